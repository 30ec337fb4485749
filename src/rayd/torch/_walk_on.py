"""The open hit interval for float64 queries: search again where the float32 search and the float64 ``t`` disagree.

The engine search bounds candidates by the ``t`` of its float32 snapshot; a float64
query reports the ``t`` of the live float64 vertices. Near ``tmin`` (or ``tmax``) the
two can fall on either side of the bound: the closest-hit search then returns a face
whose reported ``t <= tmin`` (masked to a miss by :func:`rayd.torch._interval.enforce`)
and never looks at the face behind it, and the any-hit search counts a face whose
reported ``t`` lies outside ``(tmin, tmax)``. For those rays, the first
:data:`CANDIDATES` crossings (the engine's all-hits search, each checked on its
reported ``t``) decide. float32 queries never come here.

The same holds for a winner whose float64 crossing lies off its face (the float32
search saw the snapshot's corners; :func:`rayd.core.hits.off_face`, the rule of the
engine's ``confirmed_face_t``): its reported ``t`` is ``inf`` (a miss, ``t_of``) and the
first crossings on their faces decide (session 23).

No host synchronisation: on a device (CUDA) the re-check always runs, for every ray,
masked to the doubtful ones (fixed-size work: one all-hits launch and the float64
``t`` of ``N K`` candidates). On the CPU, where reading a tensor is no
synchronisation, it is skipped when no ray is in doubt (:func:`on_host`).
"""

from __future__ import annotations

import torch

from rayd.core import hits
from rayd.core.query_args import CANDIDATES
from rayd.flags import RayFlags
from rayd.torch import _convert, _interval, _ops, _trace


def traced() -> bool:
    """True under ``torch.compile`` or a ``torch.func`` transform (no data-dependent host branch there)."""
    return torch.compiler.is_compiling() or _convert.transforms_active()


def on_host(t: torch.Tensor) -> bool:
    """True where the re-check may branch on values (CPU tensors: a read is no host synchronisation)."""
    return _interval.host_ok(t)


def _rows(bound, batch: torch.Size):
    return bound.detach().expand(batch).reshape(-1) if isinstance(bound, torch.Tensor) else bound


def _lanes(bound, batch: torch.Size):
    """A bound as :func:`_rows`, with a trailing axis of 1 to broadcast against (N, K) candidates."""
    bound = _rows(bound, batch)
    return bound.unsqueeze(-1) if isinstance(bound, torch.Tensor) else bound


def _crossings(scene, ray, ignore, batch: torch.Size, doubt: torch.Tensor,
               weight: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(t, global_prim_id)``, (N, K) each, of the first crossings of the ``doubt`` rays ((N,) bool) in the
    widened search (the float64 queries' search origin), ``t`` the reported float64 ``t`` (``inf`` for -1).
    ``weight`` ((N, K) int32, optional, never under tracing) receives the crossings each one counts (0: a touch)."""
    call = f"{scene._PREFIX}.intersect()"
    n = doubt.shape[0]
    _, _, rows, _ = _trace.prepare(scene, call, ray, doubt.reshape(batch), ignore, widen=True)
    if weight is None:
        gid = _ops.all_hits(scene, call, rows, n, CANDIDATES).reshape(n * CANDIDATES)
    else:
        gid = _ops.all_hits_impl(scene, *(x.detach() for x in rows), n, CANDIDATES, weight).reshape(n * CANDIDATES)
    lanes = torch.Size((n, CANDIDATES))
    t = t_of(scene, ray, lanes, gid, o_batch=batch).reshape(n, CANDIDATES)
    return t, gid.reshape(n, CANDIDATES)


def _candidates(scene, ray, ignore, batch: torch.Size, doubt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_crossings` with ``t`` set to ``inf`` outside ``(tmin, tmax)`` (other rays: all ``inf``)."""
    t, gid = _crossings(scene, ray, ignore, batch, doubt)
    inside = (t > _lanes(ray.tmin, batch)) & (t < _lanes(ray.tmax, batch))
    return torch.where(inside, t, torch.inf), gid


def behind(scene, ray, ignore, batch: torch.Size, rows, first: torch.Tensor) -> torch.Tensor:
    """(N,) int32 number of crossings of a float64 count (searched on ``rows``, widened below ``tmin``) whose
    reported ``t`` is ``<= tmin``: none where the first crossing ``first`` ((N,) int32) lies past ``tmin``,
    else counted among the first :data:`CANDIDATES` crossings. On the CPU, skipped when no ray is in doubt."""
    zero = torch.zeros(first.shape, dtype=torch.int32, device=first.device)
    if traced() or first.numel() == 0:
        return zero
    doubt = (first >= 0) & (t_of(scene, ray, batch, first) <= _rows(ray.tmin, batch))
    if on_host(first) and not bool(doubt.any()):
        return zero
    weight = torch.zeros((first.shape[0], CANDIDATES), dtype=torch.int32, device=first.device)
    t, gid = _crossings(scene, ray, ignore, batch, doubt, weight)
    early = (gid >= 0) & (t <= _lanes(ray.tmin, batch)) & doubt.unsqueeze(-1)
    return torch.where(early, weight, 0).sum(-1, dtype=torch.int32)  # a touch counted 0


def walk_on(scene, ray, ignore, batch: torch.Size, global_prim_id: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """(N,) int32 closest winners, where a winner's reported ``t`` (float64 ``t``, (N,); ``inf`` where its
    crossing lies off its face, :func:`rayd.core.hits.off_face`) is ``<= tmin`` or ``inf`` replaced by the
    closest crossing on its face inside ``(tmin, tmax)`` on reported ``t`` (-1: none).

    On the CPU, ``global_prim_id`` itself when no winner is in doubt; on a device always a new tensor.
    """
    if traced() or global_prim_id.numel() == 0:  # (an empty batch: nothing to re-check, and no launch)
        return global_prim_id
    t = t.detach()
    redo = (global_prim_id >= 0) & ((t <= _rows(ray.tmin, batch)) | torch.isposinf(t))  # inf: off its face
    if on_host(t) and not bool(redo.any()):
        return global_prim_id
    ht, gid = _candidates(scene, ray, ignore, batch, redo)
    best = ht.argmin(-1, keepdim=True)
    found = gid.gather(-1, best).squeeze(-1)
    found = torch.where(ht.gather(-1, best).squeeze(-1) < torch.inf, found, -1)
    return torch.where(redo, found.to(global_prim_id.dtype), global_prim_id)


def confirm_blocked(scene, ray, ignore, batch: torch.Size, blocker: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """(N,) bool occlusion: an any-hit ``blocker`` whose reported ``t`` ((N,) float64) lies in ``(tmin, tmax)``,
    or, where it does not, any of the first crossings inside ``(tmin, tmax)`` on reported ``t``."""
    hit = blocker >= 0
    if traced() or blocker.numel() == 0:
        return hit
    blocked = hit & (t > _rows(ray.tmin, batch)) & (t < _rows(ray.tmax, batch))
    doubt = hit & ~blocked
    if on_host(t) and not bool(doubt.any()):
        return blocked
    ht, _ = _candidates(scene, ray, ignore, batch, doubt)
    return blocked | (doubt & (ht < torch.inf).any(-1))


def t_of(scene, ray, batch: torch.Size, global_prim_id: torch.Tensor,
         o_batch: torch.Size | None = None) -> torch.Tensor:
    """(N,) float64 reported ``t`` of the faces ``global_prim_id`` (``inf`` for -1, and where the crossing
    lies off its face: :func:`rayd.core.hits.off_face`), no gradient.

    ``batch``: the rows' shape (``N`` = its size); the ray broadcasts to ``o_batch`` (default
    ``batch``), whose rows are repeated along ``batch``'s last axis when the two differ.
    """
    from rayd.torch._geometry import gather
    from rayd.torch._intersect import evaluate

    n = global_prim_id.shape[0]
    with torch.no_grad():
        o, d = (x.detach().to(torch.float64) for x in (ray.o, ray.d))
        if o_batch is not None:  # rays (o_batch) -> candidate rows (o_batch, K)
            o, d = (x.expand(tuple(o_batch) + (3,)).reshape(-1, 1, 3) for x in (o, d))  # (N, 1, 3)
        o, d = (x.expand(tuple(batch) + (3,)).reshape(n, 3) for x in (o, d))
        live = scene._state.live(torch.float64)
        face = hits.face_frame(scene._core, True)
        if on_host(global_prim_id):  # the hits alone (host-side sizes are fine on the CPU)
            rows = (global_prim_id >= 0).nonzero().squeeze(-1)
            t = torch.full((n,), torch.inf, dtype=torch.float64, device=global_prim_id.device)
            geometry = gather(scene._state.table, live, global_prim_id[rows])
            t[rows] = evaluate(o[rows], d[rows], global_prim_id[rows], geometry, RayFlags.Minimal, face)["t"]
            return t
        # Fixed-size: every row, misses on the stand-in (no nonzero: its size would need a host read).
        geometry = gather(scene._state.table, live, global_prim_id)
        t = evaluate(o, d, global_prim_id, geometry, RayFlags.Minimal, face)["t"]
        return torch.where(global_prim_id >= 0, t, torch.inf)
