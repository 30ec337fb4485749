"""runtime.host_array (issue 12, helper cpu22): a wp.array aliasing host memory, made without
wp.array.__init__, is the array ``wp.array(ptr=..., device="cpu")`` makes: every attribute equal, the same
values read by a kernel, the owner kept alive with the view."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import warp as wp

from rayd.engine import runtime


@pytest.mark.parametrize("dtype, np_dtype, width", [(wp.float32, np.float32, 1), (wp.float64, np.float64, 1),
                                                    (wp.int32, np.int32, 1), (wp.int64, np.int64, 1),
                                                    (wp.uint8, np.uint8, 1), (wp.vec3, np.float32, 3)])
def test_attributes_as_wp_array_from_a_pointer(dtype, np_dtype, width):
    buf = (np.arange(7 * width) * 3 % 11).astype(np_dtype)
    made = runtime.host_array(buf.ctypes.data, dtype, 7, buf)
    ref = wp.array(ptr=buf.ctypes.data, dtype=dtype, shape=(7,), device="cpu")
    assert made is not None and type(made) is wp.array
    assert {k: v for k, v in vars(made).items() if k != "_tensor"} == vars(ref)
    assert made._tensor is buf
    np.testing.assert_array_equal(made.numpy(), ref.numpy())
    assert made.numpy().reshape(-1).tolist() == buf.tolist()


@wp.kernel
def _double(a: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = 2.0 * a[i]


def test_kernels_read_and_write_through_it():
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = np.zeros_like(a)
    wp.launch(_double, dim=4, inputs=[runtime.host_array(a.ctypes.data, wp.vec3, 4, a)],
              outputs=[runtime.host_array(out.ctypes.data, wp.vec3, 4, out)], device="cpu")
    np.testing.assert_array_equal(out, 2 * a)


def test_owner_kept_alive_by_the_view():
    class Owner:
        pass

    owner = Owner()
    buf = np.zeros(4, dtype=np.float32)
    owner.buf = buf
    view = runtime.host_array(buf.ctypes.data, wp.float32, 4, owner)
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is not None
    del view
    gc.collect()
    assert ref() is None
