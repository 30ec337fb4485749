"""The hit interval on reported values: ``tmin < t < tmax`` in the evaluated dtype.

The search ranks and bounds candidates by the ``t`` the evaluation computes
(``engine.watertight.confirmed_t``), from its float32 snapshot of the scene. A
float64 scene (or transformed geometry) is evaluated from other numbers, so a
winner can land on the wrong side of ``tmin``/``tmax`` by float32 rounding; such a
winner is reported as a miss (fields masked, no gradient, no host synchronisation).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rayd.core.hits import as_misses
from rayd.torch import _convert

def enforce(fields: dict[str, torch.Tensor], tmin: float | torch.Tensor, tmax: float | torch.Tensor,
            batch: torch.Size) -> dict[str, torch.Tensor]:
    """``fields`` ((N, ...) tensors of an Intersection) with hits outside ``(tmin, tmax)`` turned into misses."""
    t = fields["t"]
    if t.device.type == "cpu" and "global_prim_id" in fields and not _traced(t):
        # Every hit inside and every miss already a miss (t = inf): nothing to mask (on the CPU
        # this host check costs two reductions; the masks cost one full pass per field). Not
        # under torch.compile or vmap (a data-dependent branch): the masks are exact anyway.
        # In NumPy on one thread: each torch op here is an OpenMP region, which costs a
        # scheduler wait per op where another process holds a core (up to 20 ms at 256 k rays).
        tn = t.detach().numpy()
        ok_np = (tn > _host(tmin, batch)) & (tn < _host(tmax, batch))
        hit = fields["global_prim_id"].numpy() >= 0
        if np.array_equal(ok_np, hit) and bool(np.all(hit | (tn == math.inf))):
            return fields
    ok = (t > _rows(tmin, batch, t)) & (t < _rows(tmax, batch, t))
    return as_misses(fields, ok, _select)


def _select(ok: torch.Tensor, value: torch.Tensor, fill: float) -> torch.Tensor:
    """``value`` where ``ok`` (per row), else ``fill`` (broadcast over component dims)."""
    return torch.where(ok.reshape(ok.shape + (1,) * (value.dim() - 1)), value, fill)


def _traced(t: torch.Tensor) -> bool:
    """True under ``torch.compile`` or for a ``torch.func``-wrapped ``t`` (no host branch on its values)."""
    return torch.compiler.is_compiling() or (_convert.transforms_active() and _convert.is_wrapped(t))


def host_ok(t: torch.Tensor) -> bool:
    """True where NumPy may stand in for torch on ``t`` (a CPU tensor, outside compile and transforms)."""
    return t.device.type == "cpu" and not _traced(t)


def _host(bound: float | torch.Tensor, batch: torch.Size) -> float | np.ndarray:
    if not isinstance(bound, torch.Tensor):
        return bound
    bound = bound.detach()
    return bound.reshape(()).item() if bound.numel() == 1 else bound.expand(batch).reshape(-1).numpy()


def _rows(bound: float | torch.Tensor, batch: torch.Size, t: torch.Tensor) -> torch.Tensor | float:
    if not isinstance(bound, torch.Tensor):
        return bound
    bound = bound.detach()
    return bound.reshape(()) if bound.numel() == 1 else bound.expand(batch).reshape(-1)
