"""Closest-point search work per query, device independent: rayd's walks vs Warp's mesh_query_point.

Usage:
    python benchmarks/surface_work.py [--meshes /work/meshes] [--mesh bunny_69k dragon_871k]
        [--points 20000] [--repeats 5] [--json OUT]

For the query points of ``benchmarks/surface.py`` (uniform in the mesh's bounding box
grown by 10 % per side, seed 0), on the CPU:

- counters per query (mean, max): inner nodes expanded, point-box tests, point-triangle
  tests, for rayd's search (``rayd.engine.closest_point.closest_point_work``) in each
  node layout (``warp``: Warp's nodes; ``pair``: rayd's child-pair nodes) and query
  order (``input``, ``morton``), and for a counting mirror of Warp 1.19's
  ``mesh_query_point_no_sign`` (``warp/native/mesh.h``: pop, re-test the node box, push
  both children farther first) over a ``wp.Bvh`` built as ``wp.Mesh`` builds its own
  (SAH on the CPU, 4 faces per leaf, unpadded face boxes). On CUDA ``wp.Mesh`` uses
  LBVH (also 4 per leaf), which has no CPU builder: the mirror is the CPU tree.
- process CPU time (all threads; median of ``--repeats`` after a warm-up) of rayd's
  production search (``closest_point_search``) per layout/order and of Warp's
  ``mesh_query_point_no_sign`` kernel (its winner only, no distance evaluation).

Every rayd configuration must give the same winners (checked; exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402
import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from rayd.engine import closest_point as cp  # noqa: E402
from rayd.engine.bvh_nodes import read_nodes  # noqa: E402

wp.config.quiet = True


@wp.kernel
def _warp_query(mesh: wp.uint64, points: wp.array(dtype=wp.vec3), face: wp.array(dtype=wp.int32)):
    i = wp.tid()
    hit = wp.mesh_query_point_no_sign(mesh, points[i], 1.0e30)
    face[i] = wp.where(hit.result, hit.face, -1)


@wp.func
def _aabb_dsq(p: wp.vec3, lo: wp.vec4, hi: wp.vec4) -> float:
    q = wp.max(wp.max(wp.vec3(lo[0], lo[1], lo[2]) - p, wp.vec3(0.0)), p - wp.vec3(hi[0], hi[1], hi[2]))
    return wp.dot(q, q)


@wp.kernel
def _warp_mirror(lowers: wp.array(dtype=wp.vec4), uppers: wp.array(dtype=wp.vec4),
                 lower_index: wp.array(dtype=wp.vec4i), upper_index: wp.array(dtype=wp.vec4i),
                 prims: wp.array(dtype=wp.int32), root: int, vertices: wp.array(dtype=wp.vec3),
                 indices: wp.array(dtype=wp.int32), points: wp.array(dtype=wp.vec3),
                 stats: wp.array(dtype=wp.int32), face: wp.array(dtype=wp.int32)):
    """Warp 1.19 ``mesh_query_point_no_sign`` (mesh.h) with counters; slivers skipped as Warp does."""
    i = wp.tid()
    p = points[i]
    stack = wp.vector(dtype=wp.int32, length=64)
    stack[0] = root
    count = int(1)
    best = float(1.0e30 * 1.0e30)
    best_face = int(-1)
    nodes = int(0)
    boxes = int(0)
    tris = int(0)
    while count > 0:
        count -= 1
        node = stack[count]
        boxes += 1
        if _aabb_dsq(p, lowers[node], uppers[node]) > best:
            continue
        low = lower_index[node][3]
        if low < 0:
            for slot in range(low & 0x7FFFFFFF, upper_index[node][3] & 0x7FFFFFFF):
                f = prims[slot]
                a = vertices[indices[3 * f]]
                b = vertices[indices[3 * f + 1]]
                c = vertices[indices[3 * f + 2]]
                e0 = b - a
                e1 = c - a
                e2 = c - b
                if wp.length(wp.cross(e0, e1)) / (wp.dot(e0, e0) + wp.dot(e1, e1) + wp.dot(e2, e2)) < 1.0e-6:
                    continue
                tris += 1
                q = cp.closest_on_triangle(p, a, b, c) - p
                dsq = wp.dot(q, q)
                if dsq < best:
                    best = dsq
                    best_face = f
        else:
            nodes += 1
            boxes += 2
            left = low
            right = upper_index[node][3] & 0x7FFFFFFF
            k_left = _aabb_dsq(p, lowers[left], uppers[left])
            k_right = _aabb_dsq(p, lowers[right], uppers[right])
            first = left
            second = right
            k_first = k_left
            k_second = k_right
            if k_left < k_right:  # the nearer child goes on top
                first = right
                second = left
                k_first = k_right
                k_second = k_left
            if k_first < best:
                stack[count] = first
                count += 1
            if k_second < best:
                stack[count] = second
                count += 1
    stats[3 * i] = nodes
    stats[3 * i + 1] = boxes
    stats[3 * i + 2] = tris
    face[i] = best_face


def _cpu_ms(fn, repeats):
    fn()
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        samples.append((time.process_time() - start) * 1e3)
    return float(np.median(samples))


def _summary(stats):
    s = stats.reshape(-1, 3)
    return {k: [float(s[:, j].mean()), int(s[:, j].max())] for j, k in enumerate(("nodes", "boxes", "triangles"))}


def run_mesh(path, args, emit):
    data = np.load(path)
    v, f = data["vertices"].astype(np.float32), data["faces"].astype(np.int64)
    lo, hi = v.min(0), v.max(0)
    grow = 0.1 * (hi - lo)
    pts = np.random.default_rng(0).uniform(lo - grow, hi + grow, (args.points, 3)).astype(np.float32)
    n = len(pts)
    device = wp.get_device("cpu")
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(v), torch.as_tensor(f)))
    scene.build()
    accel = scene._core.accel
    centre = scene._state.centre
    rel = torch.as_tensor(pts, dtype=torch.float64) - (centre if centre is not None else 0)
    q = wp.array(rel.float().numpy(), dtype=wp.vec3, device=device)
    active = wp.ones(1, dtype=wp.uint8, device=device)
    out = wp.empty(n, dtype=wp.int32, device=device)
    stats = wp.empty(3 * n, dtype=wp.int32, device=device)
    base = {"mesh": path.stem, "faces": len(f), "points": n}
    winners = {}
    for layout in ("warp", "pair"):
        for order in ("input", "morton"):
            cp.closest_point_work(accel, q, active, float("inf"), out, stats, order=order, layout=layout)
            winners[(layout, order)] = out.numpy().copy()
            row = {**base, "engine": "rayd", "layout": layout, "order": order, **_summary(stats.numpy())}
            if layout == accel.layout or layout == "warp":
                previous = cp.query_order()
                cp.set_query_order(order)
                try:
                    row["cpu_ms"] = _cpu_ms(lambda: cp._search(accel, q, active, float("inf"), out, None, None,
                                                               layout=layout), args.repeats)
                finally:
                    cp.set_query_order(previous)
            emit(row)
    first = next(iter(winners.values()))
    same = all(np.array_equal(first, w) for w in winners.values())

    wv = wp.array(v, dtype=wp.vec3, device=device)
    wi = wp.array(f.astype(np.int32).ravel(), dtype=wp.int32, device=device)
    mesh = wp.Mesh(points=wv, indices=wi)
    faces = wp.empty(n, dtype=wp.int32, device=device)
    wq = wp.array(pts, dtype=wp.vec3, device=device)
    ms = _cpu_ms(lambda: wp.launch(_warp_query, n, [mesh.id, wq], [faces], device=device), args.repeats)
    tri = v[f]
    bvh = wp.Bvh(wp.array(tri.min(1), dtype=wp.vec3, device=device), wp.array(tri.max(1), dtype=wp.vec3, device=device),
                 constructor="sah", leaf_size=4)
    nodes = read_nodes(bvh, len(f))
    mirror = wp.empty(n, dtype=wp.int32, device=device)
    wp.launch(_warp_mirror, n, [nodes.lowers, nodes.uppers, nodes.lower_index, nodes.upper_index, nodes.primitives,
                                nodes.root, wv, wi, wq], [stats, mirror], device=device)
    emit({**base, "engine": "warp", "layout": "warp-sah-leaf4", "order": "input", **_summary(stats.numpy()),
          "cpu_ms": ms, "same_face_as_rayd": float((faces.numpy() == first).mean()),
          "mirror_same_face_as_warp": float((mirror.numpy() == faces.numpy()).mean())})
    return same


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meshes", type=Path, default=Path("/work/meshes"))
    parser.add_argument("--mesh", nargs="+", default=["bunny_69k", "dragon_871k"])
    parser.add_argument("--points", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    sink = open(args.json, "a") if args.json else None

    def emit(row):
        print(json.dumps(row), flush=True)
        if sink:
            sink.write(json.dumps(row) + "\n")

    ok = all([run_mesh(args.meshes / f"{name}.npz", args, emit) for name in args.mesh])
    if not ok:
        print("rayd configurations disagree on winners", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
