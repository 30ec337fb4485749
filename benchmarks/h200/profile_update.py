"""Every CUDA kernel (and its time) of `update_mesh_vertices` + `sync()` and of the edge refit
that the next nearest-edge query triggers (issue 18 "update", issue 11 "edge refit").

    python3 benchmarks/h200/profile_update.py [terrain|sphere]
Also prints the host time of one update+sync (wall, after a device synchronize).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "terrain"
w = workloads.terrain(1024, 2048) if which == "terrain" else workloads.sphere(513, 1024, 1 << 22)
dev = "cuda"
V = torch.tensor(w.vertices, device=dev)
F = torch.tensor(w.faces, device=dev)
sets = [V, V * 1.0001]
scene = rt.Scene(); scene.add_mesh(rt.Mesh(V.clone(), F), dynamic=True); scene.build()
pts = torch.tensor(w.o[:1], device=dev)
scene.nearest_edge(pts)
k = [0]


def update():
    k[0] ^= 1
    scene.update_mesh_vertices(0, sets[k[0]])
    scene.sync()


def update_edges():
    update()
    scene.nearest_edge(pts)


print(which, w.num_triangles, "tris")
for name, fn in {"update_sync": update, "update_sync_edge_refit_1pt": update_edges}.items():
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    print(f"\n== {name}: wall per call {(time.perf_counter() - t0) / 20 * 1e3:.3f} ms")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    ev = [e for e in prof.key_averages() if e.device_type != DeviceType.CPU and e.self_device_time_total > 0]
    total = sum(e.self_device_time_total for e in ev) / 5 / 1e3
    print(f"   GPU time per call {total:.3f} ms (sum of kernels), {sum(e.count for e in ev) / 5:.0f} kernels/memsets per call")
    for e in ev:
        print(f"   {e.count / 5:4.0f} x {e.self_device_time_total / e.count:9.1f} us  {e.key[:100]}")
