"""rayd.drjit's CPU Warp views (issue 12, helper cpu22): the DLPack capsule read directly and the view made
by runtime.host_array, not wp.from_dlpack: the same pointer, dtype, shape and strides; the capsule consumed
and its tensor released when the view goes; a query makes no wp.from_dlpack call."""

from __future__ import annotations

import gc

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
wp = pytest.importorskip("warp")

from rayd.drjit import _convert  # noqa: E402

llvm = pytest.importorskip("drjit.llvm")


@pytest.mark.parametrize("kind", ["Float", "Float64", "Int", "Int64", "UInt", "UInt8"])
def test_scalar_views_as_from_dlpack(kind):
    x = getattr(llvm, kind)([3, 1, 4, 1, 5])
    view = _convert.scalar_view(x, "cpu")
    ref = wp.from_dlpack(x.__dlpack__())
    assert type(view._tensor).__name__ == "_DLPackTensorHolder"  # the fast path
    assert (view.ptr, view.dtype, view.shape, view.strides) == (ref.ptr, ref.dtype, ref.shape, ref.strides)
    assert view.numpy().tolist() == [3, 1, 4, 1, 5]


def test_vec3_view_and_release():
    view, buffer = _convert.vec3_view(llvm.Array3f([1, 2], [3, 4], [5, 6]), "cpu")
    np.testing.assert_array_equal(view.numpy(), [[1, 3, 5], [2, 4, 6]])
    assert view.dtype is wp.vec3 and view.shape == (2,) and view.strides == (12,)
    capsule = llvm.Float([1, 2, 3]).__dlpack__()
    made = _convert._host_view(capsule, None)
    with pytest.raises(ValueError):  # consumed, as wp.from_dlpack leaves it
        _convert._GET_POINTER(capsule, b"dltensor")
    released = []
    holder = made._tensor
    cls = type(holder)
    deleter = cls.__del__
    cls.__del__ = lambda self: (released.append(self.mem_ptr), deleter(self))
    try:
        mem = holder.mem_ptr
        del made, holder
        gc.collect()
    finally:
        cls.__del__ = deleter
    assert mem and released.count(mem) == 1  # (gc may release other, earlier holders too)


def test_a_cpu_query_calls_no_from_dlpack(monkeypatch):
    """Before: one wp.from_dlpack per view, 7 per intersect."""
    v = llvm.ad.Array3f([0, 1, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0])
    f = llvm.ad.Array3i([0, 1], [1, 3], [2, 2])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, f), dynamic=True)
    scene.build()
    rng = np.random.default_rng(0)
    o = rng.uniform(0, 1, (64, 3)).astype(np.float32)
    o[:, 2] = 1
    ray = rd.Ray(llvm.ad.Array3f(o.T), llvm.ad.Array3f(0, 0, -1))
    for _ in range(3):
        before = scene.intersect(ray)
        dr.eval(before.t)
    calls = []
    real = wp.from_dlpack
    monkeypatch.setattr(wp, "from_dlpack", lambda *a, **k: calls.append(1) or real(*a, **k))
    hit = scene.intersect(ray)
    blocked = scene.shadow_test(ray)
    assert calls == []
    np.testing.assert_array_equal(hit.t.numpy(), before.t.numpy())
    np.testing.assert_allclose(hit.t.numpy(), 1.0)
    assert bool(dr.all(blocked))
