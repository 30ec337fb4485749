"""Specular reflection chains in one launch: B closest-hit searches per ray, chained in the kernel.

:func:`trace_chain` runs, per ray, up to ``B`` closest-hit searches of the scene
(:func:`rayd.engine.traversal.trace`, or :mod:`rayd.engine.pair_walk` in the pair layout: the walks of ``search``), each
from the previous hit: after a hit at ``p_b`` on a face with unit geometric normal
``g_b`` (world space), the next segment starts at ``p_b`` with direction
``d_{b+1} = d_b - 2 (d_b . g_b) g_b``, ``tmin = 0``, ``tmax = inf``, skipping the face it
leaves; the first segment is the ray as given (its ``tmin``, ``tmax``, ``ignore``).
The chain stops at the first miss. No host work between bounces, one launch per
chain (DESIGN.md, "Reflections and specular paths").

The kernel computes each hit's ``t`` with :func:`~rayd.engine.watertight.confirmed_t`
from the same float32 ray and corners as the search ranked it by (so ``t > tmin``
holds for the value it reports), the hit point and the reflected direction in float64
from the float32 snapshot of the geometry (instances: the face's object-space normal
taken to world space by the inverse-transpose of the placement, in float64). The
reflection uses the segment's float32 direction and the unit normal rounded to float32
(the ``d_out`` formula of a float32 record, from its ``geo_n``); the next segment's
origin and direction are the float64 results rounded to float32, as a frontend would
hand over its own ``p`` and ``d_out``, except that an origin the rounding put behind the
plane of the face it leaves (on the side the reflected direction does not go to) is
moved a few float32 ulps along the normal to the leaving side (:func:`leaving_origin`):
in exact arithmetic the segment meets that plane only at ``t = 0``, so a neighbour of
the face (the other triangle of a planar quad, hit on their shared edge) must not be hit
at ``t ~ 1e-9`` as a second, spurious reflection. Only the float32 ray state lives across the walks. The frontends re-evaluate every
slot differentiably for the fixed winners.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.accel import SceneAccel
from rayd.engine.rays import RayBatch
from rayd.engine.runtime import alias, launch_rows
from rayd.engine.instance_walk import TRACES as _INSTANCE_TRACES
from rayd.engine.pair_walk import trace_flat_pair, trace_instances_pair, trace_pair
from rayd.engine.wide_walk import trace_flat_wide, trace_flat_wide_q
from rayd.engine.traversal import SceneView, ray_is_wellformed, trace, trace_flat, trace_instances
from rayd.engine.watertight import INF, confirmed_face_t

wp.set_module_options({"enable_backward": False})

#: The largest chain length a launch accepts (DESIGN.md: ``1 <= max_bounces <= 16``).
MAX_BOUNCES = 16


@wp.struct
class ShapeLookup:
    """Where each shape's faces live: the face of a ``global_prim_id``, by binary search over shapes."""

    count: int
    first_global: wp.array(dtype=wp.int32)  # first global_prim_id per shape (ascending)
    flat_row: wp.array(dtype=wp.int32)  # flat face index of the shape's first face; -1 for an instance
    instance: wp.array(dtype=wp.int32)  # instance index (SceneView.inst_*); -1 for a mesh


def shape_lookup(device: wp.context.Device, first_global: np.ndarray, flat_row: np.ndarray,
                 instance: np.ndarray) -> ShapeLookup:
    """A :class:`ShapeLookup` from per-shape host arrays (built once per ``build()``).

    Args:
        device: the scene's Warp device.
        first_global: (S,) first ``global_prim_id`` of each shape, ascending.
        flat_row: (S,) row of the shape's first face among the flat BVH's faces (-1: instance).
        instance: (S,) index of the shape among the instances of the top level (-1: mesh).
    """
    out = ShapeLookup()
    s = out.count = int(len(first_global))
    # one upload (a host-to-device copy each, which may wait for the stream), three views of it
    table = wp.array(np.concatenate([np.asarray(x, dtype=np.int32).reshape(-1) for x in (first_global, flat_row,
                                                                                        instance)]),
                     dtype=wp.int32, device=device)
    out.first_global, out.flat_row, out.instance = (alias(table, wp.int32, s, 4 * s * k) for k in range(3))
    return out


@wp.func
def _shape_of(shapes: ShapeLookup, g: int) -> int:
    """The last shape whose first ``global_prim_id`` is ``<= g`` (empty shapes are skipped)."""
    lo = int(0)
    hi = shapes.count - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if shapes.first_global[mid] <= g:
            lo = mid
        else:
            hi = mid - 1
    return lo


@wp.func
def _d64(v: wp.vec3) -> wp.vec3d:
    return wp.vec3d(wp.float64(v[0]), wp.float64(v[1]), wp.float64(v[2]))


@wp.func
def _r32(v: wp.vec3d) -> wp.vec3d:
    """``v`` rounded to float32 and back."""
    return wp.vec3d(wp.float64(float(v[0])), wp.float64(float(v[1])), wp.float64(float(v[2])))


@wp.func
def plane_t(o64: wp.vec3d, d64: wp.vec3d, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> wp.float64:
    """The float64 ``t`` where ``o + t d`` meets the plane of the float32 corners (not rounded)."""
    a64 = _d64(a)
    n = wp.cross(_d64(b) - a64, _d64(c) - a64)
    den = wp.dot(d64, n)
    if den == wp.float64(0.0):
        return wp.float64(0.0)
    return wp.dot(a64 - o64, n) / den


@wp.func
def leaving_origin(p: wp.vec3d, o64: wp.vec3d, d64: wp.vec3d, t_plane: wp.float64, unit: wp.vec3d,
                   direction: wp.vec3d) -> wp.vec3:
    """The float32 origin of the segment leaving a hit at ``p``: ``p`` rounded to float32, moved
    by a few float32 ulps along the face normal where the rounding put it on the wrong side of
    the face's plane (the side ``direction`` does not go to), so that the search of the next
    segment cannot hit the face's neighbours at ``t ~ 0`` (a ray reflected on the shared edge
    of a planar quad bounced again off the other triangle: a spurious reflection at ``t ~ 1e-9``).
    """
    side = wp.dot(direction, unit)
    sign = wp.float64(1.0)
    if side < wp.float64(0.0):
        sign = wp.float64(-1.0)
    scale = wp.max(wp.max(wp.abs(p[0]), wp.abs(p[1])), wp.abs(p[2]))
    need = scale * wp.float64(1.0e-9)  # ~2^-30 relative: far above the neighbours' plane mismatch
    q = _r32(p)
    step = scale * wp.float64(2.4e-7)  # ~2^-22 relative: a few float32 ulps of the largest component
    for _k in range(6):
        height = (wp.dot(q - o64, unit) - t_plane * wp.dot(d64, unit)) * sign
        if height >= need or side == wp.float64(0.0):
            break
        q = _r32(p + (wp.abs(height) + step) * sign * unit)
        step = step * wp.float64(2.0)
    return wp.vec3(float(q[0]), float(q[1]), float(q[2]))


def _chain_kernel(trace_fn: wp.Function) -> wp.Kernel:
    """The chain kernel over ``trace_fn`` (one variant per combination of scene parts, as ``search``)."""

    @wp.kernel(enable_backward=False, module="unique")
    def _reflect_chain_kernel(
        scene: SceneView,
        shapes: ShapeLookup,
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
        bounces: int,
        ids: wp.array3d(dtype=wp.int32),
        t_out: wp.array2d(dtype=float),
    ):
        i = wp.tid()
        for b in range(bounces):
            ids[i, b, 0] = -1
            ids[i, b, 1] = -1
            ids[i, b, 2] = -1
            t_out[i, b] = INF
        if active[i * active_stride] == wp.uint8(0):
            return
        oi = o[i * o_stride]
        di = d[i * d_stride]
        t0 = tmin[i * tmin_stride]
        t1 = tmax[i * tmax_stride]
        if not ray_is_wellformed(oi, di, t0, t1):
            return
        skip = ignore[i * ignore_stride]
        zero = wp.float64(0.0)
        for b in range(bounces):
            g = trace_fn(scene, oi, di, t0, t1, skip, 0)
            if g < 0:
                break
            s = _shape_of(shapes, g)
            local = g - shapes.first_global[s]
            inst = shapes.instance[s]
            o64 = _d64(oi)
            d64 = _d64(di)
            t = float(INF)
            normal = wp.vec3d(zero, zero, zero)
            if inst < 0:
                f = shapes.flat_row[s] + local
                a = scene.flat_points[scene.flat_indices[3 * f]]
                bb = scene.flat_points[scene.flat_indices[3 * f + 1]]
                c = scene.flat_points[scene.flat_indices[3 * f + 2]]
                t = confirmed_face_t(o64, d64, a, bb, c)
                normal = wp.cross(_d64(bb) - _d64(a), _d64(c) - _d64(a))
                ids[i, b, 1] = scene.flat_shape[f]
            else:
                m = scene.inst_to_object[inst]
                row = 3 * (scene.inst_face_base[inst] + local)
                a = scene.blas_points[scene.blas_indices[row]]
                bb = scene.blas_points[scene.blas_indices[row + 1]]
                c = scene.blas_points[scene.blas_indices[row + 2]]
                t = confirmed_face_t(wp.transform_point(m, o64), wp.transform_vector(m, d64), a, bb, c)
                # Normals go to world space by the inverse transpose of the placement.
                normal = wp.transform_vector(wp.transpose(m), wp.cross(_d64(bb) - _d64(a), _d64(c) - _d64(a)))
                ids[i, b, 1] = scene.inst_shape[inst]
            ids[i, b, 0] = g
            ids[i, b, 2] = local
            t_out[i, b] = t
            length = wp.length(normal)
            if not (length > zero) or not wp.isfinite(t):  # never for a winner of the search
                break
            unit = normal / length
            normal = _r32(unit)  # the geo_n a float32 record reports
            p = o64 + wp.float64(t) * d64
            direction = d64 - wp.float64(2.0) * wp.dot(d64, normal) * normal
            # The exact line-plane parameter (t above is rounded to float32) places the plane.
            t_plane = wp.float64(0.0)
            if inst < 0:
                t_plane = plane_t(o64, d64, a, bb, c)
            else:
                t_plane = plane_t(wp.transform_point(scene.inst_to_object[inst], o64),
                                  wp.transform_vector(scene.inst_to_object[inst], d64), a, bb, c)
            oi = leaving_origin(p, o64, d64, t_plane, unit, direction)
            di = wp.vec3(float(direction[0]), float(direction[1]), float(direction[2]))
            t0 = 0.0
            t1 = INF
            skip = g

    return _reflect_chain_kernel


_CHAIN_KERNELS = {"flat": _chain_kernel(trace_flat), "instances": _chain_kernel(trace_instances),
                  "both": _chain_kernel(trace),
                  # the same walks as the closest-hit search in rayd's child-pair node layout
                  "flat_pair": _chain_kernel(trace_flat_pair), "instances_pair": _chain_kernel(trace_instances_pair),
                  "both_pair": _chain_kernel(trace_pair), "flat_wide": _chain_kernel(trace_flat_wide),
                  "flat_wide_q": _chain_kernel(trace_flat_wide_q),
                  **{name: _chain_kernel(fn) for name, fn in _INSTANCE_TRACES.items()}}


def trace_chain(
    accel: SceneAccel,
    shapes: ShapeLookup,
    rays: RayBatch,
    ids: wp.array,
    t: wp.array,
    stream: wp.Stream | None = None,
) -> None:
    """The specular chain of every ray in one launch (see the module docstring).

    Args:
        accel: the scene's acceleration structures (search frame: centre-relative).
        shapes: the scene's :class:`ShapeLookup`.
        rays: the ray batch of segment 0 (arrays of length N, or 1 to broadcast).
        ids: int32 ``wp.array3d`` (N, B, 3) output: per slot ``global_prim_id``,
            ``shape_id``, ``prim_id`` (-1 in empty slots); ``B = max_bounces`` in ``[1, 16]``.
        t: float32 ``wp.array2d`` (N, B), the ray parameter of each segment's hit
            (``+inf`` empty), in units of that segment's direction.
        stream: the CUDA stream to launch on (``None`` on the CPU).

    Inactive or malformed rays (NaN/inf, zero direction, ``tmax <= tmin``) get empty chains.
    """
    n, bounces = t.shape
    if not 1 <= bounces <= MAX_BOUNCES:
        raise ValueError(f"rayd.engine.trace_chain(): B must be in [1, {MAX_BOUNCES}], got {bounces}")
    if n == 0:
        return
    walk = accel.search_walk
    launch_rows(_CHAIN_KERNELS[walk], n, [accel.search_view(walk, stream), shapes, *rays.launch_args(n), bounces],
                [ids, t], accel.device, stream)
