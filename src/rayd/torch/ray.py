"""`Ray`: a batch of rays ``o + t d`` with a hit interval ``(tmin, tmax)``."""

from __future__ import annotations

import math

import torch

from rayd.core.rays import interval_bound
from rayd.torch import _check

_CALL = "rayd.torch.Ray()"


class Ray:
    """Rays ``o + t d``, counted as hits only for ``tmin < t < tmax``.

    Args:
        o: (..., 3) float32 or float64 origins (world units).
        d: (..., 3) float32 or float64 directions; need not be unit length, and ``t``
            is measured in multiples of ``|d|``. Broadcasts against ``o`` by torch
            rules (one origin of shape (3,) with directions of shape (N, 3) is fine).
        tmax: float, or float tensor broadcastable to the batch shape; default ``inf``.
        tmin: float, or float tensor broadcastable to the batch shape; default ``0``.

    A ``Ray`` holds no scene state: one instance may be reused across steps, refits
    and scenes. Malformed rays (NaN or inf components, a zero direction,
    ``tmax <= tmin``) are not errors; queries report them as misses. The exception is
    ``nearest_edge``, whose segment ``s in [tmin, tmax]`` is closed: there
    ``tmax == tmin`` is the point ``o + tmin d`` and only ``tmax < tmin`` is a miss.

    Gradients:
        Flow into ``o`` and ``d`` (and into tensors they were computed from).

    Raises:
        TypeError: ``o``/``d`` are not float tensors, or ``tmin``/``tmax`` are neither
            numbers nor float tensors.
        ValueError: a last dimension other than 3, batch shapes that do not
            broadcast, or tensors on different devices.
    """

    def __init__(
        self,
        o: torch.Tensor,
        d: torch.Tensor,
        tmax: float | torch.Tensor = math.inf,
        *,
        tmin: float | torch.Tensor = 0.0,
    ) -> None:
        o = _check.float_tensor(_CALL, "o", o, last=3)
        d = _check.float_tensor(_CALL, "d", d, last=3)
        _check.same_device(_CALL, "d", d, o.device, "'o'")
        tmax = _interval_bound("tmax", tmax, o.device)
        tmin = _interval_bound("tmin", tmin, o.device)
        shapes = [("o", o.shape[:-1]), ("d", d.shape[:-1])]
        shapes += [(n, b.shape) for n, b in (("tmin", tmin), ("tmax", tmax)) if isinstance(b, torch.Tensor)]
        self.shape = _check.broadcast(_CALL, shapes)
        self.o = o
        self.d = d
        self.tmax = tmax
        self.tmin = tmin

    @property
    def device(self) -> torch.device:
        """The device of the ray tensors."""
        return self.o.device

    def __call__(self, t: torch.Tensor | float) -> torch.Tensor:
        """The point ``o + t d`` (``t`` broadcast against the batch shape)."""
        if isinstance(t, torch.Tensor):
            t = t.unsqueeze(-1)
        return self.o + t * self.d

    def __repr__(self) -> str:
        return f"rayd.torch.Ray(shape={tuple(self.shape)}, dtype={self.o.dtype}, device={self.device})"


def _interval_bound(name: str, value: object, device: torch.device) -> float | torch.Tensor:
    def check(name: str, value: torch.Tensor) -> torch.Tensor:
        value = _check.float_tensor(_CALL, name, value)
        _check.same_device(_CALL, name, value, device, "'o'")
        return value

    return interval_bound(_CALL, name, value, "a float tensor", lambda v: isinstance(v, torch.Tensor), check,
                          lambda v: type(v).__name__)
