"""rayd.torch._vector's constant cache (the stand-ins of rayd.core.hits / rayd.core.segments) under torch.func."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt
from rayd.torch import _vector

F32 = torch.float32


def test_constants_first_made_inside_a_transform_are_plain(device, monkeypatch):
    monkeypatch.setattr(_vector, "_CONSTANTS", {})  # as in a fresh process: filled inside the transforms
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    _vector._CONSTANTS.clear()  # build() pre-made the hit stand-in: start from nothing
    o = torch.tensor([0.2, 0.2, 1.0], device=device)
    d = torch.tensor([0.0, 0.0, -1.0], device=device)
    p = torch.tensor([0.3, -0.5, 0.2], device=device)

    def t_of(x):
        return scene.intersect(rt.Ray(o, x)).t

    h = torch.func.hessian(t_of)(d)
    torch.func.hessian(lambda q: scene.nearest_edge(q).distance)(p)
    torch.func.jacrev(lambda q: scene.nearest_edge(rt.Ray(q, d)).distance)(o)
    assert len(_vector._CONSTANTS) >= 6  # stand-in triangle, ray, up; edge, point, ray stand-ins
    for value in _vector._CONSTANTS.values():
        assert not torch._C._functorch.is_functorch_wrapped_tensor(value)
    assert float(h[2, 2]) == pytest.approx(2.0)  # t = 1 / -d_z
    torch.testing.assert_close(torch.func.grad(t_of)(d), torch.tensor([0.0, 0, 1], device=device))
    r = (0.5 ** 2 + 0.2 ** 2) ** 0.5
    torch.testing.assert_close(torch.func.grad(lambda q: scene.nearest_edge(q).distance)(p),
                               torch.tensor([0, -0.5 / r, 0.2 / r], device=device))
