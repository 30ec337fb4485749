"""Closest/any-hit walks of the flat BVH and of the instances' BLAS in rayd's child-pair layout
(``pair_nodes.py``); the top level over instances keeps Warp's nodes.

One node fetch (four 128-bit loads) tests both children; the nearer child (by entry
distance) is walked first and the farther one pushed on a stack of node refs (int32
only: a popped node is not re-tested against the closest hit so far; its children
are, in the same fetch that reads them). Boxes are padded and the triangle test is
watertight, as in ``traversal.py``, whose conventions (``_approach``, ``tmin``
handling, confirmation of candidates in float64) this walk shares.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.native import load4, load4i
from rayd.engine.traversal import (
    SceneView,
    _approach,
    _entry,
    _start_at_tmin,
)
from rayd.engine.watertight import INF, confirmed_face_t, ray_shear, safe_direction, sheared_t

wp.set_module_options({"enable_backward": False})


@wp.func
def _slab(o: wp.vec3, inv_d: wp.vec3, lx: float, ly: float, lz: float, hx: float, hy: float, hz: float,
          reach: float) -> float:
    """Entry distance into box [l, h] if the ray overlaps it on [0, reach), else +inf."""
    t0x = (lx - o[0]) * inv_d[0]
    t1x = (hx - o[0]) * inv_d[0]
    t0y = (ly - o[1]) * inv_d[1]
    t1y = (hy - o[1]) * inv_d[1]
    t0z = (lz - o[2]) * inv_d[2]
    t1z = (hz - o[2]) * inv_d[2]
    enter = wp.max(wp.max(wp.min(t0x, t1x), wp.min(t0y, t1y)), wp.max(wp.min(t0z, t1z), 0.0))
    leave = wp.min(wp.min(wp.max(t0x, t1x), wp.max(t0y, t1y)), wp.max(t0z, t1z))
    if leave >= enter and enter < reach:
        return enter
    return INF


@wp.func
def _pair_entries(boxes: wp.array(dtype=wp.vec4), g: int, o: wp.vec3, inv_d: wp.vec3,
                  reach: float) -> tuple[float, float]:
    """Entry distances (:func:`_slab`) of the ray into both children of the pair node at row ``g``
    of ``boxes`` (three 128-bit loads: left lo, hi, right lo, hi), +inf for a child missed."""
    b0 = load4(boxes, g)
    b1 = load4(boxes, g + 1)
    b2 = load4(boxes, g + 2)
    return (_slab(o, inv_d, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], reach),
            _slab(o, inv_d, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3], reach))


@wp.func
def _pair_step(links: wp.vec4i, t_left: float, t_right: float) -> tuple[int, int, float, int]:
    """The walk's step into a pair node whose children were entered at ``t_left``, ``t_right`` (at
    least one finite; ``links`` its refs): ``(next, far, t_far, push)``, the nearer child (the left one
    on a tie) next and, when both were hit (``push`` 1), the other one with its entry distance to
    push; a child missed (+inf) is dropped."""
    if t_left < INF and t_right < INF:
        if t_right < t_left:
            return links[1], links[0], t_left, 1
        return links[0], links[1], t_right, 1
    if t_left < INF:
        return links[0], links[1], INF, 0
    return links[1], links[0], INF, 0


@wp.func
def _leaf_corners(tris: wp.array(dtype=wp.vec4), slot: int) -> tuple[wp.vec3, wp.vec3, wp.vec3]:
    """The three corners of the triangle in leaf slot ``slot`` (``PairNodes.tris``: three vec4 per slot)."""
    a4 = load4(tris, 3 * slot)
    b4 = load4(tris, 3 * slot + 1)
    c4 = load4(tris, 3 * slot + 2)
    return wp.vec3(a4[0], a4[1], a4[2]), wp.vec3(b4[0], b4[1], b4[2]), wp.vec3(c4[0], c4[1], c4[2])


@wp.func
def ray_frame(d: wp.vec3) -> tuple[wp.vec3, wp.vec3i, wp.vec3]:
    """A walk's per-ray set-up of direction ``d``: its reciprocal (zero components made safe) and the
    watertight test's axis permutation and shear (``watertight.ray_shear``)."""
    k, sh = ray_shear(d)
    return wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d)), k, sh


@wp.func
def _slot_face(view: SceneView, slot: int, o: wp.vec3, k: wp.vec3i, sh: wp.vec3, s: float, o0: wp.vec3, d: wp.vec3,
               tmin: float, best: float, ignore: int) -> tuple[float, int]:
    """(t, face) of the triangle in leaf slot ``slot`` if it counts (as ``traversal._flat_face``), else (+inf, -1).

    The corners come from the leaf-ordered copy (three loads) and are tested with the
    ray's precomputed shear (``watertight.sheared_t``); the face id, its shape and
    ``global_prim_id`` are read only for a candidate.
    """
    a, b, c = _leaf_corners(view.flat_tris, slot)
    t = sheared_t(o, k, sh, a, b, c) + s
    if t > tmin and t < best:
        f = view.flat_primitives[slot]
        if view.all_enabled == 0:
            if view.shape_enabled[view.flat_shape[f]] == wp.uint8(0):
                return INF, -1
        if view.flat_global[f] == ignore:
            return INF, -1
        t = confirmed_face_t(wp.vec3d(o0), wp.vec3d(d), a, b, c)
        if t > tmin and t < best:
            return t, f
    return INF, -1


@wp.func
def _walk_flat_pairs(view: SceneView, o0: wp.vec3, s: float, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                     any_hit: int) -> tuple[float, int]:
    """Near-child-first walk of the flat pair nodes: (t, face) or (tmax, -1); ``s`` as in ``traversal.py``."""
    o = o0 + s * d
    inv_d, k, sh = ray_frame(d)
    best = tmax
    face = int(-1)
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    ref = view.flat_pair_root
    while True:
        if ref >= 0:
            t_left, t_right = _pair_entries(view.flat_pair_boxes, 4 * ref, o, inv_d, best - s)
            if t_left < INF or t_right < INF:
                ref, far, t_far, push = _pair_step(load4i(view.flat_pair_links, 4 * ref + 3), t_left, t_right)
                if push != 0:
                    stack[count] = far
                    count += 1
                continue
        else:
            code = -1 - ref
            first = code >> 3
            for slot in range(first, first + (code & 7) + 1):
                t, f = _slot_face(view, slot, o, k, sh, s, o0, d, tmin, best, ignore)
                if t < best:
                    best = t
                    face = f
            if face >= 0 and any_hit != 0:
                return best, face
        if count == 0:
            break
        count -= 1
        ref = stack[count]
    return best, face


@wp.func
def _walk_instance_pair(view: SceneView, inst: int, o64: wp.vec3d, shift: float, c64: wp.vec3d, d64: wp.vec3d,
                        tmin: float, tmax: float, ignore_local: int, any_hit: int) -> tuple[float, int]:
    """``traversal._walk_instance`` over the instance's BLAS in the pair layout: (t, local face) or (tmax, -1)."""
    face = int(-1)
    d = wp.vec3(d64)
    s = _approach(wp.vec3(o64), d, view.blas_magnitude[0])
    if s < 0.0:
        return tmax, face
    o = wp.vec3(o64 + wp.float64(s) * d64)
    inv_d, k, sh = ray_frame(d)
    s = s + shift
    best = tmax
    node_base = view.inst_pair_base[inst]
    prim_base = view.inst_prim_base[inst]
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    ref = view.inst_pair_root[inst]
    while True:
        if ref >= 0:
            g = 4 * (node_base + ref)
            t_left, t_right = _pair_entries(view.blas_pair_boxes, g, o, inv_d, best - s)
            if t_left < INF or t_right < INF:
                ref, far, t_far, push = _pair_step(load4i(view.blas_pair_links, g + 3), t_left, t_right)
                if push != 0:
                    stack[count] = far
                    count += 1
                continue
        else:
            code = -1 - ref
            first = prim_base + (code >> 3)
            for slot in range(first, first + (code & 7) + 1):
                a, b, c = _leaf_corners(view.blas_tris, slot)
                t = sheared_t(o, k, sh, a, b, c) + s
                if t > tmin and t < best:
                    f = view.blas_primitives[slot]
                    if f != ignore_local:
                        t = confirmed_face_t(c64, d64, a, b, c)  # as in _slot_face (rare branch)
                        if t > tmin and t < best:
                            best = t
                            face = f
            if face >= 0 and any_hit != 0:
                return best, face
        if count == 0:
            break
        count -= 1
        ref = stack[count]
    return best, face


@wp.func
def _walk_top_level_pair(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                         any_hit: int) -> tuple[float, int]:
    """``traversal._walk_top_level`` entering each instance with :func:`_walk_instance_pair`."""
    winner = int(-1)
    root = view.tlas_root
    lo = view.tlas_lowers[root]
    hi = view.tlas_uppers[root]
    magnitude = wp.max(wp.max(wp.max(wp.abs(lo[0]), wp.abs(lo[1])), wp.max(wp.abs(lo[2]), wp.abs(hi[0]))),
                       wp.max(wp.abs(hi[1]), wp.abs(hi[2])))
    shift = _approach(o, d, magnitude)
    if shift < 0.0:
        return tmax, winner
    o0 = o
    o = o + shift * d
    best = tmax
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    nodes = wp.vector(dtype=wp.int32, length=64)
    entries = wp.vector(dtype=wp.float32, length=64)
    count = int(0)
    node = view.tlas_root
    done = int(0)
    while done == 0:
        low = view.tlas_lower_index[node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.tlas_upper_index[node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                inst = view.tlas_primitives[slot]
                if view.shape_enabled[view.inst_shape[inst]] != wp.uint8(0):
                    m = view.inst_to_object[inst]
                    t, face = _walk_instance_pair(view, inst, wp.transform_point(m, wp.vec3d(o)), shift,
                                                  wp.transform_point(m, wp.vec3d(o0)),
                                                  wp.transform_vector(m, wp.vec3d(d)), tmin, best,
                                                  ignore - view.inst_global[inst], any_hit)
                    if face >= 0 and t < best:
                        best = t
                        winner = view.inst_global[inst] + face
                        if any_hit != 0:
                            return best, winner
        else:
            left = low[3]
            right = view.tlas_upper_index[node][3] & 0x7FFFFFFF
            reach = best - shift
            t_left = _entry(o, inv_d, view.tlas_lowers[left], view.tlas_uppers[left], reach)
            t_right = _entry(o, inv_d, view.tlas_lowers[right], view.tlas_uppers[right], reach)
            if t_left < INF and t_right < INF:
                near = left
                far = right
                t_far = t_right
                if t_right < t_left:
                    near = right
                    far = left
                    t_far = t_left
                nodes[count] = far
                entries[count] = t_far
                count += 1
                node = near
                continue
            if t_left < INF:
                node = left
                continue
            if t_right < INF:
                node = right
                continue
        done = int(1)
        while count > 0:
            count -= 1
            if entries[count] < best - shift:
                node = nodes[count]
                done = int(0)
                break
    return best, winner


@wp.func
def _walk_flat_pairs_ww(view: SceneView, o0: wp.vec3, s: float, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                        any_hit: int) -> tuple[float, int]:
    """:func:`_walk_flat_pairs` as a *while-while* loop (Aila & Laine 2009, "Understanding the Efficiency
    of Ray Traversal on GPUs", HPG): each lane opens inner nodes until it reaches a leaf (or its walk
    ends), then the leaf loop runs for every lane that has one, so a warp's lanes test leaves together
    (over trees whose leaves sit at uneven depths, e.g. PLOC's, the if-if loop runs its costlier leaf
    branch about twice per warp for the same tests per ray). The same nodes, the same tests in the same
    order: the same hits bit for bit. The CUDA default (``triangles.set_pair_walk``)."""
    o = o0 + s * d
    inv_d, k, sh = ray_frame(d)
    best = tmax
    face = int(-1)
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    ref = view.flat_pair_root
    done = int(0)  # the walk has nothing left to open
    while done == 0:
        while ref >= 0:
            t_left, t_right = _pair_entries(view.flat_pair_boxes, 4 * ref, o, inv_d, best - s)
            if t_left < INF or t_right < INF:
                ref, far, t_far, push = _pair_step(load4i(view.flat_pair_links, 4 * ref + 3), t_left, t_right)
                if push != 0:
                    stack[count] = far
                    count += 1
            elif count == 0:
                done = 1
                break
            else:
                count -= 1
                ref = stack[count]
        # Leaves: the one reached, then any leaves popped next (in the order found).
        while done == 0 and ref < 0:
            code = -1 - ref
            first = code >> 3
            for slot in range(first, first + (code & 7) + 1):
                t, f = _slot_face(view, slot, o, k, sh, s, o0, d, tmin, best, ignore)
                if t < best:
                    best = t
                    face = f
            if face >= 0 and any_hit != 0:
                return best, face
            if count == 0:
                done = 1
            else:
                count -= 1
                ref = stack[count]
    return best, face


def make_flat_search(walk: wp.Function) -> wp.Function:
    """The flat BVH's closest (or any) hit with ``walk`` (a ``(view, o0, s, d, tmin, tmax, ignore,
    any_hit) -> (t, face)`` walk after ``_approach``): a ``wp.func`` returning (t, global id) or (tmax, -1)."""

    @wp.func
    def search(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
               any_hit: int) -> tuple[float, int]:
        s = _approach(o, d, view.flat_magnitude[0])
        if s >= 0.0:
            t, face = walk(view, o, s, d, tmin, tmax, ignore, any_hit)
            if face >= 0:
                return t, view.flat_global[face]
        return tmax, -1

    return search


def make_flat_trace(walk: wp.Function) -> wp.Function:
    """``traversal.trace_flat`` with ``walk`` (as in :func:`make_flat_search`): a ``wp.func`` returning
    the winner's global id or -1."""
    search = make_flat_search(walk)

    @wp.func
    def trace(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int, any_hit: int) -> int:
        o, tmin, tmax = _start_at_tmin(o, d, tmin, tmax)
        t, winner = search(view, o, d, tmin, tmax, ignore, any_hit)
        return winner

    return trace


#: The flat BVH's search over the pair nodes with the if-if walk (also the flat part of the instance traces).
_flat_pair_search = make_flat_search(_walk_flat_pairs)
#: ``traversal.trace_flat`` over the pair layout, if-if and while-while walks.
trace_flat_pair = make_flat_trace(_walk_flat_pairs)
trace_flat_pair_ww = make_flat_trace(_walk_flat_pairs_ww)


def make_instance_trace(walk: wp.Function) -> wp.Function:
    """``traversal.trace_instances`` with the instance walk ``walk`` (``(view, o, d, tmin, tmax, ignore,
    any_hit) -> (t, global id)``): a ``wp.func`` returning the winner's global id or -1."""

    @wp.func
    def trace(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int, any_hit: int) -> int:
        o, tmin, tmax = _start_at_tmin(o, d, tmin, tmax)
        t, winner = walk(view, o, d, tmin, tmax, ignore, any_hit)
        return winner

    return trace


def make_scene_trace(walk: wp.Function) -> wp.Function:
    """``traversal.trace`` over the pair layout: the flat BVH (if-if walk), then the instances with
    ``walk`` (as in :func:`make_instance_trace`) up to the flat hit; a ``wp.func`` returning the
    winner's global id or -1."""

    @wp.func
    def trace(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int, any_hit: int) -> int:
        o, tmin, tmax = _start_at_tmin(o, d, tmin, tmax)
        best, winner = _flat_pair_search(view, o, d, tmin, tmax, ignore, any_hit)
        if winner >= 0 and any_hit != 0:
            return winner
        if view.num_instances > 0:
            t, found = walk(view, o, d, tmin, best, ignore, any_hit)
            if found >= 0:
                winner = found
        return winner

    return trace


#: ``traversal.trace`` and ``traversal.trace_instances`` over the pair layout (the nested top-level walk).
trace_pair = make_scene_trace(_walk_top_level_pair)
trace_instances_pair = make_instance_trace(_walk_top_level_pair)
