"""Triangle-BVH builders side by side on one GPU (issue 18, "build"): build time and trace time.

    python3 benchmarks/h200/builders.py [--out DIR] [--builders sah,cubql,lbvh,ploc,...] [--no-mitsuba]

For terrain 2M (coherent, 4M rays) and the bumpy sphere 1M (incoherent, 4M rays), per
builder (``sah``: Warp's host SAH; ``cubql``, ``lbvh``: Warp's GPU builders; ``ploc[:rR][:lL][:tT][:sS]``:
rayd's PLOC with radius R, leaves of up to L triangles, the last passes from T clusters in
one thread, a host read of the count every S passes, ``:cC``: C_I = C / 10 (C_T = 1),
``rayd.engine.ploc``):

- ``tri_build_ms``: ``rayd.engine.TriangleScene(...)`` alone (boxes, tree, pair nodes,
  refit set-up), kernels warm (one build first), median of 7, synchronised;
- ``scene_build_ms``: ``rayd.torch.Scene`` + ``add_mesh`` + ``build()`` of the same tensors;
- ``closest_all_ms`` / ``closest_minimal_ms``: ``scene.intersect(ray)`` with ``RayFlags.All`` /
  ``Minimal``, median of 20 after 3 warm-ups;
- ``same_prim``: fraction of rays with the ``sah`` scene's ``prim_id`` (ties may differ);
- for ``ploc``: ``ploc_ms`` (``PlocBvh`` alone, over the scene's boxes), its PLOC passes
  and kernel launches.

Mitsuba 3 (``cuda_ad_rgb``: scene build, closest hit ``ray_intersect`` All) is timed in the
same process for the ratio (``--no-mitsuba`` to skip). Writes ``builders_h200.jsonl`` and
prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from rayd.engine import ploc, triangles  # noqa: E402

DEFAULTS = (ploc.RADIUS, ploc.MAX_LEAF, ploc.TAIL, ploc.SYNC_EVERY)  # what ``ploc`` alone means


DEVICE = "cuda"


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _ms(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    _sync()
    out = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(out), 3)


def _configure(spec):
    name, *opts = spec.split(":")
    kw = {o[0]: int(o[1:]) for o in opts}
    triangles.set_bvh_constructor(name)
    ploc.RADIUS, ploc.MAX_LEAF = kw.get("r", DEFAULTS[0]), kw.get("l", DEFAULTS[1])
    ploc.TAIL, ploc.SYNC_EVERY = kw.get("t", DEFAULTS[2]), kw.get("s", DEFAULTS[3])
    ploc.COSTS = (1.0, kw.get("c", 10) / 10.0)
    return name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--builders", default=("sah,cubql,lbvh,ploc,ploc:t64,ploc:t256,ploc:t1024,ploc:s1,ploc:s8,"
                                           "ploc:r2:l1,ploc:r2:l2,ploc:r4:l4,ploc:r16:l1"))
    ap.add_argument("--no-mitsuba", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny workloads on the CPU (checks the script only)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = "cpu" if args.smoke else "cuda"
    loads = ((workloads.terrain(32, 64), workloads.sphere(17, 32, 4096)) if args.smoke
             else (workloads.terrain(1024, 2048), workloads.sphere(513, 1024, 1 << 22)))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out_path = Path(args.out) / ("builders_smoke.jsonl" if args.smoke else "builders_h200.jsonl")
    wp.config.quiet = True
    rows = []
    for w in loads:
        V = torch.tensor(w.vertices, device=DEVICE)
        F = torch.tensor(w.faces, device=DEVICE)
        ray = rt.Ray(torch.tensor(w.o, device=DEVICE), torch.tensor(w.d, device=DEVICE))
        points = wp.from_torch(V, dtype=wp.vec3)
        indices = wp.from_torch(F.reshape(-1))
        ref_prim = None
        if not args.no_mitsuba:
            try:
                from benchmarks.engines.mitsuba3 import Mitsuba3

                mi = Mitsuba3(DEVICE)
                mi.load(w)
                row = {"workload": w.name, "builder": "mitsuba", "scene_build_ms": _ms(mi.build, 7),
                       "closest_all_ms": _ms(lambda: mi.closest(False), 20, 3),
                       "closest_minimal_ms": _ms(lambda: mi.closest(True), 20, 3)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                del mi
            except Exception as exc:  # noqa: BLE001 - a reference only
                print(f"mitsuba skipped: {exc!r}", flush=True)
        for spec in args.builders.split(","):
            name = _configure(spec)
            stream = wp.stream_from_torch(torch.cuda.current_stream()) if DEVICE == "cuda" else None

            def tri_build():
                return triangles.TriangleScene(points, indices, stream)

            def scene_build():
                s = rt.Scene()
                s.add_mesh(rt.Mesh(V, F))
                s.build()
                return s

            row = {"workload": w.name, "triangles": w.num_triangles, "rays": w.num_rays, "builder": spec}
            try:
                row["tri_build_ms"] = _ms(tri_build, 7)
                row["scene_build_ms"] = _ms(scene_build, 5)
                scene = scene_build()
                tri = scene._core.accel.flat
                row["constructor"] = tri.constructor
                row["depth"] = tri.nodes.depth
                row["nodes"] = int(tri.nodes.lowers.shape[0])
                if tri.tree is not None:
                    row["iterations"], row["launches"] = tri.tree.iterations, tri.tree.launches
                    row["ploc_ms"] = _ms(lambda: ploc.PlocBvh(tri.lowers, tri.uppers, stream), 7)
                row["closest_all_ms"] = _ms(lambda: scene.intersect(ray), 20, 3)
                row["closest_minimal_ms"] = _ms(lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal), 20, 3)
                prim = scene.intersect(ray, flags=rt.RayFlags.Minimal).prim_id
                if ref_prim is None:
                    ref_prim = prim
                row["same_prim"] = round(float((prim == ref_prim).float().mean()), 6)
                del scene, tri
            except Exception as exc:  # noqa: BLE001 - report and go on
                row["error"] = repr(exc)
            rows.append(row)
            print(json.dumps(row), flush=True)
        triangles.set_bvh_constructor("sah")
    with open(out_path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    keys = ("tri_build_ms", "ploc_ms", "scene_build_ms", "closest_all_ms", "closest_minimal_ms", "same_prim",
            "iterations",
            "launches", "depth")
    print("\n| workload | builder | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for r in rows:
        print(f"| {r['workload']} | {r['builder']} | " + " | ".join(str(r.get(k, "")) for k in keys) + " |")


if __name__ == "__main__":
    main()
