"""The float64 evaluation with and without the off-face rule (session 23, helper offface23), in one process.

Times ``rayd.torch._intersect.evaluate`` (the op-by-op float64 evaluation of ``intersect``) for the
262,144 winners of ``benchmarks/workloads.py``'s terrain (C256, S512) and sphere (64 k faces, 256 k rays),
float64 vertices and origins scaled by 0.7, with ``face=None`` (before session 23) and with the search
centre (the rule), interleaved over ``rounds``; minimum and median in ms, per ``RayFlags``.

    PYTHONPATH=src python3 benchmarks/offface64_evaluate.py [--rounds 25]
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
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    import rayd.torch as rt
    from rayd.core import hits
    from rayd.flags import RayFlags
    from rayd.torch import _trace
    from rayd.torch._geometry import gather
    from rayd.torch._intersect import evaluate

    out = {"threads": torch.get_num_threads()}
    for name, make in (("terrain_C256_S512", lambda: workloads.terrain(256, 512)),
                       ("sphere_64k_256krays", lambda: workloads.sphere(129, 256, 1 << 18))):
        w = make()
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(w.vertices, dtype=torch.float64) * 0.7, torch.tensor(w.faces)))
        scene.build()
        ray = rt.Ray(torch.tensor(w.o, dtype=torch.float64) * 0.7, torch.tensor(w.d, dtype=torch.float64))
        _, _, gid, _ = _trace.trace(scene, "bench", ray, None, None, any_hit=False, widen=True)
        state = scene._state
        geometry = gather(state.table, state.live(torch.float64), gid)
        face = hits.face_frame(scene._core.centre, True)
        n = gid.shape[0]
        o, d = ray.o.expand(n, 3).contiguous(), ray.d.expand(n, 3).contiguous()  # as Scene.intersect's rows
        row = {}
        for flags in (RayFlags.All, RayFlags.Minimal):
            times = {"off": [], "on": []}
            for _ in range(args.rounds):
                for side, arg in (("off", None), ("on", face)):
                    start = time.perf_counter()
                    evaluate(o, d, gid, geometry, flags, arg)
                    times[side].append(1e3 * (time.perf_counter() - start))
            row[flags.name] = {side: {"min_ms": round(min(v), 1), "median_ms": round(statistics.median(v), 1)}
                               for side, v in times.items()}
        out[name] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
