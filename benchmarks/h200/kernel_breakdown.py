"""Every CUDA kernel (and its time) of one rayd query call, from torch.profiler (CUPTI) (issue 18).

    python3 benchmarks/h200/kernel_breakdown.py [terrain|sphere] [--rows 25]
Queries: intersect(All), intersect(Minimal), shadow_test, forward+backward of sum(t) -> vertices.
CUPTI sees Warp's and Dr.Jit's kernels too, so the table is the whole GPU side of a call.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "terrain"
rows = int(sys.argv[sys.argv.index("--rows") + 1]) if "--rows" in sys.argv else 25
w = workloads.terrain(1024, 2048) if which == "terrain" else workloads.sphere(513, 1024, 1 << 22)
dev = "cuda"
V = torch.tensor(w.vertices, device=dev)
F = torch.tensor(w.faces, device=dev)
scene = rt.Scene(); scene.add_mesh(rt.Mesh(V, F)); scene.build()
Vg = V.clone().requires_grad_(True)
dscene = rt.Scene(); dscene.add_mesh(rt.Mesh(Vg, F)); dscene.build()
ray = rt.Ray(torch.tensor(w.o, device=dev), torch.tensor(w.d, device=dev))


def fwd_bwd():
    Vg.grad = None  # as benchmarks/engines/rayd_torch.py does: AccumulateGrad steals, no add_ kernel
    t = dscene.intersect(ray, flags=rt.RayFlags.Minimal).t
    loss = torch.where(torch.isfinite(t), t, torch.zeros_like(t)).sum()
    loss.backward()


queries = {
    "intersect_all": lambda: scene.intersect(ray),
    "intersect_minimal": lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal),
    "shadow_test": lambda: scene.shadow_test(ray),
    "forward_backward": fwd_bwd,
}
print(which, w.num_triangles, "tris", w.num_rays, "rays")
for name, fn in queries.items():
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    # Device-side rows only (kernels, memsets, memcpys): an op row (aten::where, _FusedClosest)
    # repeats its kernels' time as its own "self CUDA" time, so summing every row with device
    # time counted each launch twice (session 9's "32 kernels/memsets" for forward+backward).
    ev = [e for e in prof.key_averages() if e.device_type != DeviceType.CPU and e.self_device_time_total > 0]
    total = sum(e.self_device_time_total for e in ev) / 5 / 1e3
    print(f"\n== {name}: GPU time per call {total:.3f} ms (sum of kernels), {sum(e.count for e in ev) / 5:.0f} kernels/memsets per call")
    for e in ev:
        print(f"   {e.count / 5:4.0f} x {e.self_device_time_total / e.count:9.1f} us  {e.key[:100]}")
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows, max_name_column_width=70))
