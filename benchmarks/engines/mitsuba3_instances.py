"""Mitsuba 3 (3.9.x) on the instances workload: one ``shapegroup``, N ``instance`` shapes.

Used by ``benchmarks/instances.py --mitsuba``. Variant ``cuda_ad_rgb`` on the GPU
(OptiX instance acceleration structure; on an H200 it runs on the SMs) and
``llvm_ad_rgb`` on the CPU (Embree). Metrics map as follows: transform update = set
every ``<instance>.to_world`` parameter + ``params.update()`` (Mitsuba rebuilds its
top-level structure there); closest hit = ``ray_intersect_preliminary`` (t, ids);
any hit = ``ray_test``. The full ``ray_intersect`` (a ``SurfaceInteraction``) is not
timed: through 1,000 instances it dispatches per instance and took 9.8 s per call for
16 k rays on the 2-core CPU (``llvm_ad_rgb``), against 12 ms for the preliminary one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_VARIANTS = {"cuda": "cuda_ad_rgb", "cpu": "llvm_ad_rgb"}


def measure(
    vertices: np.ndarray,
    faces: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    o: np.ndarray,
    d: np.ndarray,
    device: str,
    median_ms: Callable[[Callable[[], None], Callable[[], None]], float],
) -> tuple[dict, np.ndarray]:
    """Mitsuba's figures for the scene; also returns its closest-hit ``t`` (``inf`` on miss).

    ``median_ms(fn, sync)`` times ``fn`` with ``sync`` as the barrier.
    """
    import drjit as dr
    import mitsuba as mi

    mi.set_variant(_VARIANTS[device])
    mesh = mi.Mesh("mesh", vertices.shape[0], faces.shape[0], has_vertex_normals=False, has_vertex_texcoords=False)
    params = mi.traverse(mesh)
    params["vertex_positions"] = mi.Float(vertices.astype(np.float32).ravel())
    params["faces"] = mi.UInt32(faces.astype(np.uint32).ravel())
    params.update()
    group = mi.load_dict({"type": "shapegroup", "mesh": mesh})
    scene_dict: dict = {"type": "scene", "group": group}
    for k in range(first.shape[0]):
        scene_dict[f"i{k}"] = {"type": "instance", "shapegroup": group, "to_world": mi.ScalarTransform4f(first[k])}
    scene = mi.load_dict(scene_dict)
    scene_params = mi.traverse(scene)
    matrices = [[mi.Transform4f(m) for m in first], [mi.Transform4f(m) for m in second]]
    ray = mi.Ray3f(
        o=mi.Point3f(mi.Float(o[:, 0]), mi.Float(o[:, 1]), mi.Float(o[:, 2])),
        d=mi.Vector3f(mi.Float(d[:, 0]), mi.Float(d[:, 1]), mi.Float(d[:, 2])),
    )
    dr.eval(ray)
    dr.sync_thread()
    state = {"k": 0}

    def update() -> None:
        state["k"] ^= 1
        for k, matrix in enumerate(matrices[state["k"]]):
            scene_params[f"i{k}.to_world"] = matrix
        scene_params.update()

    def closest_minimal() -> None:
        pi = scene.ray_intersect_preliminary(ray, coherent=False)
        dr.eval(pi.t, pi.prim_index)

    def any_hit() -> None:
        dr.eval(scene.ray_test(ray))

    figures = {
        "mitsuba_update_all_transforms_ms": median_ms(update, dr.sync_thread),
        "mitsuba_closest_minimal_ms": median_ms(closest_minimal, dr.sync_thread),
        "mitsuba_any_hit_ms": median_ms(any_hit, dr.sync_thread),
        "mitsuba_version": mi.__version__,
        "mitsuba_variant": mi.variant(),
    }
    if state["k"]:  # leave the first placement in place for the agreement check
        update()
    t = np.array(scene.ray_intersect_preliminary(ray).t, dtype=np.float64)
    t[~np.isfinite(t)] = np.inf
    return figures, t
