"""Closest/any-hit walk of the flat BVH in rayd's 4-wide layout (``wide_nodes.py``).

One wide node is seven 128-bit loads (the six box rows of its four children and their
refs). The slab test takes each axis's near and far plane by the sign of the ray's
direction (chosen once per ray: the rows ``lo``/``hi`` swap for a negative component),
which is the min/max slab test of ``pair_walk._slab`` for every box with ``lo <= hi`` and
rejects an empty slot (``lo > hi``). The children hit are sorted by entry distance (a
five-comparator network); the nearest is walked next and the others pushed far first on
a stack of int32 refs (a popped node is not re-tested: its children are, in the fetch that
reads them). Leaves, their triangles (``PairNodes.tris``), the per-ray shear and the float64
confirmation are those of ``pair_walk`` (``_slot_face``), so the same triangles are
candidates and the winner's ``t`` is the same. One walk (:func:`make_wide_walk`) serves the float
rows (``"wide4"``) and the compressed rows of ``wide_q.py`` (``"wide4q"``), whose decoded boxes hold
the float ones. The node test and the sort are shared with the wide instance walks
(``instance_walk.py``).
"""

from __future__ import annotations

import warp as wp

from rayd.engine.native import load4, load4i
from rayd.engine.pair_walk import _slot_face, make_flat_trace, ray_frame
from rayd.engine.traversal import SceneView
from rayd.engine.watertight import INF
from rayd.engine.wide_nodes import STACK
from rayd.engine.wide_q import children_q

wp.set_module_options({"enable_backward": False})


@wp.func
def _sort2(da: float, ra: int, db: float, rb: int) -> tuple[float, int, float, int]:
    """The two (distance, ref) pairs in ascending distance."""
    if db < da:
        return db, rb, da, ra
    return da, ra, db, rb


@wp.func
def _sort4(t: wp.vec4, r: wp.vec4i) -> tuple[wp.vec4, wp.vec4i]:
    """The four (entry distance, ref) pairs of a wide node's children in ascending distance (a five-comparator
    network, not stable: equal distances may change their slot order): ``(distances, refs)``."""
    d0, r0, d1, r1 = _sort2(t[0], r[0], t[1], r[1])
    d2, r2, d3, r3 = _sort2(t[2], r[2], t[3], r[3])
    d0, r0, d2, r2 = _sort2(d0, r0, d2, r2)
    d1, r1, d3, r3 = _sort2(d1, r1, d3, r3)
    d1, r1, d2, r2 = _sort2(d1, r1, d2, r2)
    return wp.vec4(d0, d1, d2, d3), wp.vec4i(r0, r1, r2, r3)


@wp.func
def _near_rows(inv_d: wp.vec3) -> wp.vec3i:
    """Per axis, the row offset (0 or 1) of the near plane: ``lo`` for a positive direction."""
    return wp.vec3i(wp.where(inv_d[0] >= 0.0, 0, 1), wp.where(inv_d[1] >= 0.0, 0, 1), wp.where(inv_d[2] >= 0.0, 0, 1))


@wp.func
def _children(data: wp.array(dtype=wp.vec4), base: int, near: wp.vec3i, o: wp.vec3, inv_d: wp.vec3,
              reach: float) -> wp.vec4:
    """Entry distance of the ray into each of the four children of the node at row ``base`` (+inf: missed)."""
    nx = load4(data, base + near[0])
    fx = load4(data, base + 1 - near[0])
    ny = load4(data, base + 2 + near[1])
    fy = load4(data, base + 3 - near[1])
    nz = load4(data, base + 4 + near[2])
    fz = load4(data, base + 5 - near[2])
    out = wp.vec4(INF)
    for j in range(4):
        enter = wp.max(wp.max((nx[j] - o[0]) * inv_d[0], (ny[j] - o[1]) * inv_d[1]),
                       wp.max((nz[j] - o[2]) * inv_d[2], 0.0))
        leave = wp.min(wp.min((fx[j] - o[0]) * inv_d[0], (fy[j] - o[1]) * inv_d[1]), (fz[j] - o[2]) * inv_d[2])
        if leave >= enter and enter < reach:
            out[j] = enter
    return out


@wp.func
def _float_children(view: SceneView, ref: int, near: wp.vec3i, o: wp.vec3, inv_d: wp.vec3, reach: float) -> wp.vec4:
    """:func:`_children` of wide node ``ref`` (float rows)."""
    return _children(view.flat_wide_data, 8 * ref, near, o, inv_d, reach)


@wp.func
def _float_refs(view: SceneView, ref: int) -> wp.vec4i:
    """The children's refs of wide node ``ref`` (row 6)."""
    return load4i(view.flat_wide_links, 8 * ref + 6)


@wp.func
def _q_children(view: SceneView, ref: int, near: wp.vec3i, o: wp.vec3, inv_d: wp.vec3, reach: float) -> wp.vec4:
    """The same over the compressed rows (``wide_q.children_q``), or the float rows for the top nodes
    (``ref < view.flat_wide_qfrom``, ``wide_q.FLOAT_TOP``)."""
    if ref < view.flat_wide_qfrom:
        return _children(view.flat_wide_data, 8 * ref, near, o, inv_d, reach)
    return children_q(view.flat_wide_q, ref, near, o, inv_d, reach)


@wp.func
def _q_refs(view: SceneView, ref: int) -> wp.vec4i:
    """The children's refs of wide node ``ref`` (compressed row 3, or float row 6 for the top nodes)."""
    if ref < view.flat_wide_qfrom:
        return load4i(view.flat_wide_links, 8 * ref + 6)
    return load4i(view.flat_wide_q, 4 * ref + 3)


def make_wide_walk(children: wp.Function, refs: wp.Function) -> wp.Function:
    """The near-child-first walk of the flat wide nodes over a node format: ``children(view, ref, near, o,
    inv_d, reach) -> wp.vec4`` (entry distances, +inf: missed) and ``refs(view, ref) -> wp.vec4i``; a
    ``wp.func`` ``(view, o0, s, d, tmin, tmax, ignore, any_hit) -> (t, face)`` or ``(tmax, -1)``, ``s`` as
    in ``traversal.py``."""

    @wp.func
    def walk(view: SceneView, o0: wp.vec3, s: float, d: wp.vec3, tmin: float, tmax: float, ignore: int,
             any_hit: int) -> tuple[float, int]:
        o = o0 + s * d
        inv_d, k, sh = ray_frame(d)
        near = _near_rows(inv_d)
        best = tmax
        face = int(-1)
        stack = wp.vector(dtype=wp.int32, length=STACK)
        count = int(0)
        ref = view.flat_wide_root
        while True:
            if ref >= 0:
                t = children(view, ref, near, o, inv_d, best - s)
                if t[0] < INF or t[1] < INF or t[2] < INF or t[3] < INF:
                    ds, rs = _sort4(t, refs(view, ref))
                    for j in range(3, 0, -1):  # the far ones first
                        if ds[j] < INF:
                            stack[count] = rs[j]
                            count += 1
                    ref = rs[0]
                    continue
            else:
                code = -1 - ref
                first = code >> 3
                for slot in range(first, first + (code & 7) + 1):
                    th, f = _slot_face(view, slot, o, k, sh, s, o0, d, tmin, best, ignore)
                    if th < best:
                        best = th
                        face = f
                if face >= 0 and any_hit != 0:
                    return best, face
            if count == 0:
                break
            count -= 1
            ref = stack[count]
        return best, face

    return walk


#: The flat BVH's search over the wide nodes (``traversal.trace_flat`` over the wide layout).
trace_flat_wide = make_flat_trace(make_wide_walk(_float_children, _float_refs))
#: The same over the compressed wide nodes (``wide_q.py``, ``RAYD_BVH_LAYOUT=wide4q``): the same winners.
trace_flat_wide_q = make_flat_trace(make_wide_walk(_q_children, _q_refs))
