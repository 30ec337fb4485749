"""`update_mesh_vertices` + `sync()` per fused-refit order, one process (issue 18, "update").

    python3 benchmarks/h200/refit_orders.py [--orders climb,climb1,levels] [--builders sah,ploc]

Terrain 2M on CUDA (a small terrain on the CPU): per (builder, order) a new scene, then the
wall time of update+sync (synchronised, median of 30 after 5) and the GPU time of the
refit's kernels alone (CUDA events around ``TriangleScene.refit``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
import torch  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from rayd.engine import refit, triangles  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--orders", default=",".join(refit.ORDERS))
ap.add_argument("--builders", default="sah")
a = ap.parse_args()
cuda = torch.cuda.is_available()
dev = "cuda" if cuda else "cpu"
w = workloads.terrain(1024, 2048) if cuda else workloads.terrain(128, 256)
V = torch.tensor(w.vertices, device=dev)
F = torch.tensor(w.faces, device=dev)
sets = [V, V * 1.0001]


def sync():
    if cuda:
        torch.cuda.synchronize()


print(f"terrain {w.num_triangles:,d} tris on {dev}")
for builder in a.builders.split(","):
    for order in a.orders.split(","):
        triangles.set_bvh_constructor(builder)
        refit.set_refit_order(order)
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(V.clone(), F), dynamic=True)
        scene.build()
        k = 0
        times = []
        for i in range(35):
            k ^= 1
            sync()
            t0 = time.perf_counter()
            scene.update_mesh_vertices(0, sets[k])
            scene.sync()
            sync()
            if i >= 5:
                times.append((time.perf_counter() - t0) * 1e3)
        gpu = float("nan")
        if cuda:
            flat = scene._core.flat
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            g = []
            for _ in range(20):
                ev[0].record()
                flat.refit()
                ev[1].record()
                torch.cuda.synchronize()
                g.append(ev[0].elapsed_time(ev[1]))
            gpu = statistics.median(g[5:])
        print(f"builder {builder:6s} order {order:7s} update+sync {statistics.median(times):7.3f} ms "
              f"(min {min(times):.3f})  refit GPU {gpu:7.3f} ms  fused={scene._core.flat.fused is not None}", flush=True)
        del scene
triangles.set_bvh_constructor("sah")
refit.set_refit_order("climb")
