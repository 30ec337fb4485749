"""Where the host time of a CUDA ``build()`` and ``update + sync`` goes: cProfile, Python functions by own time.

    python3 benchmarks/h200/host_cprofile.py [--tris 128] [--reps 40] [--top 35]
A sine terrain of ``--tris`` triangles (rounded to a grid), float32 on cuda: ``--reps`` new scenes built under
cProfile (after 5 warm builds), then ``--reps`` ``update_mesh_vertices`` + ``sync()`` of a built one.  Time spent
waiting on the device shows up in the function that synchronises (``wp.synchronize``, ``numpy()``, ``item``).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import rayd.torch as rt  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--tris", type=int, default=128)
p.add_argument("--reps", type=int, default=40)
p.add_argument("--top", type=int, default=35)
p.add_argument("--device", default="cuda")
a = p.parse_args()
n = max(1, int(round((a.tris / 2) ** 0.5)))
x, y = np.meshgrid(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1))
v = torch.tensor(np.stack([x.ravel(), y.ravel(), 0.1 * np.sin(7 * x.ravel())], 1), dtype=torch.float32, device=a.device)
q = (np.arange(n)[:, None] * (n + 1) + np.arange(n)[None, :]).ravel()
f = torch.tensor(np.concatenate([np.stack([q, q + 1, q + n + 2], 1), np.stack([q, q + n + 2, q + n + 1], 1)]),
                 dtype=torch.int32, device=a.device)


def sync():
    if a.device == "cuda":
        torch.cuda.synchronize()


def new():
    s = rt.Scene()
    s.add_mesh(rt.Mesh(v, f), dynamic=True)
    s.build()
    return s


def show(title, fn):
    for _ in range(5):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(a.reps):
        fn()
    sync()
    wall = (time.perf_counter() - t) / a.reps * 1e3
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(a.reps):
        fn()
    sync()
    pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(a.top)
    print(f"== {title}: {2 * n * n} tris, wall {wall:.3f} ms per call (no profiler), {a.reps} calls profiled")
    print("\n".join(line[:200] for line in s.getvalue().splitlines()[4:]))
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(a.top)
    print(f"-- {title}: by cumulative time")
    print("\n".join(line[:200] for line in s.getvalue().splitlines()[4:]))


show("build", new)
scene = new()
v2 = v.clone()
v2[:, 2] += 0.01


def upd():
    scene.update_mesh_vertices(0, v2)
    scene.sync()


show("update+sync", upd)
