"""All hits along a ray: the first ``max_hits`` hits in increasing ``t``, and their exact count.

Both queries walk the scene's BVHs (flat and instances, as :mod:`rayd.engine.traversal`)
collecting hits into a per-ray list sorted by ``(t, global_prim_id)``. Once the list is
full, the search interval shrinks to its last entry (plus the merge tolerance), so only
nearer hits are still looked for.

Shared edges and vertices are listed once. The watertight test reports a ray through an
edge or a vertex on every face around it; two hits are *one hit* when

* their faces belong to the same shape and share a vertex index (topology, no welding by
  position: an unwelded soup counts each face), and
* their ``t`` agree to ``|t_a - t_b| <= MERGE_TOLERANCE * (|t| + M / |d|)``, ``M`` the
  largest absolute coordinate of the scene in the search frame (so the bound is about
  1e-5 relative to the distance travelled plus the scene's size).

The merged hit keeps the face with the smaller ``global_prim_id``. A ray that grazes a
silhouette edge (touching both faces at the same point) is one hit too, by the same
rule, and so is a tangential touch at a vertex (the tip of a cone): :func:`all_hits`
lists them.

:func:`count_hits` counts *crossings*: each merged hit counts the crossings of the ray
displaced by an infinitesimal there (:func:`rayd.engine.watertight.watertight_hit`: the
signed number of the merged faces that contain the displaced origin, decided by exact
signs, so the two faces of an edge never both or neither hold it unless they fold), in
absolute value: 1 for a crossing, 0 for a touch (:func:`rayd.engine.watertight.crossings`
also counts 0 for faces met exactly at a corner that the displaced ray misses, 1 for a
lone face grazed along an edge and for hits merged by ``t`` alone: faces crossed farther
than :data:`rayd.engine.hit_list.INNER_TOLERANCES` merge tolerances from their edges). Summed along a ray,
the parity is that of the displaced ray, so a closed, consistently oriented mesh is
crossed an odd number of times exactly from inside. It counts without a cap: it
collects the hits in rounds of :data:`COUNT_CAPACITY`, each round taking the next ones
after the last ``(t, global_prim_id)`` of the previous round, whose entries stay
available for merging. Under the cap it counts the ``crossings`` of what :func:`all_hits`
lists.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.accel import SceneAccel
from rayd.engine.hit_list import MERGE_TOLERANCE  # noqa: F401 - documented here
from rayd.engine.hit_list import HitList, after, offer, search_end
from rayd.engine.rays import RayBatch
from rayd.engine.runtime import launch_rows, per_row
from rayd.engine.traversal import SceneView, _approach, _entry, _start_at_tmin, ray_is_wellformed
from rayd.engine.watertight import INF, confirmed_t, crossings, safe_direction, watertight_hit

wp.set_module_options({"enable_backward": False})

#: Largest ``max_hits`` of :func:`all_hits`.
MAX_HITS = 64
#: Hits per round of :func:`count_hits` (its scratch is ``2 COUNT_CAPACITY`` entries per ray).
COUNT_CAPACITY = 8
#: Rays per launch of :func:`count_hits` (bounds its scratch memory: 80 MiB).
COUNT_CHUNK = 1 << 18
_NO_GID = wp.constant(2147483647)


@wp.func
def _walk_flat(view: SceneView, o0: wp.vec3, s: float, d: wp.vec3, tmin: float, tmax: float, ignore: int,
               lo_t: float, lo_gid: int, hits: HitList, i: int, count: int, carry: int, scale: float) -> int:
    """Every hit of the flat BVH in ``(tmin, reach)`` offered to the list (see ``traversal._walk_flat_ordered``)."""
    o = o0 + s * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    nodes = wp.vector(dtype=wp.int32, length=64)
    entries = wp.vector(dtype=wp.float32, length=64)
    top = int(0)
    node = view.flat_root
    done = int(0)
    while done == 0:
        low = view.flat_lower_index[node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.flat_upper_index[node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                f = view.flat_primitives[slot]
                enabled = True
                if view.all_enabled == 0:
                    enabled = view.shape_enabled[view.flat_shape[f]] != wp.uint8(0)
                gid = int(view.flat_global[f])
                if enabled and gid != ignore:
                    a = view.flat_points[view.flat_indices[3 * f]]
                    b = view.flat_points[view.flat_indices[3 * f + 1]]
                    c = view.flat_points[view.flat_indices[3 * f + 2]]
                    reach = search_end(hits, i, count, tmax, scale)
                    t, side = watertight_hit(o, d, a, b, c, s, tmin, reach)
                    if t > tmin and t < reach:
                        t = confirmed_t(wp.vec3d(o0), wp.vec3d(d), a, b, c)
                        if t > tmin and t < reach and after(t, gid, lo_t, lo_gid):
                            count = offer(view, hits, i, count, carry, t, gid, f, -1, side, scale, o, d)
        else:
            left = low[3]
            right = view.flat_upper_index[node][3] & 0x7FFFFFFF
            reach = search_end(hits, i, count, tmax, scale) - s
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
                nodes[top] = far
                entries[top] = t_far
                top += 1
                node = near
                continue
            if t_left < INF:
                node = left
                continue
            if t_right < INF:
                node = right
                continue
        done = int(1)
        while top > 0:
            top -= 1
            if entries[top] < search_end(hits, i, count, tmax, scale) - s:
                node = nodes[top]
                done = int(0)
                break
    return count


@wp.func
def _walk_instance(view: SceneView, inst: int, o64: wp.vec3d, shift: float, c64: wp.vec3d, d64: wp.vec3d,
                   tmin: float, tmax: float, ignore_local: int, lo_t: float, lo_gid: int, hits: HitList, i: int,
                   count: int, carry: int, scale: float) -> int:
    """Every hit of one instance's BLAS offered to the list (see ``traversal._walk_instance``)."""
    d = wp.vec3(d64)
    s = _approach(wp.vec3(o64), d, view.blas_magnitude[0])
    if s < 0.0:
        return count
    o = wp.vec3(o64 + wp.float64(s) * d64)
    s = s + shift
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    node_base = view.inst_node_base[inst]
    prim_base = view.inst_prim_base[inst]
    base = view.inst_face_base[inst]
    first_gid = view.inst_global[inst]
    nodes = wp.vector(dtype=wp.int32, length=64)
    entries = wp.vector(dtype=wp.float32, length=64)
    top = int(0)
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
                    reach = search_end(hits, i, count, tmax, scale)
                    t, side = watertight_hit(o, d, a, b, c, s, tmin, reach)
                    if t > tmin and t < reach:
                        t = confirmed_t(c64, d64, a, b, c)
                        gid = first_gid + f
                        if t > tmin and t < reach and after(t, gid, lo_t, lo_gid):
                            count = offer(view, hits, i, count, carry, t, gid, f, inst, side, scale, o, d)
        else:
            left = low[3]
            right = view.blas_upper_index[node_base + node][3] & 0x7FFFFFFF
            reach = search_end(hits, i, count, tmax, scale) - s
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
                nodes[top] = far
                entries[top] = t_far
                top += 1
                node = near
                continue
            if t_left < INF:
                node = left
                continue
            if t_right < INF:
                node = right
                continue
        done = int(1)
        while top > 0:
            top -= 1
            if entries[top] < search_end(hits, i, count, tmax, scale) - s:
                node = nodes[top]
                done = int(0)
                break
    return count


@wp.func
def _tlas_magnitude(view: SceneView) -> float:
    lo = view.tlas_lowers[view.tlas_root]
    hi = view.tlas_uppers[view.tlas_root]
    return wp.max(wp.max(wp.max(wp.abs(lo[0]), wp.abs(lo[1])), wp.max(wp.abs(lo[2]), wp.abs(hi[0]))),
                  wp.max(wp.abs(hi[1]), wp.abs(hi[2])))


@wp.func
def _walk_top_level(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                    lo_t: float, lo_gid: int, hits: HitList, i: int, count: int, carry: int, scale: float) -> int:
    """Every instance hit offered to the list (see ``traversal._walk_top_level``)."""
    shift = _approach(o, d, _tlas_magnitude(view))
    if shift < 0.0:
        return count
    o0 = o
    o = o + shift * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    nodes = wp.vector(dtype=wp.int32, length=64)
    entries = wp.vector(dtype=wp.float32, length=64)
    top = int(0)
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
                    count = _walk_instance(view, inst, wp.transform_point(m, wp.vec3d(o)), shift,
                                           wp.transform_point(m, wp.vec3d(o0)), wp.transform_vector(m, wp.vec3d(d)),
                                           tmin, tmax, ignore - view.inst_global[inst], lo_t, lo_gid, hits, i,
                                           count, carry, scale)
        else:
            left = low[3]
            right = view.tlas_upper_index[node][3] & 0x7FFFFFFF
            reach = search_end(hits, i, count, tmax, scale) - shift
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
                nodes[top] = far
                entries[top] = t_far
                top += 1
                node = near
                continue
            if t_left < INF:
                node = left
                continue
            if t_right < INF:
                node = right
                continue
        done = int(1)
        while top > 0:
            top -= 1
            if entries[top] < search_end(hits, i, count, tmax, scale) - shift:
                node = nodes[top]
                done = int(0)
                break
    return count


@wp.func
def _collect(view: SceneView, walk_flat: int, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
             lo_t: float, lo_gid: int, hits: HitList, i: int, carry: int, scale: float) -> int:
    """Fill row ``i`` with the first ``cap`` crossings after ``(lo_t, lo_gid)``; returns how many."""
    count = int(0)
    if walk_flat != 0 and view.has_flat != 0:
        s = _approach(o, d, view.flat_magnitude[0])
        if s >= 0.0:
            count = _walk_flat(view, o, s, d, tmin, tmax, ignore, lo_t, lo_gid, hits, i, count, carry, scale)
    if view.num_instances > 0:
        count = _walk_top_level(view, o, d, tmin, tmax, ignore, lo_t, lo_gid, hits, i, count, carry, scale)
    return count


@wp.func
def _scale(view: SceneView, walk_flat: int, d: wp.vec3) -> float:
    """``M / |d|``: the scene's magnitude in units of ``t`` (the absolute part of the merge tolerance)."""
    magnitude = float(0.0)
    if walk_flat != 0 and view.has_flat != 0:
        magnitude = view.flat_magnitude[0]
    if view.num_instances > 0:
        magnitude = wp.max(magnitude, _tlas_magnitude(view))
    return magnitude / wp.length(d)


@wp.kernel(enable_backward=False)
def _all_hits_search_kernel(
    scene: SceneView,
    walk_flat: int,
    o: wp.array(dtype=wp.vec3),
    o_stride: int,
    d: wp.array(dtype=wp.vec3),
    d_stride: int,
    tmin: wp.array(dtype=float),
    tmin_stride: int,
    tmax: wp.array(dtype=float),
    tmax_stride: int,
    active: wp.array(dtype=wp.uint8),
    active_stride: int,
    ignore: wp.array(dtype=wp.int32),
    ignore_stride: int,
    cap: int,
    list_t: wp.array2d(dtype=float),
    list_gid: wp.array2d(dtype=wp.int32),
    list_key: wp.array2d(dtype=wp.int32),
    list_inst: wp.array2d(dtype=wp.int32),
    list_side: wp.array2d(dtype=wp.int32),
):
    i = wp.tid()
    hits = HitList()
    hits.t = list_t
    hits.gid = list_gid
    hits.key = list_key
    hits.inst = list_inst
    hits.side = list_side
    hits.cap = cap
    for j in range(hits.cap):
        hits.t[i, j] = INF
        hits.gid[i, j] = wp.int32(-1)
    found = int(0)
    if active[i * active_stride] != wp.uint8(0):
        oi = o[i * o_stride]
        di = d[i * d_stride]
        t0 = tmin[i * tmin_stride]
        t1 = tmax[i * tmax_stride]
        if ray_is_wellformed(oi, di, t0, t1):
            oi, t0, t1 = _start_at_tmin(oi, di, t0, t1)
            found = _collect(scene, walk_flat, oi, di, t0, t1, int(ignore[i * ignore_stride]), t0, _NO_GID, hits,
                             i, 0, _scale(scene, walk_flat, di))
    for j in range(hits.cap):  # each slot's crossings (0 for a touch), 0 in unused slots
        weight = int(0)
        if j < found:
            weight = crossings(hits.side[i, j])
        hits.side[i, j] = wp.int32(weight)


@wp.kernel(enable_backward=False)
def _count_hits_search_kernel(
    scene: SceneView,
    walk_flat: int,
    o: wp.array(dtype=wp.vec3),
    o_stride: int,
    d: wp.array(dtype=wp.vec3),
    d_stride: int,
    tmin: wp.array(dtype=float),
    tmin_stride: int,
    tmax: wp.array(dtype=float),
    tmax_stride: int,
    active: wp.array(dtype=wp.uint8),
    active_stride: int,
    ignore: wp.array(dtype=wp.int32),
    ignore_stride: int,
    cap: int,
    list_t: wp.array2d(dtype=float),
    list_gid: wp.array2d(dtype=wp.int32),
    list_key: wp.array2d(dtype=wp.int32),
    list_inst: wp.array2d(dtype=wp.int32),
    list_side: wp.array2d(dtype=wp.int32),
    count: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    hits = HitList()
    hits.t = list_t
    hits.gid = list_gid
    hits.key = list_key
    hits.inst = list_inst
    hits.side = list_side
    hits.cap = cap
    total = int(0)
    if active[i * active_stride] != wp.uint8(0):
        oi = o[i * o_stride]
        di = d[i * d_stride]
        t0 = tmin[i * tmin_stride]
        t1 = tmax[i * tmax_stride]
        if ray_is_wellformed(oi, di, t0, t1):
            oi, t0, t1 = _start_at_tmin(oi, di, t0, t1)
            skip = int(ignore[i * ignore_stride])
            scale = _scale(scene, walk_flat, di)
            lo_t = t0
            lo_gid = int(_NO_GID)
            carry = int(0)
            more = int(1)
            while more != 0:
                found = _collect(scene, walk_flat, oi, di, t0, t1, skip, lo_t, lo_gid, hits, i, carry, scale)
                for j in range(found):  # a crossing counts 1 (or the sheets it crosses), a touch 0
                    total += crossings(hits.side[i, j])
                more = 0
                if found == cap:  # full: the next round starts after the last entry, which stays for merging
                    more = 1
                    lo_t = hits.t[i, cap - 1]
                    lo_gid = int(hits.gid[i, cap - 1])
                    for j in range(cap):
                        hits.t[i, cap + j] = hits.t[i, j]
                        hits.gid[i, cap + j] = hits.gid[i, j]
                        hits.key[i, cap + j] = hits.key[i, j]
                        hits.inst[i, cap + j] = hits.inst[i, j]
                    carry = cap
    count[i] = wp.int32(total)


def all_hits(accel: SceneAccel, rays: RayBatch, max_hits: int, t: wp.array, global_prim_id: wp.array,
             stream: wp.Stream | None = None, crossings: wp.array | None = None) -> None:
    """The first ``max_hits`` hits of each ray, sorted by ``(t, global_prim_id)``.

    Args:
        accel: the scene's acceleration structures.
        rays: the ray batch (arrays of length N, or 1 to broadcast).
        max_hits: ``K``, 1 to :data:`MAX_HITS`.
        t: float32 output of N K entries (row-major ``(N, K)``): the search's ``t`` of each
            hit (``watertight.confirmed_t``), ``+inf`` in unused slots.
        global_prim_id: int32 output of N K entries: the hit faces, -1 in unused slots.
        stream: the CUDA stream to launch on (``None`` on the CPU).
        crossings: optional int32 output of N K entries: the crossings each listed hit
            counts for :func:`count_hits` (1, 0 for a touch; the module's rule), 0 in
            unused slots.

    Hits count for ``tmin < t < tmax``, skipping the ray's ``ignore`` face, disabled
    shapes, inactive and malformed rays (as :func:`rayd.engine.search`). Hits of a shared
    edge or vertex are listed once (the module's rule), touches included.
    """
    if not 1 <= max_hits <= MAX_HITS:
        raise ValueError(f"rayd.engine.all_hits(): 'max_hits' must be in [1, {MAX_HITS}], got {max_hits}")
    n = t.shape[0] // max_hits
    if n == 0:
        return
    device = accel.device
    lists = [t.reshape((n, max_hits)), global_prim_id.reshape((n, max_hits)),
             wp.empty((n, max_hits), dtype=wp.int32, device=device),
             wp.empty((n, max_hits), dtype=wp.int32, device=device),
             crossings.reshape((n, max_hits)) if crossings is not None
             else wp.empty((n, max_hits), dtype=wp.int32, device=device)]
    walk_flat = 0 if accel.walks == "instances" else 1
    launch_rows(_all_hits_search_kernel, n, [accel.view_for(stream), walk_flat, *rays.launch_args(n), max_hits], lists,
                device, stream)


def count_hits(accel: SceneAccel, rays: RayBatch, count: wp.array, stream: wp.Stream | None = None) -> None:
    """The number of crossings of each ray (int32 ``count`` of length N), exact and uncapped.

    Args and hit rules as :func:`all_hits`; a merged hit counts its crossings (1, or 0 for a
    touch: the module's rule), so with ``max_hits`` at least the number of hits, the count
    is the sum of :func:`all_hits`' ``crossings``.
    """
    n = count.shape[0]
    if n == 0:
        return
    device = accel.device
    rows = min(n, COUNT_CHUNK)
    width = 2 * COUNT_CAPACITY
    scratch = [wp.empty((rows, width), dtype=float, device=device)] + [
        wp.empty((rows, width), dtype=wp.int32, device=device) for _ in range(4)]
    walk_flat = 0 if accel.walks == "instances" else 1
    arrays = (rays.o, rays.d, rays.tmin, rays.tmax, rays.active, rays.ignore)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        part = [a if a.shape[0] == 1 else a[start:stop] for a in arrays]
        args = [x for a in part for x in per_row(a, stop - start)]
        launch_rows(_count_hits_search_kernel, stop - start, [accel.view_for(stream), walk_flat, *args, COUNT_CAPACITY],
                    [*(a[: stop - start] for a in scratch), count[start:stop]], device, stream)
