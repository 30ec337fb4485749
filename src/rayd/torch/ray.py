"""`Ray`: a batch of rays ``o + t d`` with a hit interval ``(tmin, tmax)``."""

from __future__ import annotations

import torch

from rayd.core.rays import RayBase, document_ray
from rayd.torch import _check


class Ray(RayBase):
    """Rays ``o + t d``, counted as hits only for ``tmin < t < tmax``.

    Args:
        o: (..., 3) float32 or float64 origins (world units).
        d: (..., 3) float32 or float64 directions; need not be unit length, and ``t``
            is measured in multiples of ``|d|``. Broadcasts against ``o`` by torch
            rules (one origin of shape (3,) with directions of shape (N, 3) is fine).
        tmax: float, or float tensor broadcastable to the batch shape; default ``inf``.
        tmin: float, or float tensor broadcastable to the batch shape; default ``0``.
            ``-inf`` takes every hit with ``t < tmax``: the hits behind ``o`` (a backward
            half-line), or with ``tmax = inf`` the whole line; ``t`` stays measured from
            ``o`` (negative behind it), and the closest hit is the one of smallest ``t``.

    A ``Ray`` holds no scene state: one instance may be reused across steps, refits
    and scenes. Its arrays are held by reference: a query reads them as they are
    then, and checks them again as ``Ray()`` does when one was reassigned (``ray.o =
    ...``; errors name the query and ``'ray.o'``, ...). Malformed rays (NaN or inf components in ``o`` or ``d``, a zero
    direction, a NaN or ``+inf`` bound, ``tmax <= tmin``) are not errors; queries report
    them as misses. The exception is ``nearest_edge``, whose segment ``s in [tmin, tmax]``
    is closed: there ``tmax == tmin`` is the point ``o + tmin d`` and only ``tmax < tmin``
    is a miss.

    A query with ``tmin = -inf`` searches from just before the ray enters the scene's
    bounding box (the same hits as any finite ``tmin`` before the scene, without the
    float32 rounding of a far start such as ``-1e30``). A finite ``tmin`` costs nothing
    more (a CPU ``tmin`` tensor: one NumPy check for ``-inf``); a ``tmin`` tensor on a GPU
    pays a few elementwise ops per query (no host read), and the box of a scene on a GPU
    is computed on the device once per ``sync()``.

    Gradients:
        Flow into ``o`` and ``d`` (and into tensors they were computed from).

    Raises:
        TypeError: ``o``/``d`` are not float tensors, or ``tmin``/``tmax`` are neither
            numbers nor float tensors.
        ValueError: a last dimension other than 3, batch shapes that do not
            broadcast, or tensors on different devices.
    """

    # ------------------------------------------------------------------ RayBase hooks
    _ARRAYS = "a float tensor"
    _same_device = staticmethod(_check.same_device)
    _broadcast = staticmethod(_check.broadcast)

    @staticmethod
    def _check_vectors(call: str, name: str, value: object) -> torch.Tensor:
        return _check.float_tensor(call, name, value, last=3)

    @staticmethod
    def _device_of(value: torch.Tensor) -> torch.device:
        return value.device

    @staticmethod
    def _is_array(value: object) -> bool:
        return isinstance(value, torch.Tensor)

    @staticmethod
    def _type_name(value: object) -> str:
        return type(value).__name__

    _check_flat = staticmethod(_check.float_tensor)

    @staticmethod
    def _batch(value: torch.Tensor, vector: bool) -> torch.Size:
        return value.shape[:-1] if vector else value.shape

    @staticmethod
    def _extent(value: object) -> torch.Size | None:
        return value.shape if isinstance(value, torch.Tensor) else None

    def _set_batch(self, batch: torch.Size) -> None:
        self._shape = batch

    @property
    def shape(self) -> torch.Size:
        """The batch shape ``...`` of the arrays as they are now (checked again after an assignment).

        Raises:
            TypeError, ValueError: as ``Ray()``, when a reassigned array does not fit.
        """
        return self._current(f"{self._name}.shape")._shape

    @staticmethod
    def _per_row(t: torch.Tensor | float) -> torch.Tensor | float:
        return t.unsqueeze(-1) if isinstance(t, torch.Tensor) else t

    @property
    def device(self) -> torch.device:
        """The device of the ray tensors."""
        return self.o.device

    def __repr__(self) -> str:
        return f"rayd.torch.Ray(shape={tuple(self.shape)}, dtype={self.o.dtype}, device={self.device})"


document_ray(Ray, torch.Tensor, """The point ``o + t d``, e.g. ``ray(hit.t)`` (``hit.p`` where the ray hit).

    Args:
        t: a float, or a float tensor broadcastable to the batch shape ``...``; in multiples of ``|d|``.

    Returns:
        (..., 3) points (world units) in the promoted dtype of ``o``, ``d``, ``t``; differentiable
        in all three. No checks: a miss's ``t = inf`` gives non-finite points.
    """)
