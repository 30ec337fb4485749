"""`Ray`: a batch of rays ``o + t d`` with a hit interval ``(tmin, tmax)``."""

from __future__ import annotations

import drjit as dr

from rayd.core.rays import RayBase, document_ray
from rayd.drjit import _check, _convert


class Ray(RayBase):
    """Rays ``o + t d``, counted as hits only for ``tmin < t < tmax``.

    Args:
        o: (N, 3) origins (world units): an ``Array3f`` or ``Array3f64`` of width N
            (or 1, broadcast) from ``drjit.llvm(.ad)`` or ``drjit.cuda(.ad)``.
        d: (N, 3) directions, same types; need not be unit length, and ``t`` is
            measured in multiples of ``|d|``. Width 1 broadcasts against ``o`` (one
            origin with N directions is fine).
        tmax: float, or a flat ``Float``/``Float64`` of width N or 1; default ``inf``.
        tmin: float, or a flat ``Float``/``Float64`` of width N or 1; default ``0``.
            ``-inf`` takes every hit with ``t < tmax`` (behind ``o`` too; with
            ``tmax = inf`` the whole line), ``t`` measured from ``o``.

    As :class:`rayd.torch.Ray` (whose docstring states the rules): a ``Ray`` holds no
    scene state (reuse one across steps, refits and scenes; a query checks its arrays
    again when one was reassigned or a component replaced by one of another width),
    malformed rays (a NaN
    bound included) are misses, not errors (``nearest_edge``'s segment ``s in [tmin,
    tmax]`` is closed), and ``tmin = -inf`` searches from just before the ray enters
    the scene's bounding box.

    Gradients:
        Flow into ``o`` and ``d`` (and into arrays they were computed from) when they
        are ``.ad`` arrays with gradients enabled; there is no separate ``RayAD`` type.

    Raises:
        TypeError: ``o``/``d`` are not Dr.Jit float arrays (e.g. torch tensors), or
            ``tmin``/``tmax`` are neither numbers nor float arrays.
        ValueError: not 3-vectors, widths that do not broadcast, or arrays on
            different backends or devices.
    """

    # ------------------------------------------------------------------ RayBase hooks
    _ARRAYS = "a Dr.Jit Float array"
    _device_of = staticmethod(_convert.device_name)
    _same_device = staticmethod(_check.same_backend)
    _broadcast = staticmethod(_check.broadcast)
    _is_array = staticmethod(_convert.is_jit_array)
    _type_name = staticmethod(_convert.type_name)
    _check_vectors = staticmethod(lambda call, name, value: _check.float_array(call, name, value, 3))
    _batch = staticmethod(lambda value, vector: dr.width(value))
    _check_flat = staticmethod(lambda call, name, value: _check.float_array(call, name, value, 1))

    @staticmethod
    def _extent(value: object) -> tuple[int, ...] | int | None:
        if not isinstance(value, dr.ArrayBase):
            return None
        return tuple(dr.width(c) for c in value) if dr.depth_v(value) > 1 else dr.width(value)

    def _set_batch(self, width: int) -> None:
        self._width = width

    @property
    def width(self) -> int:
        """N, the batch width of the arrays as they are now (checked again after an assignment).

        Raises:
            TypeError, ValueError: as ``Ray()``, when a reassigned array does not fit.
        """
        return self._current(f"{self._name}.width")._width

    @property
    def device(self) -> str:
        """``'cpu'`` (LLVM backend) or ``'cuda:<ordinal>'``."""
        return _convert.device_name(self.o)

    @property
    def shape(self) -> tuple[int]:
        """The batch shape ``(N,)``."""
        return (self.width,)

    def __repr__(self) -> str:
        return f"rayd.drjit.Ray(width={self.width}, type={_convert.type_name(self.o)})"


document_ray(Ray, dr.ArrayBase, """The point ``o + t d``, e.g. ``ray(hit.t)`` (``hit.p`` where the ray hit).

    Args:
        t: a float, or a ``Float``/``Float64`` of the rays' width (or width 1); in multiples of ``|d|``.

    Returns:
        ``Array3f``/``Array3f64`` points (world units) in the promoted dtype of ``o``, ``d``, ``t``; differentiable
        in all three. No checks: a miss's ``t = inf`` gives non-finite points.
    """)
