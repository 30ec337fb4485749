"""Per-call host cost of small queries, to compare two checkouts (issue 13: nothing slower).

Times ``Ray(o, d)`` + ``scene.intersect(ray)`` (and ``nearest_edge``, ``closest_point`` on
``--rays`` points) on a two-triangle scene with ``time.process_time`` over many calls: the CPU
time of this process per call, best of ``--repeats`` blocks. Which rayd is timed is
whichever ``import rayd`` finds, so run it once per checkout with ``PYTHONPATH`` and
alternate the runs::

    for i in 1 2 3; do
      PYTHONPATH=/work/main/src python3 benchmarks/query_host_cost.py --label main
      PYTHONPATH=$PWD/src python3 benchmarks/query_host_cost.py --label branch
    done

Prints one JSON line per run: ``{"label", "rayd", "rows"}``, each row ``{"frontend", "query",
"rays", "us_per_call", "python_calls"}``; ``python_calls`` counts the Python-level function
calls of one call (profiler ``call`` + ``c_call`` events), a figure the machine's load does
not move. torch runs on one intra-op thread. ``--device cuda`` times the torch frontend on the GPU (host time
per call still; the kernels are asynchronous).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

#: The scene: one unit quad (two triangles) in z = 0, so that the kernels are cheap and
#: the figure is mostly the host's work per call (checks, hand-over, records).
QUAD_V = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
QUAD_F = [[0, 1, 2], [0, 2, 3]]


def _calls(fn) -> int:
    """Python-level function calls (``call`` + ``c_call`` profiler events) of one ``fn()``: a count, not a time."""
    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def _best(fn, calls: int, repeats: int) -> float:
    fn()  # warm: kernels loaded, caches made
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def torch_rows(n: int, calls: int, repeats: int, device: str) -> list[dict]:
    import torch

    import rayd.torch as rt

    g = torch.Generator().manual_seed(0)
    v = torch.tensor(QUAD_V, dtype=torch.float32)
    f = torch.tensor(QUAD_F, dtype=torch.int32)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.to(device), f.to(device)))
    scene.build()
    o = (torch.rand((n, 3), generator=g) - 0.5).to(device) + torch.tensor([0.5, 0.5, -2.0], device=device)
    d = torch.tensor([0.0, 0.0, 1.0], device=device).expand(n, 3).contiguous()
    points = torch.rand((n, 3), generator=g).to(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def intersect():
        scene.intersect(rt.Ray(o, d))

    def edge():
        scene.nearest_edge(points)

    def closest():
        scene.closest_point(points)

    rows = []
    for name, fn in (("Ray+intersect", intersect), ("nearest_edge", edge), ("closest_point", closest)):
        us = round(_best(fn, calls, repeats), 2)
        rows.append({"frontend": "torch", "query": name, "rays": n, "us_per_call": us, "python_calls": _calls(fn)})
        sync()
    return rows


def drjit_rows(n: int, calls: int, repeats: int) -> list[dict]:
    import drjit as dr
    import numpy as np
    from drjit.llvm import Array3f, Array3u

    import rayd.drjit as rd

    rng = np.random.default_rng(0)
    v = np.array(QUAD_V, dtype=np.float32)
    f = np.array(QUAD_F, dtype=np.uint32)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(Array3f(v.T), Array3u(f.T)))
    scene.build()
    o = Array3f(*(rng.random((3, n)).astype(np.float32) - 0.5))
    o = o + Array3f(0.5, 0.5, -2.0)
    d = Array3f(0.0, 0.0, 1.0)
    points = Array3f(*rng.random((3, n)).astype(np.float32))

    def intersect():
        dr.eval(scene.intersect(rd.Ray(o, d)).t)

    def closest():
        dr.eval(scene.closest_point(points).distance)

    return [{"frontend": "drjit", "query": name, "rays": n, "us_per_call": round(_best(fn, calls, repeats), 2),
             "python_calls": _calls(fn)}
            for name, fn in (("Ray+intersect", intersect), ("closest_point", closest))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="")
    parser.add_argument("--rays", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="torch device (cpu or cuda)")
    parser.add_argument("--no-drjit", action="store_true", help="time only rayd.torch")
    args = parser.parse_args()
    import torch

    import rayd

    torch.set_num_threads(1)  # process time of this thread's work, not of spinning intra-op threads
    rows = torch_rows(args.rays, args.calls, args.repeats, args.device)
    if not args.no_drjit and args.device == "cpu":
        rows += drjit_rows(args.rays, args.calls // 4, args.repeats)
    print(json.dumps({"label": args.label, "rayd": rayd.__file__, "rows": rows}))


if __name__ == "__main__":
    main()
