"""The rules every object-to-world matrix must meet, shared by both frontends (NumPy, on the host).

A transform is rejected if an entry is non-finite, if an entry is beyond float32 range
(the engine stores transforms in float32), or if its 3x3 linear part is singular. The
determinant is expanded by cofactors, so integer matrices of rank < 3 give exactly 0
(an LU factorisation, as in ``numpy.linalg.det``, leaves a rounding residue).
"""

from __future__ import annotations

import numpy as np

#: Largest finite float32.
FLOAT32_MAX = 3.4028234663852886e38


def transform_problem(m: np.ndarray) -> tuple[int, str] | None:
    """The first rule that a batch of matrices breaks, else ``None``.

    Args:
        m: (K, 4, 4) float64 matrices acting on column vectors; all 16 entries must
            be finite and within float32 range, the top-left 3x3 block invertible.

    Returns:
        ``(k, message)``: the index of the first offending matrix and what it breaks,
        phrased to follow the argument's name (e.g. ``"holds non-finite values"``).
    """
    flat = m.reshape(m.shape[0], 16)  # not -1: K may be 0
    bad = ~np.isfinite(flat).all(1)
    if bad.any():
        return int(np.argmax(bad)), "holds non-finite values"
    bad = (np.abs(flat) > FLOAT32_MAX).any(1)
    if bad.any():
        return int(np.argmax(bad)), "holds values outside the float32 range (the engine stores float32)"
    a = m[:, :3, :3]
    with np.errstate(over="ignore"):  # products of entries near float32's limit may overflow float64: not 0
        det = (
            a[:, 0, 0] * (a[:, 1, 1] * a[:, 2, 2] - a[:, 1, 2] * a[:, 2, 1])
            - a[:, 0, 1] * (a[:, 1, 0] * a[:, 2, 2] - a[:, 1, 2] * a[:, 2, 0])
            + a[:, 0, 2] * (a[:, 1, 0] * a[:, 2, 1] - a[:, 1, 1] * a[:, 2, 0])
        )
    bad = det == 0.0
    if bad.any():
        return int(np.argmax(bad)), "is singular (its 3x3 linear part has determinant 0)"
    return None
