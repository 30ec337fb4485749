"""Edge-BVH refit variants (issue 11): the leaf-climb refit in one or two launches, per tree.

For the issue-size terrain 2 M and sphere 1 M edge sets, builds each tree of ``--trees``
and times ``TreeRefit.refit(split=bool(m))`` for each mode ``m`` of ``--modes`` (0: one
launch, a thread per leaf gathering its segments; 1: a slots launch, then the leaf climb;
:mod:`rayd.engine.tree_refit`): one refit synchronised per call (median of ``--reps``, what
``benchmarks/edges.py`` reports) and ``--reps`` refits back to back then one
synchronisation (per refit). Checks that every mode writes the same packed boxes.

Trees with wide nodes (``ploc+q:8``, ``ploc+qs:8``: ``builder+wide:leaf``) take the modes ``split`` /
``fused`` / ``fused1`` of :mod:`rayd.engine.edge_refit_fused` (the whole ``EdgeBvh.refit``: today's three
launches, the compressed nodes written in the climb after a slots launch, or all in one launch) and
``wide`` / ``wide1`` / ``wide3`` of :mod:`rayd.engine.edge_refit_wide` (the climb on the wide tree itself, after a
slots launch or gathering; the binary boxes refitted only for the check, untimed), on the same tree in
one process; these also check the compressed nodes and segment boxes. ``<mode>+s``: the same with per-leaf
slabs (``engine/edge_leaf_slab.py``: one more launch, or written by the ``wide*`` climb's leaf threads).

Usage::

    python3 benchmarks/edge_refit_ab.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

# RAYD_SRC: another tree's src (an A/B against a baseline checkout; modes 0 / 1 / split / fused / fused1 there)
sys.path.insert(0, os.environ.get("RAYD_SRC") or str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine.edge_refit_fused import REFIT_MODES, FusedRefit  # noqa: E402
try:
    from rayd.engine.edge_refit_wide import WideRefit  # noqa: E402
except ImportError:  # a baseline tree without it (RAYD_SRC)
    WideRefit = None
from rayd.engine.edges import EdgeBvh  # noqa: E402

from benchmarks.edge_trees import unique_edges  # noqa: E402
from benchmarks.edges import workloads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=["full", "cpu"], default="full")
    parser.add_argument("--only", nargs="*", default=["terrain_2M_1M", "sphere_1M_1M"])
    parser.add_argument("--trees", nargs="*", default=["lbvh:8", "lbvh:4", "lbvh:1", "sah:4"])
    parser.add_argument("--modes", nargs="*", default=["0", "1"],
                        help="0 / 1: TreeRefit one / two launches; split / fused / fused1 / wide / wide1 / wide3 / "
                             "wide3l / wideg: "
                             "EdgeBvh.refit "
                             "(wide trees)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    wp.config.quiet = True
    device = wp.get_device("cuda:0" if args.device == "cuda" else args.device)
    print(f"# edge refit variants, device {device}, size {args.size}, rayd from {Path(sys.modules['rayd'].__file__).parent}")
    for name, spec in workloads(args.size).items():
        if name not in args.only:
            continue
        vertices, faces = spec["mesh"]()
        ends = unique_edges(faces)
        pts = wp.array(vertices, dtype=wp.vec3, device=device)
        ev = wp.array(ends, dtype=wp.vec2i, device=device)
        mask = wp.array(np.ones(len(ends), np.uint8), dtype=wp.uint8, device=device)
        for tree_spec in args.trees:
            builder, leaf = tree_spec.split(":")
            builder, _, wide = builder.partition("+")
            bvh = EdgeBvh(pts, ev, mask, builder=builder, leaf_size=int(leaf), wide=(wide or False) if wide != "w" else True)
            tree = bvh._tree
            reference = {}
            fused = {}
            slabs = None
            for spec in args.modes:
                mode, _, extra = spec.partition("+")  # "<mode>+s": with leaf slabs (engine/edge_leaf_slab.py)
                if mode in REFIT_MODES or mode.startswith("wide"):
                    if mode not in REFIT_MODES or bvh.wide is None or bvh.wide.compressed is None:
                        continue
                    if extra == "s" and slabs is None:
                        from rayd.engine.edge_leaf_slab import LeafSlabs

                        slabs = LeafSlabs(tree.leaves, bvh.seg, bvh.slot_id)
                    if mode.startswith("wide") and spec not in fused:
                        fused[spec] = WideRefit(tree, bvh.wide.compressed, bvh.num_edges, mode)
                        fused[spec].slabs = slabs if extra == "s" else None
                    elif mode != "split" and spec not in fused:
                        fused[spec] = FusedRefit(tree, bvh.node_link, bvh.wide.compressed, mode)
                    bvh._fused = fused.get(spec)
                    bvh.leaf_slabs = slabs if extra == "s" else None
                    run = bvh.refit
                else:
                    run = lambda m=mode: tree.refit(pts, ev, mask, bvh.slot_edge, bvh.seg, bvh.slot_id,  # noqa: E731
                                                    bvh.node_box, bvh.root_box, split=bool(int(m)))
                run()
                wp.synchronize_device(device)
                single = []
                for _ in range(args.reps):
                    start = time.perf_counter()
                    run()
                    wp.synchronize_device(device)
                    single.append((time.perf_counter() - start) * 1e3)
                start = time.perf_counter()
                for _ in range(args.reps):
                    run()
                wp.synchronize_device(device)
                batch = (time.perf_counter() - start) * 1e3 / args.reps
                if hasattr(bvh, "binary_boxes"):
                    bvh.binary_boxes()  # refitted here if the mode left them (not timed)
                boxes = bvh.node_box.numpy()
                if mode in REFIT_MODES:
                    c = bvh.wide.compressed
                    boxes = np.concatenate([boxes.view(np.int32).ravel(), c.q.numpy().ravel(), c.segq.numpy().ravel()])
                ref = reference.setdefault(mode in REFIT_MODES, boxes.copy())
                same = bool(np.array_equal(boxes, ref, equal_nan=True))
                if extra == "s":  # and the slabs, the same in every mode
                    got = slabs.slab.numpy()
                    same = same and bool(np.array_equal(got, reference.setdefault("slab", got.copy())))
                row = {"benchmark": "edge_refit_ab", "workload": name, "tree": tree_spec, "edges": len(ends),
                       "leaves": tree.num_leaves, "depth": bvh.depth, "mode": spec,
                       "refit_ms": round(statistics.median(single), 4), "refit_batch_ms": round(batch, 4),
                       "same_boxes": same}
                print(f"{name:15s} {tree_spec:10s} leaves {tree.num_leaves:8d} depth {bvh.depth:2d} mode {spec:7s}: "
                      f"refit {row['refit_ms']:.3f} ms (synchronised), {batch:.3f} ms (back to back)  same {same}",
                      flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
