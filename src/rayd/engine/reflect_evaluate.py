"""Fused forward evaluation of specular chains for fixed winners (float32 plain meshes).

:func:`evaluate_chain` computes, in one launch, every field of a reflection chain whose
winners :func:`rayd.engine.trace_chain` found: the frontends' op-by-op formulas
(``rayd.torch._chain.evaluate``) in float64 from float32 inputs, rounded to float32
after each bounce as the frontends round to the output dtype. Per slot ``b`` with the
winner's corners ``v0, v1, v2`` (live, world space):

- ``N = (v1 - v0) x (v2 - v0)``, ``g = N / |N|`` rounded to float32 (``geo_n``),
- ``t = (v0 . N - o . N) / (d . N)``; the slot counts iff ``N != 0``, ``d . N != 0`` and
  the float32 ``t`` lies in the segment's interval (``tmin < t < tmax`` for segment 0,
  ``0 < t < inf`` after it), and every earlier slot counted,
- ``p = o + t d``, ``d_out = d - 2 (d . g) g``, ``I = I - 2 ((I - p) . g) g`` (``I`` starts
  at the ray's origin), each rounded to float32; the next segment is ``(p, d_out)``,
- ``path_length = |d_0| * sum(t)`` (0 where no slot counts, whatever ``d_0`` holds).

Slots that do not count get ids -1 (in ``ids_out``), ``t = inf`` and zero vectors. No derivatives here:
the frontends differentiate their own formulas for the fixed chain (the same values).
"""

from __future__ import annotations

import warp as wp

from rayd.engine.runtime import PerRow, launch_rows, per_row
from rayd.engine.watertight import INF

wp.set_module_options({"enable_backward": False})


@wp.func
def _d64(v: wp.vec3) -> wp.vec3d:
    return wp.vec3d(wp.float64(v[0]), wp.float64(v[1]), wp.float64(v[2]))


@wp.func
def _r32(v: wp.vec3d) -> wp.vec3d:
    """``v`` rounded to float32 and back (the value a float32 record holds)."""
    return wp.vec3d(wp.float64(float(v[0])), wp.float64(float(v[1])), wp.float64(float(v[2])))


@wp.func
def _f32(v: wp.vec3d) -> wp.vec3:
    return wp.vec3(float(v[0]), float(v[1]), float(v[2]))


@wp.kernel(enable_backward=False)
def _evaluate_chain_kernel(
    o: wp.array(dtype=wp.vec3),
    o_stride: int,
    d: wp.array(dtype=wp.vec3),
    d_stride: int,
    tmin: wp.array(dtype=wp.float64),
    tmin_stride: int,
    tmax: wp.array(dtype=wp.float64),
    tmax_stride: int,
    vertices: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    ids: wp.array3d(dtype=wp.int32),
    ids_out: wp.array3d(dtype=wp.int32),
    t_out: wp.array2d(dtype=float),
    p_out: wp.array2d(dtype=wp.vec3),
    n_out: wp.array2d(dtype=wp.vec3),
    d_out: wp.array2d(dtype=wp.vec3),
    image_out: wp.array2d(dtype=wp.vec3),
    num_bounces: wp.array(dtype=wp.int32),
    path_length: wp.array(dtype=float),
):
    i = wp.tid()
    zero = wp.float64(0.0)
    two = wp.float64(2.0)
    oi = _d64(o[i * o_stride])
    di = _d64(d[i * d_stride])
    image = oi
    length = wp.sqrt(wp.dot(di, di))
    total = zero
    count = int(0)
    alive = int(1)
    empty = wp.vec3(0.0, 0.0, 0.0)
    for b in range(ids.shape[1]):
        g = ids[i, b, 0]
        counted = int(0)
        t = zero
        normal = wp.vec3d(zero, zero, zero)
        sq = zero
        if alive != 0 and g >= 0:
            v0 = _d64(vertices[indices[3 * g]])
            normal = wp.cross(_d64(vertices[indices[3 * g + 1]]) - v0, _d64(vertices[indices[3 * g + 2]]) - v0)
            sq = wp.dot(normal, normal)
            den = wp.dot(di, normal)
            if sq > zero and den != zero:
                t = (wp.dot(v0, normal) - wp.dot(oi, normal)) / den
                td = wp.float64(float(t))  # the interval is decided on the float32 t, as the record holds it
                lo = wp.float64(0.0)
                hi = wp.float64(INF)
                if b == 0:
                    lo = tmin[i * tmin_stride]
                    hi = tmax[i * tmax_stride]
                if td > lo and td < hi:
                    counted = 1
        if counted == 0:
            alive = 0
            ids_out[i, b, 0] = -1
            ids_out[i, b, 1] = -1
            ids_out[i, b, 2] = -1
            t_out[i, b] = float(INF)
            p_out[i, b] = empty
            n_out[i, b] = empty
            d_out[i, b] = empty
            image_out[i, b] = empty
        else:
            unit = _r32(normal / wp.sqrt(sq))
            p = _r32(oi + t * di)
            di = _r32(di - two * wp.dot(di, unit) * unit)
            image = _r32(image - two * wp.dot(image - p, unit) * unit)
            ids_out[i, b, 0] = g
            ids_out[i, b, 1] = ids[i, b, 1]
            ids_out[i, b, 2] = ids[i, b, 2]
            t_out[i, b] = float(t)
            p_out[i, b] = _f32(p)
            n_out[i, b] = _f32(unit)
            d_out[i, b] = _f32(di)
            image_out[i, b] = _f32(image)
            total = total + t
            count = count + 1
            oi = p
    num_bounces[i] = wp.int32(count)
    if count == 0:
        length = zero  # no hit: 0, also for a malformed d (not 0 * inf)
    path_length[i] = float(total * length)


def evaluate_chain(
    o: wp.array,
    d: wp.array,
    tmin: wp.array,
    tmax: wp.array,
    vertices: wp.array,
    indices: wp.array,
    ids: wp.array,
    outputs: list[wp.array],
    stream: wp.Stream | None = None,
) -> None:
    """Every field of N chains of B slots in one launch (see the module docstring).

    Args:
        o, d: ``wp.vec3`` world-space float32 origins and directions of segment 0
            (length N, or 1 to broadcast).
        tmin, tmax: float64 bounds of segment 0 (length N or 1), the values the
            float32 ``t`` is compared with.
        vertices: ``wp.vec3`` (V,) the live float32 vertices (world space: no transforms);
            ``indices`` int32 (3 F,), row ``global_prim_id`` per face.
        ids: int32 ``wp.array3d`` (N, B, 3) the winners (``global_prim_id``, ``shape_id``,
            ``prim_id``) of :func:`rayd.engine.trace_chain`.
        outputs: ``ids`` int32 (N, B, 3) as ``ids`` with -1 in the slots that do not count; ``t`` float32 (N, B); ``p``, ``geo_n``, ``d_out``, ``image_source``
            ``wp.vec3`` (N, B); ``num_bounces`` int32 (N,); ``path_length`` float32 (N,).
        stream: the CUDA stream to launch on (``None`` on the CPU).
    """
    n = ids.shape[0]
    if n == 0:
        return
    launch_rows(_evaluate_chain_kernel, n,
                [*per_row(o, n), *per_row(d, n), *per_row(tmin, n), *per_row(tmax, n), vertices, indices,
                 PerRow(ids)], outputs, ids.device, stream)

