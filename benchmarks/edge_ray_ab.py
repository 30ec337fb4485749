"""Ray nearest-edge search: the binary walk against the 4-wide walk, and refit + ray query per step (issue 11).

For the issue-size terrain 2 M / sphere 1 M edge sets (``benchmarks/edges.py``), builds the tree of ``--tree``
(default ``ploc+q:8``, the CUDA default) twice, with the ``split`` refit and with ``--refit`` (default
``wide3``: the wide-tree climb, after which the binary boxes are stale), and times, interleaved in one
process (median of ``--reps`` synchronised calls, each variant once per round):

- ``binary``: ``nearest_edge_ray`` over ``--rays`` rays on the binary walk (``edge_wide_walk.WIDE_RAYS = False``,
  ``nearest_edge_kernels.RAY_BOUND = False``: the path of before the 18th session), on the ``split`` tree;
  ``binary bound`` (``--binary-bound``): the binary walk with the bound pruning (the CPU default's ray walk now);
- ``wide``: the same rays on the 4-wide walk (``WIDE_RAYS = True``), pruned by box bounds (``RAY_KEY = "box"``,
  the default); ``wide center``: the same walk without the bounds (``RAY_KEY = "center"``, the binary walk's rule);
  ``wide r0``: ``wide`` without the 64-register cap (``RAY_MAX_REGISTERS = 0``);
- ``step split+binary``: ``refit()`` then the binary ray query (one update + query step of before);
- ``step <refit>+binary``: ``refit()`` with ``--refit`` then the binary ray query (it first pays the binary climb,
  ``EdgeBvh.binary_boxes``);
- ``step <refit>+wide``: ``refit()`` with ``--refit`` then the wide ray query (no binary box is read);
- ``refit split`` / ``refit <refit>``: the refits alone;
- ``point`` / ``top8``: the default point and top-8 searches of the same points on the ``split`` tree.

Rays: origins uniform in the mesh's box (the points of ``benchmarks/edges.py``), unit directions uniform on
the sphere, ``s in [0, L]`` with ``L = --length`` times the box diagonal (0: half-lines); Morton-sorted by
origin as the engine does from 256 k queries. ``same`` = every variant returns the ids of ``binary``.
``--counts N``: also the per-ray visited nodes / tested segments of both walks on the first N rays (a
counting build of the kernels). One JSON line per workload with ``--json``.

Usage::

    python3 benchmarks/edge_ray_ab.py --device cuda --json $OUT/edge_ray_ab.jsonl
    python3 benchmarks/edge_ray_ab.py --device cpu --size cpu --rays 65536 --reps 3 --counts 4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine import edge_wide_walk  # noqa: E402
from rayd.engine import nearest_edge_kernels as kernels  # noqa: E402
from rayd.engine import nearest_edge as search  # noqa: E402
from rayd.engine.edges import EdgeBvh  # noqa: E402

from benchmarks.edge_trees import unique_edges  # noqa: E402
from benchmarks.edges import box_points, workloads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=["full", "cpu"], default="full")
    parser.add_argument("--only", nargs="*", default=["terrain_2M_1M", "sphere_1M_1M"])
    parser.add_argument("--tree", default="ploc+q:8")
    parser.add_argument("--refit", default="wide3", help="the refit compared with split (edge_refit_fused.REFIT_MODES)")
    parser.add_argument("--rays", type=int, default=1 << 20)
    parser.add_argument("--length", type=float, default=0.02, help="ray segment length / box diagonal (0: half-lines)")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--counts", type=int, default=0)
    parser.add_argument("--no-points", action="store_true", help="skip the point / top-8 timings")
    parser.add_argument("--binary-bound", action="store_true",
                        help="also 'binary bound': the binary walk with the bound pruning (nearest_edge_kernels.RAY_BOUND)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    wp.config.quiet = True
    device = wp.get_device("cuda:0" if args.device == "cuda" else args.device)
    builder, leaf = args.tree.split(":")
    builder, _, wide = builder.partition("+")
    wide = True if wide == "w" else (wide or False)
    print(f"# ray nearest-edge walks, device {device}, size {args.size}, tree {args.tree}, {args.rays} rays, "
          f"length {args.length} x diagonal, refit {args.refit} vs split")
    for name, spec in workloads(args.size).items():
        if name not in args.only:
            continue
        vertices, faces = spec["mesh"]()
        ends = unique_edges(faces)
        pts = wp.array(vertices, dtype=wp.vec3, device=device)
        ev = wp.array(ends, dtype=wp.vec2i, device=device)
        mask = wp.array(np.ones(len(ends), np.uint8), dtype=wp.uint8, device=device)
        trees = {m: EdgeBvh(pts, ev, mask, builder=builder, leaf_size=int(leaf), wide=wide, refit=m)
                 for m in ("split", args.refit)}
        n = args.rays
        rng = np.random.default_rng(11)
        o_np = box_points(vertices, n, seed=7)
        d_np = rng.normal(size=(n, 3))
        d_np = (d_np / np.linalg.norm(d_np, axis=1, keepdims=True)).astype(np.float32)
        span = args.length * float(np.linalg.norm(vertices.max(0) - vertices.min(0))) if args.length > 0 else np.inf
        o = wp.array(o_np, dtype=wp.vec3, device=device)
        d = wp.array(d_np, dtype=wp.vec3, device=device)
        t0 = wp.zeros(1, dtype=float, device=device)
        t1 = wp.array([span], dtype=float, device=device)
        one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=device)
        out = wp.empty(n, dtype=wp.int32, device=device)
        out8 = wp.empty((n, 8), dtype=wp.int32, device=device)

        def ray(tree, wide_rays, key="box", maxreg=None, bound=True):
            kernels.RAY_BOUND = bound
            edge_wide_walk.WIDE_RAYS = wide_rays
            edge_wide_walk.RAY_KEY = key
            edge_wide_walk.RAY_MAX_REGISTERS = maxreg
            search.nearest_edge_ray(tree, o, d, t0, t1, one, np.inf, out)
            edge_wide_walk.RAY_KEY, edge_wide_walk.RAY_MAX_REGISTERS, kernels.RAY_BOUND = "box", None, True

        def step(mode, wide_rays, bound=True):
            trees[mode].refit()
            ray(trees[mode], wide_rays, bound=bound)

        variants = {
            "binary": lambda: ray(trees["split"], False, bound=False),
            "wide": lambda: ray(trees["split"], True),
            "wide center": lambda: ray(trees["split"], True, "center"),
            "wide r0": lambda: ray(trees["split"], True, "box", 0),
            "step split+binary": lambda: step("split", False, False),
            f"step {args.refit}+binary": lambda: step(args.refit, False, False),
            f"step {args.refit}+wide": lambda: step(args.refit, True),
            "refit split": lambda: trees["split"].refit(),
            f"refit {args.refit}": lambda: trees[args.refit].refit(),
        }
        if args.binary_bound:
            variants["binary bound"] = lambda: ray(trees["split"], False)
        if not args.no_points:
            variants["point"] = lambda: search.nearest_edge_point(trees["split"], o, one, np.inf, out)
            variants["top8"] = lambda: search.nearest_edges_point(trees["split"], o, one, np.inf, out8)
        times = {k: [] for k in variants}
        reference, same = None, {}
        for key, fn in variants.items():  # warm-up (kernel loads) and the answers
            fn()
            wp.synchronize_device(device)
            if key in ("binary", "binary bound", "wide", "wide center", "wide r0") or key.startswith("step"):
                got = out.numpy().copy()
                reference = got if reference is None else reference
                same[key] = bool(np.array_equal(got, reference))
        for _ in range(args.reps):
            for key, fn in variants.items():
                wp.synchronize_device(device)
                start = time.perf_counter()
                fn()
                wp.synchronize_device(device)
                times[key].append((time.perf_counter() - start) * 1e3)
        edge_wide_walk.WIDE_RAYS = True
        row = {"benchmark": "edge_ray_ab", "workload": name, "tree": args.tree, "edges": len(ends), "rays": n,
               "length": args.length, "refit_modes": [trees[m].refit_mode for m in trees],
               "ms": {k: round(statistics.median(v), 3) for k, v in times.items()}, "same": same}
        if args.counts:
            m = min(args.counts, n)
            c = wp.zeros(m, dtype=wp.vec2i, device=device)
            for label, wide_rays, key, bound in (("binary", False, "box", False), ("binary_bound", False, "box", True),
                                                 ("wide", True, "box", True), ("wide_center", True, "center", True)):
                kernels.RAY_BOUND = bound
                edge_wide_walk.WIDE_RAYS = wide_rays
                edge_wide_walk.RAY_KEY = key
                search.nearest_edge_ray(trees["split"], wp.array(o_np[:m], dtype=wp.vec3, device=device),
                                        wp.array(d_np[:m], dtype=wp.vec3, device=device), t0, t1, one, np.inf,
                                        wp.empty(m, dtype=wp.int32, device=device), counts=c)
                row["counts_" + label] = [round(float(x), 1) for x in c.numpy().mean(0)]
            edge_wide_walk.WIDE_RAYS, edge_wide_walk.RAY_KEY, kernels.RAY_BOUND = True, "box", True
        ms = row["ms"]
        print(f"{name:15s} {args.tree} ({len(ends)} edges, refits {row['refit_modes']}): "
              + "  ".join(f"{k} {v:.3f}" for k, v in ms.items()), flush=True)
        print(f"{name:15s}   wide/binary {ms['wide'] / ms['binary']:.3f}; wide center/binary "
              f"{ms['wide center'] / ms['binary']:.3f}; step {args.refit}+wide / split+binary "
              f"{ms[f'step {args.refit}+wide'] / ms['step split+binary']:.3f}; same {all(same.values())} {same}"
              + (f"; counts (visited, tested) binary {row['counts_binary']} binary bound {row['counts_binary_bound']} "
                 f"wide {row['counts_wide']} wide center {row['counts_wide_center']}" if args.counts else ""),
              flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
