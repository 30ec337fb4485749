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
