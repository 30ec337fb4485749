"""engine.assemble's min/max reductions (face range, float64 bounds) against NumPy."""

import numpy as np
import pytest
import warp as wp

from rayd.engine.assemble import _REDUCE_THREADS, bounds, face_range


@pytest.mark.parametrize("n", [1, 7, _REDUCE_THREADS - 1, _REDUCE_THREADS + 3, 3 * _REDUCE_THREADS + 11])
def test_face_range_and_bounds_match_numpy(n):
    rng = np.random.default_rng(n)
    faces = rng.integers(-5, 10**6, size=n).astype(np.int32)
    faces[rng.integers(n)] = 2**31 - 1
    assert face_range(wp.array(faces, dtype=wp.int32, device="cpu")) == (faces.min(), faces.max())
    big = rng.integers(0, 2**32 - 1, size=n, dtype=np.uint64).astype(np.uint32)
    assert face_range(wp.array(big, dtype=wp.uint32, device="cpu")) == (int(big.min()), int(big.max()))
    v = (rng.normal(size=(n, 3)) * 1e3).astype(np.float32)
    lo, hi = bounds(wp.array(v, dtype=wp.vec3, device="cpu"))
    assert np.array_equal(lo, v.min(0).astype(np.float64)) and np.array_equal(hi, v.max(0).astype(np.float64))
    v64 = rng.normal(size=(n, 3)) * 1e300
    lo, hi = bounds(wp.array(v64, dtype=wp.vec3d, device="cpu"))
    assert np.array_equal(lo, v64.min(0)) and np.array_equal(hi, v64.max(0))
