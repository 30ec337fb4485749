"""Cost of rayd.drjit's float64 placement of transformed meshes (session 21, helper drjit21).

Times, on the LLVM backend, a float32 bumpy sphere (``workloads.bumpy_sphere_mesh``)
placed by a float32 ``to_world`` (a rotation and a 3e4 translation):

- ``intersect``: 2^18 float32 rays, ``RayFlags.All``, outputs evaluated (``dr.eval``);
- ``closest_point``: 2^16 float32 points near the surface, outputs evaluated.

With ``--grad`` the vertices and the matrix have gradients enabled and each call also runs
``dr.backward`` of the sum of the float outputs (where valid).

Each is called once to compile, then ``--repeats`` times; prints JSON with the median
wall time (ms) of each. Compare two trees by alternating processes, e.g.

    for i in 1 2 3; do for tree in /tmp/before/src src; do
        PYTHONPATH=$tree python3 benchmarks/drjit_placement.py; done; done
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import drjit as dr
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rayd.drjit as rd  # noqa: E402
from benchmarks.workloads import bumpy_sphere_mesh  # noqa: E402

OFFSET = (1.0e4, -2.0e4, 3.0e4)


def _scene(llvm, rings: int, segments: int, grad: bool):
    v, f = bumpy_sphere_mesh(rings, segments)
    c, s = math.cos(0.3), math.sin(0.3)
    matrix = np.array([[c, -s, 0, OFFSET[0]], [s, c, 0, OFFSET[1]], [0, 0, 1, OFFSET[2]], [0, 0, 0, 1]], np.float32)
    vertices, to_world = llvm.Array3f(*v.T), llvm.Matrix4f(matrix)
    if grad:
        dr.enable_grad(vertices, to_world)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vertices, llvm.Array3u(*f.T.astype(np.uint32)), to_world=to_world))
    scene.build()
    return scene, f.shape[0]


def _median_ms(call, repeats: int) -> float:
    call()  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rays", type=int, default=1 << 18)
    parser.add_argument("--points", type=int, default=1 << 16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--grad", action="store_true")
    args = parser.parse_args()
    llvm = __import__("drjit.llvm.ad", fromlist=["ad"])
    scene, faces = _scene(llvm, 128, 256, args.grad)
    rng = np.random.default_rng(1)
    o = 3.0 * rng.standard_normal((args.rays, 3))
    o = o / np.linalg.norm(o, axis=1, keepdims=True) * 3.0
    d = rng.uniform(-0.5, 0.5, (args.rays, 3)) - o
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    ray = rd.Ray(llvm.Array3f(*(o + OFFSET).astype(np.float32).T), llvm.Array3f(*d.astype(np.float32).T))
    q = rng.standard_normal((args.points, 3))
    q = q / np.linalg.norm(q, axis=1, keepdims=True) * rng.uniform(0.8, 1.2, (args.points, 1))
    points = llvm.Array3f(*(q + OFFSET).astype(np.float32).T)

    def run(fields, valid):
        if args.grad:
            loss = sum(dr.sum(dr.sum(dr.select(valid, f, 0))) for f in fields)
            dr.backward(loss)
        else:
            dr.eval(*fields)

    def intersect():
        hit = scene.intersect(ray, flags=rd.RayFlags.All)
        run((hit.t, hit.p, hit.geo_n, hit.n, hit.barycentric, hit.uv), hit.is_valid())

    def closest():
        near = scene.closest_point(points)
        run((near.distance, near.p, near.barycentric, near.geo_n), near.is_valid())

    print(json.dumps({"src": os.path.dirname(rd.__file__), "faces": faces, "rays": args.rays,
                      "points": args.points, "repeats": args.repeats, "grad": args.grad,
                      "intersect_ms": round(_median_ms(intersect, args.repeats), 2),
                      "closest_point_ms": round(_median_ms(closest, args.repeats), 2)}))


if __name__ == "__main__":
    main()
