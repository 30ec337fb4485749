"""Every field of a closest-point record for the search's winners, in one pass (forward only).

The frontends' reference path re-evaluates the winning triangle with op-by-op
float64 tensor ops (``rayd.torch._closest_point.closest_on_triangles``): the Voronoi
region of the query (Ericson 2004, "Real-Time Collision Detection", 5.1.5; the
formulas of ``rayd.core.surface``), that region's barycentric weights, the closest
point ``p``, ``distance = |q - p|`` and ``geo_n = normalize((v1 - v0) x (v2 - v0))``,
with the engine's rule for sliver faces (the closest of the three sides). This
kernel evaluates the same formulas in the same order, in float64 from the float32
inputs, and rounds each field to float32 once, so the two agree to the last float32
bit up to float64 rounding (at most one float32 ulp). Misses (``global_prim_id < 0``)
write ``distance = inf``, zeros and ids -1.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.closest_walk import SLIVER
from rayd.engine.evaluate import _f32, _f64, _place
from rayd.engine.runtime import launch_rows, per_row
from rayd.engine.watertight import INF


@wp.func
def _div(num: wp.float64, den: wp.float64) -> wp.float64:
    """``num / den`` where ``den > 0``, else 0 (``_closest_point._safe_div``)."""
    if den > wp.float64(0.0):
        return num / den
    return wp.float64(0.0)


@wp.func
def _side(q: wp.vec3d, x: wp.vec3d, y: wp.vec3d) -> wp.float64:
    """Clamped parameter ``t`` of the closest point of segment ``xy`` to ``q``."""
    xy = y - x
    t = _div(wp.dot(q - x, xy), wp.dot(xy, xy))
    return wp.min(wp.max(t, wp.float64(0.0)), wp.float64(1.0))


@wp.func
def _gap(q: wp.vec3d, a: wp.vec3d, b: wp.vec3d, c: wp.vec3d, w: wp.vec3d) -> wp.float64:
    g = a * w[0] + b * w[1] + c * w[2] - q
    return wp.dot(g, g)


@wp.func
def _weights(q: wp.vec3d, a: wp.vec3d, b: wp.vec3d, c: wp.vec3d) -> wp.vec3d:
    """Barycentric weights of the closest point of ``abc`` to ``q`` (``closest_on_triangles``)."""
    zero = wp.float64(0.0)
    one = wp.float64(1.0)
    ab = b - a
    ac = c - a
    nrm = wp.cross(ab, ac)
    if wp.dot(nrm, nrm) <= wp.float64(SLIVER) * wp.dot(ab, ab) * wp.dot(ac, ac):
        # sliver: the closest of the sides ab, ac, bc, the first on ties (``_on_sides``)
        t0 = _side(q, a, b)
        t1 = _side(q, a, c)
        t2 = _side(q, b, c)
        side = wp.vec3d(one - t0, t0, zero)
        best = _gap(q, a, b, c, side)
        side1 = wp.vec3d(one - t1, zero, t1)
        g1 = _gap(q, a, b, c, side1)
        if g1 < best:
            side = side1
            best = g1
        side2 = wp.vec3d(zero, one - t2, t2)
        if _gap(q, a, b, c, side2) < best:
            side = side2
        return side
    ap = q - a
    bp = q - b
    cp = q - c
    d1 = wp.dot(ab, ap)
    d2 = wp.dot(ac, ap)
    d3 = wp.dot(ab, bp)
    d4 = wp.dot(ac, bp)
    d5 = wp.dot(ab, cp)
    d6 = wp.dot(ac, cp)
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4
    # the cascade of rayd.core.surface.regions: first test wins
    if d1 <= zero and d2 <= zero:
        return wp.vec3d(one, zero, zero)
    if d3 >= zero and d4 <= d3:
        return wp.vec3d(zero, one, zero)
    if vc <= zero and d1 >= zero and d3 <= zero:
        t = _div(d1, d1 - d3)
        return wp.vec3d(one - t, t, zero)
    if d6 >= zero and d5 <= d6:
        return wp.vec3d(zero, zero, one)
    if vb <= zero and d2 >= zero and d6 <= zero:
        t = _div(d2, d2 - d6)
        return wp.vec3d(one - t, zero, t)
    if va <= zero and (d4 - d3) >= zero and (d5 - d6) >= zero:
        t = _div(d4 - d3, (d4 - d3) + (d5 - d6))
        return wp.vec3d(zero, one - t, t)
    den = va + vb + vc
    if not (den > zero):
        return wp.vec3d(one, zero, zero)  # degenerate face: vertex a, as the engine
    fv = _div(vb, den)
    fw = _div(vc, den)
    return wp.vec3d(one - fv - fw, fv, fw)


@wp.kernel(enable_backward=False)
def _closest_point_fields_kernel(
    points: wp.array(dtype=wp.vec3),
    points_stride: int,
    vertices: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    offsets: wp.array(dtype=wp.int32),
    face_row: wp.array(dtype=wp.int32),
    world: wp.array(dtype=wp.mat44d),
    geometric: int,
    global_prim_id: wp.array(dtype=wp.int32),
    distance: wp.array(dtype=float),
    p: wp.array(dtype=wp.vec3),
    barycentric: wp.array(dtype=wp.vec3),
    geo_n: wp.array(dtype=wp.vec3),
    shape_id: wp.array(dtype=wp.int32),
    prim_id: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    f = global_prim_id[i]
    if f < 0:
        distance[i] = INF
        shape_id[i] = -1
        prim_id[i] = -1
        if geometric != 0:
            p[i] = wp.vec3(0.0, 0.0, 0.0)
            barycentric[i] = wp.vec3(0.0, 0.0, 0.0)
            geo_n[i] = wp.vec3(0.0, 0.0, 0.0)
        return
    # shape: the last one whose first global_prim_id is <= f (searchsorted right, minus 1)
    shape = int(0)
    hi_s = offsets.shape[0]
    while hi_s - shape > 1:
        mid = (shape + hi_s) // 2
        if offsets[mid] <= f:
            shape = mid
        else:
            hi_s = mid
    row = face_row[shape] + f - offsets[shape]
    a = _f64(vertices[indices[3 * row]])
    b = _f64(vertices[indices[3 * row + 1]])
    c = _f64(vertices[indices[3 * row + 2]])
    if world.shape[0] > 0:  # placed in float64, as rayd.torch._geometry.gather places corners
        m = world[shape]
        a = _place(m, a)
        b = _place(m, b)
        c = _place(m, c)
    q = _f64(points[i * points_stride])
    w = _weights(q, a, b, c)
    x = a * w[0] + b * w[1] + c * w[2]
    gap = q - x
    distance[i] = float(wp.sqrt(wp.dot(gap, gap)))
    shape_id[i] = wp.int32(shape)
    prim_id[i] = f - offsets[shape]
    if geometric != 0:
        p[i] = _f32(x)
        barycentric[i] = _f32(w)
        nrm = wp.cross(b - a, c - a)
        length = wp.sqrt(wp.dot(nrm, nrm))
        if length > wp.float64(0.0):
            nrm = nrm / length
        geo_n[i] = _f32(nrm)


def closest_point_fields(
    points: wp.array,
    vertices: wp.array,
    indices: wp.array,
    offsets: wp.array,
    face_row: wp.array,
    global_prim_id: wp.array,
    outputs: list,
    stream: wp.Stream | None = None,
    world: wp.array | None = None,
) -> None:
    """The fields of a closest-point record for fixed winners, one pass, float64 inside.

    Args:
        points: ``wp.vec3`` (N,) or (1,) (broadcast) float32 query points in world space.
        vertices: ``wp.vec3`` (V,) the live float32 vertices; ``indices`` int32 (3 F,).
        offsets: int32 (S,) first ``global_prim_id`` of each shape (ascending; S >= 1).
        face_row: int32 (S,) row of ``indices`` (in faces) of each shape's first face.
        global_prim_id: int32 (N,) the search's winners (-1: none); read only.
        outputs: ``[distance, p, barycentric, geo_n, shape_id, prim_id]`` (N,): float32
            ``distance``, ``wp.vec3`` ``p``, ``barycentric``, ``geo_n`` (or three ``None``
            to skip them), int32 ids. Misses: ``distance = inf``, zeros, ids -1.
        stream: the CUDA stream (``None`` on the CPU).
        world: ``wp.mat44d`` (S,) placement per shape (only the top three rows are
            read), or ``None`` for vertices already in world space.

    References:
        Ericson 2004, "Real-Time Collision Detection", sec. 5.1.5.
    """
    n = global_prim_id.shape[0]
    if n == 0:
        return
    distance, p, barycentric, geo_n, shape_id, prim_id = outputs
    launch_rows(
        _closest_point_fields_kernel,
        n,
        [*per_row(points, n), vertices, indices, offsets, face_row, world, 0 if p is None else 1],
        [global_prim_id, distance, p, barycentric, geo_n, shape_id, prim_id],
        global_prim_id.device,
        stream,
    )
