"""Closest-hit search: which triangle each ray hits first (no derivatives).

The continuous outputs (t, p, normals, ...) are recomputed by the frontends from
the winner's live geometry; this module only picks the winner (DESIGN.md,
"Differentiation contract").
"""

from __future__ import annotations

import warp as wp

from rayd.engine.triangles import TriangleScene


@wp.func
def _ray_is_wellformed(o: wp.vec3, d: wp.vec3, tmin: float, tmax: float) -> bool:
    finite = wp.isfinite(o) and wp.isfinite(d) and wp.isfinite(tmin) and not wp.isnan(tmax)
    if not finite:
        return False
    if d[0] == 0.0 and d[1] == 0.0 and d[2] == 0.0:
        return False
    return tmax > tmin


@wp.kernel
def _intersect_search_kernel(
    mesh: wp.uint64,
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
    global_prim_id: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    winner = int(-1)
    if active[i * active_stride] != wp.uint8(0):
        oi = o[i * o_stride]
        di = d[i * d_stride]
        t0 = tmin[i * tmin_stride]
        t1 = tmax[i * tmax_stride]
        if _ray_is_wellformed(oi, di, t0, t1):
            # Hits count for tmin < t < tmax. Warp's query is closed at 0 and open at
            # max_t, so start at tmin and reject a hit exactly there.
            start = oi
            if t0 != 0.0:
                start = oi + t0 * di
            query = wp.mesh_query_ray(mesh, start, di, t1 - t0)
            if query.result:
                if query.t > 0.0 or (t0 < 0.0 and query.t >= 0.0):
                    winner = query.face
    global_prim_id[i] = wp.int32(winner)


def closest_hit(
    scene: TriangleScene,
    o: wp.array,
    d: wp.array,
    tmin: wp.array,
    tmax: wp.array,
    active: wp.array,
    global_prim_id: wp.array,
    stream: wp.Stream | None = None,
) -> None:
    """Write the closest hit's scene-wide face id per ray into ``global_prim_id``.

    Args:
        scene: the built engine scene.
        o: ray origins, ``wp.array(dtype=wp.vec3)`` of shape (N,) or (1,) (broadcast).
        d: ray directions, same rule as ``o``; need not be unit length.
        tmin: float32 array of shape (N,) or (1,).
        tmax: float32 array of shape (N,) or (1,); ``inf`` for an unbounded ray.
        active: uint8 array of shape (N,) or (1,); 0 marks an inactive ray (a miss).
        global_prim_id: int32 output of shape (N,); ``-1`` on a miss.
        stream: the CUDA stream to launch on (``None`` on the CPU).

    A hit counts for ``tmin < t < tmax`` (``t`` in multiples of ``|d|``). Rays with a
    NaN/inf component, a zero direction or ``tmax <= tmin`` are misses. The triangle
    test is watertight (Woop, Benthin, Wald 2013, "Watertight Ray/Triangle
    Intersection", JCGT 2(1)), as implemented by Warp's ``mesh_query_ray``.
    """
    n = global_prim_id.shape[0]
    if n == 0:
        return

    def stride(a: wp.array) -> int:
        return 0 if a.shape[0] == 1 and n != 1 else 1

    wp.launch(
        _intersect_search_kernel,
        dim=n,
        inputs=[scene.id, o, stride(o), d, stride(d), tmin, stride(tmin), tmax, stride(tmax), active, stride(active)],
        outputs=[global_prim_id],
        device=scene.device,
        stream=stream,
    )
