"""Argument checks that do not depend on the array library (both frontends raise these).

Messages start with the call (``rayd.torch.Scene.nearest_edge()``) and name the
argument, as DESIGN.md's "Errors" asks; the frontends pass their own call names.
"""

from __future__ import annotations

import math

from rayd.flags import RayFlags


def lifecycle(call: str, message: str) -> RuntimeError:
    """A ``RuntimeError`` for a scene-lifecycle fault, prefixed by the call."""
    return RuntimeError(f"{call}: {message}")


def max_distance(call: str, value: object) -> float:
    """``max_distance`` as a float ``>= 0`` (``inf`` allowed), else ``TypeError``/``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{call}: 'max_distance' must be a float, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{call}: 'max_distance' must be >= 0 (inf for no limit), got {value}")
    return value


def top_k(call: str, k: object, largest: int) -> int:
    """``k`` as an int in ``[1, largest]``, else ``TypeError``/``ValueError``."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"{call}: 'k' must be an int, got {type(k).__name__}")
    if not 1 <= k <= largest:
        raise ValueError(f"{call}: 'k' must be in [1, {largest}], got {k}")
    return k


def non_finite(call: str, name: str, row: int) -> ValueError:
    """The ``ValueError`` for NaN/inf in ``name`` (``row`` of the first bad row, or -1 if unknown)."""
    where = f" (first at row {row})" if row >= 0 else ""
    return ValueError(f"{call}: '{name}' holds non-finite values{where}")


def face_range(call: str, name: str, low: int, high: int, num_vertices: int) -> None:
    """``ValueError`` unless face indices spanning ``[low, high]`` lie in ``[0, num_vertices)``."""
    if low < 0 or high >= num_vertices:
        raise ValueError(f"{call}: '{name}' must index vertices in [0, {num_vertices}), got values in [{low}, {high}]")


def ray_flags(call: str, flags: object) -> RayFlags:
    """``flags`` as a :class:`rayd.RayFlags` (an int of known bits), else ``TypeError``/``ValueError``."""
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise TypeError(f"{call}: 'flags' must be a rayd.RayFlags, got {type(flags).__name__}")
    if flags & ~int(RayFlags.All):
        raise ValueError(f"{call}: 'flags' has unknown bits {int(flags) & ~int(RayFlags.All):#x}")
    return RayFlags(flags)
