"""`Ray`: a batch of rays ``o + t d`` with a hit interval ``(tmin, tmax)``."""

from __future__ import annotations

import math

import drjit as dr

from rayd.core.rays import interval_bound
from rayd.drjit import _check, _convert

_CALL = "rayd.drjit.Ray()"


class Ray:
    """Rays ``o + t d``, counted as hits only for ``tmin < t < tmax``.

    Args:
        o: (N, 3) origins (world units): an ``Array3f`` or ``Array3f64`` of width N
            (or 1, broadcast) from ``drjit.llvm(.ad)`` or ``drjit.cuda(.ad)``.
        d: (N, 3) directions, same types; need not be unit length, and ``t`` is
            measured in multiples of ``|d|``. Width 1 broadcasts against ``o`` (one
            origin with N directions is fine).
        tmax: float, or a flat ``Float``/``Float64`` of width N or 1; default ``inf``.
        tmin: float, or a flat ``Float``/``Float64`` of width N or 1; default ``0``.

    A ``Ray`` holds no scene state: one instance may be reused across steps, refits
    and scenes. Malformed rays (NaN or inf components, a zero direction,
    ``tmax <= tmin``) are not errors; queries report them as misses. The exception is
    ``nearest_edge``, whose segment ``s in [tmin, tmax]`` is closed: there
    ``tmax == tmin`` is the point ``o + tmin d`` and only ``tmax < tmin`` is a miss.

    Gradients:
        Flow into ``o`` and ``d`` (and into arrays they were computed from) when they
        are ``.ad`` arrays with gradients enabled; there is no separate ``RayAD`` type.

    Raises:
        TypeError: ``o``/``d`` are not Dr.Jit float arrays (e.g. torch tensors), or
            ``tmin``/``tmax`` are neither numbers nor float arrays.
        ValueError: not 3-vectors, widths that do not broadcast, or arrays on
            different backends or devices.
    """

    def __init__(
        self,
        o: dr.ArrayBase,
        d: dr.ArrayBase,
        tmax: float | dr.ArrayBase = math.inf,
        *,
        tmin: float | dr.ArrayBase = 0.0,
    ) -> None:
        o = _check.float_array(_CALL, "o", o, 3)
        d = _check.float_array(_CALL, "d", d, 3)
        device = _convert.device_name(o)
        _check.same_backend(_CALL, "d", d, device, "'o'")
        tmax = _interval_bound("tmax", tmax, device)
        tmin = _interval_bound("tmin", tmin, device)
        widths = [("o", dr.width(o)), ("d", dr.width(d))]
        widths += [(n, dr.width(b)) for n, b in (("tmin", tmin), ("tmax", tmax)) if isinstance(b, dr.ArrayBase)]
        self.width = _check.broadcast(_CALL, widths)
        self.o = o
        self.d = d
        self.tmax = tmax
        self.tmin = tmin

    @property
    def device(self) -> str:
        """``'cpu'`` (LLVM backend) or ``'cuda:<ordinal>'``."""
        return _convert.device_name(self.o)

    @property
    def shape(self) -> tuple[int]:
        """The batch shape ``(N,)``."""
        return (self.width,)

    def __call__(self, t: dr.ArrayBase | float) -> dr.ArrayBase:
        """The point ``o + t d``."""
        return self.o + t * self.d

    def __repr__(self) -> str:
        return f"rayd.drjit.Ray(width={self.width}, type={_convert.type_name(self.o)})"


def _interval_bound(name: str, value: object, device: str) -> float | dr.ArrayBase:
    def check(name: str, value: dr.ArrayBase) -> dr.ArrayBase:
        value = _check.float_array(_CALL, name, value, 1)
        _check.same_backend(_CALL, name, value, device, "'o'")
        return value

    return interval_bound(_CALL, name, value, "a Dr.Jit Float array", _convert.is_jit_array, check, _convert.type_name)
