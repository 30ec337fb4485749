"""The open hit interval for float64 queries: search again where the float32 search and the float64 ``t`` disagree.

As ``rayd.torch._walk_on``: the engine search bounds candidates by the ``t`` of its
float32 snapshot, a float64 query reports the ``t`` of the live float64 vertices. A
closest-hit winner at reported ``t <= tmin`` (masked to a miss by
:func:`rayd.drjit._intersect.enforce`) hides the face behind it, and an any-hit
blocker may lie outside ``(tmin, tmax)`` on its reported ``t``. For those rays alone,
the first :data:`CANDIDATES` crossings (``intersect_all``, each checked on its
reported ``t``) decide. float32 queries never come here.

The same holds for a winner whose float64 crossing lies off its face (the float32
search saw the snapshot's corners; :func:`rayd.core.hits.off_face`, the rule of the
engine's ``confirmed_face_t``): its reported ``t`` is ``inf`` (a miss, ``t_of``) and the
first crossings on their faces decide (session 23).

No host read: the re-check runs in every float64 query, masked to the doubtful rays
(one all-hits launch; Dr.Jit evaluates the candidates' ``t`` lazily, fused into the
kernels that read the result), rather than after a ``dr.any(...).item()`` that would
synchronise the host.
"""

from __future__ import annotations

from types import ModuleType

import drjit as dr

from rayd.core import hits
from rayd.core.query_args import CANDIDATES
from rayd.drjit._intersect import _bound, evaluate
from rayd.flags import RayFlags



def t_of(scene, m: ModuleType, ray, global_prim_id: dr.ArrayBase) -> dr.ArrayBase:
    """Width-N float64 reported ``t`` of the faces ``global_prim_id`` (``inf`` for -1, and where the crossing
    lies off its face: :func:`rayd.core.hits.off_face`), detached."""
    o, d = m.Array3f64(dr.detach(ray.o)), m.Array3f64(dr.detach(ray.d))
    fields = evaluate(m, True, o, d, global_prim_id, scene._state.live_geometry(m, True), RayFlags.Minimal,
                      hits.face_frame(scene._core, True))
    return dr.select(global_prim_id >= 0, m.Float64(dr.detach(fields["t"])), float("inf"))


def _candidates(scene, m: ModuleType, ray, ignore, active: dr.ArrayBase) -> tuple[dr.ArrayBase, dr.ArrayBase]:
    """``(t, global_prim_id)`` of the closest crossing inside ``(tmin, tmax)`` on reported ``t`` (``inf``, -1: none)."""
    n = dr.width(active)
    hits = scene.intersect_all(ray, CANDIDATES, active, RayFlags.Minimal, ignore=ignore)
    base = dr.arange(m.UInt, n) * CANDIDATES
    best_t = dr.full(m.Float64, float("inf"), n)
    best = dr.full(m.Int, -1, n)
    for k in range(CANDIDATES):
        t = dr.gather(m.Float64, m.Float64(dr.detach(hits.t)), base + k)
        gid = dr.gather(m.Int, m.Int(hits.global_prim_id), base + k)
        closer = (gid >= 0) & (t < best_t)
        best_t = dr.select(closer, t, best_t)
        best = dr.select(closer, gid, best)
    return best_t, best


def walk_on(scene, m: ModuleType, ray, ignore, global_prim_id: dr.ArrayBase, t: dr.ArrayBase) -> dr.ArrayBase:
    """Closest winners where a winner's reported ``t`` is ``<= tmin`` or ``inf`` (its crossing lies off its
    face: :func:`rayd.core.hits.off_face`) replaced by the closest crossing on its face inside ``(tmin, tmax)``
    on reported ``t`` (-1: none)."""
    Bool = type(global_prim_id >= 0)  # the winners' (non-AD) types throughout
    t = m.Float64(dr.detach(t))
    redo = Bool(dr.detach((global_prim_id >= 0) & ((t <= _bound(m.Float64, ray.tmin)) | dr.isinf(t))))
    _, found = _candidates(scene, m, ray, ignore, redo)  # every query, masked: no host read of redo
    return dr.select(redo, type(global_prim_id)(dr.detach(found)), global_prim_id)


def confirm_blocked(scene, m: ModuleType, ray, ignore, blocker: dr.ArrayBase) -> dr.ArrayBase:
    """Occlusion of float64 rays: an any-hit ``blocker`` whose reported ``t`` lies in ``(tmin, tmax)``, or, where
    it does not, any of the first crossings inside ``(tmin, tmax)`` on reported ``t``."""
    Bool = type(blocker >= 0)  # shadow_test's (non-AD) result type
    t = t_of(scene, m, ray, blocker)
    blocked = Bool((blocker >= 0) & (t > _bound(m.Float64, ray.tmin)) & (t < _bound(m.Float64, ray.tmax)))
    doubt = (blocker >= 0) & ~blocked
    _, found = _candidates(scene, m, ray, ignore, doubt)
    return blocked | Bool(dr.detach(found >= 0))
