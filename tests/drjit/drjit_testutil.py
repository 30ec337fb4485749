"""Array helpers for the rayd.drjit tests (NumPy rows <-> Dr.Jit vectors)."""

from __future__ import annotations

import numpy as np


def vec(kind, rows) -> object:
    """A Dr.Jit 3-vector (or 2-vector) array from rows ``(N, k)``."""
    return kind(np.ascontiguousarray(np.asarray(rows).T))


def rows(value) -> np.ndarray:
    """``(N, k)`` NumPy rows of a Dr.Jit k-vector array (``(N,)`` for a flat one)."""
    a = np.array(value)
    return a.T if a.ndim == 2 else a


def grad_rtol(m) -> float:
    """Relative tolerance of AD gradients against float64 finite differences.

    Dr.Jit's own derivative rules (of division, sqrt) use ``rcp``/``rsqrt``, which are
    approximate instructions on CUDA (~5e-7 relative, in float64 too; measured on an
    H200), so CUDA gradients carry ~1e-5..1e-4 relative error that rayd cannot
    avoid; the LLVM backend is exact.
    """
    return 5e-4 if ".cuda" in m.__name__ else 1e-5
