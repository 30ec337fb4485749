"""Warp kernels of the Embree CPU path (:mod:`rayd.engine.cpu_embree`): per packet of 16 rays,
Embree's rays (:func:`_prepare_row`), ``rtcIntersect16`` (:func:`rayd.engine.embree_api.intersect16`),
then the checks that send a ray to rayd's Warp search (:func:`_finish_row`)."""

from __future__ import annotations

import warp as wp

from rayd.engine import embree_api
from rayd.engine.traversal import ray_is_wellformed

wp.set_module_options({"enable_backward": False})


@wp.func
def _prepare_row(
    i: int, o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    active: wp.array(dtype=wp.uint8), active_stride: int,
    centre: wp.vec3d, radius: float, band: float,
    origin: wp.array(dtype=wp.vec3), direction: wp.array(dtype=wp.vec3), far: wp.array(dtype=float),
    start: wp.array(dtype=float), delta: wp.array(dtype=float),
):
    """Embree's ray of row ``i``: origin ``o + (max(tmin, sphere entry) - delta) d - c`` (float64),
    ``tfar`` up to ``min(tmax, sphere exit) + delta`` (-1: a miss without a search)."""
    oi = o[i * o_stride]
    di = d[i * d_stride]
    t0 = tmin[i * tmin_stride]
    t1 = tmax[i * tmax_stride]
    origin[i] = wp.vec3(0.0, 0.0, 0.0)
    direction[i] = wp.vec3(1.0, 1.0, 1.0)
    far[i] = -1.0
    start[i] = 0.0
    delta[i] = 0.0
    if active[i * active_stride] != wp.uint8(0) and ray_is_wellformed(oi, di, t0, t1):
        od = wp.vec3d(wp.float64(oi[0]), wp.float64(oi[1]), wp.float64(oi[2])) - centre
        dd = wp.vec3d(wp.float64(di[0]), wp.float64(di[1]), wp.float64(di[2]))
        dl = wp.float64(band) * (wp.length(od) + wp.float64(radius)) / wp.length(dd)
        # Clip to the sphere of radius 1.8 R around the centre (it holds every vertex): Embree's
        # origin then lies within it (small rounding), and a ray that misses it is a miss.
        rs = wp.float64(1.8) * wp.float64(radius)
        dd2 = wp.dot(dd, dd)
        b = wp.dot(od, dd)
        disc = b * b - dd2 * (wp.dot(od, od) - rs * rs)
        if disc >= wp.float64(0.0):
            sq = wp.sqrt(disc)
            lo = wp.max(wp.float64(t0), (-b - sq) / dd2)
            hi = wp.min(wp.float64(t1), (-b + sq) / dd2)
            if hi > lo:
                s0 = lo - dl
                p = od + s0 * dd
                origin[i] = wp.vec3(float(p[0]), float(p[1]), float(p[2]))
                direction[i] = di
                far[i] = float(hi - s0 + dl)
                start[i] = float(s0)
                delta[i] = float(dl)


@wp.func
def _finish_row(
    i: int, d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    ignore: wp.array(dtype=wp.int32), ignore_stride: int,
    flat_global: wp.array(dtype=wp.int32), flat_shape: wp.array(dtype=wp.int32),
    shape_enabled: wp.array(dtype=wp.uint8), degenerate: wp.array(dtype=wp.uint8), face_mode: int, far_origin: float,
    origin: wp.array(dtype=wp.vec3), tfar: wp.array(dtype=float), start: wp.array(dtype=float),
    delta: wp.array(dtype=float), prim: wp.array(dtype=wp.int32), capped: wp.array(dtype=wp.int32),
    u: wp.array(dtype=float), v: wp.array(dtype=float), edge: float,
    out: wp.array(dtype=wp.int32), redo: wp.array(dtype=wp.uint8),
) -> int:
    """Row ``i``'s winner ``global_prim_id``, or -1 and ``redo = 1`` where Warp must decide;
    returns ``redo``."""
    out[i] = -1
    redo[i] = wp.uint8(0)
    if tfar[i] < 0.0:  # inactive or malformed: a miss, not searched
        return 0
    if capped[i] > 0 or wp.length(origin[i]) > far_origin:
        redo[i] = wp.uint8(1)
        return 1
    f = prim[i]
    if f < 0:
        di = d[i * d_stride]
        if di[0] == 0.0 or di[1] == 0.0 or di[2] == 0.0:
            redo[i] = wp.uint8(1)
            return 1
        return 0
    t = wp.float64(tfar[i]) + wp.float64(start[i])
    dl = wp.float64(delta[i])
    bad = t <= wp.float64(tmin[i * tmin_stride]) + dl or t >= wp.float64(tmax[i * tmax_stride]) - dl
    near_edge = wp.min(wp.min(u[i], v[i]), 1.0 - u[i] - v[i]) < edge  # a tie: Warp's pick
    if bad or near_edge or not wp.isfinite(t):
        redo[i] = wp.uint8(1)
        return 1
    # Per-face tables only where they can matter (random reads: on incoherent rays a cache miss
    # each, 65 of 270 ms on the sphere): bit 0 of face_mode, global id = face id; bit 1, every
    # shape enabled; bit 2, no degenerate face or sliver.
    g = f
    if face_mode & 1 == 0:
        g = flat_global[f]
    if face_mode & 2 == 0:
        if shape_enabled[flat_shape[f]] == wp.uint8(0):
            redo[i] = wp.uint8(1)
            return 1
    if face_mode & 4 == 0:
        if degenerate[f] != wp.uint8(0):
            redo[i] = wp.uint8(1)
            return 1
    if g == ignore[i * ignore_stride]:
        redo[i] = wp.uint8(1)
        return 1
    out[i] = g
    return 0


@wp.kernel(enable_backward=False)
def _search_packets_kernel(
    o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    active: wp.array(dtype=wp.uint8), active_stride: int, ignore: wp.array(dtype=wp.int32), ignore_stride: int,
    centre: wp.vec3d, radius: float, band: float,
    flat_global: wp.array(dtype=wp.int32), flat_shape: wp.array(dtype=wp.int32),
    shape_enabled: wp.array(dtype=wp.uint8), degenerate: wp.array(dtype=wp.uint8), face_mode: int,
    far_origin: float, edge: float,
    fn: wp.uint64, scene: wp.uint64, coherent_cos: float, base: int, n: int,
    origin: wp.array(dtype=wp.vec3), direction: wp.array(dtype=wp.vec3), far: wp.array(dtype=float),
    start: wp.array(dtype=float), delta: wp.array(dtype=float), prim: wp.array(dtype=wp.int32),
    capped: wp.array(dtype=wp.int32), u: wp.array(dtype=float), v: wp.array(dtype=float),
    out: wp.array(dtype=wp.int32), redo: wp.array(dtype=wp.uint8), redo_count: wp.array(dtype=wp.int32),
):
    """One packet of 16 rows from ``base``: Embree's rays, ``rtcIntersect16``, then the checks."""
    lo = base + wp.tid() * 16
    hi = wp.min(lo + 16, n)
    for i in range(lo, hi):
        _prepare_row(i, o, o_stride, d, d_stride, tmin, tmin_stride, tmax, tmax_stride, active, active_stride,
                     centre, radius, band, origin, direction, far, start, delta)
    embree_api.intersect16(fn, scene, origin, direction, far, prim, capped, u, v, lo, hi, coherent_cos)
    count = int(0)
    for i in range(lo, hi):
        count += _finish_row(i, d, d_stride, tmin, tmin_stride, tmax, tmax_stride, ignore, ignore_stride,
                             flat_global, flat_shape, shape_enabled, degenerate, face_mode, far_origin,
                             origin, far, start, delta, prim, capped, u, v, edge, out, redo)
    if count > 0:
        wp.atomic_add(redo_count, 0, count)


@wp.kernel(enable_backward=False)
def _trace_kernel(fn: wp.uint64, scene: wp.uint64, n: int, origin: wp.array(dtype=wp.vec3),
                  direction: wp.array(dtype=wp.vec3), far: wp.array(dtype=float), prim: wp.array(dtype=wp.int32),
                  geom: wp.array(dtype=wp.int32), u: wp.array(dtype=float), v: wp.array(dtype=float),
                  coherent_cos: float):
    lo = wp.tid() * 16
    embree_api.intersect16(fn, scene, origin, direction, far, prim, geom, u, v, lo, wp.min(lo + 16, n), coherent_cos)
