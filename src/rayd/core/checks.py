"""Argument checks that do not depend on the array library (both frontends raise these).

Messages start with the call (``rayd.torch.Scene.nearest_edge()``) and name the
argument, as DESIGN.md's "Errors" asks; the frontends pass their own call names.
"""

from __future__ import annotations

import math
import numbers

import numpy as np



def integer(value: object) -> int | None:
    """``value`` as a Python int if it is an integer (``int`` or a NumPy integer, never a bool), else ``None``."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    return None


def real(value: object) -> float | None:
    """``value`` as a Python float if it is a real number (Python or NumPy, never a bool), else ``None``."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    return None


def lifecycle(call: str, message: str) -> RuntimeError:
    """A ``RuntimeError`` for a scene-lifecycle fault, prefixed by the call."""
    return RuntimeError(f"{call}: {message}")


def max_distance(call: str, value: object) -> float:
    """``max_distance`` as a float ``>= 0`` (``inf`` allowed), else ``TypeError``/``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # NumPy scalars too
        raise TypeError(f"{call}: 'max_distance' must be a float, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{call}: 'max_distance' must be >= 0 (inf for no limit), got {value}")
    return value


def top_k(call: str, k: object, largest: int) -> int:
    """``k`` as an int in ``[1, largest]``, else ``TypeError``/``ValueError``."""
    if integer(k) is None:
        raise TypeError(f"{call}: 'k' must be an int, got {type(k).__name__}")
    k = integer(k)
    if not 1 <= k <= largest:
        raise ValueError(f"{call}: 'k' must be in [1, {largest}], got {k}")
    return k


def int_in_range(call: str, name: str, value: object, largest: int) -> int:
    """``value`` as an int in ``[1, largest]`` (e.g. ``max_hits``), else ``TypeError``/``ValueError``."""
    if integer(value) is None:
        raise TypeError(f"{call}: '{name}' must be an int in [1, {largest}], got {type(value).__name__}")
    value = integer(value)
    if not 1 <= value <= largest:
        raise ValueError(f"{call}: '{name}' must be an int in [1, {largest}], got {value}")
    return value


def non_finite(call: str, name: str, row: int) -> ValueError:
    """The ``ValueError`` for NaN/inf in ``name`` (``row`` of the first bad row, or -1 if unknown)."""
    where = f" (first at row {row})" if row >= 0 else ""
    return ValueError(f"{call}: '{name}' holds non-finite values{where}")


def face_range(call: str, name: str, low: int, high: int, num_vertices: int) -> None:
    """``ValueError`` unless face indices spanning ``[low, high]`` lie in ``[0, num_vertices)``."""
    if low < 0 or high >= num_vertices:
        raise ValueError(f"{call}: '{name}' must index vertices in [0, {num_vertices}), got values in [{low}, {high}]")


def type_name(value: object) -> str:
    """``type(value)``'s public dotted name (``torch.Generator``, ``numpy.random.Generator``, ``rayd.torch.Scene``)."""
    kind = type(value)
    parts = [p for p in kind.__module__.split(".") if not p.startswith("_")]
    if parts[:1] == ["builtins"]:
        return kind.__name__
    if parts[:1] == ["rayd"]:
        parts = parts[:2]
    return ".".join(parts + [kind.__name__])
