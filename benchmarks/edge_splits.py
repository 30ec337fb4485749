"""Would split segment references make better edge boxes? CPU counts, no engine change (issue 11).

Hypothesis (benchmarks/README.md, "Issue 11, 12-06, 17th session"): the point searches visit within
4-12 % of the perfect-radius floor, so what is left is box quality, and the axis-aligned box of a
diagonal segment is mostly empty. Early split clipping (Ernst & Greiner 2007) would store a long or
diagonal segment as 2-4 references, each bounding one piece. This script simulates it: each chosen
segment is cut into ``pieces`` sub-segments (new vertices on it, float32), the tree is built over all
pieces, and the counting searches report nodes visited and segments tested per query; the nearest
distance over the pieces is the original's (checked). Which segments are cut (``--rules``):

* ``none``: the original segments (the baseline);
* ``all<k>``: every segment into ``k`` pieces;
* ``diag<k>``: the segments whose box is least filled (box surface over the segment's length squared
  above the median) into ``k`` pieces;
* ``long<k>``: the segments longer than twice the median length into ``k`` pieces.

Usage::

    python3 benchmarks/edge_splits.py --size cpu --points 8192 --trees ploc:8 ploc+q:8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine import nearest_edge as search  # noqa: E402

from benchmarks.edge_trees import unique_edges  # noqa: E402
from benchmarks.edges import box_points, make_tree, workloads  # noqa: E402


def cut(vertices: np.ndarray, ends: np.ndarray, rule: str):
    """``(vertices, ends, parent)`` with the chosen segments cut into pieces (``parent``: original row)."""
    a, b = vertices[ends[:, 0]].astype(np.float64), vertices[ends[:, 1]].astype(np.float64)
    length = np.linalg.norm(b - a, axis=1)
    ext = np.abs(b - a)
    fill = (ext[:, 0] * ext[:, 1] + ext[:, 1] * ext[:, 2] + ext[:, 2] * ext[:, 0]) / np.maximum(length ** 2, 1e-30)
    if rule == "none":
        return vertices, ends, np.arange(len(ends))
    kind, k = rule.rstrip("0123456789"), int(rule[len(rule.rstrip("0123456789")):])
    chosen = {"all": np.ones(len(ends), bool), "diag": fill > np.median(fill),
              "long": length > 2.0 * np.median(length)}[kind]
    rows = np.flatnonzero(chosen)
    new_v = [vertices]
    start = len(vertices)
    out_e, parent = [ends[~chosen]], [np.flatnonzero(~chosen)]
    # inner points: k - 1 per chosen segment
    f = np.arange(1, k) / k
    inner = (a[rows, None] + f[None, :, None] * (b - a)[rows, None]).astype(np.float32).reshape(-1, 3)
    new_v.append(inner)
    ids = start + np.arange(len(rows) * (k - 1)).reshape(len(rows), k - 1)
    chain = np.concatenate([ends[rows, :1], ids, ends[rows, 1:]], 1)
    for j in range(k):
        out_e.append(chain[:, j:j + 2])
        parent.append(rows)
    return np.concatenate(new_v), np.concatenate(out_e).astype(np.int32), np.concatenate(parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["full", "cpu"], default="cpu")
    parser.add_argument("--only", nargs="*", default=["terrain_2M_1M", "sphere_1M_1M"])
    parser.add_argument("--points", type=int, default=8192)
    parser.add_argument("--trees", nargs="*", default=["ploc:8", "ploc+q:8"])
    parser.add_argument("--rules", nargs="*", default=["none", "all2", "all4", "diag2", "diag4", "long2"])
    args = parser.parse_args()
    wp.config.quiet = True
    dev = "cpu"
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    for name, spec in workloads(args.size).items():
        if name not in args.only:
            continue
        vertices, faces = spec["mesh"]()
        ends = unique_edges(faces)
        q = box_points(vertices, spec["points"], seed=7)[:args.points]
        qw = wp.array(q, dtype=wp.vec3, device=dev)
        base = None
        for rule in args.rules:
            v2, e2, parent = cut(vertices, ends, rule)
            for tree in args.trees:
                builder, leaf = tree.split(":")
                bvh = make_tree(wp.array(v2, dtype=wp.vec3, device=dev), wp.array(e2, dtype=wp.vec2i, device=dev),
                                wp.array(np.ones(len(e2), np.uint8), dtype=wp.uint8, device=dev), builder, int(leaf))
                counts = wp.zeros(len(q), dtype=wp.vec2i, device=dev)
                out = wp.empty(len(q), dtype=wp.int32, device=dev)
                search.nearest_edge_point(bvh, qw, one, np.inf, out, counts=counts, sort_queries=True)
                c = counts.numpy().astype(np.float64)
                ids = parent[out.numpy()]
                a, b = vertices[ends[ids, 0]].astype(np.float64), vertices[ends[ids, 1]].astype(np.float64)
                ab = b - a
                t = np.clip(((q - a) * ab).sum(1) / (ab * ab).sum(1), 0, 1)
                d = np.linalg.norm(q - a - t[:, None] * ab, axis=1)
                if base is None:
                    base = d
                err = float(np.max(np.abs(d - base) / np.maximum(base, 1e-30)))
                node_bytes = 64
                kb = (c[:, 0].mean() * node_bytes + c[:, 1].mean() * 24) / 1e3
                print(f"{name:14s} {rule:6s} {tree:9s} refs {len(e2):8d} ({len(e2) / len(ends):.2f}x)  "
                      f"visited {c[:, 0].mean():6.1f}  tested {c[:, 1].mean():6.1f}  KB/query {kb:5.2f}  "
                      f"max rel. distance change {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
