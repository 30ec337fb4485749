"""torch.compile against eager for small rayd.torch training steps (issue 16).

For each query (``intersect``, ``nearest_edge``, ``closest_point``) a loss on a dynamic
UV-sphere mesh is differentiated to its vertex tensor; one training iteration is
``loss.backward()`` (the measured *step*), then an in-place SGD update and ``sync()``
outside the compiled region (docs/compile.md). Reports the compile time (first call
of the compiled loss, backward included), the graph count (``fullgraph=True``: a graph
break would raise) and the median step time eager vs compiled.

    python benchmarks/compile.py                  # CPU, 64 k queries
    python benchmarks/compile.py --device cuda    # 1 M queries
    python benchmarks/compile.py --backend aot_eager --queries 16384 --repeats 10
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch
from torch._dynamo.testing import CompileCounterWithBackend

import rayd.torch as rt


def uv_sphere(n: int, device: str):
    """(V, 3) float32 vertices and (F, 3) faces of a UV sphere with ``n`` rings of ``2 n`` quads."""
    th = torch.linspace(0, math.pi, n + 1, dtype=torch.float64)
    ph = torch.arange(2 * n, dtype=torch.float64) * math.pi / n
    v = torch.stack([th.sin()[:, None] * ph.cos(), th.sin()[:, None] * ph.sin(), th.cos()[:, None].expand(-1, 2 * n)],
                    -1).reshape(-1, 3)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(2 * n), indexing="ij")
    a, b = i * 2 * n + j, i * 2 * n + (j + 1) % (2 * n)
    faces = torch.stack([torch.stack([a, a + 2 * n, b], -1), torch.stack([b, a + 2 * n, b + 2 * n], -1)], 2)
    return v.float().to(device), faces.reshape(-1, 3).to(device)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run(query: str, args) -> dict:
    device = args.device
    v, f = uv_sphere(args.rings, device)
    v = v.clone().requires_grad_()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    scene.edge_topology()  # the edge state exists before compiling
    gen = torch.Generator().manual_seed(0)
    n = args.queries
    o = torch.tensor([0.0, 0.0, -3.0], device=device)
    d = (torch.randn(n, 3, generator=gen) * 0.2 + torch.tensor([0.0, 0.0, 1.0])).to(device)
    points = (torch.randn(n, 3, generator=gen) * 0.7).to(device)
    ray = rt.Ray(o, d)

    def loss_fn():
        if query == "intersect":
            hit = scene.intersect(ray, flags=rt.RayFlags.Geometric)
            t = torch.where(hit.is_valid(), hit.t, torch.zeros_like(hit.t))
            return (t ** 2).sum() + hit.p[..., 0].sum()
        if query == "nearest_edge":
            return scene.nearest_edge(points).distance.sum()
        return scene.closest_point(points).distance.sum()

    def iteration(fn):
        loss = fn()
        loss.backward()
        _sync(device)
        return loss

    def update():
        with torch.no_grad():
            v.sub_(1e-9 * v.grad)  # tiny step: the mesh moves, the winners stay comparable
        v.grad = None
        scene.sync()

    def time_steps(fn):
        times = []
        for k in range(args.warmup + args.repeats):
            _sync(device)
            start = time.perf_counter()
            iteration(fn)
            elapsed = time.perf_counter() - start
            update()
            if k >= args.warmup:
                times.append(elapsed)
        return statistics.median(times)

    eager = time_steps(loss_fn)
    counter = CompileCounterWithBackend(args.backend)
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, backend=counter, fullgraph=True)
    _sync(device)
    start = time.perf_counter()
    iteration(compiled)
    compile_s = time.perf_counter() - start
    update()
    step = time_steps(compiled)
    return {"query": query, "device": device, "backend": args.backend, "queries": n, "faces": int(f.shape[0]),
            "compile_s": compile_s, "graphs": counter.frame_count, "eager_ms": eager * 1e3,
            "compiled_ms": step * 1e3, "speedup": eager / step}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--queries", type=int, default=None, help="rays/points (default 65536 CPU, 1 M CUDA)")
    parser.add_argument("--rings", type=int, default=64, help="sphere resolution (2 * 2 * rings^2 faces)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--only", default="intersect,nearest_edge,closest_point")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per query")
    args = parser.parse_args(argv)
    if args.queries is None:
        args.queries = 1 << 20 if args.device == "cuda" else 1 << 16
    print(f"# rayd compile benchmark: torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"device {args.device}, backend {args.backend}, {args.queries} queries, median of {args.repeats}")
    print(f"{'query':<14} {'faces':>7} {'compile s':>10} {'graphs':>6} {'eager ms':>9} {'compiled ms':>12} "
          f"{'speed-up':>9}")
    for query in args.only.split(","):
        r = run(query, args)
        print(f"{r['query']:<14} {r['faces']:>7} {r['compile_s']:>10.1f} {r['graphs']:>6} {r['eager_ms']:>9.2f} "
              f"{r['compiled_ms']:>12.2f} {r['speedup']:>8.2f}x")
        if args.json:
            print(json.dumps(r))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
