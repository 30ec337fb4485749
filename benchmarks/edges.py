"""Nearest-edge benchmarks (issue 6): rayd's BVH queries beside a brute-force torch reference.

Workloads (issue 6 sizes with ``--size full``, the H200 targets; ``--size cpu`` scales
them down for a CPU run):

| workload            | mesh                              | queries                             |
|---------------------|-----------------------------------|-------------------------------------|
| terrain_73k_65k     | 192 x 192 height field, 73.7 k tri | 65 536 points in its bounding box   |
| terrain_2M_1M       | 1024 x 1024 height field, 2.1 M tri| 1 M points in its bounding box      |
| sphere_1M_1M        | bumpy UV sphere, 1.05 M tri       | 1 M points inside its box           |
| sphere_1M_1M_top8   | same                              | same points, top-k with k = 8       |

Times are per query batch (search + differentiable evaluation through the public
``Scene.nearest_edge`` / ``nearest_edges``), median of ``--reps`` after a warm-up,
synchronised on CUDA; ``search_ms`` is the engine search alone (``search_sorted_ms`` /
``search_unsorted_ms``: with and without sorting the queries along a Morton curve
first; ``search_ms`` uses the engine's default for the device). The brute-force
reference computes all point-segment distances in chunks (float32 torch ops) and is
run on a subset of the points when the full product would take too long, then scaled
to the full count (``brute_extrapolated``). Prints a table and one JSON line per
workload (``--json FILE`` appends them to a file).

Then, per workload and per edge BVH of ``--trees`` (``builder:leaf_size``; the b3e33b4 tree,
``legacy:1``, was compared on the H200 in ``results/h200-session4/edges_h200.txt`` and its
frozen copy then removed): the BVH build alone
(median of 3 after a warm-up), refit, sorted and unsorted engine search, and the largest
relative error of the chosen edges' float64 distances against the float64 brute force.

Usage::

    python benchmarks/edges.py --device cuda --size full --brute-budget 3 --json $OUT/edges_h200.jsonl
    python benchmarks/edges.py --device cpu --size cpu --json benchmarks/results/edges_cpu.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rayd.torch as rt  # noqa: E402
from rayd.engine import edges as edges_module  # noqa: E402
from rayd.engine import nearest_edge as engine_search  # noqa: E402
from rayd.engine.edges import EdgeBvh  # noqa: E402
from rayd.torch import _convert  # noqa: E402

from benchmarks.workloads import bumpy_sphere_mesh as sphere_mesh  # noqa: E402
from benchmarks.workloads import terrain_mesh  # noqa: E402

#: RayD 0.8 on one H200 (issue 6), and the goals, in ms.
RAYD08_MS = {"terrain_73k_65k": 126.0, "terrain_2M_1M": 1165.0, "sphere_1M_1M": 3090.0, "sphere_1M_1M_top8": 6633.0}
GOAL_MS = {"terrain_73k_65k": 1.0, "terrain_2M_1M": 10.0, "sphere_1M_1M": 20.0, "sphere_1M_1M_top8": 60.0}


def make_tree(pts, ev, mask, builder: str, leaf: int, stream=None) -> EdgeBvh:
    """``EdgeBvh`` of a tree spec: ``sah``, ``lbvh``, ``ploc`` (the builders' defaults),
    ``lbvh<bits><c|a>`` (Morton key bits 30 / 63, ``c`` cubic cells, ``a`` per-axis scaling;
    ``lbvh30a`` is the tree of commit 811b89b), ``lbvhc`` (the LBVH, compact node array) or ``ploc-p<pad>-r<radius>-t<C_T>`` (any of the
    parts: box padding in mean segment lengths, PLOC radius, node cost with ``C_I = 1``); a suffix
    ``+w`` on any of them also builds the 4-wide copy that point and top-k searches then walk
    (``edges.DEFAULT_WIDE``, ``engine/edge_wide.py``), e.g. ``ploc+w:8``; ``+w<R>`` caps its kernels at ``R``
    registers (``edge_wide.WIDE_MAX_REGISTERS``; ``+w0``: the compiler's choice); ``+q`` / ``+q<R>``: the
    same with compressed wide nodes (``engine/edge_wide_q.py``); ``+qs``: and quantised segment boxes."""
    if "+w" in builder or "+q" in builder:
        from rayd.engine import edge_wide

        mode = "qs" if "+qs" in builder else "q" if "+q" in builder else True
        builder, cap = builder.split({"qs": "+qs", "q": "+q", True: "+w"}[mode])
        saved_wide, saved_cap = dict(edges_module.DEFAULT_WIDE), edge_wide.WIDE_MAX_REGISTERS
        edges_module.DEFAULT_WIDE.update(cpu=mode, cuda=mode)
        edge_wide.WIDE_MAX_REGISTERS = int(cap) if cap else saved_cap
        try:
            return make_tree(pts, ev, mask, builder, leaf, stream)
        finally:
            edges_module.DEFAULT_WIDE.update(saved_wide)
            edge_wide.WIDE_MAX_REGISTERS = saved_cap
    if builder.startswith("ploc-"):  # ploc-p<pad>-r<radius>-t<C_T>: PLOC knobs (edges.PLOC_*)
        saved = edges_module.PLOC_PAD, edges_module.PLOC_RADIUS, edges_module.PLOC_COSTS
        for part in builder.split("-")[1:]:
            if part[0] == "p":
                edges_module.PLOC_PAD = float(part[1:])
            elif part[0] == "r":
                edges_module.PLOC_RADIUS = int(part[1:])
            elif part[0] == "t":
                edges_module.PLOC_COSTS = (float(part[1:]), 1.0)
        try:
            return EdgeBvh(pts, ev, mask, stream, builder="ploc", leaf_size=leaf)
        finally:
            edges_module.PLOC_PAD, edges_module.PLOC_RADIUS, edges_module.PLOC_COSTS = saved
    if builder == "lbvhc":  # the LBVH with only its packed internal nodes stored (edges.LBVH_COMPACT)
        saved = edges_module.LBVH_COMPACT
        edges_module.LBVH_COMPACT = True
        try:
            return EdgeBvh(pts, ev, mask, stream, builder="lbvh", leaf_size=leaf)
        finally:
            edges_module.LBVH_COMPACT = saved
    if builder.startswith("lbvh") and builder != "lbvh":
        saved = edges_module.LBVH_KEY_BITS, edges_module.LBVH_CUBIC
        edges_module.LBVH_KEY_BITS, edges_module.LBVH_CUBIC = int(builder[4:-1]), builder[-1] == "c"
        try:
            return EdgeBvh(pts, ev, mask, stream, builder="lbvh", leaf_size=leaf)
        finally:
            edges_module.LBVH_KEY_BITS, edges_module.LBVH_CUBIC = saved
    return EdgeBvh(pts, ev, mask, stream, builder=builder, leaf_size=leaf)


def wide_tag(tree: EdgeBvh) -> str:
    """``+w`` / ``+q`` / ``+qs`` for the tree's wide copy (see :func:`make_tree`), ``""`` for none."""
    wide = getattr(tree, "wide", None)
    if wide is None:
        return ""
    if wide.compressed is None:
        return "+w"
    return "+qs" if wide.compressed.seg_boxes else "+q"


def box_points(vertices: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` uniform points in the mesh's bounding box."""
    lo, hi = vertices.min(0), vertices.max(0)
    return np.random.default_rng(seed).uniform(lo, hi, (n, 3)).astype(np.float32)


def workloads(size: str) -> dict[str, dict]:
    """Mesh/points/k per workload; ``size='cpu'`` shrinks every mesh and batch."""
    if size == "full":
        t73, t2m, sph, n65, n1m = 192, 1024, (513, 1024), 1 << 16, 1 << 20
    else:
        t73, t2m, sph, n65, n1m = 64, 256, (129, 256), 1 << 14, 1 << 16
    return {
        "terrain_73k_65k": {"mesh": lambda: terrain_mesh(t73), "points": n65, "k": 1},
        "terrain_2M_1M": {"mesh": lambda: terrain_mesh(t2m), "points": n1m, "k": 1},
        "sphere_1M_1M": {"mesh": lambda: sphere_mesh(*sph), "points": n1m, "k": 1},
        "sphere_1M_1M_top8": {"mesh": lambda: sphere_mesh(*sph), "points": n1m, "k": 8},
    }


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, reps: int) -> float:
    """Median wall time of ``fn()`` in ms after one warm-up call."""
    fn()
    _sync(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def brute_force(points: torch.Tensor, a: torch.Tensor, b: torch.Tensor, k: int, chunk: int) -> torch.Tensor:
    """Distances of the ``k`` nearest segments per point, all pairs in chunks of points."""
    ab = b - a
    inv = 1.0 / (ab * ab).sum(-1).clamp_min(1e-30)
    out = []
    for start in range(0, points.shape[0], chunk):
        p = points[start : start + chunk, None]
        t = (((p - a) * ab).sum(-1) * inv).clamp(0, 1)
        d = (p - a - t[..., None] * ab).norm(dim=-1)
        out.append(d.topk(k, dim=1, largest=False).values if k > 1 else d.min(1).values[:, None])
    return torch.cat(out)


def run(name: str, spec: dict, device: str, reps: int, brute_budget: float, trees: list) -> list[dict]:
    vertices, faces = spec["mesh"]()
    n, k = spec["points"], spec["k"]
    points = torch.from_numpy(box_points(vertices, n, seed=7)).to(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.from_numpy(vertices).to(device), torch.from_numpy(faces).to(device)))
    start = time.perf_counter()
    scene.build()
    _sync(device)
    build_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    num_edges = scene.edge_topology().num_edges
    stream = _convert.current_stream(scene.device)
    bvh = scene._edges.bvh(stream)
    _sync(device)
    edge_build_ms = (time.perf_counter() - start) * 1e3

    if k == 1:
        query = lambda: scene.nearest_edge(points)  # noqa: E731
        winner = torch.empty(n, dtype=torch.int32, device=device)
        search_fn = engine_search.nearest_edge_point
    else:
        query = lambda: scene.nearest_edges(points, k)  # noqa: E731
        winner = torch.empty((n, k), dtype=torch.int32, device=device)
        search_fn = engine_search.nearest_edges_point
    flag = torch.ones(1, dtype=torch.uint8, device=device)
    pts_w, flag_w, out_w = _convert.vec3_view(points), _convert.scalar_view(flag), _convert.scalar_view(winner)
    search_ms = {
        mode: timed(lambda: search_fn(bvh, pts_w, flag_w, math.inf, out_w, stream, sort_queries=sort), device, reps)
        for mode, sort in (("auto", None), ("unsorted", False), ("sorted", True))
    }
    query_ms = timed(query, device, reps)
    refit_ms = timed(lambda: bvh.refit(stream), device, reps)

    # Brute force on a subset sized to the budget, checked against rayd's distances.
    top = scene.edge_topology()
    v = torch.from_numpy(vertices).to(device)
    a, b = v[top.v[:, 0].long()], v[top.v[:, 1].long()]
    probe = max(64, min(n, 1024))
    chunk = max(1, int(2e7 // num_edges))
    probe_ms = timed(lambda: brute_force(points[:probe], a, b, k, chunk), device, 1)
    per_point = probe_ms / probe
    subset = n if per_point * n <= brute_budget * 1e3 else max(probe, int(brute_budget * 1e3 / per_point))
    start = time.perf_counter()
    reference = brute_force(points[:subset], a, b, k, chunk)
    _sync(device)
    brute_ms = (time.perf_counter() - start) * 1e3 * (n / subset)
    # accuracy: rayd's distances against a float64 brute force on the first points
    check = min(subset, 2048)
    exact = brute_force(points[:check].double(), a.double(), b.double(), k, chunk)
    got = query().distance.reshape(n, k)[:check].double()
    rel = ((got - exact).abs() / exact.clamp_min(1e-12)).max().item()
    del reference

    def ids_error(ids: torch.Tensor) -> float:
        """Max relative error of the distances to the edges ``ids`` [check, k] against ``exact``."""
        ids = ids.reshape(n, k)[:check].long()
        pa, pb = a.double()[ids.clamp_min(0)], b.double()[ids.clamp_min(0)]
        q = points[:check, None].double()
        ab = pb - pa
        t = (((q - pa) * ab).sum(-1) / (ab * ab).sum(-1).clamp_min(1e-300)).clamp(0, 1)
        d = (q - pa - t[..., None] * ab).norm(dim=-1)
        d = torch.where(ids >= 0, d, torch.full_like(d, math.inf))
        return ((d - exact).abs() / exact.clamp_min(1e-12)).max().item()

    tree_rows = []
    for builder, leaf in trees:
        make = lambda: make_tree(bvh.points, bvh.edge_v, bvh.mask, builder, leaf, stream)  # noqa: E731
        fn = search_fn
        tree = make()
        _sync(device)
        builds = []
        for _ in range(3):
            start = time.perf_counter()
            tree = make()
            _sync(device)
            builds.append((time.perf_counter() - start) * 1e3)
        ms = {mode: timed(lambda: fn(tree, pts_w, flag_w, math.inf, out_w, stream, sort_queries=sort), device, reps)
              for mode, sort in (("unsorted", False), ("sorted", True))}
        fn(tree, pts_w, flag_w, math.inf, out_w, stream)
        _sync(device)
        tree_rows.append({
            "benchmark": "edges_tree", "workload": name, "tree": f"{builder}:{leaf}", "edges": int(num_edges),
            "built_as": f"{tree.builder}{wide_tag(tree)}:{tree.leaf_size}", "fallback_error": tree.fallback_error,
            "points": n, "k": k, "depth": tree.depth, "bvh_build_ms": round(statistics.median(builds), 3),
            "refit_ms": round(timed(lambda: tree.refit(stream), device, reps), 3),
            "search_unsorted_ms": round(ms["unsorted"], 3), "search_sorted_ms": round(ms["sorted"], 3),
            "max_rel_distance_err": ids_error(winner.clone()), "goal_h200_ms": GOAL_MS[name],
        })
        del tree
    row = {
        "benchmark": "edges",
        "workload": name,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor() or "cpu",
        "triangles": int(faces.shape[0]),
        "edges": int(num_edges),
        "points": n,
        "k": k,
        "bvh_depth": bvh.depth,
        "build_ms": round(build_ms, 3),
        "edge_build_ms": round(edge_build_ms, 3),
        "refit_ms": round(refit_ms, 3),
        "search_ms": round(search_ms["auto"], 3),
        "search_unsorted_ms": round(search_ms["unsorted"], 3),
        "search_sorted_ms": round(search_ms["sorted"], 3),
        "query_ms": round(query_ms, 3),
        "brute_ms": round(brute_ms, 1),
        "brute_extrapolated": subset < n,
        "brute_points": subset,
        "max_rel_distance_err": rel,
        "rayd08_h200_ms": RAYD08_MS[name],
        "goal_h200_ms": GOAL_MS[name],
        "builder": f"{bvh.builder}:{bvh.leaf_size}",
    }
    return [row] + tree_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=["full", "cpu"], default=None, help="default: full on CUDA, cpu on CPU")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--brute-budget", type=float, default=20.0, help="seconds of brute force per workload")
    parser.add_argument("--only", nargs="*", help="workload names to run")
    parser.add_argument("--json", type=Path, help="append JSON lines to this file")
    parser.add_argument("--trees", nargs="*", default=["lbvh30a:1", "lbvh:1", "lbvh:2", "lbvh:4", "lbvh:8", "sah:4"],
                        help="edge BVHs to compare (builder:leaf_size; see make_tree)")
    args = parser.parse_args()
    device = args.device if args.device != "cuda" else "cuda:0"
    size = args.size or ("full" if device.startswith("cuda") else "cpu")
    rows = []
    header = f"{'workload':20s} {'tri':>9s} {'edges':>9s} {'points':>8s} {'k':>2s} {'search':>9s} {'sorted':>9s} {'query':>9s} " \
             f"{'refit':>8s} {'brute':>10s} {'RayD0.8':>8s} {'goal':>6s}"
    print(f"# rayd nearest-edge benchmark, size={size}, device={device}, torch {torch.__version__}")
    print(header)
    for name, spec in workloads(size).items():
        if args.only and name not in args.only:
            continue
        trees = [(t.split(":")[0], int(t.split(":")[1])) for t in args.trees]
        row, *tree_rows = run(name, spec, device, args.reps, args.brute_budget, trees)
        row["size"] = size
        rows.append(row)
        rows.extend(tree_rows)
        brute = f"{row['brute_ms']:.0f}{'~' if row['brute_extrapolated'] else ''}"
        print(f"{name:20s} {row['triangles']:9d} {row['edges']:9d} {row['points']:8d} {row['k']:2d} "
              f"{row['search_unsorted_ms']:8.2f}m {row['search_sorted_ms']:8.2f}m {row['query_ms']:8.2f}m {row['refit_ms']:7.2f}m {brute:>9s}m "
              f"{row['rayd08_h200_ms']:7.0f}m {row['goal_h200_ms']:5.0f}m  (default tree {row['builder']})", flush=True)
        for t in tree_rows:
            print(f"  tree {t['tree']:11s} built as {t['built_as']:11s} depth {t['depth']:3d}  build {t['bvh_build_ms']:9.2f}m  refit {t['refit_ms']:7.3f}m  "
                  f"search unsorted {t['search_unsorted_ms']:9.2f}m  sorted {t['search_sorted_ms']:9.2f}m  "
                  f"max rel err {t['max_rel_distance_err']:.1e}", flush=True)
    print("# times in ms; '~' = brute force extrapolated from a subset; RayD 0.8 and goals are H200 figures")
    for row in rows:
        line = json.dumps(row)
        print(line)
        if args.json:
            with args.json.open("a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
