"""The per-ray sorted hit list of the all-hits queries, and the rule that merges shared-edge hits.

See :mod:`rayd.engine.all_hits` for the queries and the rule (two hits on faces of one
shape that share a vertex index, with ``t`` equal to :data:`MERGE_TOLERANCE` relative,
are one hit, kept on the smaller ``global_prim_id``). Each entry also keeps the *side*
of its merged faces (:func:`rayd.engine.watertight.watertight_hit`), from which
``count_intersections`` tells a crossing from a touch (:func:`rayd.engine.watertight.crossings`).
"""

from __future__ import annotations

import warp as wp

from rayd.engine.traversal import SceneView
from rayd.engine.watertight import MERGE_TOLERANCE, inner_hit, merge_sides

wp.set_module_options({"enable_backward": False})


_TOL = wp.constant(MERGE_TOLERANCE)
#: A merged face is *inner* (hits merged by ``t`` alone) where the ray passes farther than this many merge
#: tolerances from all its edges (a nearly tangent ray meets the faces of one vertex at points that far apart).
INNER_TOLERANCES = 3.0
_INNER = wp.constant(INNER_TOLERANCES * MERGE_TOLERANCE)


@wp.struct
class HitList:
    """Per-ray sorted hit list: columns ``[0, cap)`` the list, ``[cap, cap + carry)`` merged-into entries."""

    t: wp.array2d(dtype=float)
    gid: wp.array2d(dtype=wp.int32)
    key: wp.array2d(dtype=wp.int32)  # flat face index, or the instance's local face index
    inst: wp.array2d(dtype=wp.int32)  # -1 for a flat face, else the instance index
    side: wp.array2d(dtype=wp.int32)  # the merged faces' side (watertight.watertight_hit, merge_sides)
    cap: int


@wp.func
def _corner(view: SceneView, key: int, inst: int, j: int) -> int:
    if inst < 0:
        return view.flat_indices[3 * key + j]
    return view.blas_indices[3 * (view.inst_face_base[inst] + key) + j]


@wp.func
def _share_vertex(view: SceneView, key_a: int, inst_a: int, key_b: int, inst_b: int) -> bool:
    """True if the two faces belong to the same shape and share a vertex index."""
    if inst_a != inst_b:
        return False
    for ja in range(3):
        a = _corner(view, key_a, inst_a, ja)
        for jb in range(3):
            if _corner(view, key_b, inst_b, jb) == a:
                return True
    return False


@wp.func
def _close(t_a: float, t_b: float, scale: float) -> bool:
    return wp.abs(t_a - t_b) <= _TOL * (wp.max(wp.abs(t_a), wp.abs(t_b)) + scale)


@wp.func
def search_end(hits: HitList, i: int, count: int, tmax: float, scale: float) -> float:
    """The end of the interval still searched: ``tmax``, or the last entry (+ tolerance) of a full list."""
    if count < hits.cap:
        return tmax
    last = hits.t[i, hits.cap - 1]
    return wp.min(tmax, last + _TOL * (wp.abs(last) + scale) * 1.0001)


@wp.func
def _inner(view: SceneView, key: int, inst: int, t: float, scale: float, o: wp.vec3, d: wp.vec3) -> int:
    """The *inner* flag of a listed face (``watertight.inner_hit``) at the merge tolerance of its ``t``
    (``o``, ``d``: the frame of the walk that offered it, world or the instance's object space)."""
    a = int(0)
    b = int(0)
    c = int(0)
    if inst < 0:
        a = view.flat_indices[3 * key]
        b = view.flat_indices[3 * key + 1]
        c = view.flat_indices[3 * key + 2]
        return inner_hit(o, d, view.flat_points[a], view.flat_points[b], view.flat_points[c],
                         _INNER * (wp.abs(t) + scale) * wp.length(d))
    row = 3 * (view.inst_face_base[inst] + key)
    a = view.blas_indices[row]
    b = view.blas_indices[row + 1]
    c = view.blas_indices[row + 2]
    return inner_hit(o, d, view.blas_points[a], view.blas_points[b], view.blas_points[c],
                     _INNER * (wp.abs(t) + scale) * wp.length(d))


@wp.func
def offer(view: SceneView, hits: HitList, i: int, count: int, carry: int, t_in: float, gid_in: int,
          key_in: int, inst_in: int, side_in: int, scale: float, o: wp.vec3, d: wp.vec3) -> int:
    """Insert a hit into row ``i``'s sorted list (merging shared-edge duplicates); returns the new count.

    Where hits merge, each one's *inner* flag (``watertight.inner_hit``) joins the merged side
    (``side_in``: ``watertight.watertight_hit``'s): only merged hits need it. ``o``, ``d``: the
    walk's frame of the hit's face (the same for every face it can merge with: one shape).
    """
    cap = hits.cap
    for j in range(carry):  # one crossing with an entry of the previous round: already counted
        c = cap + j
        if _close(hits.t[i, c], t_in, scale):
            if _share_vertex(view, hits.key[i, c], hits.inst[i, c], key_in, inst_in):
                return count
    t = t_in
    gid = gid_in
    key = key_in
    inst = inst_in
    side = side_in
    merging = int(1)
    while merging != 0:
        found = int(-1)
        for j in range(count):
            if found < 0 and _close(hits.t[i, j], t, scale):
                if _share_vertex(view, hits.key[i, j], hits.inst[i, j], key, inst):
                    found = j
        if found < 0:
            merging = 0
        else:
            side = merge_sides(side, hits.side[i, found])
            side = side | _inner(view, key, inst, t, scale, o, d)
            side = side | _inner(view, hits.key[i, found], hits.inst[i, found], hits.t[i, found], scale, o, d)
            if hits.gid[i, found] < gid:  # the crossing keeps the smaller global_prim_id
                t = hits.t[i, found]
                gid = hits.gid[i, found]
                key = hits.key[i, found]
                inst = hits.inst[i, found]
            for j in range(found, count - 1):
                hits.t[i, j] = hits.t[i, j + 1]
                hits.gid[i, j] = hits.gid[i, j + 1]
                hits.key[i, j] = hits.key[i, j + 1]
                hits.inst[i, j] = hits.inst[i, j + 1]
                hits.side[i, j] = hits.side[i, j + 1]
            count -= 1
    pos = count
    while pos > 0 and (hits.t[i, pos - 1] > t or (hits.t[i, pos - 1] == t and hits.gid[i, pos - 1] > gid)):
        pos -= 1
    if pos >= cap:
        return count
    last = wp.min(count, cap - 1)
    j = last
    while j > pos:
        hits.t[i, j] = hits.t[i, j - 1]
        hits.gid[i, j] = hits.gid[i, j - 1]
        hits.key[i, j] = hits.key[i, j - 1]
        hits.inst[i, j] = hits.inst[i, j - 1]
        hits.side[i, j] = hits.side[i, j - 1]
        j -= 1
    hits.t[i, pos] = t
    hits.gid[i, pos] = wp.int32(gid)
    hits.key[i, pos] = wp.int32(key)
    hits.inst[i, pos] = wp.int32(inst)
    hits.side[i, pos] = wp.int32(side)
    return wp.min(count + 1, cap)


@wp.func
def after(t: float, gid: int, lo_t: float, lo_gid: int) -> bool:
    """``(t, gid) > (lo_t, lo_gid)`` in lexicographic order (the start of a counting round)."""
    return t > lo_t or (t == lo_t and gid > lo_gid)
