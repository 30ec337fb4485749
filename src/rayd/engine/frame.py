"""The search frame: scene coordinates relative to a centre chosen at ``build()``.

The search runs in float32, whose rounding scales with the magnitude of the
coordinates. The frontends therefore hand the engine vertices, instance placements
and ray origins relative to a centre ``c`` (``x - c`` computed in float64 or the input
dtype, then rounded to float32), so the rounding scales with the scene's extent, not
with its distance from the origin (a city in ECEF/UTM coordinates searches as
precisely as the same city at the origin). ``t`` does not change (directions are not
moved); the evaluation of the winner uses the user's own coordinates.
"""

from __future__ import annotations

import numpy as np


def search_centre(lower: np.ndarray, upper: np.ndarray) -> np.ndarray | None:
    """The centre ``c`` (3,) float64 for a scene whose float64 bounding box is ``[lower, upper]``, or ``None`` for 0.

    Per axis: the box's midpoint rounded to float32 where the box lies within a
    quarter of its midpoint's magnitude of it (``half_extent <= |mid| / 4``), else 0.
    Then every float32 coordinate ``x`` of the scene satisfies ``c/2 <= x <= 2c``, so
    ``x - c`` is exact in float32 (Sterbenz's lemma): float32 scenes search their own
    vertices exactly, merely translated. On an axis where the scene spans the origin
    or comes near it, the coordinates are already about as small as the extent.

    The centre is chosen at ``build()`` and kept by ``sync()`` (refits), so results
    stay bitwise reproducible across refits; a mesh moved far from where it was built
    searches less precisely until the next ``build()``.
    """
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    if not (np.isfinite(lower).all() and np.isfinite(upper).all()):
        return None
    mid = 0.5 * (lower + upper)
    half = 0.5 * (upper - lower)
    centre = np.where(half <= 0.25 * np.abs(mid), mid.astype(np.float32).astype(np.float64), 0.0)
    return centre if centre.any() else None
