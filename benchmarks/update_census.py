"""What one ``update_mesh_vertices`` + ``sync()`` asks of Warp, and its host time (issue 18, "update").

    PYTHONPATH=$PWD/src python3 benchmarks/update_census.py [--device cpu|cuda] [--size 8] [--layout auto] [--builder auto]
        [--calls 50] [--runs 15] [--meshes 1]

Counts, per update + sync of a terrain of ``2 size^2`` triangles (``--meshes`` copies, all moved), the
Warp calls the scene makes: kernel launches (``wp.launch``, and replays of recorded launches),
fills/memsets, copies, ``wp.from_torch`` views, host reads (``wp.array.numpy``) and waits
(``wp.synchronize_*``); then the host time per update + sync (``time.process_time`` over ``--calls``
calls, p25 / median of ``--runs``). On the CPU the kernels of a small terrain are cheap, so the host
time is the Python side; on CUDA it is what ``sync()`` costs before it returns (it waits once, for
the finite check's flags). Prints one line of counts and one of times.
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402
import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from rayd.engine import triangles  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--size", type=int, default=8)
ap.add_argument("--layout", default="auto")
ap.add_argument("--builder", default="auto")
ap.add_argument("--calls", type=int, default=50)
ap.add_argument("--runs", type=int, default=15)
ap.add_argument("--meshes", type=int, default=1)
a = ap.parse_args()
if a.device == "cpu":
    torch.set_num_threads(1)
triangles.set_bvh_layout(a.layout)
triangles.set_bvh_constructor(a.builder)
w = workloads.terrain(a.size, 2 * a.size)
V = torch.tensor(w.vertices, device=a.device)
F = torch.tensor(w.faces, device=a.device)
sets = [V, V * 1.0001]
scene = rt.Scene()
for _ in range(a.meshes):
    scene.add_mesh(rt.Mesh(V.clone(), F), dynamic=True)
scene.build()


def step(k: int) -> None:
    for m in range(a.meshes):
        scene.update_mesh_vertices(m, sets[k & 1])
    scene.sync()


for k in range(20):  # warm: compiles, recorded launches, scratch
    step(k)
counts: collections.Counter = collections.Counter()
wrapped = []


def wrap(owner, name: str, key: str) -> None:
    real = getattr(owner, name)

    def counting(*args, **kwargs):
        counts[key] += 1
        return real(*args, **kwargs)

    setattr(owner, name, counting)
    wrapped.append((owner, name, real))


wrap(wp, "launch", "wp.launch")
wrap(wp.Launch, "launch", "replay")
wrap(wp.array, "fill_", "fill")
wrap(wp.array, "zero_", "fill")
wrap(wp, "copy", "copy")
wrap(wp, "from_torch", "from_torch")
wrap(wp.array, "numpy", "host read")
for name in ("synchronize_stream", "synchronize_event", "synchronize_device", "synchronize"):
    wrap(wp, name, "wait")
N = 10
for k in range(N):
    step(k)
for owner, name, real in wrapped:
    setattr(owner, name, real)
print(f"{a.device} terrain {w.num_triangles} tris x {a.meshes}, layout {a.layout} builder {a.builder} "
      f"({scene._core.flat.constructor}, wide {scene._core.flat.wide is not None}): per update+sync "
      + ", ".join(f"{key} {counts[key] / N:g}" for key in
                  ("wp.launch", "replay", "fill", "copy", "from_torch", "host read", "wait")), flush=True)
host = []
for _ in range(a.runs):
    if a.device != "cpu":
        torch.cuda.synchronize()
    t0 = time.process_time()
    for k in range(a.calls):
        step(k)
    host.append((time.process_time() - t0) / a.calls * 1e6)
host.sort()
print(f"host us per update+sync (process time): p25 {host[len(host) // 4]:.1f} median {statistics.median(host):.1f}")
