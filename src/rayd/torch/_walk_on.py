"""The open hit interval for float64 queries: search again where the float32 search and the float64 ``t`` disagree.

The engine search bounds candidates by the ``t`` of its float32 snapshot; a float64
query reports the ``t`` of the live float64 vertices. Near ``tmin`` (or ``tmax``) the
two can fall on either side of the bound: the closest-hit search then returns a face
whose reported ``t <= tmin`` (masked to a miss by :func:`rayd.torch._interval.enforce`)
and never looks at the face behind it, and the any-hit search counts a face whose
reported ``t`` lies outside ``(tmin, tmax)``. For those rays alone, the first
:data:`CANDIDATES` crossings (``intersect_all``, each checked on its reported ``t``)
decide. float32 queries never come here.
"""

from __future__ import annotations

import torch

from rayd.flags import RayFlags
from rayd.torch import _convert

CANDIDATES = 8  # crossings looked at per doubtful ray (all within float32 rounding of a bound: rare beyond 2)


def traced() -> bool:
    """True under ``torch.compile`` or a ``torch.func`` transform (no data-dependent host branch there)."""
    return torch.compiler.is_compiling() or _convert.transforms_active()


def _rows(bound, batch: torch.Size):
    return bound.detach().expand(batch).reshape(-1) if isinstance(bound, torch.Tensor) else bound


def walk_on(scene, ray, ignore, batch: torch.Size, global_prim_id: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """(N,) int32 closest winners, where a winner's reported ``t`` (float64 ``t``, (N,)) is ``<= tmin``
    replaced by the closest crossing inside ``(tmin, tmax)`` on reported ``t`` (-1: none)."""
    if traced():
        return global_prim_id
    redo = (global_prim_id >= 0) & (t.detach() <= _rows(ray.tmin, batch))
    if not bool(redo.any()):
        return global_prim_id
    hits = scene.intersect_all(ray, CANDIDATES, redo.reshape(batch), RayFlags.Minimal, ignore=ignore)
    ht = hits.t.detach().reshape(-1, CANDIDATES)
    best = ht.argmin(-1, keepdim=True)
    found = hits.global_prim_id.reshape(-1, CANDIDATES).gather(-1, best).squeeze(-1)
    found = torch.where(ht.gather(-1, best).squeeze(-1) < torch.inf, found, -1)
    return torch.where(redo, found.to(global_prim_id.dtype), global_prim_id)


def confirm_blocked(scene, ray, ignore, batch: torch.Size, blocker: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """(N,) bool occlusion: an any-hit ``blocker`` whose reported ``t`` ((N,) float64) lies in ``(tmin, tmax)``,
    or, where it does not, any of the first crossings inside ``(tmin, tmax)`` on reported ``t``."""
    if traced():
        return blocker >= 0
    blocked = (blocker >= 0) & (t > _rows(ray.tmin, batch)) & (t < _rows(ray.tmax, batch))
    doubt = (blocker >= 0) & ~blocked
    if not bool(doubt.any()):
        return blocked
    hits = scene.intersect_all(ray, CANDIDATES, doubt.reshape(batch), RayFlags.Minimal, ignore=ignore)
    return blocked | (hits.global_prim_id.reshape(-1, CANDIDATES) >= 0).any(-1)


def t_of(scene, ray, batch: torch.Size, global_prim_id: torch.Tensor) -> torch.Tensor:
    """(N,) float64 reported ``t`` of the faces ``global_prim_id`` (``inf`` for -1), no gradient."""
    from rayd.torch._geometry import gather
    from rayd.torch._intersect import evaluate

    n = global_prim_id.shape[0]
    with torch.no_grad():
        o = ray.o.detach().to(torch.float64).expand(tuple(batch) + (3,)).reshape(n, 3)
        d = ray.d.detach().to(torch.float64).expand(tuple(batch) + (3,)).reshape(n, 3)
        rows = (global_prim_id >= 0).nonzero().squeeze(-1)  # the hits alone (host-side sizes are fine here)
        geometry = gather(scene._state.table, scene._state.live(torch.float64), global_prim_id[rows])
        t = torch.full((n,), torch.inf, dtype=torch.float64, device=global_prim_id.device)
        t[rows] = evaluate(o[rows], d[rows], global_prim_id[rows], geometry, RayFlags.Minimal)["t"]
    return t
