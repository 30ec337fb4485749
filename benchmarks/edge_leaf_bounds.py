"""Where the tested segments of a point search come from: leaf boxes against tighter leaf bounds (CPU, NumPy).

For the ``ploc:8`` tree of each workload and a prefix of its query points, with the final search
radius ``r`` of each query (float64 distance to the edge found, times the walk's ``1 + 2^-10``), counts
per query the segments in leaves that a walk started with radius ``r`` must still test, for several
leaf bounds (the floor for that bound; the tree and its inner nodes unchanged):

* ``aabb``: the leaf's axis-aligned box (today's; ``edge_trees.py --necessary``'s figure);
* ``slab<d>``: the box and one slab (``lo <= n.x <= hi``) along the best of ``d`` fixed directions
  for that leaf (``3``: the axes, i.e. nothing new; ``7``: + the 4 cube diagonals; ``13``: + the 6
  face diagonals), chosen as the thinnest extent of the leaf's endpoints;
* ``pca``: the box and a slab along the leaf's own plane normal (least-variance direction of its
  endpoints; a float3 normal per leaf);
* ``segbox``: every segment's own box (what ``+qs``'s quantised segment boxes approach);
* ``seg``: the segments themselves within ``r`` (the floor of any bound).

Usage::

    python3 benchmarks/edge_leaf_bounds.py --size cpu --points 4096
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


def directions(d: int) -> np.ndarray:
    """``d`` unit directions: the axes, then the cube diagonals, then the face diagonals."""
    dirs = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    if d >= 7:
        dirs += [[1, 1, 1], [1, 1, -1], [1, -1, 1], [-1, 1, 1]]
    if d >= 13:
        dirs += [[1, 1, 0], [1, -1, 0], [1, 0, 1], [1, 0, -1], [0, 1, 1], [0, 1, -1]]
    v = np.array(dirs, np.float64)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def box_gap_sq(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Squared distances, queries x boxes."""
    g = np.maximum(np.maximum(lo[None] - p[:, None], 0.0), p[:, None] - hi[None])
    return (g * g).sum(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["full", "cpu"], default="cpu")
    parser.add_argument("--only", nargs="*", default=["terrain_2M_1M", "sphere_1M_1M"])
    parser.add_argument("--points", type=int, default=4096)
    parser.add_argument("--tree", default="ploc:8")
    args = parser.parse_args()
    wp.config.quiet = True
    dev = "cpu"
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    for name, spec in workloads(args.size).items():
        if name not in args.only:
            continue
        vertices, faces = spec["mesh"]()
        ends = unique_edges(faces)
        builder, leaf = args.tree.split(":")
        bvh = make_tree(wp.array(vertices, dtype=wp.vec3, device=dev), wp.array(ends, dtype=wp.vec2i, device=dev),
                        wp.array(np.ones(len(ends), np.uint8), dtype=wp.uint8, device=dev), builder, int(leaf))
        q = box_points(vertices, spec["points"], seed=7)[:args.points].astype(np.float64)
        counts = wp.zeros(len(q), dtype=wp.vec2i, device=dev)
        out = wp.empty(len(q), dtype=wp.int32, device=dev)
        search.nearest_edge_point(bvh, wp.array(q.astype(np.float32), dtype=wp.vec3, device=dev), one, np.inf, out,
                                  counts=counts)
        tested = counts.numpy()[:, 1].mean()
        ids = out.numpy()
        a, b = vertices[ends[ids, 0]].astype(np.float64), vertices[ends[ids, 1]].astype(np.float64)
        ab = b - a
        t = np.clip(((q - a) * ab).sum(1) / (ab * ab).sum(1), 0, 1)
        r_sq = ((q - a - t[:, None] * ab) ** 2).sum(1) * (1.0 + 1.0 / 1024.0)
        seg = bvh.seg.numpy().astype(np.float64).reshape(-1, 2, 3)
        leaves = bvh._tree.leaves.numpy()
        first, cnt = leaves[:, 1], leaves[:, 2]
        slot_leaf = np.repeat(np.arange(len(leaves)), cnt)
        order = np.argsort(np.repeat(first, cnt) + np.concatenate([np.arange(c) for c in cnt]))
        slot_leaf = slot_leaf[order]  # leaf of each slot
        s_lo, s_hi = seg.min(1), seg.max(1)
        l_lo = np.full((len(leaves), 3), np.inf)
        l_hi = np.full((len(leaves), 3), -np.inf)
        np.minimum.at(l_lo, slot_leaf, s_lo)
        np.maximum.at(l_hi, slot_leaf, s_hi)
        pts = seg.reshape(-1, 3)  # endpoints, slot-major
        pt_leaf = np.repeat(slot_leaf, 2)
        slabs = {}
        for d in (3, 7, 13):
            dirs = directions(d)
            proj = pts @ dirs.T  # endpoints x directions
            lo = np.full((len(leaves), d), np.inf)
            hi = np.full((len(leaves), d), -np.inf)
            np.minimum.at(lo, pt_leaf, proj)
            np.maximum.at(hi, pt_leaf, proj)
            best = np.argmin(hi - lo, 1)
            slabs[f"slab{d}"] = (dirs[best], lo[np.arange(len(leaves)), best], hi[np.arange(len(leaves)), best])
        normals = np.zeros((len(leaves), 3))
        for i in range(len(leaves)):  # the least-variance direction of the leaf's endpoints
            p = pts[2 * first[i]:2 * (first[i] + cnt[i])]
            _, _, vt = np.linalg.svd(p - p.mean(0), full_matrices=True)
            normals[i] = vt[-1]
        off = np.einsum("ij,ij->i", normals[pt_leaf], pts)
        plo = np.full(len(leaves), np.inf)
        phi = np.full(len(leaves), -np.inf)
        np.minimum.at(plo, pt_leaf, off)
        np.maximum.at(phi, pt_leaf, off)
        slabs["pca"] = (normals, plo, phi)
        tot = {k: 0.0 for k in ["aabb", "slab3", "slab7", "slab13", "pca", "segbox", "seg"]}
        chunk = 16
        for s in range(0, len(q), chunk):
            p = q[s:s + chunk]
            rr = r_sq[s:s + chunk, None]
            gap = box_gap_sq(p, l_lo, l_hi)
            inside = gap <= rr
            tot["aabb"] += (inside * cnt[None]).sum()
            for key, (n, lo, hi) in slabs.items():
                x = np.einsum("qj,lj->ql", p, n)
                g = np.maximum(np.maximum(lo[None] - x, 0.0), x - hi[None])
                tot[key] += ((inside & (g * g <= rr)) * cnt[None]).sum()
            tot["segbox"] += (box_gap_sq(p, s_lo, s_hi) <= rr).sum()
            sa, sb = seg[:, 0], seg[:, 1]
            sab = sb - sa
            tt = np.clip(np.einsum("qsj,sj->qs", p[:, None] - sa[None], sab) / (sab * sab).sum(1)[None], 0, 1)
            dd = ((p[:, None] - sa[None] - tt[..., None] * sab[None]) ** 2).sum(-1)
            tot["seg"] += (dd <= rr).sum()
        n = len(q)
        print(f"{name:14s} {args.tree}: walk tests {tested:.1f} segments / query; floors: "
              + "  ".join(f"{k} {v / n:.1f}" for k, v in tot.items()), flush=True)


if __name__ == "__main__":
    main()
