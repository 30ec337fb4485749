"""Instance walks with one stack per ray, both levels in the child-pair layout (issue 18).

``pair_walk._walk_top_level_pair`` walks Warp's nodes of the top level with two
zero-filled 64-entry stacks (refs and entry distances) and, for every instance entered,
calls a BLAS walk with a third one. The walks here read the top level's pair nodes
(``InstanceLevel.tlas_pairs``, kept after the BLAS nodes in ``blas_pair_boxes``: one
fetch of 64 bytes per inner node, as for a BLAS), keep one int32 stack of
:data:`~rayd.engine.instances.SHARED_STACK` entries for both levels (a top-level entry is
two: its entry distance's bits, then its ref, so that a popped node behind the closest hit
so far is skipped, as the nested walk does), and read an instance's BLAS location and
first ``global_prim_id`` in one 128-bit load (``inst_table``):

- :func:`_walk_pairtop` (``pairtop``): the BLAS walk is a loop nested in the top level's
  (``RAYD_INSTANCE_WALK=pairtop``); it pushes above the top level's refs and stops
  when the stack is back where it started.
- :func:`_walk_unified`: one loop for both levels (``unified``): entering an
  instance pushes a marker and switches the ray to object space, so every iteration
  runs the same node test whichever level a lane is in (lanes of a warp stay together
  across levels); popping the marker switches back to the world ray. ``unified_cull``
  also skips popped BLAS nodes behind the closest hit so far (their entry distance on the
  stack too). ``wide_blas`` / ``wide_both`` walk each BLAS / both levels in 4-wide nodes
  (``instance_wide.py``), with the flat wide walk's node test and sort (``wide_walk._children``,
  ``_sort4``): the nearest child next, the others pushed far first (top-level ones with their
  entry distance). The boxes are the pair nodes', so the same leaves can be reached; the order
  they are reached in differs, which can change the winner only between triangles whose ``t``
  agree within the float32 test's rounding (a shared edge, coincident instances: the closest hit
  so far rejects a later candidate by its float32 ``t``). On ``benchmarks/instances.py``'s
  workload (16,384 rays, CPU) their winners equal ``unified``'s on every ray.

Both keep the arithmetic of ``pair_walk`` (float64 transforms of the ray into object
space, ``_approach`` per level, the float32 sheared test and the float64 confirmation
of candidates, near child first, nearer-or-left first on ties), so the winners are
the same, and the same nodes are visited (a popped BLAS node is not culled against the
closest hit so far, in both: its children are).
"""

from __future__ import annotations

import warp as wp

from rayd.engine.instances import SHARED_STACK
from rayd.engine.native import bits_float, float_bits, load4i
from rayd.engine.pair_walk import (
    _leaf_corners,
    _pair_entries,
    _pair_step,
    make_instance_trace,
    make_scene_trace,
    ray_frame,
)
from rayd.engine.traversal import SceneView, _approach
from rayd.engine.watertight import INF, confirmed_face_t, safe_direction, sheared_t
from rayd.engine.wide_walk import _children, _near_rows, _sort4

wp.set_module_options({"enable_backward": False})

#: Stack entry that marks "leave the instance" (below every leaf ref the layout makes).
_MARKER = wp.constant(-2147483647)
_STACK = wp.constant(SHARED_STACK)


@wp.func
def _world_shift(view: SceneView, o: wp.vec3, d: wp.vec3) -> float:
    """``_approach`` of the ray to the top level's root box (as ``pair_walk._walk_top_level_pair``)."""
    root = view.tlas_root
    lo = view.tlas_lowers[root]
    hi = view.tlas_uppers[root]
    magnitude = wp.max(wp.max(wp.max(wp.abs(lo[0]), wp.abs(lo[1])), wp.max(wp.abs(lo[2]), wp.abs(hi[0]))),
                       wp.max(wp.abs(hi[1]), wp.abs(hi[2])))
    return _approach(o, d, magnitude)


@wp.func
def _confirmed(view: SceneView, inst: int, o_in: wp.vec3, d: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> float:
    """``confirmed_t`` of a candidate of instance ``inst`` from the ray as given, taken into object
    space in float64 here (the rare branch: the transformed ray is not held through the walk)."""
    m = view.inst_to_object[inst]
    return confirmed_face_t(wp.transform_point(m, wp.vec3d(o_in)), wp.transform_vector(m, wp.vec3d(d)), a, b, c)


@wp.func
def _walk_pairtop(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                  any_hit: int) -> tuple[float, int]:
    """Top level and each BLAS in the pair layout, the BLAS loop nested, one stack: (t, global id) or (tmax, -1)."""
    winner = int(-1)
    shift = _world_shift(view, o_in, d)
    if shift < 0.0:
        return tmax, winner
    o = o_in + shift * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    best = tmax
    stack = wp.vector(dtype=wp.int32, length=_STACK)
    count = int(0)
    tbase = view.tlas_pair_base
    ref = view.tlas_pair_root
    while True:
        if ref >= 0:
            g = 4 * (tbase + ref)
            t_left, t_right = _pair_entries(view.blas_pair_boxes, g, o, inv_d, best - shift)
            if t_left < INF or t_right < INF:
                ref, far, t_far, push = _pair_step(load4i(view.blas_pair_links, g + 3), t_left, t_right)
                if push != 0:  # the far child goes on the stack with its entry distance
                    stack[count] = float_bits(t_far)
                    stack[count + 1] = far
                    count += 2
                continue
        else:
            code = -1 - ref
            first = code >> 3
            for slot in range(first, first + (code & 7) + 1):
                inst = view.tlas_primitives[slot]
                if view.shape_enabled[view.inst_shape[inst]] != wp.uint8(0):
                    m = view.inst_to_object[inst]
                    o64 = wp.transform_point(m, wp.vec3d(o))
                    c64 = wp.transform_point(m, wp.vec3d(o_in))
                    d64 = wp.transform_vector(m, wp.vec3d(d))
                    dl = wp.vec3(d64)
                    s = _approach(wp.vec3(o64), dl, view.blas_magnitude[0])
                    if s >= 0.0:
                        ol = wp.vec3(o64 + wp.float64(s) * d64)
                        s = s + shift
                        inv_dl, k, sh = ray_frame(dl)
                        row = load4i(view.inst_table, inst)
                        nbase = row[0]
                        pbase = row[1]
                        gbase = row[3]
                        bottom = count
                        r = row[2]
                        while True:
                            if r >= 0:
                                gb = 4 * (nbase + r)
                                tl, tr = _pair_entries(view.blas_pair_boxes, gb, ol, inv_dl, best - s)
                                if tl < INF or tr < INF:
                                    r, far, t_far, push = _pair_step(load4i(view.blas_pair_links, gb + 3), tl, tr)
                                    if push != 0:
                                        stack[count] = far
                                        count += 1
                                    continue
                            else:
                                leaf = -1 - r
                                start = pbase + (leaf >> 3)
                                for tri in range(start, start + (leaf & 7) + 1):
                                    a, b, c = _leaf_corners(view.blas_tris, tri)
                                    t = sheared_t(ol, k, sh, a, b, c) + s
                                    if t > tmin and t < best:
                                        f = view.blas_primitives[tri]
                                        if gbase + f != ignore:
                                            t = confirmed_face_t(c64, d64, a, b, c)
                                            if t > tmin and t < best:
                                                best = t
                                                winner = gbase + f
                                if winner >= 0 and any_hit != 0:
                                    return best, winner
                            if count == bottom:
                                break
                            count -= 1
                            r = stack[count]
        # Pop the next top-level node still in front of the closest hit so far.
        done = int(1)
        while count > 0:
            count -= 2
            if bits_float(stack[count]) < best - shift:
                ref = stack[count + 1]
                done = int(0)
                break
        if done != 0:
            break
    return best, winner


@wp.func
def _walk_unified(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                  any_hit: int, cull: int, wide: int) -> tuple[float, int]:
    """Both levels in one loop and one stack (a marker leaves an instance): (t, global id) or (tmax, -1).

    ``cull`` (a constant per kernel): BLAS entries carry their entry distance too, and a popped
    BLAS node behind the closest hit so far is skipped (``unified_cull``; fewer node fetches
    for closest hit, twice the BLAS part of the stack; pair nodes only).
    ``wide`` (a constant per kernel): 0 both levels in pair nodes; 1 each BLAS in 4-wide nodes
    (``wide_blas``); 2 the top level too (``wide_both``; ``instance_wide.py``).
    """
    winner = int(-1)
    shift = _world_shift(view, o_in, d)
    if shift < 0.0:
        return tmax, winner
    best = tmax
    stack = wp.vector(dtype=wp.int32, length=_STACK)
    count = int(0)
    # The ray of the level being walked: world at the top level, object space in a BLAS.
    o = o_in + shift * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    near = _near_rows(inv_d)
    off = shift
    level = int(0)
    k = wp.vec3i(0, 0, 0)
    sh = wp.vec3(0.0, 0.0, 0.0)
    inst = int(0)
    pbase = int(0)
    gbase = int(0)
    base = view.tlas_pair_base
    ref = view.tlas_pair_root
    if wide == 2:
        base = view.tlas_wide_base
        ref = view.tlas_wide_root
    while True:
        if ref >= 0:
            if wide == 0 or (wide == 1 and level == 0):
                g = 4 * (base + ref)
                t_left, t_right = _pair_entries(view.blas_pair_boxes, g, o, inv_d, best - off)
                if t_left < INF or t_right < INF:
                    ref, far, t_far, push = _pair_step(load4i(view.blas_pair_links, g + 3), t_left, t_right)
                    if push != 0:
                        if level == 0 or cull != 0:  # top-level entries carry their entry distance (culled when popped)
                            stack[count] = float_bits(t_far)
                            count += 1
                        stack[count] = far
                        count += 1
                    continue
            else:  # 4-wide nodes (wide_walk.py): the nearest child next, the others pushed far first
                g = 8 * (base + ref)
                entry = _children(view.inst_wide_data, g, near, o, inv_d, best - off)
                if entry[0] < INF or entry[1] < INF or entry[2] < INF or entry[3] < INF:
                    ds, rs = _sort4(entry, load4i(view.inst_wide_links, g + 6))
                    for j in range(3, 0, -1):
                        if ds[j] < INF:
                            if level == 0:
                                stack[count] = float_bits(ds[j])
                                count += 1
                            stack[count] = rs[j]
                            count += 1
                    ref = rs[0]
                    continue
        elif level == 0:
            code = -1 - ref
            first = code >> 3
            rest = code & 7
            if rest > 0:  # the leaf's other instances come next (one continuation ref, never culled)
                stack[count] = float_bits(-INF)
                stack[count + 1] = -1 - (8 * (first + 1) + rest - 1)
                count += 2
            leaf_inst = view.tlas_primitives[first]
            if view.shape_enabled[view.inst_shape[leaf_inst]] != wp.uint8(0):
                m = view.inst_to_object[leaf_inst]
                o64 = wp.transform_point(m, wp.vec3d(o))
                d64 = wp.transform_vector(m, wp.vec3d(d))
                dl = wp.vec3(d64)
                s = _approach(wp.vec3(o64), dl, view.blas_magnitude[0])
                if s >= 0.0:
                    o = wp.vec3(o64 + wp.float64(s) * d64)
                    off = s + shift
                    inv_d, k, sh = ray_frame(dl)
                    near = _near_rows(inv_d)
                    inst = leaf_inst
                    row = wp.vec4i()
                    if wide == 0:
                        row = load4i(view.inst_table, inst)
                    else:
                        row = load4i(view.inst_wide_table, inst)
                    base = row[0]
                    pbase = row[1]
                    gbase = row[3]
                    level = 1
                    stack[count] = _MARKER
                    count += 1
                    ref = row[2]
                    continue
        else:
            code = -1 - ref
            start = pbase + (code >> 3)
            for tri in range(start, start + (code & 7) + 1):
                a, b, c = _leaf_corners(view.blas_tris, tri)
                t = sheared_t(o, k, sh, a, b, c) + off
                if t > tmin and t < best:
                    f = view.blas_primitives[tri]
                    if gbase + f != ignore:
                        t = _confirmed(view, inst, o_in, d, a, b, c)
                        if t > tmin and t < best:
                            best = t
                            winner = gbase + f
            if winner >= 0 and any_hit != 0:
                return best, winner
        # Pop: a marker returns to the top level, whose entries behind the closest hit are skipped.
        done = int(1)
        while count > 0:
            count -= 1
            ref = stack[count]
            if ref == _MARKER:
                level = 0  # the world ray again (recomputed: fewer registers held across the BLAS)
                o = o_in + shift * d
                inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
                near = _near_rows(inv_d)
                off = shift
                base = view.tlas_pair_base
                if wide == 2:
                    base = view.tlas_wide_base
                continue
            if level == 0 or cull != 0:
                count -= 1
                if bits_float(stack[count]) >= best - off:
                    continue
            done = int(0)
            break
        if done != 0:
            break
    return best, winner


@wp.func
def _walk_unified_plain(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                        any_hit: int) -> tuple[float, int]:
    """:func:`_walk_unified` without culling popped BLAS nodes."""
    t, winner = _walk_unified(view, o_in, d, tmin, tmax, ignore, any_hit, 0, 0)
    return t, winner


@wp.func
def _walk_unified_culled(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                         any_hit: int) -> tuple[float, int]:
    """:func:`_walk_unified`, popped BLAS nodes behind the closest hit skipped."""
    t, winner = _walk_unified(view, o_in, d, tmin, tmax, ignore, any_hit, 1, 0)
    return t, winner


@wp.func
def _walk_wide_blas(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                    any_hit: int) -> tuple[float, int]:
    """:func:`_walk_unified` with each BLAS in 4-wide nodes (``wide_blas``)."""
    t, winner = _walk_unified(view, o_in, d, tmin, tmax, ignore, any_hit, 0, 1)
    return t, winner


@wp.func
def _walk_wide_both(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                    any_hit: int) -> tuple[float, int]:
    """:func:`_walk_unified` with both levels in 4-wide nodes (``wide_both``)."""
    t, winner = _walk_unified(view, o_in, d, tmin, tmax, ignore, any_hit, 0, 2)
    return t, winner


#: The shared-stack instance walks by name (``RAYD_INSTANCE_WALK``).
_WALKS = {"pairtop": _walk_pairtop, "unified": _walk_unified_plain, "unified_cull": _walk_unified_culled,
          "wide_blas": _walk_wide_blas, "wide_both": _walk_wide_both}

#: The trace functions per ``accel.search_walk`` name of the shared-stack walks (instances alone, or
#: after the flat BVH).
TRACES = {**{"instances_" + k: make_instance_trace(w) for k, w in _WALKS.items()},
          **{"both_" + k: make_scene_trace(w) for k, w in _WALKS.items()}}
