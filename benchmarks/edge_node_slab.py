"""Leaf slabs packed in the compressed wide node's own bytes: what they could save (CPU, NumPy; issue 11, part 2
of the 18th session).

A compressed wide node (``engine/edge_wide_q.py``) leaves 71 bits unused: bits 25-31 of its exponent word and the
last two words of its third row. Session 17's per-leaf oriented slabs (``engine/edge_leaf_slab.py``) cut the CPU
segment tests by 21-36 % but read a 16-byte record per leaf (one more dependent load) and were slower on the GPU.
Packed in the node, a slab costs no load, but the bits allow only one direction per wide node (three 5-bit
signed integers, 15 bits) and, per leaf child, its bounds along it as two 7-bit codes on the node's range
(4 x 14 = 56 bits; 71 in all). This script counts, per query, the segments that a walk started with the final
radius ``r`` must test (leaves within ``r``), for the wide tree of ``--tree`` (``ploc+q:8``) and the first
``--points`` Morton-sorted box points:

* ``aabb``: the leaves' boxes alone (today's floor);
* ``pca``: + a slab along each leaf's own least-variance direction, in float64 (session 17's ``edge_leaf_bounds.py``
  figure: the most a per-leaf slab can do);
* ``node``: + a slab along the node's direction (least-variance direction of all its leaf children's endpoints),
  quantised to integer vectors of ``--dbits`` bits a component, the bounds to ``--bbits`` bits on the node's
  range (rounded outwards): what the packed encoding would give;
* ``node_exact``: the same direction, unquantised bounds;
* ``node_grid``: as ``node``, the bounds' codes on the range along ``n`` of the node's own grid box (origin +
  255 scales, what the walk can decode from the node), in steps of a power of two (exact decoding);
* ``node_union``: the same on the range of the union of the decoded children's boxes (max of their ``hi`` codes).

Decision rule of the brief: implement only if ``node`` is more than 20 % below ``aabb`` on both workloads.

Usage::

    python3 benchmarks/edge_node_slab.py --size cpu --points 4096
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

from benchmarks.edge_leaf_bounds import box_gap_sq  # noqa: E402
from benchmarks.edge_trees import unique_edges  # noqa: E402
from benchmarks.edges import box_points, make_tree, workloads  # noqa: E402


def least_variance(p: np.ndarray) -> np.ndarray:
    """Unit least-variance direction of the points ``p`` (n, 3)."""
    _, _, vt = np.linalg.svd(p - p.mean(0), full_matrices=True)
    return vt[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["full", "cpu"], default="cpu")
    parser.add_argument("--only", nargs="*", default=["terrain_2M_1M", "sphere_1M_1M"])
    parser.add_argument("--points", type=int, default=4096)
    parser.add_argument("--tree", default="ploc+q:8")
    parser.add_argument("--dbits", type=int, default=5, help="bits per component of the node direction (signed)")
    parser.add_argument("--bbits", type=int, default=7, help="bits per slab bound code")
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
        assert bvh.wide is not None
        pts_all = box_points(vertices, spec["points"], seed=7)
        q = pts_all[:args.points].astype(np.float64)
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
        links = bvh.wide.nodes.links.numpy().reshape(-1, 8, 4)[:bvh.wide.nodes.count]
        # the leaf children of every wide node: (node, first slot, count)
        rows = []
        for w in range(len(links)):
            for j in range(4):
                r = int(links[w, 6, j])
                if links[w, 7, j] >= 0 and r < 0:
                    code = -1 - r
                    rows.append((w, code >> 3, (code & 7) + 1))
        rows = np.array(rows, np.int64)
        node, first, cnt = rows[:, 0], rows[:, 1], rows[:, 2]
        nleaf = len(rows)
        l_lo = np.stack([seg[f:f + c].reshape(-1, 3).min(0) for f, c in zip(first, cnt)])
        l_hi = np.stack([seg[f:f + c].reshape(-1, 3).max(0) for f, c in zip(first, cnt)])
        own = np.stack([least_variance(seg[f:f + c].reshape(-1, 3)) for f, c in zip(first, cnt)])
        nodes = np.unique(node)
        ndir = {}
        for w in nodes:
            sel = np.nonzero(node == w)[0]
            ndir[w] = least_variance(np.concatenate([seg[first[i]:first[i] + cnt[i]].reshape(-1, 3) for i in sel]))
        nd = np.stack([ndir[w] for w in node])  # per leaf: its node's direction
        m = (1 << (args.dbits - 1)) - 1
        ndq = np.stack([np.round(ndir[w] / np.abs(ndir[w]).max() * m) for w in node])  # integer vectors
        qrows = bvh.wide.compressed.q.numpy().reshape(-1, 4, 4)
        origin = qrows[:, 0, :3].copy().view(np.float32).astype(np.float64)
        ex = qrows[:, 0, 3].astype(np.int64)
        scale = np.stack([((ex >> (8 * k)) & 255).astype(np.uint32) << 23 for k in range(3)], 1).view(np.float32)
        top = origin + 255.0 * scale.astype(np.float64)
        qi = qrows.astype(np.int64) & 0xFFFFFFFF
        hib = np.stack([np.stack([(qi[:, r, c] >> (8 * j)) & 255 for j in range(4)], 1)
                        for r, c in ((1, 1), (1, 3), (2, 1))], 2)  # node, child, axis: hi bytes
        lob = np.stack([(qi[:, 1, 0] >> (8 * j)) & 255 for j in range(4)], 1)
        hib = np.where((lob <= hib[:, :, 0])[..., None], hib, 0)
        union_top = origin + hib.max(1) * scale.astype(np.float64)
        slabs = {}
        for key, dirs, quant in (("pca", own, False), ("node_exact", nd, False), ("node", ndq, True),
                                 ("node_grid", ndq, "grid"), ("node_union", ndq, "union")):
            lo = np.array([(seg[f:f + c].reshape(-1, 3) @ dv).min() for f, c, dv in zip(first, cnt, dirs)])
            hi = np.array([(seg[f:f + c].reshape(-1, 3) @ dv).max() for f, c, dv in zip(first, cnt, dirs)])
            if quant in ("grid", "union"):  # bounds on the node box's range along n, steps a power of two
                steps = (1 << args.bbits) - 1
                o, t = origin[node], (top if quant == "grid" else union_top)[node]
                base = np.minimum(dirs * o, dirs * t).sum(1)
                span = np.abs(dirs * (t - o)).sum(1)
                u = 2.0 ** np.ceil(np.log2(np.maximum(span / steps, 1e-300)))
                cl = np.clip(np.floor((lo - base) / u), 0, steps)
                ch = np.clip(np.ceil((hi - base) / u), 0, steps)
                lo, hi = base + cl * u, base + ch * u
            elif quant:  # bounds on the node's range, rounded outwards
                steps = (1 << args.bbits) - 1
                nlo = {w: lo[node == w].min() for w in nodes}
                nhi = {w: hi[node == w].max() for w in nodes}
                base = np.array([nlo[w] for w in node])
                span = np.maximum(np.array([nhi[w] for w in node]) - base, 1e-300)
                cl = np.floor((lo - base) / span * steps)
                ch = np.ceil((hi - base) / span * steps)
                lo, hi = base + cl * span / steps, base + ch * span / steps
            slabs[key] = (dirs, lo, hi)
        tot = {k: 0.0 for k in ["aabb", "pca", "node_exact", "node", "node_grid", "node_union"]}
        chunk = 32
        for s in range(0, len(q), chunk):
            p = q[s:s + chunk]
            rr = r_sq[s:s + chunk, None]
            inside = box_gap_sq(p, l_lo, l_hi) <= rr
            tot["aabb"] += (inside * cnt[None]).sum()
            for key, (n, lo, hi) in slabs.items():
                x = p @ n.T
                g = np.maximum(np.maximum(lo[None] - x, 0.0), x - hi[None])
                tot[key] += ((inside & (g * g <= rr * (n * n).sum(1)[None])) * cnt[None]).sum()
        n = len(q)
        base = tot["aabb"] / n
        print(f"{name:14s} {args.tree} ({nleaf} leaves, {len(links)} wide nodes): walk tests {tested:.1f} / query; "
              "floors: " + "  ".join(f"{k} {v / n:.1f} ({100 * (v / n / base - 1):+.0f} %)" for k, v in tot.items()),
              flush=True)


if __name__ == "__main__":
    main()
