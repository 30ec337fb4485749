"""State that outlives ``torch.func`` transforms (issue 19, item 6).

Inside a transform even factory functions return wrapper tensors tied to its level;
any tensor rayd keeps beyond the call (module caches, a scene's tables, lazily built
edge state) must be plain, or every later transform fails with INTERNAL ASSERT FAILED.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt
from rayd.torch import _intersect

F32 = torch.float32
VERTS = [[0.1, -0.2, 0.05], [1.3, 0.1, -0.2], [0.2, 1.1, 0.3], [2.0, 2.0, 1.0], [3.0, 2.2, 1.1], [2.1, 3.0, 0.8]]
FACES = [[0, 1, 2], [3, 4, 5]]
O = [[0.4, 0.3, 2.0], [0.5, 0.2, -1.5], [2.3, 2.4, 3.0]]
D = [[0.05, 0.02, -1.0], [0.1, 0.1, 0.8], [0.0, 0.1, -1.1]]
POINTS = [[0.5, -0.6, 0.3], [0.9, 0.8, -0.3], [2.6, 1.7, 1.4]]


def _t(x, dtype, device):
    return torch.tensor(x, dtype=dtype, device=device)


def _scene(v, dynamic=False):
    faces = FACES if v.shape[0] == 6 else [[0, 1, 2]]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(faces, device=v.device)), dynamic=dynamic)
    scene.build()
    return scene


def test_transforms_after_func_hessian(device, monkeypatch):
    monkeypatch.setattr(_intersect, "_STAND_IN", {})  # as in a fresh process: filled inside the transform
    scene = _scene(_t([[0, 0, 0], [1, 0, 0], [0, 1, 0]], F32, device))
    o = _t([0.2, 0.2, 1.0], F32, device)
    d = _t([0.0, 0.0, -1.0], F32, device)
    p = _t([0.3, -0.5, 0.2], F32, device)

    def t_of(x):
        return scene.intersect(rt.Ray(o, x)).t

    h = torch.func.hessian(t_of)(d)
    assert float(h[2, 2]) == pytest.approx(2.0)
    # The first edge query (lazily built topology and BVH) inside a transform, too.
    torch.func.hessian(lambda q: scene.nearest_edge(q).distance)(p)
    for cached in _intersect._STAND_IN.values():
        assert not any(torch._C._functorch.is_functorch_wrapped_tensor(x) for x in cached)
    # Every later call still works and is right: t = 1 / -d_z, dt/dd = (0, 0, 1) at d = -z.
    torch.testing.assert_close(torch.func.grad(t_of)(d), _t([0, 0, 1], F32, device))
    _, tangent = torch.func.jvp(t_of, (d,), (_t([0, 0, 1], F32, device),))
    assert float(tangent) == pytest.approx(1.0)
    assert float(t_of(d)) == pytest.approx(1.0)
    torch.testing.assert_close(torch.func.hessian(t_of)(d), h)
    r = (0.5 ** 2 + 0.2 ** 2) ** 0.5
    torch.testing.assert_close(torch.func.grad(lambda q: scene.nearest_edge(q).distance)(p),
                               _t([0, -0.5 / r, 0.2 / r], F32, device))
    assert float(scene.nearest_edge(p).distance) == pytest.approx(r, rel=1e-6)


def test_scene_built_inside_a_transform_serves_later_calls(device):
    o = _t([0.2, 0.2, 1.0], F32, device)
    v = _t([[0, 0, 0], [1, 0, 0], [0, 1, 0]], F32, device)
    kept = []

    def f(d):
        scene = _scene(v, dynamic=True)
        scene.sync()
        kept.append(scene)
        return scene.intersect(rt.Ray(o, d)).t

    torch.func.hessian(f)(_t([0.0, 0.0, -1.0], F32, device))
    scene = kept[0]
    torch.testing.assert_close(torch.func.grad(lambda d: scene.intersect(rt.Ray(o, d)).t)(_t([0, 0, -1.0], F32, device)),
                               _t([0, 0, 1], F32, device))
    assert float(scene.nearest_edge(o).distance) == pytest.approx((0.2 ** 2 + 1) ** 0.5, rel=1e-6)


def test_fused_path_inside_a_transform_over_other_inputs(device):
    # Nothing passed to intersect is wrapped, but a transform is active: the custom
    # function must not be applied there (autograd.Function without setup_context).
    scene = _scene(_t(VERTS, F32, device))
    o, d = _t(O, F32, device), _t(D, F32, device)
    t = scene.intersect(rt.Ray(o, d)).t
    g = torch.func.grad(lambda x: (scene.intersect(rt.Ray(o, d)).t * x).sum())(_t([1.0, 2.0, 3.0], F32, device))
    torch.testing.assert_close(g, t)
    g = torch.func.grad(lambda x: (scene.nearest_edge(_t(POINTS, F32, device)).distance * x).sum())(
        _t([1.0, 2.0, 3.0], F32, device))
    torch.testing.assert_close(g, scene.nearest_edge(_t(POINTS, F32, device)).distance)
