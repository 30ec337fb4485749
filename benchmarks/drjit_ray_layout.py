"""Dr.Jit ray layout: pack Array3f (SoA) into vec3 rows, or let a kernel read components?

rayd.drjit hands rays to the engine as interleaved float32 rows, built by one
``dr.ravel(order='F')`` kernel per 3-vector. This script measures that packing against
(a) the closest-hit search itself and (b) a search kernel that reads the three
component arrays directly (no packing), against its twin on packed rows, on a sphere-like mesh, and prints JSON.

    PYTHONPATH=src python3 benchmarks/drjit_ray_layout.py [--backend llvm|cuda] [--rays N]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import drjit as dr
import numpy as np
import warp as wp

import rayd.drjit as rd
from rayd.drjit import _convert
from rayd.engine.intersect import closest_hit


@wp.kernel
def _soa_search_kernel(
    mesh: wp.uint64,
    ox: wp.array(dtype=float),
    oy: wp.array(dtype=float),
    oz: wp.array(dtype=float),
    dx: wp.array(dtype=float),
    dy: wp.array(dtype=float),
    dz: wp.array(dtype=float),
    global_prim_id: wp.array(dtype=wp.int32),
):
    # Same traversal as the engine's flat closest hit (tmin = 0, tmax = inf), SoA input.
    i = wp.tid()
    o = wp.vec3(ox[i], oy[i], oz[i])
    d = wp.vec3(dx[i], dy[i], dz[i])
    winner = int(-1)
    query = wp.mesh_query_ray(mesh, o, d, 1.0e30)
    if query.result and query.t > 0.0:
        winner = query.face
    global_prim_id[i] = wp.int32(winner)


@wp.kernel
def _aos_search_kernel(
    mesh: wp.uint64,
    o: wp.array(dtype=wp.vec3),
    d: wp.array(dtype=wp.vec3),
    global_prim_id: wp.array(dtype=wp.int32),
):
    # The SoA kernel's twin on packed rows: isolates the layout from the traversal.
    i = wp.tid()
    winner = int(-1)
    query = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e30)
    if query.result and query.t > 0.0:
        winner = query.face
    global_prim_id[i] = wp.int32(winner)


def _grid_sphere(m, n: int):
    theta, phi = np.meshgrid(np.linspace(0, math.pi, n), np.linspace(0, 2 * math.pi, 2 * n), indexing="ij")
    p = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], -1).reshape(-1, 3)
    rows, cols = theta.shape
    i = np.arange(rows - 1)[:, None] * cols + np.arange(cols - 1)[None, :]
    lower, upper = np.stack([i, i + 1, i + cols], -1), np.stack([i + 1, i + cols + 1, i + cols], -1)
    f = np.concatenate([lower, upper]).reshape(-1, 3)
    return m.Array3f(p.astype(np.float32).T), m.Array3u(f.astype(np.uint32).T)


def _time(fn, repeat: int) -> float:
    fn()
    dr.sync_thread()
    wp.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    dr.sync_thread()
    wp.synchronize()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="llvm", choices=["llvm", "cuda"])
    parser.add_argument("--rays", type=int, default=1 << 20)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    m = _convert.module(args.backend, False)
    vertices, faces = _grid_sphere(m, 200)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vertices, faces))
    scene.build()
    device = scene.device
    stream = _convert.current_stream(device)
    # The layout kernels below trace a plain wp.Mesh of the same triangles, so that the
    # SoA/AoS pair differs only in how rays are read.
    wp_device = _convert.to_warp_device(device)
    reference = wp.Mesh(
        points=wp.array(np.array(vertices).T.copy(), dtype=wp.vec3, device=wp_device),
        indices=wp.array(np.array(faces).T.astype(np.int32).ravel(), dtype=wp.int32, device=wp_device),
    )

    rng = np.random.default_rng(0)
    n = args.rays
    o = m.Array3f(np.tile(np.array([[0.0], [0.0], [3.0]], np.float32), (1, n)))
    target = rng.uniform(-1, 1, (3, n)).astype(np.float32)
    d = m.Array3f(target) - o
    dr.eval(o, d)
    out = _convert.empty_int32(n, args.backend)
    out_view = _convert.scalar_view(out, device)
    one_f = _convert.scalar_view(_convert.float32(0.0, args.backend), device)
    inf_f = _convert.scalar_view(_convert.float32(math.inf, args.backend), device)
    one_u8 = _convert.scalar_view(_convert.uint8(None, args.backend), device)

    def pack():
        a, _ = _convert.vec3_view(o + 0, device)  # "+ 0": a fresh array each time, as per query
        b, _ = _convert.vec3_view(d + 0, device)
        return a, b

    def packed_search():
        a, b = pack()
        closest_hit(scene._engine, a, b, one_f, inf_f, one_u8, out_view, stream)  # the engine's own search

    def soa_search():
        oo, dd = o + 0, d + 0
        comps = [_convert.scalar_view(c, device) for c in (oo.x, oo.y, oo.z, dd.x, dd.y, dd.z)]
        wp.launch(_soa_search_kernel, dim=n, inputs=[reference.id, *comps], outputs=[out_view],
                  device=_convert.to_warp_device(device), stream=stream)

    def aos_search():
        a, b = pack()
        wp.launch(_aos_search_kernel, dim=n, inputs=[reference.id, a, b], outputs=[out_view],
                  device=_convert.to_warp_device(device), stream=stream)

    result = {
        "backend": args.backend,
        "rays": n,
        "triangles": dr.width(faces),
        "pack_o_and_d_s": _time(pack, args.repeat),
        "packed_search_s": _time(packed_search, args.repeat),
        "soa_search_s": _time(soa_search, args.repeat),
        "pack_then_same_kernel_s": _time(aos_search, args.repeat),
        "intersect_all_fields_s": _time(lambda: dr.eval(scene.intersect(rd.Ray(o, d)).t), args.repeat),
    }
    result["pack_share_of_packed_search"] = result["pack_o_and_d_s"] / result["packed_search_s"]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
