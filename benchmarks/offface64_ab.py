"""A/B of the float64 off-face rule (session 23, helper offface23): float64 ``intersect`` on the CPU.

Run one side per process, alternating the source trees, e.g.::

    for r in 1 2 3; do
      for tree in /work/main/src /work/wt-offface23/src; do
        PYTHONPATH=$tree python3 benchmarks/offface64_ab.py --label $tree
      done
    done

Each process builds the float64 scene of a workload (float32 vertices times 0.7 in float64, so the
float64 vertices are no float32 values) and float64 rays, runs two warm-up queries (the first on a
geometry runs on Warp, later ones on Embree when it serves the scene), then times ``repeats``
calls of ``scene.intersect(ray)`` (``RayFlags.All``) and prints the minimum and median per workload.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import workloads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import rayd.torch as rt

    out = {"label": args.label, "rayd": rt.__file__}
    for name, make in (("terrain_C256_S512", lambda: workloads.terrain(256, 512)),
                       ("sphere_64k_256krays", lambda: workloads.sphere(129, 256, 1 << 18))):
        w = make()
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(w.vertices, dtype=torch.float64) * 0.7, torch.tensor(w.faces)))
        scene.build()
        ray = rt.Ray(torch.tensor(w.o, dtype=torch.float64) * 0.7, torch.tensor(w.d, dtype=torch.float64))
        for _ in range(2):
            hit = scene.intersect(ray)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            hit = scene.intersect(ray)
            times.append(time.perf_counter() - start)
        out[name] = {"min_s": min(times), "median_s": statistics.median(times),
                     "hits": int(hit.is_valid().sum()), "rays": int(w.o.shape[0])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
