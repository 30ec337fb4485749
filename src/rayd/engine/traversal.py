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

from rayd.engine.watertight import safe_direction, watertight_t


@wp.struct
class SceneView:
    """Kernel-side handle of a scene. Arrays of absent parts hold one dummy entry."""

    has_flat: int
    flat_bvh: wp.uint64
    flat_points: wp.array(dtype=wp.vec3)  # world space
    flat_indices: wp.array(dtype=wp.int32)
    flat_global: wp.array(dtype=wp.int32)  # global_prim_id of each flat face
    flat_shape: wp.array(dtype=wp.int32)  # shape id of each flat face
    shape_enabled: wp.array(dtype=wp.uint8)  # per shape id
    all_enabled: int
    num_instances: int
    tlas: wp.uint64
    blas_points: wp.array(dtype=wp.vec3)  # object space, all instanced meshes
    blas_indices: wp.array(dtype=wp.int32)
    inst_bvh: wp.array(dtype=wp.uint64)  # bottom-level BVH per instance
    inst_face_base: wp.array(dtype=wp.int32)  # first face row in blas_indices per instance
    inst_to_object: wp.array(dtype=wp.mat44)  # world -> object per instance
    inst_shape: wp.array(dtype=wp.int32)  # shape id per instance
    inst_global: wp.array(dtype=wp.int32)  # first global_prim_id per instance


@wp.func
def _walk_flat(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
               any_hit: int) -> tuple[float, int]:
    """Closest (or some) flat face with tmin < t < tmax: (t, face) or (tmax, -1)."""
    best = tmax
    face = int(-1)
    query = wp.bvh_query_ray(view.flat_bvh, o, safe_direction(d))
    f = int(0)
    while wp.bvh_query_next(query, f, best):
        if view.all_enabled == 0:
            if view.shape_enabled[view.flat_shape[f]] == wp.uint8(0):
                continue
        if view.flat_global[f] == ignore:
            continue
        t = watertight_t(o, d, view.flat_points[view.flat_indices[3 * f]],
                         view.flat_points[view.flat_indices[3 * f + 1]],
                         view.flat_points[view.flat_indices[3 * f + 2]])
        if t > tmin and t < best:
            best = t
            face = f
            if any_hit != 0:
                break
    return best, face


@wp.func
def _walk_instance(view: SceneView, inst: int, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float,
                   ignore_local: int, any_hit: int) -> tuple[float, int]:
    """Closest (or some) face of one instance (object-space ray): (t, local face) or (tmax, -1)."""
    best = tmax
    face = int(-1)
    base = view.inst_face_base[inst]
    query = wp.bvh_query_ray(view.inst_bvh[inst], o, safe_direction(d))
    f = int(0)
    while wp.bvh_query_next(query, f, best):
        if f == ignore_local:
            continue
        row = 3 * (base + f)
        t = watertight_t(o, d, view.blas_points[view.blas_indices[row]], view.blas_points[view.blas_indices[row + 1]],
                         view.blas_points[view.blas_indices[row + 2]])
        if t > tmin and t < best:
            best = t
            face = f
            if any_hit != 0:
                break
    return best, face


@wp.func
def trace(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int, any_hit: int) -> int:
    """``global_prim_id`` of the closest (or with ``any_hit``, any) hit with tmin < t < tmax, or -1."""
    if tmin < 0.0:
        # BVH ray queries skip boxes behind the origin: start the ray at tmin instead.
        o = o + tmin * d
        tmax = tmax - tmin
        tmin = 0.0
    best = tmax
    winner = int(-1)
    if view.has_flat != 0:
        t, face = _walk_flat(view, o, d, tmin, best, ignore, any_hit)
        if face >= 0:
            best = t
            winner = view.flat_global[face]
            if any_hit != 0:
                return winner
    if view.num_instances > 0:
        query = wp.bvh_query_ray(view.tlas, o, safe_direction(d))
        inst = int(0)
        while wp.bvh_query_next(query, inst, best):
            if view.shape_enabled[view.inst_shape[inst]] == wp.uint8(0):
                continue
            m = view.inst_to_object[inst]
            t, face = _walk_instance(view, inst, wp.transform_point(m, o), wp.transform_vector(m, d), tmin, best,
                                     ignore - view.inst_global[inst], any_hit)
            if face >= 0 and t < best:
                best = t
                winner = view.inst_global[inst] + face
                if any_hit != 0:
                    return winner
    return winner


@wp.func
def ray_is_wellformed(o: wp.vec3, d: wp.vec3, tmin: float, tmax: float) -> bool:
    """False for NaN/inf components, a zero direction, a NaN bound or ``tmax <= tmin``."""
    if not (wp.isfinite(o) and wp.isfinite(d) and wp.isfinite(tmin)) or wp.isnan(tmax):
        return False
    if d[0] == 0.0 and d[1] == 0.0 and d[2] == 0.0:
        return False
    return tmax > tmin
