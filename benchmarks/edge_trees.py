"""Edge-BVH quality, device-independent: nodes visited and segments tested per query, SAH cost.

For each workload of ``benchmarks/edges.py`` and each tree configuration (builder,
leaf size), builds an :class:`rayd.engine.edges.EdgeBvh` straight from the mesh's
edge topology and runs the counting build of the search kernels on a subset of the
queries. Prints one line per (workload, tree) and, with ``--json``, appends JSON lines.

Usage::

    python benchmarks/edge_trees.py --device cpu --size cpu
    python benchmarks/edge_trees.py --device cpu --size full --points 4096   # issue-size trees, few queries
    python benchmarks/edge_trees.py --points 2000 --necessary   # + nodes any correct walk must enter
    python benchmarks/edge_trees.py --rays --profile --trees lbvh:8 sah:4 ploc:4   # + ray counts, work by distance

Workloads: those of ``benchmarks/edges.py`` plus ``scan_dragon`` (the Stanford dragon scan from
``get_meshes.sh``: 871 k triangles with ``--size full``, 48 k with ``--size cpu``; skipped when the
file is missing), its points uniform in its bounding box. ``--rays``: also ray queries from the
same points, random directions, segments of 2 % of the box diagonal. ``--profile``: the point
queries' work by decile of their nearest distance (share of all node visits, mean visits).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine import nearest_edge as search  # noqa: E402
from rayd.engine.edges import EdgeBvh  # noqa: E402

from benchmarks.edges import box_points, make_tree, wide_tag  # noqa: E402
from benchmarks.edges import workloads as edge_workloads  # noqa: E402
from benchmarks.workloads import load_scan  # noqa: E402

#: ``lbvh30a:1`` is the CUDA default tree of commit 811b89b.
TREES = [("lbvh30a", 1), ("lbvh", 1), ("lbvh", 2), ("lbvh", 4), ("lbvh", 8), ("sah", 4)]


def workloads(size: str) -> dict[str, dict]:
    """``benchmarks/edges.py``'s workloads plus the dragon scan when its file is present."""
    out = edge_workloads(size)
    name = "dragon_871k" if size == "full" else "dragon_48k"
    try:
        load_scan(name)
    except FileNotFoundError:
        return out
    out["scan_dragon"] = {"mesh": lambda: load_scan(name), "points": out["terrain_2M_1M"]["points"], "k": 1}
    return out


def unique_edges(faces: np.ndarray) -> np.ndarray:
    """Sorted unique undirected edges of a triangle mesh, (E, 2) int32."""
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [0, 2]], faces[:, [1, 2]]]), 1).astype(np.int64)
    m = int(e.max()) + 1 if len(e) else 1
    key = np.unique(e[:, 0] * m + e[:, 1])  # one int64 key per pair: the rows' lexicographic order, 5-10x faster
    return np.stack([key // m, key % m], 1).astype(np.int32)


def sah_cost(bvh: EdgeBvh, c_node: float = 1.0, c_seg: float = 1.0) -> float:
    """Surface-area cost of the packed tree: sum over nodes of area / root area x cost."""
    box, child = bvh.packed_nodes()
    ext = np.maximum(box[:, :, 1] - box[:, :, 0], 0.0)
    area = ext[..., 0] * ext[..., 1] + ext[..., 1] * ext[..., 2] + ext[..., 2] * ext[..., 0]
    root = bvh.root_box.numpy()
    re = np.maximum(root[1] - root[0], 0.0)
    ra = re[0] * re[1] + re[1] * re[2] + re[2] * re[0]
    count = child[:, 2:]
    cost = np.where(count > 0, c_seg * count, c_node) * np.where(np.isfinite(area), area, 0.0)
    return float(c_node + cost.sum() / ra)


def necessary_nodes(bvh: EdgeBvh, q: np.ndarray, bound_sq: np.ndarray, segments: bool = False):
    """Per query, the internal nodes any correct walk of this tree must enter: those reached
    from the root through children whose box lies within the final search radius
    (``bound_sq``, squared, with the search's relative slack). ``visited / necessary`` is
    the walk order's overhead; the rest is the tree's box quality. With ``segments``, also the
    segments in leaves whose box lies within that radius (what a walk started with the final
    radius, e.g. from a perfect seed, still tests): ``(nodes, segments)``."""
    box, link = bvh.packed_nodes()
    need = np.zeros(len(q), np.int64)
    need_seg = np.zeros(len(q), np.int64)
    front = {0: np.arange(len(q))}
    while front:
        nxt: dict = {}
        for j, idx in front.items():
            need[idx] += 1
            for c in (0, 1):
                if link[j, 2 + c] > 0 and not segments:
                    continue
                lo, hi = box[j, c, 0], box[j, c, 1]
                p = q[idx]
                gap = np.maximum(np.maximum(lo - p, 0.0), p - hi)
                sel = idx[(gap * gap).sum(1) <= bound_sq[idx]]
                if link[j, 2 + c] > 0:
                    if lo[0] <= hi[0]:
                        need_seg[sel] += int(link[j, 2 + c])
                    continue
                if len(sel) and lo[0] <= hi[0]:
                    k = int(link[j, c])
                    nxt[k] = np.concatenate([nxt[k], sel]) if k in nxt else sel
        front = nxt
    return (need, need_seg) if segments else need


def ray_counts(bvh: EdgeBvh, origins: np.ndarray, vertices: np.ndarray, device: str) -> np.ndarray:
    """(visited, tested) per ray query: from ``origins``, random unit directions, length 2 % of the diagonal."""
    rng = np.random.default_rng(11)
    d = rng.normal(size=origins.shape)
    d = (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)
    span = 0.02 * float(np.linalg.norm(vertices.max(0) - vertices.min(0)))
    n = len(origins)
    counts = wp.zeros(n, dtype=wp.vec2i, device=device)
    out = wp.empty(n, dtype=wp.int32, device=device)
    search.nearest_edge_ray(bvh, wp.array(origins, dtype=wp.vec3, device=device), wp.array(d, dtype=wp.vec3,
                            device=device), wp.zeros(1, dtype=float, device=device),
                            wp.array([span], dtype=float, device=device), wp.array(np.ones(1, np.uint8),
                            dtype=wp.uint8, device=device), np.inf, out, counts=counts)
    return counts.numpy()


def distance_profile(visited: np.ndarray, dist: np.ndarray, diag: float) -> list:
    """Per decile of the nearest distance: (upper distance / diagonal, share of all visits, mean visits)."""
    order = np.argsort(dist)
    total = float(visited.sum())
    rows = []
    for part in np.array_split(order, 10):
        rows.append((round(float(dist[part].max()) / diag, 4), round(float(visited[part].sum()) / total, 3),
                     round(float(visited[part].mean()), 1)))
    return rows


def measure(name: str, spec: dict, device: str, builder: str, leaf: int, num_points: int, k_override,
            necessary: bool = False, rays: bool = False, profile: bool = False) -> dict:
    vertices, faces = spec["mesh"]()
    ends = unique_edges(faces)
    dev = device
    pts = wp.array(vertices, dtype=wp.vec3, device=dev)
    ev = wp.array(ends, dtype=wp.vec2i, device=dev)
    mask = wp.array(np.ones(len(ends), np.uint8), dtype=wp.uint8, device=dev)
    start = time.perf_counter()
    bvh = make_tree(pts, ev, mask, builder, leaf)
    wp.synchronize_device(dev)
    build_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    for _ in range(3):
        bvh.refit()
    wp.synchronize_device(dev)
    refit_ms = (time.perf_counter() - start) * 1e3 / 3
    n = min(num_points, spec["points"])
    k = spec["k"] if k_override is None else k_override
    q = wp.array(box_points(vertices, spec["points"], seed=7)[:n], dtype=wp.vec3, device=dev)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    counts = wp.zeros(n, dtype=wp.vec2i, device=dev)
    out = wp.empty((n, k), dtype=wp.int32, device=dev) if k > 1 else wp.empty(n, dtype=wp.int32, device=dev)
    fn = search.nearest_edges_point if k > 1 else search.nearest_edge_point
    fn(bvh, q, one, np.inf, out, counts=counts)
    c = counts.numpy().copy()  # (on the CPU .numpy() shares the memory, and counts is reused below)
    slots = c[:, 1]  # segments whose data a query reads (with quantised segment boxes: their 8-byte boxes)
    packed = bvh.wide.compressed if bvh.wide is not None else None
    seg_boxes = packed is not None and packed.seg_boxes
    if seg_boxes:  # the same walk without the segment boxes reads every slot
        packed.seg_boxes = False
        try:
            fn(bvh, q, one, np.inf, out, counts=counts)
            slots = counts.numpy()[:, 1].copy()
        finally:
            packed.seg_boxes = True
    extra = {}
    if rays:
        r = ray_counts(bvh, q.numpy(), vertices, dev)
        extra["ray_visited_mean"] = round(float(r[:, 0].mean()), 1)
        extra["ray_tested_mean"] = round(float(r[:, 1].mean()), 1)
    if necessary or profile:  # float64 distance to the k-th chosen edge = the final radius
        qn = q.numpy().astype(np.float64)
        ids = out.numpy().reshape(n, -1)[:, -1]
        a, b = vertices[ends[ids, 0]].astype(np.float64), vertices[ends[ids, 1]].astype(np.float64)
        ab = b - a
        t = np.clip(((qn - a) * ab).sum(1) / np.maximum((ab * ab).sum(1), 1e-300), 0.0, 1.0)
        dist_sq = ((qn - a - t[:, None] * ab) ** 2).sum(1)
        bound_sq = dist_sq * (1.0 + 1.0 / 1024.0)
        if profile:
            diag = float(np.linalg.norm(vertices.max(0) - vertices.min(0)))
            extra["profile"] = distance_profile(c[:, 0], np.sqrt(dist_sq), diag)
    if necessary:
        need, need_seg = necessary_nodes(bvh, qn, bound_sq, segments=True)
        extra["necessary_mean"] = round(float(need.mean()), 1)
        extra["necessary_tested_mean"] = round(float(need_seg.mean()), 1)
    fn(bvh, q, one, np.inf, out)  # warm-up of the plain kernel
    wp.synchronize_device(dev)
    start = time.perf_counter()
    fn(bvh, q, one, np.inf, out)
    wp.synchronize_device(dev)
    search_ms = (time.perf_counter() - start) * 1e3
    return {
        "benchmark": "edge_trees", "workload": name, "builder": builder, "leaf_size": leaf, "edges": len(ends),
        "queries": n, "k": k, "depth": bvh.depth, "built_as": f"{bvh.builder}{wide_tag(bvh)}:{bvh.leaf_size}", "inner_nodes": bvh.num_inner, "sah_cost": round(sah_cost(bvh), 2),
        "visited_mean": round(float(c[:, 0].mean()), 1), "tested_mean": round(float(c[:, 1].mean()), 1),
        "visited_p99": int(np.percentile(c[:, 0], 99)),
        "kb_per_query": round(float(c[:, 0].mean() * (64 if bvh.wide is None or packed is not None else 112)
                                    + c[:, 1].mean() * 24 + (slots.mean() * 8 if seg_boxes else 0)) / 1e3, 2),
        "slots_mean": round(float(slots.mean()), 1),
        "wide": bvh.wide is not None, "build_ms": round(build_ms, 1), "refit_ms": round(refit_ms, 2),
        "search_ms": round(search_ms, 2), "device": device, **extra,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", choices=["full", "cpu"], default="cpu")
    parser.add_argument("--points", type=int, default=1 << 14, help="queries per workload (a prefix of its points)")
    parser.add_argument("--trees", nargs="*", help="builder:leaf entries, e.g. lbvh:1 sah:4")
    parser.add_argument("--only", nargs="*", help="workload names")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--necessary", action="store_true",
                        help="also count the nodes any correct walk must enter (NumPy, slow on large trees)")
    parser.add_argument("--rays", action="store_true", help="also count ray queries (see the module docstring)")
    parser.add_argument("--profile", action="store_true", help="work by decile of the nearest distance")
    args = parser.parse_args()
    wp.init()
    trees = [(t.split(":")[0], int(t.split(":")[1])) for t in args.trees] if args.trees else TREES
    print(f"{'workload':20s} {'tree':8s} {'edges':>8s} {'depth':>5s} {'SAH':>7s} {'visited':>8s} {'tested':>8s} "
          f"{'p99 vis':>7s} {'build':>9s} {'refit':>8s} {'search':>9s}")
    warm = wp.array(np.random.default_rng(0).random((64, 3)).astype(np.float32), dtype=wp.vec3, device=args.device)
    warm_e = wp.array(np.stack([np.arange(63), np.arange(1, 64)], 1).astype(np.int32), dtype=wp.vec2i,
                      device=args.device)
    for builder, leaf in trees:  # load every builder's kernels first: build_ms is the build alone
        make_tree(warm, warm_e, wp.array(np.ones(63, np.uint8), dtype=wp.uint8, device=args.device), builder, leaf)
    for name, spec in workloads(args.size).items():
        if args.only and name not in args.only:
            continue
        for builder, leaf in trees:
            row = measure(name, spec, args.device, builder, leaf, args.points, None, args.necessary, args.rays,
                          args.profile)
            row["size"] = args.size
            print(f"{name:20s} {builder + ':' + str(leaf):8s} {row['edges']:8d} {row['depth']:5d} {row['sah_cost']:7.1f} "
                  f"{row['visited_mean']:8.1f} {row['tested_mean']:8.1f} {row['visited_p99']:7d} "
                  f"{row['build_ms']:8.1f}m {row['refit_ms']:7.2f}m {row['search_ms']:8.2f}m  KB {row['kb_per_query']:.1f}"
                  + (f"  necessary {row['necessary_mean']:.1f} / {row['necessary_tested_mean']:.1f} tested"
                     if "necessary_mean" in row else "")
                  + (f"  rays {row['ray_visited_mean']:.1f} / {row['ray_tested_mean']:.1f}" if "ray_visited_mean" in row
                     else ""), flush=True)
            if "profile" in row:
                print("    by distance decile (max dist / diag, share of visits, mean visits): "
                      + " ".join(f"{d:.3f}:{s:.2f}:{m:.0f}" for d, s, m in row["profile"]), flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
