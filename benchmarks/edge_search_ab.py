"""Nearest-edge search kernel variants on one device: registers, block size, trees (issue 11).

For the issue-size terrain 2 M / sphere 1 M workloads of ``benchmarks/edges.py`` (1 M points
in the box, Morton-sorted as the engine does from 256 k queries), builds the edge trees of
``--trees`` straight from the edge topology (no triangle BVH) and times the engine point
search (median of ``--reps`` after a warm-up, synchronised) for each
``cuda_max_registers`` value of ``--maxreg`` (0: the compiler's choice) and each block size
of ``--block`` (top-k with ``--k``), with and without per-leaf slabs (``--slab 0 1``). On CUDA it also prints each compiled search kernel's registers per thread
and local memory (``cuFuncGetAttribute``), and it checks that every variant returns the same
edges as the first. ``--seg`` A/Bs the segment test and read of ``engine/edge_segment.py``. One JSON line per
(workload, tree, variant) with ``--json``.

Usage::

    python3 benchmarks/edge_search_ab.py --device cuda --json $OUT/edge_search_ab.jsonl
    python3 benchmarks/edge_search_ab.py --device cpu --size cpu --maxreg 0 --block 256
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine import edge_segment, edge_wide_walk  # noqa: E402
from rayd.engine import nearest_edge as search  # noqa: E402
from rayd.engine import nearest_edge_kernels as kernels  # noqa: E402
from rayd.engine.edges import EdgeBvh  # noqa: E402
from rayd.engine import edge_leaf_slab  # noqa: E402
from rayd.engine.edge_leaf_slab import LeafSlabs  # noqa: E402

from benchmarks.edge_trees import unique_edges  # noqa: E402
from benchmarks.edges import box_points, workloads  # noqa: E402


def search_kernel(bvh, kind: int):
    """The search kernel a ``kind`` query on ``bvh`` launches now (as ``nearest_edge._launch`` picks it, unseeded)."""
    seg = edge_segment.seg_modes(bvh.device)
    wide = getattr(bvh, "wide", None)
    if wide is None:
        return search._kernel(kind, False, seg)
    packed = wide.compressed
    return edge_wide_walk.wide_kernel(kind, False, wide.max_registers, packed is not None,
                                      packed is not None and packed.seg_boxes, False,
                                      0 if getattr(bvh, "leaf_slabs", None) is None else 1 + int(edge_leaf_slab.AHEAD),
                                      seg=seg)


def kernel_resources(device, kernel) -> str:
    """Registers per thread and local bytes of the compiled search ``kernel`` (CUDA only)."""
    if not device.is_cuda:
        return "-"
    try:
        func = kernel.module.get_kernel_hooks(kernel, device).forward
        cuda = ctypes.CDLL("libcuda.so.1")
        regs, local = ctypes.c_int(), ctypes.c_int()
        cuda.cuFuncGetAttribute(ctypes.byref(regs), 4, ctypes.c_void_p(func))  # CU_FUNC_ATTRIBUTE_NUM_REGS
        cuda.cuFuncGetAttribute(ctypes.byref(local), 3, ctypes.c_void_p(func))  # LOCAL_SIZE_BYTES
        return f"{regs.value} regs, {local.value} B local"
    except Exception as error:  # a measurement aid only
        return f"? ({error})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=["full", "cpu"], default="full")
    parser.add_argument("--only", nargs="*", default=["terrain_2M_1M", "sphere_1M_1M"])
    parser.add_argument("--trees", nargs="*", default=["lbvh:8", "sah:4"])
    parser.add_argument("--maxreg", nargs="*", type=int, default=[0, 40, 48, 64, 96])
    parser.add_argument("--block", nargs="*", type=int, default=[256, 128])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--k", type=int, default=1, help="top-k search when > 1")
    parser.add_argument("--seed", nargs="*", type=int, default=[0],
                        help="edge_wide_walk.SEED_STRIDE values (wide point searches; 0: no seed)")
    parser.add_argument("--slab", nargs="*", type=int, default=[0],
                        help="1: with per-leaf oriented slabs (engine/edge_leaf_slab.py; wide trees), 2: the same "
                             "with the node's leaf slabs tested at its visit (edge_leaf_slab.AHEAD), 0: without")
    parser.add_argument("--seg", nargs="*", default=["exact:plain"],
                        help="edge_segment.SEG_TEST:SEG_LOAD pairs (exact|pruned : plain|v2), timed in this order "
                             "(repeat them to interleave); the same edges either way")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    wp.config.quiet = True
    device = wp.get_device("cuda:0" if args.device == "cuda" else args.device)
    saved = kernels.SEARCH_MAX_REGISTERS, search.SEARCH_BLOCK_DIM
    print(f"# edge search variants, device {device}, size {args.size}")
    for name, spec in workloads(args.size).items():
        if name not in args.only:
            continue
        vertices, faces = spec["mesh"]()
        ends = unique_edges(faces)
        pts = wp.array(vertices, dtype=wp.vec3, device=device)
        ev = wp.array(ends, dtype=wp.vec2i, device=device)
        mask = wp.array(np.ones(len(ends), np.uint8), dtype=wp.uint8, device=device)
        q = wp.array(box_points(vertices, spec["points"], seed=7), dtype=wp.vec3, device=device)
        flag = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=device)
        out = wp.empty(spec["points"] if args.k == 1 else (spec["points"], args.k), dtype=wp.int32, device=device)
        for tree_spec in args.trees:
            builder, leaf = tree_spec.split(":")
            builder, _, wide = builder.partition("+")
            start = time.perf_counter()
            bvh = EdgeBvh(pts, ev, mask, builder=builder, leaf_size=int(leaf),
                          wide=(True if wide == "w" else wide) if wide else False)
            wp.synchronize_device(device)
            build_ms = (time.perf_counter() - start) * 1e3
            refits = []
            for _ in range(args.reps + 1):
                start = time.perf_counter()
                bvh.refit()
                wp.synchronize_device(device)
                refits.append((time.perf_counter() - start) * 1e3)
            reference = None
            slabs = LeafSlabs(bvh._tree.leaves, bvh.seg, bvh.slot_id) if any(args.slab) and bvh.wide else None
            for block, maxreg, seed, slab, segmode in [(b, m, s, sl, g) for b in args.block for m in args.maxreg
                                                       for s in args.seed for sl in args.slab for g in args.seg]:
                if True:
                    edge_segment.SEG_TEST, edge_segment.SEG_LOAD = segmode.split(":")
                    edge_segment.SEG_TEST_CPU = edge_segment.SEG_TEST
                    bvh.leaf_slabs = slabs if slab else None
                    edge_leaf_slab.AHEAD = slab == 2
                    edge_wide_walk.SEED_STRIDE = seed
                    kernels.SEARCH_MAX_REGISTERS = maxreg or None
                    search.SEARCH_BLOCK_DIM = block
                    search._KERNELS.clear()
                    if args.k == 1:
                        run = lambda: search.nearest_edge_point(bvh, q, flag, float("inf"), out, None)  # noqa: E731
                    else:
                        run = lambda: search.nearest_edges_point(bvh, q, flag, float("inf"), out, None)  # noqa: E731
                    run()
                    wp.synchronize_device(device)
                    times = []
                    for _ in range(args.reps):
                        start = time.perf_counter()
                        run()
                        wp.synchronize_device(device)
                        times.append((time.perf_counter() - start) * 1e3)
                    got = out.numpy()
                    if reference is None:
                        reference = got.copy()
                    same = bool(np.array_equal(got, reference))
                    row = {"benchmark": "edge_search_ab", "workload": name, "tree": tree_spec, "k": args.k,
                           "built_as": f"{bvh.builder}{'+' + str(wide) if bvh.wide is not None else ''}:{bvh.leaf_size}", "depth": bvh.depth,
                           "build_ms": round(build_ms, 2), "refit_ms": round(statistics.median(refits[1:]), 3),
                           "maxreg": maxreg, "block": block, "search_ms": round(statistics.median(times), 3),
                           "resources": kernel_resources(device, search_kernel(bvh, kernels.POINT if args.k == 1
                                                                               else kernels.TOPK)),
                           "seed": seed, "slab": slab, "seg": segmode, "same_edges": same}
                    print(f"{name:15s} {tree_spec:7s} (built {row['built_as']:7s} depth {bvh.depth:2d}, build "
                          f"{build_ms:8.1f} ms, refit {row['refit_ms']:.3f} ms)  block {block:3d} maxreg {maxreg:3d} "
                          f"seed {seed:3d} slab {slab} "
                          f"seg {segmode:12s}: "
                          f"search {row['search_ms']:8.2f} ms  [{row['resources']}]  same {same}", flush=True)
                    if args.json:
                        with args.json.open("a") as f:
                            f.write(json.dumps(row) + "\n")
            kernels.SEARCH_MAX_REGISTERS, search.SEARCH_BLOCK_DIM = saved
            edge_wide_walk.SEED_STRIDE = 0
            edge_segment.SEG_TEST = edge_segment.SEG_TEST_CPU = "exact"
            edge_segment.SEG_LOAD = "plain"
            search._KERNELS.clear()


if __name__ == "__main__":
    main()
