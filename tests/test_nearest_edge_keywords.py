"""``nearest_edge`` in DESIGN.md's two forms by keyword (``points=``, ``ray=``) as well as positionally, in both
frontends: the same answers (hand-derived: unit distances to the square's edge (0, 1)); exactly one query, else a
TypeError naming the call."""

from __future__ import annotations

import pytest


def _check(rt, scene, p, r, value):
    by_position, by_points = scene.nearest_edge(p), scene.nearest_edge(points=p)
    assert value(by_position.distance) == value(by_points.distance) == pytest.approx(1.0)
    assert value(by_position.edge_t) == value(by_points.edge_t) == pytest.approx(0.5)
    by_position, by_ray = scene.nearest_edge(r), scene.nearest_edge(ray=r, max_distance=2.0)
    assert value(by_position.distance) == value(by_ray.distance) == pytest.approx(1.0)
    assert value(by_ray.ray_t) == pytest.approx(1.0)  # (0.5, -1, 1) - s (0, 0, 1) is nearest to y = 0, z = 0 at s = 1
    call = rf"{rt.__name__}\.Scene\.nearest_edge\(\)"
    with pytest.raises(TypeError, match=call + r" takes the query points or a Ray once.*\(got none\)"):
        scene.nearest_edge()
    with pytest.raises(TypeError, match=call + r" takes the query points or a Ray once.*\(got points_or_ray, ray\)"):
        scene.nearest_edge(p, ray=r)
    with pytest.raises(TypeError, match=call + rf": 'ray' must be a {rt.__name__}\.Ray"):
        scene.nearest_edge(ray=p)
    with pytest.raises(TypeError, match=call + r": 'points' must be an array of points, got a Ray"):
        scene.nearest_edge(points=r)


def test_torch():
    torch = pytest.importorskip("torch")
    import rayd.torch as rt

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]]),
                           torch.tensor([[0, 1, 2], [1, 3, 2]])))
    scene.build()
    ray = rt.Ray(torch.tensor([0.5, -1.0, 1.0]), torch.tensor([0.0, 0.0, -1.0]))
    _check(rt, scene, torch.tensor([0.5, -1.0, 0.0]), ray, float)


def test_drjit():
    pytest.importorskip("drjit")
    import rayd.drjit as rd
    from drjit.llvm.ad import Array3f, Array3i

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(Array3f([0.0, 1, 0, 1], [0.0, 0, 1, 1], [0.0, 0, 0, 0]), Array3i([0, 1], [1, 3], [2, 2])))
    scene.build()
    ray = rd.Ray(Array3f(0.5, -1.0, 1.0), Array3f(0.0, 0.0, -1.0))
    _check(rd, scene, Array3f(0.5, -1.0, 0.0), ray, lambda x: float(x[0]))
