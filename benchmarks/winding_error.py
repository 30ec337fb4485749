"""Error of the hierarchical winding number against the exact sum, by ``beta`` and expansion order.

Usage:
    python benchmarks/winding_error.py [--meshes /work/meshes] [--mesh bunny bunny_69k dragon_48k]
        [--soups 8] [--points 5000] [--beta 2 3] [--order 1 2 3] [--device cpu] [--json OUT]

For each mesh (and ``--soups`` random triangle soups: 200-4000 triangles of random
size in the unit cube) it draws ``--points`` points uniformly in the bounding box grown
by 20 % per side (soups: [-0.3, 1.3]^3), evaluates ``rayd.engine.winding`` exactly and
hierarchically, and reports the max and mean absolute difference and the time of one
call of each. The exact reference is itself checked against the float64 NumPy sum in
``tests/torch/test_surface_winding.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import rayd.torch as rt  # noqa: E402
from rayd.engine import winding  # noqa: E402
from rayd.torch import _convert  # noqa: E402
from rayd.torch._nearest_edge import _search_rows  # noqa: E402


def _evaluate(scene, points, **options):
    out = torch.empty(points.shape[0], dtype=torch.float64, device=points.device)
    flag = torch.ones(1, dtype=torch.uint8, device=points.device)
    core = scene._core
    start = time.perf_counter()
    winding.winding_number(core.accel, core.table.num_flat_faces,
                           _convert.vec3_view(_search_rows(points, points.shape[:-1], scene._state.centre)),
                           _convert.scalar_view(flag), _convert.scalar_view(out), _convert.current_stream(points.device),
                           **options)
    if points.is_cuda:
        torch.cuda.synchronize()
    return out, (time.perf_counter() - start) * 1e3


def measure(name, v, f, pts, args, emit):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(v, device=args.device), torch.as_tensor(f, device=args.device)))
    scene.build()
    q = torch.as_tensor(pts, dtype=torch.float32, device=args.device)
    _evaluate(scene, q[:16])  # compile and node data outside the timings
    _evaluate(scene, q[:16], exact=True)
    exact, exact_ms = _evaluate(scene, q, exact=True)
    for order in args.order:
        for beta in args.beta:
            fast, ms = _evaluate(scene, q, beta=beta, order=order)
            err = (fast - exact).abs()
            emit({"case": name, "faces": int(len(f)), "points": int(len(pts)), "beta": beta, "order": order,
                  "max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()), "fast_ms": ms,
                  "exact_ms": exact_ms})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meshes", type=Path, default=Path("/work/meshes"))
    parser.add_argument("--mesh", nargs="*", default=["bunny", "bunny_69k", "dragon_48k"])
    parser.add_argument("--soups", type=int, default=8)
    parser.add_argument("--points", type=int, default=5000)
    parser.add_argument("--beta", type=float, nargs="+", default=[2.0, 3.0])
    parser.add_argument("--order", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    out = open(args.json, "w") if args.json else None

    def emit(row):
        rows.append(row)
        print(f"{row['case']:<12} F={row['faces']:>7} beta={row['beta']:<4} order={row['order']} "
              f"max {row['max_abs_err']:.2e} mean {row['mean_abs_err']:.2e}  fast {row['fast_ms']:9.1f} ms  "
              f"exact {row['exact_ms']:9.1f} ms", flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()

    for name in args.mesh:
        path = args.meshes / f"{name}.npz"
        if not path.exists():
            print(f"{path} missing")
            continue
        data = np.load(path)
        v, f = data["vertices"].astype(np.float32), data["faces"].astype(np.int64)
        lo, hi = v.min(0), v.max(0)
        pts = np.random.default_rng(0).uniform(lo - 0.2 * (hi - lo), hi + 0.2 * (hi - lo), (args.points, 3))
        measure(name, v, f, pts, args, emit)
    for seed in range(args.soups):
        rng = np.random.default_rng(seed)
        count, size = int(rng.integers(200, 4000)), rng.uniform(0.02, 0.3)
        tri = rng.uniform(0, 1, (count, 1, 3)) + rng.normal(size=(count, 3, 3)) * size
        measure(f"soup{seed}", tri.reshape(-1, 3).astype(np.float32), np.arange(3 * count).reshape(count, 3),
                rng.uniform(-0.3, 1.3, (args.points, 3)), args, emit)
    if out:
        out.close()
    for order in args.order:
        for beta in args.beta:
            sel = [r for r in rows if r["order"] == order and r["beta"] == beta]
            if sel:
                print(f"order {order} beta {beta}: worst max {max(r['max_abs_err'] for r in sel):.2e}, "
                      f"worst mean {max(r['mean_abs_err'] for r in sel):.2e}")
    return rows


if __name__ == "__main__":
    main()
