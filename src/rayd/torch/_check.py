"""Input checks for rayd.torch with messages that name the call and the argument.

Exception types follow DESIGN.md: ``TypeError`` for wrong Python types and dtypes,
``ValueError`` for wrong shapes, devices and values, ``RuntimeError`` for lifecycle
faults. Never ``assert`` (it vanishes under ``python -O``).
"""

from __future__ import annotations

import torch

from rayd.core.checks import face_range, lifecycle, non_finite
from rayd.torch._convert import is_batched

__all__ = ["lifecycle"]  # re-exported: rayd.torch modules raise lifecycle faults through _check

FLOAT_DTYPES = (torch.float32, torch.float64)
INDEX_DTYPES = (torch.int32, torch.int64)


def _dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    return " or ".join(str(d).replace("torch.", "") for d in dtypes)


def tensor(call: str, name: str, value: object) -> torch.Tensor:
    """``value`` if it is a ``torch.Tensor``, else ``TypeError``."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{call}: '{name}' must be a torch.Tensor, got {type(value).__name__}")
    return value


def float_tensor(
    call: str, name: str, value: object, *, last: int | None = None, ndim: int | None = None
) -> torch.Tensor:
    """A float32/float64 tensor whose last dimension is ``last`` and rank ``ndim`` (if given)."""
    value = tensor(call, name, value)
    if value.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{call}: '{name}' must have dtype {_dtype_names(FLOAT_DTYPES)}, got {value.dtype}")
    shape(call, name, value, last=last, ndim=ndim)
    return value


def index_tensor(call: str, name: str, value: object, *, last: int | None = None, ndim: int | None = None) -> torch.Tensor:
    """An int32/int64 tensor of the given trailing size and rank."""
    value = tensor(call, name, value)
    if value.dtype not in INDEX_DTYPES:
        raise TypeError(f"{call}: '{name}' must have dtype {_dtype_names(INDEX_DTYPES)}, got {value.dtype}")
    shape(call, name, value, last=last, ndim=ndim)
    return value


def shape(call: str, name: str, value: torch.Tensor, *, last: int | None = None, ndim: int | None = None) -> None:
    """``ValueError`` unless ``value`` has rank ``ndim`` and last dimension ``last``."""
    if ndim is not None and value.dim() != ndim:
        dims = ["N"] * (ndim - 1) + [str(last) if last is not None else "M"]
        want = f"({dims[0]},)" if ndim == 1 else "(" + ", ".join(dims) + ")"
        raise ValueError(f"{call}: '{name}' must have shape {want}, got {tuple(value.shape)}")
    if last is not None and (value.dim() == 0 or value.shape[-1] != last):
        raise ValueError(f"{call}: '{name}' must have shape (..., {last}), got {tuple(value.shape)}")


def unbatched(call: str, name: str, value: torch.Tensor) -> torch.Tensor:
    """``value`` unless it is batched by ``torch.func.vmap`` (a scene holds one geometry), else ``ValueError``."""
    if is_batched(value):
        raise ValueError(
            f"{call}: '{name}' is batched by torch.func.vmap, but a scene holds one geometry: "
            "vmap over rays and points (every query supports it), or build one scene per batch element "
            "outside vmap (docs/compile.md)")
    return value


def same_device(call: str, name: str, value: torch.Tensor, device: torch.device, owner: str) -> None:
    """``ValueError`` unless ``value`` lives on ``device`` (named after ``owner``)."""
    if not _same(value.device, device):
        raise ValueError(f"{call}: '{name}' is on {value.device}, but {owner} is on {device}")


def _same(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    ia = a.index if a.index is not None else torch.cuda.current_device()
    ib = b.index if b.index is not None else torch.cuda.current_device()
    return ia == ib


def supported_device(call: str, name: str, value: torch.Tensor) -> None:
    """``ValueError`` for devices the engine cannot run on (only CPU and CUDA)."""
    if value.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{call}: '{name}' is on {value.device}; rayd runs on 'cpu' and 'cuda' devices")


def finite(call: str, name: str, value: torch.Tensor) -> None:
    """``ValueError`` if ``value`` holds NaN or inf (synchronises with the device)."""
    if value.numel() and not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).any(dim=-1).nonzero()[0, 0]) if value.dim() > 1 else -1
        raise non_finite(call, name, bad)


def face_indices(call: str, name: str, faces: torch.Tensor, num_vertices: int) -> None:
    """``ValueError`` unless every entry of ``faces`` lies in ``[0, num_vertices)`` (synchronises)."""
    if faces.numel():
        low, high = (int(x) for x in torch.aminmax(faces))
        face_range(call, name, low, high, num_vertices)


def broadcast(call: str, names_and_shapes: list[tuple[str, torch.Size]]) -> torch.Size:
    """The common batch shape of several inputs, or ``ValueError`` naming them."""
    try:
        return torch.broadcast_shapes(*(s for _, s in names_and_shapes))
    except RuntimeError:
        described = ", ".join(f"'{n}' {tuple(s)}" for n, s in names_and_shapes)
        raise ValueError(f"{call}: batch shapes do not broadcast: {described}") from None

