"""In-process A/B of the float64 off-face rule (session 23, helper offface23): float64 ``intersect`` on the CPU.

One process, the rule switched off and on between calls (``rayd.core.hits.face_frame`` patched to
``None``: the evaluation of main before session 23, bit for bit, apart from the walk-on's extra
``isposinf`` test), calls interleaved A, B, A, B, ..., so the machine's load falls on both alike.
Also counts the rays whose float64 winner the rule drops (walked on). Workloads of
``benchmarks/workloads.py`` (256 k rays; float64 vertices and origins scaled by 0.7, no float32 values).

    PYTHONPATH=src python3 benchmarks/offface64_inproc.py [--rounds 7] [--accel warp|default]
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
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--accel", default="default", choices=["default", "warp"])
    args = parser.parse_args()
    import rayd.torch as rt
    from rayd.core import hits
    from rayd.engine import cpu_embree
    from rayd.flags import RayFlags

    if args.accel == "warp":
        cpu_embree.set_enabled(False)
    rule = hits.face_frame
    out = {"accel": args.accel, "embree": cpu_embree.active()}
    for name, make in (("terrain_C256_S512", lambda: workloads.terrain(256, 512)),
                       ("sphere_64k_256krays", lambda: workloads.sphere(129, 256, 1 << 18))):
        w = make()
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(w.vertices, dtype=torch.float64) * 0.7, torch.tensor(w.faces)))
        scene.build()
        ray = rt.Ray(torch.tensor(w.o, dtype=torch.float64) * 0.7, torch.tensor(w.d, dtype=torch.float64))
        row = {}
        for flags in (RayFlags.All, RayFlags.Minimal):
            times = {"off": [], "on": []}
            for _ in range(2):
                scene.intersect(ray, flags=flags)
            for _ in range(args.rounds):
                for side in ("off", "on"):
                    hits.face_frame = rule if side == "on" else (lambda centre, double: None)
                    start = time.perf_counter()
                    hit = scene.intersect(ray, flags=flags)
                    times[side].append(time.perf_counter() - start)
                    row.setdefault(f"hits_{side}", int(hit.is_valid().sum()))
            hits.face_frame = rule
            row[flags.name] = {side: {"min_s": round(min(v), 4), "median_s": round(statistics.median(v), 4)}
                               for side, v in times.items()}
        hits.face_frame = rule
        # rays whose winner the rule drops: the search's winners, re-evaluated with and without the rule
        from rayd.torch import _trace, _walk_on
        batch, n, gid, r = _trace.trace(scene, "bench", ray, None, None, any_hit=False, widen=True)
        t = _walk_on.t_of(scene, r, batch, gid)
        row["winners"] = int((gid >= 0).sum())
        row["dropped_off_face"] = int(((gid >= 0) & torch.isposinf(t)).sum())
        out[name] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
