"""``count_intersections`` counts crossings in rayd.drjit: a touch counts 0 (the rayd.torch twin, with the rule,
is ``tests/torch/test_all_hits_touch.py``; session 20, helper limits20). float32 and float64, on the CPU's
Embree and Warp paths (the all-hits search itself is one Warp kernel)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows  # noqa: E402
from rayd.engine import cpu_embree  # noqa: E402
from touch_reference import (OCTA_F, OCTA_V, bumpy_sphere, edge_rays, inside, oriented_cube,  # noqa: E402
                             rotation, vertex_and_edge_rays)


@pytest.fixture(params=["embree", "warp"])
def accel(request):
    before = cpu_embree._enabled
    cpu_embree.set_enabled(request.param == "embree")
    yield request.param
    cpu_embree.set_enabled(before)


def _vec(m, double, a):
    kind = m.Array3f64 if double else m.Array3f
    return kind(*(np.ascontiguousarray(np.asarray(a, np.float64)[:, k]) for k in range(3)))


def _scene(m, double, meshes):
    scene = rd.Scene()
    for v, f in meshes:
        f = np.asarray(f)
        scene.add_mesh(rd.Mesh(_vec(m, double, v), m.Array3u(*(f[:, k].astype(np.uint32) for k in range(3)))))
    scene.build()
    return scene


def _count(m, double, scene, o, d):
    return np.asarray(scene.count_intersections(rd.Ray(_vec(m, double, o), _vec(m, double, d))))


@pytest.mark.parametrize("double", [False, True])
def test_touches_count_zero_and_parity_holds(m, double, accel):
    scene = _scene(m, double, [(OCTA_V, OCTA_F), (OCTA_V + [3.0, 0.1, -0.95], OCTA_F)])
    o = np.array([[-3.0, 0.1, 0.05], [0.5, -2.0, 0.5], [-3.0, 0.0, 1.0]])
    d = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert _count(m, double, scene, o, d).tolist() == [2, 0, 0]
    hits = scene.intersect_all(rd.Ray(_vec(m, double, o), _vec(m, double, d)), 8)
    assert rows(hits.is_valid()).reshape(3, 8).sum(-1).tolist() == [3, 1, 1]  # the touch is listed


@pytest.mark.parametrize("double", [False, True])
def test_a_touch_at_the_origin_is_not_taken_off_twice(m, double, accel):
    scene = _scene(m, double, [(OCTA_V, OCTA_F), (OCTA_V + [3.0, 0.0, 1.0], OCTA_F)])
    o = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [-2.0, 0.0, 1.0]])
    d = np.array([[1.0, 0.0, 0.0], [0.3, 0.1, -1.0], [1.0, 0.0, 0.0]])
    assert _count(m, double, scene, o, d).tolist() == [2, 1, 2]


@pytest.mark.parametrize("double", [False, True])
def test_rays_through_vertices_and_edges_keep_the_parity_of_their_origin(m, double, accel):
    rng = np.random.default_rng(5)
    v, f = bumpy_sphere(5)
    v = v @ rotation(rng).T + rng.normal(size=3)
    o, d = vertex_and_edge_rays(v, f, rng, per_target=2)
    want, clear = inside(o, v, f)
    count = _count(m, double, _scene(m, double, [(v, f)]), o, d)
    bad = clear & ((count % 2 == 1) != want)
    assert not bad.any(), (np.nonzero(bad)[0][:10], count[bad][:10])


@pytest.mark.parametrize("double", [False, True])
def test_grazing_an_edge_of_a_cube_counts_zero(m, double, accel):
    rng = np.random.default_rng(4)
    v, f, _ = oriented_cube(rng, 2.0, 20.0)
    scene = _scene(m, double, [(v, f)])
    assert (_count(m, double, scene, *edge_rays(v, f, rng, "touch")) == 0).all()
    assert (_count(m, double, scene, *edge_rays(v, f, rng, "cross")) == 2).all()
