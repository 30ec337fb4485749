"""Closest-hit search: which triangle each ray hits first (no derivatives).

The continuous outputs (t, p, normals, ...) are recomputed by the frontends from
the winner's live geometry; this module only picks the winner (DESIGN.md,
"Differentiation contract").
"""

from __future__ import annotations

import warp as wp

from rayd.engine import cpu_embree
from rayd.engine.accel import SceneAccel, flat_accel
from rayd.engine.instance_walk import TRACES as _INSTANCE_TRACES
from rayd.engine.instances import instance_max_registers
from rayd.engine.pair_walk import trace_flat_pair, trace_flat_pair_ww, trace_instances_pair, trace_pair
from rayd.engine.rays import RayBatch
from rayd.engine.runtime import launch_rows
from rayd.engine.traversal import SceneView, ray_is_wellformed, trace, trace_flat, trace_instances
from rayd.engine.triangles import TriangleScene
from rayd.engine.wide_walk import trace_flat_wide, trace_flat_wide_q

# Search kernels have no derivatives: skip generating adjoint code (halves the first compile).
wp.set_module_options({"enable_backward": False})


def _search_kernel(trace_fn: wp.Function, max_registers: int = 0) -> wp.Kernel:
    """The search kernel over ``trace_fn`` (each variant compiles only the walks it needs);
    ``max_registers > 0``: CUDA's ``__maxnreg__`` (Warp's ``cuda_max_registers``; ignored on the CPU)."""
    options = {"cuda_max_registers": max_registers} if max_registers > 0 else {}

    @wp.kernel(enable_backward=False, module="unique", **options)
    def _intersect_search_kernel(
        scene: SceneView,
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
        any_hit: int,
        global_prim_id: wp.array(dtype=wp.int32),
    ):
        i = wp.tid()
        winner = int(-1)
        if active[i * active_stride] != wp.uint8(0):
            oi = o[i * o_stride]
            di = d[i * d_stride]
            t0 = tmin[i * tmin_stride]
            t1 = tmax[i * tmax_stride]
            if ray_is_wellformed(oi, di, t0, t1):
                winner = trace_fn(scene, oi, di, t0, t1, ignore[i * ignore_stride], any_hit)
        global_prim_id[i] = wp.int32(winner)

    return _intersect_search_kernel


#: One search kernel per combination of parts a scene has; a kernel that also holds the
#: instance walk needs more registers, which slowed the flat walk on the H200. Made on first
#: use, per walk and register cap (``instances.set_instance_max_registers``).
_SEARCH_TRACES = {"flat": trace_flat, "instances": trace_instances, "both": trace, "flat_pair": trace_flat_pair,
                  "both_pair": trace_pair, "instances_pair": trace_instances_pair, "flat_wide": trace_flat_wide,
                  "flat_wide_q": trace_flat_wide_q,
                  # the shared-stack instance walks (instance_walk.py; RAYD_INSTANCE_WALK)
                  **_INSTANCE_TRACES,
                  # the while-while flat walk (pair_walk.py; RAYD_PAIR_WALK)
                  "flat_pairww": trace_flat_pair_ww}
_SEARCH_KERNELS: dict[tuple[str, int], wp.Kernel] = {}


def search_kernel(walk: str) -> wp.Kernel:
    """The search kernel of ``walk`` (``SceneAccel.search_walk``) under the current register cap."""
    cap = 0 if walk.startswith("flat") else instance_max_registers()
    kernel = _SEARCH_KERNELS.get((walk, cap))
    if kernel is None:
        kernel = _SEARCH_KERNELS[(walk, cap)] = _search_kernel(_SEARCH_TRACES[walk], cap)
    return kernel


def search(
    accel: SceneAccel,
    rays: RayBatch,
    global_prim_id: wp.array,
    any_hit: bool = False,
    stream: wp.Stream | None = None,
) -> None:
    """Write the winning scene-wide face id per ray into ``global_prim_id`` (-1: none).

    Args:
        accel: the scene's acceleration structures.
        rays: the ray batch (arrays of length N, or 1 to broadcast).
        global_prim_id: int32 output of shape (N,).
        any_hit: ``False`` for the closest hit; ``True`` to stop at the first hit
            found (any hit; the id is then *some* blocker, not the closest).
        stream: the CUDA stream to launch on (``None`` on the CPU).

    A hit counts for ``tmin < t < tmax`` (``t`` in multiples of ``|d|``); a face whose
    ``global_prim_id`` equals the ray's ``ignore`` entry is skipped. Rays with a
    NaN/inf component, a zero direction or ``tmax <= tmin``, and inactive rays, are
    misses. The triangle test is watertight (Woop, Benthin, Wald 2013, "Watertight
    Ray/Triangle Intersection", JCGT 2(1)).
    """
    n = global_prim_id.shape[0]
    if n == 0:
        return
    if cpu_embree.usable(accel, n):
        # Embree on all cores; rayd's Warp search for the rays it cannot answer exactly.
        cpu_embree.search(accel, rays, global_prim_id, lambda a, r, out: _warp_search(a, r, out, any_hit, None))
        return
    _warp_search(accel, rays, global_prim_id, any_hit, stream)


def _warp_search(accel: SceneAccel, rays: RayBatch, global_prim_id: wp.array, any_hit: bool,
                 stream: wp.Stream | None) -> None:
    """rayd's Warp search kernel over all rays (CPU launches split across cores)."""
    n = global_prim_id.shape[0]
    walk = accel.search_walk
    if walk == "flat_pair" and getattr(accel.flat, "walk", "ifif") != "ifif":
        walk += accel.flat.walk
    launch_rows(
        search_kernel(walk),
        n,
        [accel.search_view(walk, stream), *rays.launch_args(n), 1 if any_hit else 0],
        [global_prim_id],
        accel.device,
        stream,
    )



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
    """Closest hit on a single :class:`TriangleScene` (face id = ``global_prim_id``).

    A shorthand of :func:`search` for scenes of one mesh without instances or
    disabled shapes: arrays as in :class:`RayBatch` (length N or 1), no face ignored.
    """
    accel = flat_accel(scene)
    search(accel, RayBatch(o, d, tmin, tmax, active, accel.no_ignore), global_prim_id, False, stream)
