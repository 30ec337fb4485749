"""The open hit interval for float64 queries: re-search where the float32 search and the float64 ``t`` disagree.

The engine search bounds candidates by the ``t`` of its float32 snapshot; a float64
query reports the ``t`` of the live float64 vertices. Near ``tmin`` the two can fall
on either side of the bound: the search then returns a face whose reported ``t <=
tmin`` (masked to a miss by :func:`rayd.torch._interval.enforce`) and never looks
at the face behind it. :func:`walk_on` searches those rays again with that face
skipped (``ignore``), a few passes at most; :func:`confirm_blocked` checks an
any-hit blocker's float64 ``t`` and, where it lies outside ``(tmin, tmax)``, asks
the closest hit instead. float32 queries never come here.
"""

from __future__ import annotations

import torch

from rayd.flags import RayFlags
from rayd.torch import _convert, _interval, _ops, _trace
from rayd.torch._geometry import gather
from rayd.torch._intersect import evaluate

PASSES = 4  # each pass skips one more face; rays still disagreeing after these report a miss (as before)


def t_of(scene, o: torch.Tensor, d: torch.Tensor, global_prim_id: torch.Tensor) -> torch.Tensor:
    """(N,) float64 reported ``t`` of the winners (``inf`` for misses), no gradient."""
    with torch.no_grad():
        live = scene._state.live(torch.float64)
        fields = evaluate(o.detach(), d.detach(), global_prim_id, gather(scene._state.table, live, global_prim_id),
                          RayFlags.Minimal)
    return torch.where(global_prim_id >= 0, fields["t"], torch.inf)


def walk_on(scene, call: str, ray, active, ignore, batch: torch.Size, o: torch.Tensor, d: torch.Tensor,
            global_prim_id: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """(N,) int32 closest winners with every winner at reported ``t <= tmin`` searched past (float64 rows).

    ``o``, ``d`` (N, 3) and ``t`` (the winners' reported ``t``) are float64. A winner
    equal to the ray's own ``ignore`` (possible once a pass skips another face) is
    searched past as well. Under ``torch.compile`` or transforms nothing changes.
    """
    if _traced():
        return global_prim_id
    tmin = _interval._rows(ray.tmin, batch, t)
    rows = None
    for _ in range(PASSES):
        if rows is not None:
            t = t_of(scene, o, d, global_prim_id)
        redo = (global_prim_id >= 0) & (t <= tmin)
        if rows is not None:
            redo |= (global_prim_id >= 0) & (global_prim_id == user)
        if not bool(redo.any()):
            break
        if rows is None:
            _, n, rows, _ = _trace.prepare(scene, call, ray, active, ignore)
            ro, rd, lo, hi, flag, user = rows
        flag_n = (flag.expand(n).bool() & redo).to(torch.uint8).contiguous()
        skip = torch.where(redo, global_prim_id, user.expand(n)).to(torch.int32).contiguous()
        again = _ops.ray_search(scene, call, ro, rd, lo, hi, flag_n, skip, n, False)
        global_prim_id = torch.where(redo, again, global_prim_id)
    return global_prim_id


def confirm_blocked(scene, call: str, ray, active, ignore, batch: torch.Size, n: int,
                    blocker: torch.Tensor) -> torch.Tensor:
    """(N,) bool occlusion of float64 rays: an any-hit ``blocker`` whose reported ``t`` lies in ``(tmin, tmax)``.

    Where it does not, the closest hit (:func:`walk_on`) decides.
    """
    if _traced():
        return blocker >= 0
    o, d = _rows(ray, batch, n)
    t = t_of(scene, o, d, blocker)
    tmin = _interval._rows(ray.tmin, batch, t)
    tmax = _interval._rows(ray.tmax, batch, t)
    blocked = (blocker >= 0) & (t > tmin) & (t < tmax)
    doubt = (blocker >= 0) & ~blocked
    if not bool(doubt.any()):
        return blocked
    _, _, rows, _ = _trace.prepare(scene, call, ray, active, ignore)
    ro, rd, lo, hi, flag, skip = rows
    flag_n = (flag.expand(n).bool() & doubt).to(torch.uint8).contiguous()
    closest = _ops.ray_search(scene, call, ro, rd, lo, hi, flag_n, skip, n, False)
    closest = walk_on(scene, call, ray, active, ignore, batch, o, d, closest, t_of(scene, o, d, closest))
    t = t_of(scene, o, d, closest)
    return blocked | ((closest >= 0) & (t > tmin) & (t < tmax))


def _traced() -> bool:
    """True under ``torch.compile`` or a ``torch.func`` transform (no data-dependent host branch there)."""
    return torch.compiler.is_compiling() or _convert.transforms_active()


def _rows(ray, batch: torch.Size, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ray's (N, 3) float64 origins and directions, detached."""
    o = ray.o.detach().to(torch.float64).expand(tuple(batch) + (3,)).reshape(n, 3)
    d = ray.d.detach().to(torch.float64).expand(tuple(batch) + (3,)).reshape(n, 3)
    return o, d
