"""Scene traversal shared by the query kernels: one flat BVH plus instances.

Kernels see a scene as a :class:`SceneView`: an optional flat BVH over the
world-space triangles of all meshes, and an optional top level (a ``wp.Bvh`` over
instance boxes) whose leaves point at object-space bottom-level BVHs shared by all
instances of one mesh. Every BVH has conservatively padded boxes and every triangle
is tested with the watertight test, so rays through shared edges and vertices never
leak. Closest hit shrinks the search interval as hits are found; any hit stops at
the first one.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.watertight import INF, confirmed_face_t, safe_direction, watertight_t


@wp.struct
class SceneView:
    """Kernel-side handle of a scene. Arrays of absent parts hold one dummy entry."""

    has_flat: int
    flat_bvh: wp.uint64
    flat_points: wp.array(dtype=wp.vec3)  # world space
    flat_indices: wp.array(dtype=wp.int32)
    flat_magnitude: wp.array(dtype=float)  # largest absolute world coordinate of the flat points
    flat_global: wp.array(dtype=wp.int32)  # global_prim_id of each flat face
    flat_shape: wp.array(dtype=wp.int32)  # shape id of each flat face
    flat_lowers: wp.array(dtype=wp.vec4)  # node boxes (see bvh_nodes.py)
    flat_uppers: wp.array(dtype=wp.vec4)
    flat_lower_index: wp.array(dtype=wp.vec4i)
    flat_upper_index: wp.array(dtype=wp.vec4i)
    flat_primitives: wp.array(dtype=wp.int32)
    flat_root: int
    flat_pair_boxes: wp.array(dtype=wp.vec4)  # child-pair nodes (see pair_nodes.py; one dummy with Warp's layout)
    flat_pair_links: wp.array(dtype=wp.vec4i)  # the same memory as int32
    flat_pair_root: int  # ref of the root in the pair layout
    flat_tris: wp.array(dtype=wp.vec4)  # corners of the triangle in each leaf slot (3 per slot, xyz)
    flat_wide_data: wp.array(dtype=wp.vec4)  # 4-wide nodes (see wide_nodes.py; one dummy node without them)
    flat_wide_links: wp.array(dtype=wp.vec4i)  # the same memory as int32
    flat_wide_root: int  # ref of the root in the wide layout
    flat_wide_q: wp.array(dtype=wp.vec4i)  # compressed wide nodes (see wide_q.py; one dummy node without them)
    flat_wide_qfrom: int  # the first wide node the compressed walk reads compressed (those before: float rows)
    shape_enabled: wp.array(dtype=wp.uint8)  # per shape id
    all_enabled: int
    num_instances: int
    tlas_lowers: wp.array(dtype=wp.vec4)  # top level over instance boxes (see bvh_nodes.py)
    tlas_uppers: wp.array(dtype=wp.vec4)
    tlas_lower_index: wp.array(dtype=wp.vec4i)
    tlas_upper_index: wp.array(dtype=wp.vec4i)
    tlas_primitives: wp.array(dtype=wp.int32)
    tlas_root: int
    blas_lowers: wp.array(dtype=wp.vec4)  # nodes of every bottom level, one after another
    blas_uppers: wp.array(dtype=wp.vec4)
    blas_lower_index: wp.array(dtype=wp.vec4i)
    blas_upper_index: wp.array(dtype=wp.vec4i)
    blas_primitives: wp.array(dtype=wp.int32)
    blas_points: wp.array(dtype=wp.vec3)  # object space, all instanced meshes
    blas_indices: wp.array(dtype=wp.int32)
    blas_magnitude: wp.array(dtype=float)  # largest absolute object coordinate of the blas points
    inst_node_base: wp.array(dtype=wp.int32)  # first node of its BLAS in blas_* per instance
    inst_prim_base: wp.array(dtype=wp.int32)  # first primitive slot of its BLAS per instance
    inst_root: wp.array(dtype=wp.int32)  # root node of its BLAS (local) per instance
    inst_face_base: wp.array(dtype=wp.int32)  # first face row in blas_indices per instance
    inst_to_object: wp.array(dtype=wp.mat44d)  # world -> object per instance (float64)
    inst_shape: wp.array(dtype=wp.int32)  # shape id per instance
    inst_global: wp.array(dtype=wp.int32)  # first global_prim_id per instance
    blas_pair_boxes: wp.array(dtype=wp.vec4)  # pair nodes of every BLAS, one after another (pair layout only)
    blas_pair_links: wp.array(dtype=wp.vec4i)  # the same memory as int32
    blas_tris: wp.array(dtype=wp.vec4)  # leaf-ordered corners of every BLAS (3 per slot)
    inst_pair_base: wp.array(dtype=wp.int32)  # first pair node of its BLAS per instance
    inst_pair_root: wp.array(dtype=wp.int32)  # root ref (local) of its BLAS per instance
    tlas_pair_base: int  # first pair node of the top level in blas_pair_boxes (instance_walk.py)
    tlas_pair_root: int  # root ref (local) of the top level in the pair layout
    inst_table: wp.array(dtype=wp.vec4i)  # per instance: pair base, prim base, pair root, first global id
    inst_wide_data: wp.array(dtype=wp.vec4)  # 4-wide nodes of every BLAS, then the top level's (instance_wide.py)
    inst_wide_links: wp.array(dtype=wp.vec4i)  # the same memory as int32
    inst_wide_table: wp.array(dtype=wp.vec4i)  # per instance: wide base, prim base, wide root, first global id
    tlas_wide_base: int  # first wide node of the top level in inst_wide_data
    tlas_wide_root: int  # root ref (local) of the top level in the wide layout


@wp.func
def _entry(o: wp.vec3, inv_d: wp.vec3, lo: wp.vec4, hi: wp.vec4, tmax: float) -> float:
    """Entry distance of the ray into box [lo, hi] (xyz) if it overlaps [0, tmax), else +inf."""
    t0x = (lo[0] - o[0]) * inv_d[0]
    t1x = (hi[0] - o[0]) * inv_d[0]
    t0y = (lo[1] - o[1]) * inv_d[1]
    t1y = (hi[1] - o[1]) * inv_d[1]
    t0z = (lo[2] - o[2]) * inv_d[2]
    t1z = (hi[2] - o[2]) * inv_d[2]
    enter = wp.max(wp.max(wp.min(t0x, t1x), wp.min(t0y, t1y)), wp.max(wp.min(t0z, t1z), 0.0))
    leave = wp.min(wp.min(wp.max(t0x, t1x), wp.max(t0y, t1y)), wp.max(t0z, t1z))
    if leave >= enter and enter < tmax:
        return enter
    return INF


@wp.func
def _flat_face(view: SceneView, f: int, o: wp.vec3, s: float, o0: wp.vec3, d: wp.vec3, tmin: float, best: float,
               ignore: int) -> float:
    """t of flat face f if it counts (enabled, not ignored, tmin < t < best), else +inf.

    ``o0`` is the ray's origin as given, ``o = o0 + s d`` the one moved near the scene
    (``_approach``) for the watertight test; ``t``, ``tmin``, ``best`` are along ``o0``.
    """
    if view.all_enabled == 0:
        if view.shape_enabled[view.flat_shape[f]] == wp.uint8(0):
            return INF
    if view.flat_global[f] == ignore:
        return INF
    a = view.flat_points[view.flat_indices[3 * f]]
    b = view.flat_points[view.flat_indices[3 * f + 1]]
    c = view.flat_points[view.flat_indices[3 * f + 2]]
    t = watertight_t(o, d, a, b, c) + s
    if t > tmin and t < best:
        # A candidate: rank and bound it by the t the evaluation will report (rare branch).
        t = confirmed_face_t(wp.vec3d(o0), wp.vec3d(d), a, b, c)
        if t > tmin and t < best:
            return t
    return INF


@wp.func
def _walk_flat_ordered(view: SceneView, o0: wp.vec3, s: float, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                       any_hit: int) -> tuple[float, int]:
    """Near-child-first walk of the flat BVH with a short stack; (t, face) or (tmax, -1).

    Boxes and triangles are tested from ``o0 + s d`` (near the scene), hits are
    confirmed and ranked along the ray as given (``t``, ``tmin``, ``tmax`` along ``o0``).
    """
    o = o0 + s * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    best = tmax
    face = int(-1)
    nodes = wp.vector(dtype=wp.int32, length=64)
    entries = wp.vector(dtype=wp.float32, length=64)
    count = int(0)
    node = view.flat_root
    done = int(0)
    while done == 0:
        low = view.flat_lower_index[node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.flat_upper_index[node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                f = view.flat_primitives[slot]
                t = _flat_face(view, f, o, s, o0, d, tmin, best, ignore)
                if t < best:
                    best = t
                    face = f
            if face >= 0 and any_hit != 0:
                return best, face
        else:
            left = low[3]
            right = view.flat_upper_index[node][3] & 0x7FFFFFFF
            reach = best - s
            t_left = _entry(o, inv_d, view.flat_lowers[left], view.flat_uppers[left], reach)
            t_right = _entry(o, inv_d, view.flat_lowers[right], view.flat_uppers[right], reach)
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
        # Pop the next node still in front of the closest hit so far.
        done = int(1)
        while count > 0:
            count -= 1
            if entries[count] < best - s:
                node = nodes[count]
                done = int(0)
                break
    return best, face


@wp.func
def _approach(o: wp.vec3, d: wp.vec3, magnitude: float) -> float:
    """Where a ray enters the cube of half-size ``2 magnitude`` around the origin.

    Returns 0 for an origin inside it, -1 if the ray misses it, else a ray parameter a
    little before the entry. Slab tests round in proportion to the distance from the
    ray's origin to a box, the boxes' padding is in proportion to the scene's size:
    starting a distant ray near the scene keeps the traversal conservative.
    """
    r = 2.0 * magnitude + 1.0e-30
    if wp.max(wp.max(wp.abs(o[0]), wp.abs(o[1])), wp.abs(o[2])) <= r:
        return 0.0
    near = float(0.0)
    far = float(INF)
    for k in range(3):
        if d[k] == 0.0:
            if wp.abs(o[k]) > r:
                return -1.0
        else:
            t1 = (-r - o[k]) / d[k]
            t2 = (r - o[k]) / d[k]
            near = wp.max(near, wp.min(t1, t2))
            far = wp.min(far, wp.max(t1, t2))
    if near > far * (1.0 + 1.0e-6):
        return -1.0
    return near * (1.0 - 1.0e-6)


@wp.func
def _walk_instance(view: SceneView, inst: int, o64: wp.vec3d, shift: float, c64: wp.vec3d, d64: wp.vec3d,
                   tmin: float, tmax: float, ignore_local: int, any_hit: int) -> tuple[float, int]:
    """Near-first walk of one instance's BLAS: (t, local face) or (tmax, -1).

    ``o64``, ``d64``: the ray in object space, transformed in float64; the origin is
    moved near the mesh (``_approach``) before it is rounded to float32, so a distant
    origin costs no precision. ``o64`` is ``c64 + shift d64``, the caller's origin
    ``c64`` already moved near the instances; hits are confirmed and ranked along
    ``c64`` (``t``, ``tmin``, ``tmax`` are along the ray as given).
    """
    face = int(-1)
    d = wp.vec3(d64)
    s = _approach(wp.vec3(o64), d, view.blas_magnitude[0])
    if s < 0.0:
        return tmax, face
    o = wp.vec3(o64 + wp.float64(s) * d64)
    s = s + shift
    best = tmax
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    node_base = view.inst_node_base[inst]
    prim_base = view.inst_prim_base[inst]
    base = view.inst_face_base[inst]
    nodes = wp.vector(dtype=wp.int32, length=64)
    entries = wp.vector(dtype=wp.float32, length=64)
    count = int(0)
    node = view.inst_root[inst]
    done = int(0)
    while done == 0:
        low = view.blas_lower_index[node_base + node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.blas_upper_index[node_base + node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                f = view.blas_primitives[prim_base + slot]
                if f != ignore_local:
                    row = 3 * (base + f)
                    a = view.blas_points[view.blas_indices[row]]
                    b = view.blas_points[view.blas_indices[row + 1]]
                    c = view.blas_points[view.blas_indices[row + 2]]
                    t = watertight_t(o, d, a, b, c) + s
                    if t > tmin and t < best:
                        t = confirmed_face_t(c64, d64, a, b, c)  # as in _flat_face (rare branch)
                        if t > tmin and t < best:
                            best = t
                            face = f
            if face >= 0 and any_hit != 0:
                return best, face
        else:
            left = low[3]
            right = view.blas_upper_index[node_base + node][3] & 0x7FFFFFFF
            reach = best - s
            t_left = _entry(o, inv_d, view.blas_lowers[node_base + left], view.blas_uppers[node_base + left], reach)
            t_right = _entry(o, inv_d, view.blas_lowers[node_base + right], view.blas_uppers[node_base + right], reach)
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
            if entries[count] < best - s:
                node = nodes[count]
                done = int(0)
                break
    return best, face


@wp.func
def _walk_top_level(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                    any_hit: int) -> tuple[float, int]:
    """Near-first walk of the top level, each leaf an instance walked in object space: (t, global id) or (tmax, -1).

    A distant origin first moves near the instances (``_approach`` on the top level's
    root box), as for the flat BVH, so that the slab tests stay within the padding.
    """
    winner = int(-1)
    root = view.tlas_root
    lo = view.tlas_lowers[root]
    hi = view.tlas_uppers[root]
    magnitude = wp.max(wp.max(wp.max(wp.abs(lo[0]), wp.abs(lo[1])), wp.max(wp.abs(lo[2]), wp.abs(hi[0]))),
                       wp.max(wp.abs(hi[1]), wp.abs(hi[2])))
    shift = _approach(o, d, magnitude)
    if shift < 0.0:
        return tmax, winner
    o0 = o  # instances confirm hits along the ray as given (see _walk_instance)
    o = o + shift * d
    best = tmax
    # Near-first walk of the top level; each leaf is an instance, walked in object space.
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
                    t, face = _walk_instance(view, inst, wp.transform_point(m, wp.vec3d(o)), shift,
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
def _start_at_tmin(o: wp.vec3, d: wp.vec3, tmin: float, tmax: float) -> tuple[wp.vec3, float, float]:
    """BVH ray queries skip boxes behind the origin: a ray with tmin < 0 starts at tmin instead."""
    if tmin < 0.0:
        return o + tmin * d, 0.0, tmax - tmin
    return o, tmin, tmax


@wp.func
def _flat_search(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                 any_hit: int) -> tuple[float, int]:
    """The flat BVH's closest (or any) hit: (t, global id) or (tmax, -1)."""
    s = _approach(o, d, view.flat_magnitude[0])
    if s >= 0.0:
        t, face = _walk_flat_ordered(view, o, s, d, tmin, tmax, ignore, any_hit)
        if face >= 0:
            return t, view.flat_global[face]
    return tmax, -1


@wp.func
def trace(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int, any_hit: int) -> int:
    """``global_prim_id`` of the closest (or with ``any_hit``, any) hit with tmin < t < tmax, or -1."""
    o, tmin, tmax = _start_at_tmin(o, d, tmin, tmax)
    best = tmax
    winner = int(-1)
    if view.has_flat != 0:
        best, winner = _flat_search(view, o, d, tmin, tmax, ignore, any_hit)
        if winner >= 0 and any_hit != 0:
            return winner
    if view.num_instances > 0:
        t, found = _walk_top_level(view, o, d, tmin, best, ignore, any_hit)
        if found >= 0:
            winner = found
    return winner


@wp.func
def trace_flat(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int, any_hit: int) -> int:
    """:func:`trace` for scenes without instances (a smaller kernel: fewer registers)."""
    o, tmin, tmax = _start_at_tmin(o, d, tmin, tmax)
    t, winner = _flat_search(view, o, d, tmin, tmax, ignore, any_hit)
    return winner


@wp.func
def trace_instances(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                    any_hit: int) -> int:
    """:func:`trace` for scenes whose meshes are all disabled (only instances take part)."""
    o, tmin, tmax = _start_at_tmin(o, d, tmin, tmax)
    t, winner = _walk_top_level(view, o, d, tmin, tmax, ignore, any_hit)
    return winner


@wp.func
def ray_is_wellformed(o: wp.vec3, d: wp.vec3, tmin: float, tmax: float) -> bool:
    """False for NaN/inf components, a zero direction, a NaN bound or ``tmax <= tmin``."""
    if not (wp.isfinite(o) and wp.isfinite(d) and wp.isfinite(tmin)) or wp.isnan(tmax):
        return False
    if d[0] == 0.0 and d[1] == 0.0 and d[2] == 0.0:
        return False
    return tmax > tmin
