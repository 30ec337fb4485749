"""Instance walks over 4-wide nodes (issue 18): the ``unified`` walk with the BLAS, or both
levels, in the wide layout (``instance_wide.py``).

:func:`_walk_wide` is ``instance_walk._walk_unified`` (one loop and one int32 stack for
both levels, a marker leaves an instance, top-level entries carry their entry distance and are
skipped when popped behind the closest hit so far) whose node step is the flat wide walk's
(``wide_walk._children``: seven 128-bit loads, near planes by the sign of the direction; the
children hit sorted by ``wide_walk._sort4``, the nearest walked next, the others pushed far
first):

- ``wide_both`` (``top = 1``): both levels wide; the top level's wide nodes (SAH-collapsed
  from its pair nodes) push (distance bits, ref) pairs;
- ``wide_blas`` (``top = 0``): the top level keeps its pair nodes (``_pair_entries`` /
  ``_pair_step``), each BLAS is walked wide (two node tests in the loop: lanes of a warp at
  different levels run different ones).

Everything else is ``unified``'s: float64 transforms of the ray into object space, ``_approach``
per level, the float32 sheared triangle test and float64 confirmation of candidates, the same
leaves. The boxes are the pair nodes' (the wide collapse copies them), so the same leaves can be
reached; the order in which they are reached differs (four children sorted at once, not the pair
tree's near-first recursion), which can change the winner only between triangles whose ``t`` agree
within the float32 test's rounding (a shared edge, coincident instances): the closest hit so far
rejects a later candidate by its float32 ``t``. On the ``instances.py`` workload (16,384 rays, CPU)
the winners of ``unified`` and both wide walks are the same on every ray.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.instance_walk import _MARKER, _STACK, TRACES as _PAIR_TRACES, _confirmed, _world_shift
from rayd.engine.native import bits_float, float_bits, load4i
from rayd.engine.pair_walk import _leaf_corners, _pair_entries, _pair_step, make_instance_trace, make_scene_trace
from rayd.engine.pair_walk import ray_frame
from rayd.engine.traversal import SceneView, _approach
from rayd.engine.watertight import INF, safe_direction, sheared_t
from rayd.engine.wide_walk import _children, _near_rows, _sort4

wp.set_module_options({"enable_backward": False})


@wp.func
def _walk_wide(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                       any_hit: int, top: int) -> tuple[float, int]:
    """Both levels in one loop and one stack, BLAS (and with ``top`` 1 the top level) in 4-wide nodes:
    (t, global id) or (tmax, -1). ``top`` is a constant per kernel."""
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
    if top != 0:
        base = view.tlas_wide_base
        ref = view.tlas_wide_root
    while True:
        if ref >= 0:
            if top == 0 and level == 0:
                g = 4 * (base + ref)
                t_left, t_right = _pair_entries(view.blas_pair_boxes, g, o, inv_d, best - off)
                if t_left < INF or t_right < INF:
                    ref, far, t_far, push = _pair_step(load4i(view.blas_pair_links, g + 3), t_left, t_right)
                    if push != 0:
                        stack[count] = float_bits(t_far)
                        stack[count + 1] = far
                        count += 2
                    continue
            else:
                g = 8 * (base + ref)
                entry = _children(view.inst_wide_data, g, near, o, inv_d, best - off)
                if entry[0] < INF or entry[1] < INF or entry[2] < INF or entry[3] < INF:
                    ds, rs = _sort4(entry, load4i(view.inst_wide_links, g + 6))
                    for j in range(3, 0, -1):  # the far ones first
                        if ds[j] < INF:
                            if level == 0:  # top-level entries carry their entry distance (culled when popped)
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
                if top != 0:
                    base = view.tlas_wide_base
                continue
            if level == 0:
                count -= 1
                if bits_float(stack[count]) >= best - off:
                    continue
            done = int(0)
            break
        if done != 0:
            break
    return best, winner


@wp.func
def _walk_wide_both(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                    any_hit: int) -> tuple[float, int]:
    """:func:`_walk_wide` with both levels wide (``wide_both``)."""
    t, winner = _walk_wide(view, o_in, d, tmin, tmax, ignore, any_hit, 1)
    return t, winner


@wp.func
def _walk_wide_blas(view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                    any_hit: int) -> tuple[float, int]:
    """:func:`_walk_wide` with the top level in pair nodes (``wide_blas``)."""
    t, winner = _walk_wide(view, o_in, d, tmin, tmax, ignore, any_hit, 0)
    return t, winner


_WALKS = {"wide_both": _walk_wide_both, "wide_blas": _walk_wide_blas}

#: Every shared-stack instance walk's trace function by ``accel.search_walk`` name: ``instance_walk``'s
#: and the wide ones (instances alone, or after the flat BVH).
TRACES = {**_PAIR_TRACES,
          **{"instances_" + k: make_instance_trace(w) for k, w in _WALKS.items()},
          **{"both_" + k: make_scene_trace(w) for k, w in _WALKS.items()}}
