"""Drive rayd's and Warp's closest-hit kernels a few times each for Nsight Compute (issue 18).

    ncu --kernel-name regex:'walk|closest|trace' --launch-skip 2 --launch-count 1 --set full \
        python3 benchmarks/h200/profile_walk.py terrain
Workloads: terrain (2M tris, 4M coherent rays), sphere (1M tris, 4M incoherent rays).
Also prints median wall times (no profiler) so the profile can be matched with run.py's rows.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from benchmarks.engines.warp_mesh import WarpMeshSAH  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "terrain"
w = workloads.terrain(1024, 2048) if which == "terrain" else workloads.sphere(513, 1024, 1 << 22)
dev = "cuda"
V = torch.tensor(w.vertices, device=dev)
F = torch.tensor(w.faces, device=dev)
scene = rt.Scene()
scene.add_mesh(rt.Mesh(V, F))
scene.build()
ray = rt.Ray(torch.tensor(w.o, device=dev), torch.tensor(w.d, device=dev))
eng = WarpMeshSAH("cuda")
eng.load(w)


def timeit(fn, n=10):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


f_rayd = lambda: scene.intersect(ray)  # noqa: E731
f_minimal = lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal)  # noqa: E731
f_warp = lambda: eng.closest()  # noqa: E731
print(which, w.num_triangles, "tris", w.num_rays, "rays")
print("rayd All     %.3f ms" % timeit(f_rayd))
print("rayd Minimal %.3f ms" % timeit(f_minimal))
print("warp SAH     %.3f ms" % timeit(f_warp))
