"""rayd.torch's CPU Warp views (issue 12, helper cpu22): made by runtime.host_array, never by wp.from_torch,
for the dense tensors a query hands the engine; the same pointer, dtype, shape and strides as wp.from_torch's;
the other layouts (empty, strided, 2-D scalars) still through wp.from_torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import warp as wp

import rayd.torch as rt
from rayd.torch import _convert


def _same_as_from_torch(view, tensor, dtype=None):
    ref = wp.from_torch(tensor, dtype=dtype) if dtype is not None else wp.from_torch(tensor)
    assert (view.ptr, view.dtype, view.shape, view.strides) == (ref.ptr, ref.dtype, ref.shape, ref.strides)
    np.testing.assert_array_equal(view.numpy(), ref.numpy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8])
def test_scalar_views(dtype):
    t = (torch.arange(10) * 7 % 5).to(dtype)
    view = _convert.scalar_view(t)
    assert view._tensor is t  # the fast path (wp.from_torch keeps the tensor too, with storage fields)
    _same_as_from_torch(view, t)


def test_vec3_view_and_fallbacks():
    v = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    view = _convert.vec3_view(v)
    assert view._storage_base_ptr is None  # host_array's (wp.from_torch records the storage)
    _same_as_from_torch(view, v, wp.vec3)
    strided = torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, ::2]
    with pytest.raises(RuntimeError):  # not contiguous: wp.from_torch's error, as before
        _convert.vec3_view(strided)
    wide = torch.arange(8, dtype=torch.float32)[::2]
    _same_as_from_torch(_convert.scalar_view(wide), wide)  # a strided 1-D tensor: wp.from_torch's view
    assert _convert.scalar_view(wide)._storage_base_ptr is not None
    assert _convert.scalar_view(torch.empty(0, dtype=torch.int32)).shape == (0,)


def test_a_cpu_query_calls_no_from_torch(monkeypatch):
    """Before: 19 wp.from_torch calls per intersect (16-19 us each), 11 per shadow_test."""
    v = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=torch.float32)
    f = torch.tensor([[0, 1, 2], [1, 3, 2]], dtype=torch.int32)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    o = torch.rand(64, 3) * torch.tensor([1.0, 1.0, 0.0]) + torch.tensor([0.0, 0.0, 1.0])
    ray = rt.Ray(o, torch.tensor([0.0, 0.0, -1.0]).expand(64, 3).contiguous())
    for _ in range(3):  # (the Embree scene is built at the second query)
        before = scene.intersect(ray)
    calls = []
    real = wp.from_torch
    monkeypatch.setattr(wp, "from_torch", lambda *a, **k: calls.append(1) or real(*a, **k))
    hit = scene.intersect(ray)
    blocked = scene.shadow_test(ray)
    assert calls == []
    assert torch.equal(hit.t, before.t) and torch.equal(hit.prim_id, before.prim_id)
    assert torch.allclose(hit.t, torch.ones(64)) and bool(blocked.all())
