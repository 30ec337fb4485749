"""Every CUDA kernel of a scene build, an update + sync, and an edge refit + query (issues 11, 18).

    python3 benchmarks/h200/profile_calls.py [terrain|sphere] [--reps 5]
For each call: wall time per call (host clock around the call and a synchronize), the sum of
its kernels' device times (torch.profiler / CUPTI sees Warp's kernels too), and the table of
kernels, so that host gaps (wall - kernels) and the kernels that dominate show side by side.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from benchmarks.edges import box_points  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "terrain"
reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 5
dev = os.environ.get("RAYD_PROFILE_DEVICE", "cuda")  # "cpu": a small smoke run of the script
small = dev == "cpu"
w = (workloads.terrain(64 if small else 1024, 64 if small else 2048) if which == "terrain"
     else workloads.sphere(33 if small else 513, 64 if small else 1024, 1 << (12 if small else 22)))
V = torch.tensor(w.vertices, device=dev)
F = torch.tensor(w.faces, device=dev)


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


def new_scene():
    s = rt.Scene(); s.add_mesh(rt.Mesh(V, F)); s.build()
    return s


scene = new_scene()
V2 = V.clone()
scene_u = rt.Scene(); scene_u.add_mesh(rt.Mesh(V2, F), dynamic=True); scene_u.build()
ray = rt.Ray(torch.tensor(w.o, device=dev), torch.tensor(w.d, device=dev))
scene_u.intersect(ray)
bump = torch.full_like(V2, 1e-4)


def update():
    scene_u.update_mesh_vertices(0, V2 + bump)
    scene_u.sync()


pts = torch.from_numpy(box_points(w.vertices, 1 << (12 if small else 20), seed=7)).to(dev)
scene.nearest_edge(pts)
edges = scene._edges


def edge_refit():
    scene_u.update_mesh_vertices(0, V2 + bump)
    scene_u.sync()
    scene_u.nearest_edge(pts[:1])


scene_u.nearest_edge(pts[:1])
calls = {
    "build (new scene, kernels warm)": new_scene,
    "update_mesh_vertices + sync": update,
    "update + sync + 1-point nearest_edge (edge refit)": edge_refit,
    "nearest_edge, 1M box points": lambda: scene.nearest_edge(pts),
    "nearest_edges k=8, 1M box points": lambda: scene.nearest_edges(pts, 8),
    "intersect All": lambda: scene.intersect(ray),
}
print(which, w.num_triangles, "tris", w.num_rays, "rays")
for name, fn in calls.items():
    for _ in range(2):
        fn()
    sync()
    wall = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); sync(); wall.append((time.perf_counter() - t0) * 1e3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        sync()
    ev = [e for e in prof.key_averages() if e.device_type != DeviceType.CPU and e.self_device_time_total > 0]
    total = sum(e.self_device_time_total for e in ev) / reps / 1e3
    print(f"\n== {name}: wall {statistics.median(wall):.3f} ms (min {min(wall):.3f}), kernels {total:.3f} ms, "
          f"{sum(e.count for e in ev) / reps:.0f} kernels/memsets/copies per call")
    for e in sorted(ev, key=lambda e: -e.self_device_time_total):
        print(f"   {e.count / reps:5.1f} x {e.self_device_time_total / e.count:9.1f} us  {e.key[:110]}")
