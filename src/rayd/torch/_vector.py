"""rayd.torch's vector ops: what the backend-neutral formulas of :mod:`rayd.core` need, in torch.

Rows are the last dimension: a 3-vector array is (N, 3), a scalar array (N,). These
are plain torch expressions, so reverse mode (double backward included),
``torch.func.jvp`` and ``torch.compile`` see through them. Counterpart:
:mod:`rayd.drjit._vector`; the protocol is described in :mod:`rayd.core.segments`.
"""

from __future__ import annotations

import torch

from rayd.torch import _convert, _interval

_CONSTANTS: dict[tuple, torch.Tensor] = {}


def constant(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A constant tensor of nested ``values``, cached per dtype and device (no copy per query).

    The cached tensors are made outside any ``torch.func`` transform (plain tensors,
    which every later transform can use; a wrapped one would outlive its transform).
    Under ``torch.compile`` they are always constants of the graph, never the cache's
    (so a graph is the same whether or not an eager call filled the cache first).
    """
    if torch.compiler.is_compiling():
        return torch.tensor(values, dtype=dtype, device=device)
    key = (values, dtype, device)
    cached = _CONSTANTS.get(key)
    if cached is not None:
        return cached
    with _convert.outside_transforms():
        value = torch.tensor(values, dtype=dtype).to(device)
    if not _convert.is_wrapped(value):  # (wrapped: torch without _DisableFuncTorch; not cached)
        _CONSTANTS[key] = value
    return value


def const3(like: torch.Tensor, x: float, y: float, z: float) -> torch.Tensor:
    """The 3-vector ``(x, y, z)`` in ``like``'s dtype and device (broadcasts against rows)."""
    return constant((float(x), float(y), float(z)), like.dtype, like.device)


def dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise ``a . b``."""
    return (a * b).sum(-1)


def cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise ``a x b``."""
    return torch.linalg.cross(a, b)


def scale(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Row-wise ``x v`` (a scalar per row times a 3-vector per row)."""
    return x.unsqueeze(-1) * v


def where(mask: torch.Tensor, a: object, b: object) -> torch.Tensor:
    """Elementwise select (``a`` where ``mask``, else ``b``; either may be a number)."""
    return torch.where(mask, a, b)


def where3(mask: torch.Tensor, a: object, b: object) -> torch.Tensor:
    """A per-row ``mask`` choosing between 3-vectors (``b`` may be a number or one vector)."""
    return torch.where(mask.unsqueeze(-1), a, b)


sqrt = torch.sqrt  # elementwise square root (the function itself: no wrapper call)


def clamp(x: torch.Tensor, lo: object, hi: object) -> torch.Tensor:
    """``min(max(x, lo), hi)`` for number or tensor bounds."""
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        return torch.minimum(torch.maximum(x, lo), hi)
    return x.clamp(lo, hi)


def all_zero(v: torch.Tensor) -> torch.Tensor:
    """Row-wise: every component of ``v`` is 0."""
    return (v == 0).all(-1)


def max_abs(v: torch.Tensor) -> torch.Tensor:
    """Row-wise largest ``|component|`` of ``v``."""
    return v.abs().amax(-1)


def masked(mask: torch.Tensor, fn, *rows: torch.Tensor) -> torch.Tensor:
    """``fn(*rows) & mask`` for a per-row bool ``fn`` of per-row tensors ``rows`` (no gradient).

    On CPU tensors outside ``torch.compile`` and ``torch.func`` transforms, ``fn`` runs on the
    rows where ``mask`` holds only (a host read of ``mask``, which is no synchronisation there);
    elsewhere on every row (fixed-size work, no host read).
    """
    if not all(_interval.host_ok(x) for x in (mask, *rows)):
        return fn(*rows) & mask
    index = mask.nonzero().squeeze(-1)
    out = torch.zeros_like(mask)
    if index.numel():
        out[index] = fn(*(x.detach()[index] for x in rows))
    return out


def rsqrt(x: torch.Tensor) -> torch.Tensor:
    """Elementwise ``1 / sqrt(x)``."""
    return torch.rsqrt(x)


def stack(*xs: torch.Tensor) -> torch.Tensor:
    """The per-row vector ``(x0, x1, ...)`` of per-row scalars."""
    return torch.stack(xs, dim=-1)
