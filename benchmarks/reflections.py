"""Reflection benchmarks (issue 14) on rayd.torch: trace_reflections vs intersect, find_specular_paths.

1. ``trace_reflections`` with 4 bounces on N incoherent rays (random origins in the scene's
   box, random directions) against four ``intersect`` calls (``RayFlags.Geometric``: the
   fields a bounce needs) on the same rays and scene; the ratio is what issue 14 bounds
   (<= 1.1 on the H200 at N = 1 M). Also against four ``intersect`` calls on the chain's
   own segments (``ratio_vs_segments``: the same searches), and the engine's share
   (``engine_chain_ms``: the chain's one search launch; ``four_engine_search_ms``,
   ``four_segment_search_ms``: the searches of the two baselines without evaluation). Two scenes: the street canyon of
   ``examples/reflections/street_canyon.py`` (98 faces) and a bumpy closed sphere (many
   faces, rays inside: every bounce hits), so BVH depth shows.
2. ``find_specular_paths`` on the street canyon (one transmitter, a grid of receivers,
   order <= 2): time per (source, target) pair and recall against brute force (every face
   sequence of order <= 2 through ``specular_paths``), for several ``num_rays``.

Times: median of ``--repeats`` after a warm-up, synchronised on CUDA. One JSON line per
measurement on stdout (and appended to ``--json FILE``).

Usage::

    python benchmarks/reflections.py --device cpu --rays 65536 --json benchmarks/results/reflections_cpu.jsonl
    python benchmarks/reflections.py --device cuda --rays 1000000 --json $OUT/reflections_h200.jsonl
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rayd.torch as rt  # noqa: E402


def _example():
    spec = importlib.util.spec_from_file_location("street_canyon", ROOT / "examples/reflections/street_canyon.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device, repeats, warmup=2, best=None):
    """Median wall time (ms) of ``fn`` over ``repeats`` after ``warmup`` calls; ``best`` (a dict) gets the minimum."""
    for _ in range(warmup):
        fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        samples.append((time.perf_counter() - start) * 1e3)
    if best is not None:
        best["min"] = min(samples)
    return statistics.median(samples)


def _sphere(rings, segments):
    """A closed UV sphere of radius 1 with a bump (so paths do not repeat), triangles inward and outward alike."""
    theta = np.linspace(0, math.pi, rings + 1)
    phi = np.linspace(0, 2 * math.pi, segments, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    r = 1 + 0.05 * np.sin(5 * t) * np.cos(3 * p)
    v = np.stack([r * np.sin(t) * np.cos(p), r * np.sin(t) * np.sin(p), r * np.cos(t)], -1).reshape(-1, 3)
    f = []
    for i in range(rings):
        for j in range(segments):
            a, b = i * segments + j, i * segments + (j + 1) % segments
            c, d = a + segments, b + segments
            f += [[a, c, b], [b, c, d]]
    return torch.tensor(v), torch.tensor(f)


def _rays(n, lo, hi, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    o = lo + (hi - lo) * torch.rand(n, 3, generator=gen, dtype=torch.float64)
    d = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    return rt.Ray(o.float().to(device), d.float().to(device))


def bench_trace(name, vertices, faces, ray, device, repeats):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices.float().to(device), faces.to(device)))
    scene.build()
    n = ray.o.shape[0]
    chain = scene.trace_reflections(ray, 4)
    mins = [{}, {}, {}, {}]
    trace_ms = _time(lambda: scene.trace_reflections(ray, 4), device, repeats, best=mins[0])
    # Four closest-hit calls on the same rays (the cost of four bounces without the chaining).
    intersect_ms = _time(lambda: [scene.intersect(ray, flags=rt.RayFlags.Geometric) for _ in range(4)], device,
                         repeats, best=mins[1])
    # Where the time goes: the engine's chain search alone (rayd::trace_chain, the B searches
    # of one launch) and four engine searches alone (rayd::ray_search), without any evaluation.
    from rayd.torch import _ops, _trace  # noqa: PLC0415 - internals, for the breakdown only

    _, _, rows, _ = _trace.prepare(scene, "bench", ray, None, None)
    chain_ms = _time(lambda: _ops.trace_chain(scene, "bench", rows, n, 4), device, repeats, best=mins[2])
    search_ms = _time(lambda: [_ops.ray_search(scene, "bench", *rows, n, False) for _ in range(4)], device, repeats,
                      best=mins[3])
    # The same four searches as the chain's: intersect() of each segment, (p_{b-1}, d_out_{b-1})
    # skipping the face left, rays made beforehand. Reflected rays start on a surface, inside
    # the boxes around their origin, so they cost more than the rays from inside the scene.
    segments = [(ray, None, None)] + [(rt.Ray(chain.p[:, b], chain.d_out[:, b]), chain.global_prim_id[:, b] >= 0,
                                       chain.global_prim_id[:, b]) for b in range(3)]
    segment_ms = _time(lambda: [scene.intersect(r, a, rt.RayFlags.Geometric, ignore=g) for r, a, g in segments],
                       device, repeats)
    seg_rows = [_trace.prepare(scene, "bench", r, a, g)[2] for r, a, g in segments]
    segment_search_ms = _time(lambda: [_ops.ray_search(scene, "bench", *r, n, False) for r in seg_rows], device,
                              repeats)
    return {"bench": "trace_reflections_vs_4_intersect", "scene": name, "faces": int(faces.shape[0]), "rays": n,
            "bounces": 4, "trace_ms": trace_ms, "four_intersect_ms": intersect_ms,
            "ratio": trace_ms / intersect_ms, "ratio_of_minima": mins[0]["min"] / mins[1]["min"],
            "four_segment_intersect_ms": segment_ms, "ratio_vs_segments": trace_ms / segment_ms,
            "four_segment_search_ms": segment_search_ms,
            "engine_chain_ms": chain_ms, "four_engine_search_ms": search_ms,
            "trace_min_ms": mins[0]["min"], "four_intersect_min_ms": mins[1]["min"],
            "engine_chain_min_ms": mins[2]["min"], "four_engine_search_min_ms": mins[3]["min"],
            "mean_bounces": float(chain.num_bounces.float().mean())}


def bench_find(example, device, num_rays_list, repeats, quick):
    vertices, faces = example.canyon()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices.to(device), faces.to(device)))
    scene.build()
    tx = torch.tensor([[-2.0, -30.0, 6.0]], dtype=torch.float64, device=device)
    rx = example.receivers(quick).to(device)
    count = faces.shape[0]
    seqs = [[-1, -1]] + [[a, -1] for a in range(count)] + [[a, b] for a in range(count) for b in range(count)
                                                            if a != b]
    seqs = torch.tensor(seqs, device=device)
    start = time.perf_counter()
    truth_paths = scene.specular_paths(tx[0], rx[:, None, :], seqs[None])
    _sync(device)
    brute_ms = (time.perf_counter() - start) * 1e3
    truth = {(t, tuple(seqs[k].tolist())) for t, k in truth_paths.valid.nonzero().tolist()}
    pairs = rx.shape[0]
    rows = []
    for num_rays in num_rays_list:
        def run():
            return rt.find_specular_paths(scene, tx, rx, 2, num_rays=num_rays)

        found = run()
        ms = _time(run, device, repeats, warmup=1)
        got = {(t, tuple(found.prim_sequence[0, t, p].tolist())) for t, p in found.valid[0].nonzero().tolist()}
        rows.append({"bench": "find_specular_paths", "scene": "street_canyon", "faces": count, "pairs": pairs,
                     "max_bounces": 2, "num_rays": num_rays, "total_ms": ms, "ms_per_pair": ms / pairs,
                     "paths_found": len(got), "paths_brute_force": len(truth),
                     "recall": len(got & truth) / max(len(truth), 1), "all_returned_valid": got <= truth,
                     "brute_force_ms": brute_ms, "brute_force_sequences": int(seqs.shape[0])})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rays", type=int, default=65536, help="incoherent rays of the trace benchmark")
    parser.add_argument("--sphere", type=int, default=256, help="sphere rings (faces = 2 * rings * 2 rings)")
    parser.add_argument("--num-rays", default="1000,3000,10000,30000,100000",
                        help="comma-separated num_rays of find_specular_paths")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small receiver grid (15 receivers)")
    parser.add_argument("--json", type=Path, default=None, help="append JSON lines to this file")
    parser.add_argument("--no-find", action="store_true", help="only the trace_reflections benchmark")
    parser.add_argument("--commit", default=None, help="the commit measured (recorded in each line)")
    args = parser.parse_args()
    device = torch.device(args.device)
    from rayd.engine import cpu_embree  # noqa: PLC0415

    meta = {"device": args.device, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "torch_threads": torch.get_num_threads(), "commit": args.commit,
            "cpu_search": (cpu_embree.describe() if device.type == "cpu" else None)}
    example = _example()
    out = []
    v, f = example.canyon()
    lo, hi = torch.tensor([-15.0, -38.0, 0.5], dtype=torch.float64), torch.tensor([15.0, 38.0, 20.0],
                                                                                  dtype=torch.float64)
    out.append(bench_trace("street_canyon", v, f, _rays(args.rays, lo, hi, device), device, args.repeats))
    v, f = _sphere(args.sphere, 2 * args.sphere)
    out.append(bench_trace("bumpy_sphere_inside", v, f, _rays(args.rays, -0.5 * torch.ones(3, dtype=torch.float64),
                                                              0.5 * torch.ones(3, dtype=torch.float64), device),
                           device, args.repeats))
    if not args.no_find:
        out += bench_find(example, device, [int(x) for x in args.num_rays.split(",")], max(1, args.repeats // 2),
                          args.quick)
    for row in out:
        line = json.dumps({**row, **meta})
        print(line)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            with open(args.json, "a") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
