"""Every query raises while an edge mask awaits ``sync()``, as ``is_ready()`` (False) and
``has_pending_updates()`` (True) say and DESIGN.md's lifecycle requires ("any query while pending
raises"); was: ray and surface queries ran. After ``sync()`` they answer (hand-derived values)."""

from __future__ import annotations

import pytest


def _queries(rt, tensor, ray):
    return {
        "intersect": lambda s: s.intersect(ray).t,
        "shadow_test": lambda s: s.shadow_test(ray),
        "visible": lambda s: s.visible(tensor([0.2, 0.2, -1.0]), tensor([0.2, 0.2, 1.0])),
        "closest_point": lambda s: s.closest_point(tensor([0.2, 0.2, 2.0])).distance,
        "trace_reflections": lambda s: s.trace_reflections(ray, 1).t,
        "nearest_edge": lambda s: s.nearest_edge(tensor([0.5, -1.0, 0.0])).distance,
    }


def _check(rt, tensor, to_float, mask_of):
    v = tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]])
    f = [[0, 1, 2], [1, 3, 2]]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, tensor(f, integer=True)))
    scene.build()
    ray = rt.Ray(tensor([0.2, 0.2, -1.0]), tensor([0.0, 0.0, 1.0]))
    scene.set_edge_mask(mask_of(scene))
    assert scene.has_pending_updates() and not scene.is_ready()
    queries = _queries(rt, tensor, ray)
    for name, query in queries.items():
        with pytest.raises(RuntimeError, match=rf"Scene.{name}\(\): the edge mask changed since the last sync\(\)"):
            query(scene)
    scene.sync()
    assert scene.is_ready() and not scene.has_pending_updates()
    assert to_float(queries["intersect"](scene)) == pytest.approx(1.0)
    assert to_float(queries["closest_point"](scene)) == pytest.approx(2.0)
    # edge 0 = (0, 1) masked out: the nearest edge to (0.5, -1, 0) is now (1, 3) or (0, 2): sqrt(1.25)
    assert to_float(queries["nearest_edge"](scene)) == pytest.approx(1.25 ** 0.5)


def test_torch():
    torch = pytest.importorskip("torch")
    import rayd.torch as rt

    def tensor(x, integer=False):
        return torch.tensor(x, dtype=torch.int64 if integer else torch.float32)

    def mask_of(scene):
        m = scene.edge_mask().clone()
        m[0] = False
        return m

    _check(rt, tensor, lambda x: float(x), mask_of)


def test_drjit():
    dr = pytest.importorskip("drjit")
    import rayd.drjit as rd
    from drjit.llvm.ad import Array3f, Array3i, Bool

    def tensor(x, integer=False):
        if integer:
            return Array3i([r[0] for r in x], [r[1] for r in x], [r[2] for r in x])
        if isinstance(x[0], list):
            return Array3f([r[0] for r in x], [r[1] for r in x], [r[2] for r in x])
        return Array3f(*x)

    def mask_of(scene):
        m = [bool(b) for b in scene.edge_mask()]
        m[0] = False
        return Bool(m)

    _check(rd, tensor, lambda x: float(x[0]), mask_of)
