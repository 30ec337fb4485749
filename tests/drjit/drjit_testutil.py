"""Array helpers for the rayd.drjit tests (NumPy rows <-> Dr.Jit vectors)."""

from __future__ import annotations

import math

import numpy as np


def vec(kind, rows) -> object:
    """A Dr.Jit 3-vector (or 2-vector) array from rows ``(N, k)``."""
    return kind(np.ascontiguousarray(np.asarray(rows).T))


def rows(value) -> np.ndarray:
    """``(N, k)`` NumPy rows of a Dr.Jit k-vector array (``(N,)`` for a flat one)."""
    a = np.array(value)
    return a.T if a.ndim == 2 else a


def grad_rtol(m) -> float:
    """Relative tolerance of AD gradients against float64 finite differences or rayd.torch: 1e-5 on both backends.

    Dr.Jit's own derivative rules (of division, sqrt) use ``rcp``/``rsqrt``, which Dr.Jit 1.5 emits as
    approximate instructions on CUDA while ``JitFlag.FastMath`` is on, in float64 too (20-bit
    ``rcp.approx.ftz.f64``). rayd.drjit runs every public call with the flag off
    (``rayd.drjit._check.exact_math``, session 22), so CUDA gradients are as exact as LLVM's; until then
    this tolerance was 5e-4 on CUDA.
    """
    return 1e-5


def exact_winding(points, tri) -> np.ndarray:
    """(N,) float64 exact winding numbers of triangles ``tri`` (F, 3, 3) around ``points`` (N, 3): the sum of
    their solid angles over 4 pi (Van Oosterom & Strackee 1983, NumPy ``arctan2``)."""
    p = np.asarray(points, np.float64)[:, None, :]
    x, y, z = tri[None, :, 0] - p, tri[None, :, 1] - p, tri[None, :, 2] - p
    lx, ly, lz = (np.linalg.norm(u, axis=-1) for u in (x, y, z))
    num = (x * np.cross(y, z)).sum(-1)
    den = lx * ly * lz + (x * y).sum(-1) * lz + (y * z).sum(-1) * lx + (z * x).sum(-1) * ly
    return (2.0 * np.arctan2(num, den)).sum(-1) / (4.0 * math.pi)
