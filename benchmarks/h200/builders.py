"""Triangle-BVH builders side by side on one GPU (issue 18, "build"): build time and trace time.

    python3 benchmarks/h200/builders.py [--out DIR] [--builders sah,cubql,lbvh,ploc,...] [--no-mitsuba]

For terrain 2M (coherent, 4M rays) and the bumpy sphere 1M (incoherent, 4M rays), per
builder (``sah``: Warp's host SAH; ``cubql``, ``lbvh``: Warp's GPU builders; ``ploc[:rR][:lL][:tT][:sS]``:
rayd's PLOC with radius R, leaves of up to L triangles, the last passes from T clusters in
one thread, a host read of the count every S passes, ``:cC``: C_I = C / 10 (C_T = 1),
``:k1``: nearest neighbours and survivors in one kernel per pass, ``:e0``: pair nodes and refit set-up by ``PairNodes``/``FusedRefit`` after the build instead of
emitted by it, ``rayd.engine.ploc``; any builder ``+ww``: the flat search walks the pair
nodes while-while (``rayd.engine.pair_walk``; the ``+one`` / ``+wws`` walks were removed in
session 13 after the H200 measured them slower); ``+pool``: Warp's CUDA memory pool
keeps freed memory, release threshold 4 GiB, instead of the default 0, which returns it to
the driver at every synchronisation):

- ``tri_build_ms``: ``rayd.engine.TriangleScene(...)`` alone (boxes, tree, pair nodes,
  refit set-up), kernels warm (one build first), median of 7, synchronised;
- ``scene_build_ms``: ``rayd.torch.Scene`` + ``add_mesh`` + ``build()`` of the same tensors;
- ``closest_all_ms`` / ``closest_minimal_ms``: ``scene.intersect(ray)`` with ``RayFlags.All`` /
  ``Minimal``, median of 20 after 3 warm-ups;
- ``same_prim``: fraction of rays with the ``sah`` scene's ``prim_id`` (ties may differ);
- for ``ploc``: ``ploc_ms`` (``PlocBvh`` alone, over the scene's boxes), its PLOC passes
  and kernel launches;
- ``stages`` (``--stages``): one more ``scene_build``, synchronised around each stage of
  ``Scene.build()`` (inclusive ms per stage, summed over calls; the synchronisations add a
  little), with ``host_reads`` (``wp.array.numpy`` and torch ``item``/``tolist``/``cpu``
  calls) and ``launches`` (``wp.launch`` calls) of that build, and ``ploc.*``: the PLOC build's
  own stages (``ploc.PROFILE``: keys and sort, groups of passes by cluster count, layout, emit).

Sizes: ``--sizes terrain:C:S,sphere:R:SEG:RAYS`` (default the two above).

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


_POOL = {"saved": None}


def _configure(spec):
    spec, *extras = spec.split("+")
    name, *opts = spec.split(":")
    kw = {o[0]: int(o[1:]) for o in opts}
    triangles.set_bvh_constructor(name)
    triangles.set_pair_walk(next((e for e in extras if e in triangles.PAIR_WALKS), "ifif"))
    if DEVICE == "cuda":
        if _POOL["saved"] is None:
            _POOL["saved"] = wp.get_mempool_release_threshold("cuda:0")
        wp.set_mempool_release_threshold("cuda:0", (4 << 30) if "pool" in extras else _POOL["saved"])
    ploc.RADIUS, ploc.MAX_LEAF = kw.get("r", DEFAULTS[0]), kw.get("l", DEFAULTS[1])
    ploc.TAIL, ploc.SYNC_EVERY = kw.get("t", DEFAULTS[2]), kw.get("s", DEFAULTS[3])
    ploc.COSTS = (1.0, kw.get("c", 10) / 10.0)
    ploc.EMIT_PAIRS = bool(kw.get("e", 1))
    ploc.FUSED_KEEP = kw.get("k", 0)
    return name


def _stages(fn):
    """Run ``fn`` once with synchronised timers around the stages of ``Scene.build()``: {stage: ms}, counts."""
    import rayd.core.scene as core_scene
    import rayd.engine.triangles as tri_mod
    import rayd.torch.scene as torch_scene
    from rayd.torch import _ops

    from rayd.engine.pair_nodes import PairNodes
    from rayd.engine.refit import FusedRefit
    from rayd.torch._live import LiveState
    from rayd.torch.edges import SceneEdges

    targets = [  # classes are timed through their __init__ (their names stay classes)
        (rt.Mesh, "__init__", "Mesh()"), (core_scene.SceneCore, "build", "core.build"),
        (core_scene.SceneCore, "_check_meshes", "check_meshes"), (core_scene.SceneCore, "_search_centre", "centre"),
        (core_scene.SceneCore, "_build_flat", "build_flat"), (core_scene.SceneCore, "_place_flat", "place_points"),
        (core_scene, "place_faces", "place_faces"), (core_scene, "place_face_ids", "place_face_ids"),
        (tri_mod.TriangleScene, "__init__", "TriangleScene"),
        (tri_mod.TriangleScene, "_bounds", "tri.bounds"), (ploc.PlocBvh, "__init__", "PlocBvh"),
        (PairNodes, "__init__", "PairNodes"), (FusedRefit, "__init__", "FusedRefit"),
        (core_scene.SceneAccel, "__init__", "SceneAccel"), (core_scene.SceneCore, "_shape_lookup", "shape_lookup"),
        (core_scene.SceneCore, "_apply_enabled", "apply_enabled"), (torch_scene.Scene, "_after_build", "after_build"),
        (LiveState, "__init__", "LiveState"), (SceneEdges, "__init__", "SceneEdges"),
        (_ops, "register", "ops.register"), (torch_scene, "stand_in", "stand_in"),
    ]
    times, counts, saved = {}, {"host_reads": 0, "launches": 0}, []

    def timed(f, label):
        def run(*a, **k):
            _sync()
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                _sync()
                times[label] = times.get(label, 0.0) + (time.perf_counter() - t0) * 1e3
        return run

    def counted(f, key):
        def run(*a, **k):
            counts[key] += 1
            return f(*a, **k)
        return run

    for obj, attr, label in targets:
        saved.append((obj, attr, obj.__dict__.get(attr, None) if isinstance(obj, type) else getattr(obj, attr)))
        setattr(obj, attr, timed(getattr(obj, attr), label))
    for obj, attr, key in ((wp.array, "numpy", "host_reads"), (torch.Tensor, "item", "host_reads"),
                           (torch.Tensor, "tolist", "host_reads"), (torch.Tensor, "cpu", "host_reads"),
                           (wp, "launch", "launches")):
        saved.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, counted(getattr(obj, attr), key))
    ploc.PROFILE = {}
    try:
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        times["total"] = (time.perf_counter() - t0) * 1e3
    finally:
        for obj, attr, f in reversed(saved):
            if f is None:
                delattr(obj, attr)  # it was inherited
            else:
                setattr(obj, attr, f)
        times.update({"ploc." + k: v for k, v in ploc.PROFILE.items()})
        ploc.PROFILE = None
    return {k: round(v, 3) for k, v in times.items()}, counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--builders", default=("sah,cubql,lbvh,ploc,ploc:t64,ploc:t256,ploc:t1024,ploc:s1,ploc:s8,"
                                           "ploc:r2:l1,ploc:r2:l2,ploc:r4:l4,ploc:r16:l1"))
    ap.add_argument("--no-mitsuba", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny workloads on the CPU (checks the script only)")
    ap.add_argument("--device", default=None, help="cuda (default) or cpu")
    ap.add_argument("--sizes", default=None, help="terrain:C:S,sphere:R:SEG:RAYS (default terrain:1024:2048,"
                                                  "sphere:513:1024:4194304; --smoke: terrain:32:64,sphere:17:32:4096)")
    ap.add_argument("--stages", action="store_true", help="time the stages of one more scene build (ploc builders)")
    ap.add_argument("--build-repeats", type=int, default=7, help="repeats of tri_build (5 fewer of scene_build, "
                                                                     "at least 1); host-SAH builds run once")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device or ("cpu" if args.smoke else "cuda")
    sizes = args.sizes or ("terrain:32:64,sphere:17:32:4096" if args.smoke
                           else "terrain:1024:2048,sphere:513:1024:4194304")
    loads = []
    for item in sizes.split(","):
        kind, *nums = item.split(":")
        nums = [int(x) for x in nums]
        loads.append(workloads.terrain(*nums) if kind == "terrain" else workloads.sphere(*nums))
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
        ref_spec = None
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
            host_sah = name == "sah" or (name == "cubql" and DEVICE == "cpu")
            # Warm every kernel of this configuration on a tiny scene first (so that a host-SAH build,
            # timed once and without a warm-up run, does not include first-use compilation).
            tiny = workloads.terrain(8, 8)
            ts = rt.Scene()
            ts.add_mesh(rt.Mesh(torch.tensor(tiny.vertices, device=DEVICE), torch.tensor(tiny.faces, device=DEVICE)))
            ts.build()
            tray = rt.Ray(torch.tensor(tiny.o, device=DEVICE), torch.tensor(tiny.d, device=DEVICE))
            ts.intersect(tray)
            ts.intersect(tray, flags=rt.RayFlags.Minimal)
            del ts
            reps = 1 if host_sah else args.build_repeats
            try:
                row["tri_build_ms"] = _ms(tri_build, reps, 0 if host_sah else 1)
                row["scene_build_ms"] = _ms(scene_build, max(1, reps - 2), 0 if host_sah else 1)
                if args.stages and name == "ploc":
                    row["stages"], counted = _stages(scene_build)
                    row.update(counted)
                scene = scene_build()
                tri = scene._core.accel.flat
                row["constructor"] = tri.constructor
                row["walk"] = tri.walk
                row["depth"] = tri.nodes.depth
                row["nodes"] = int(tri.nodes.lowers.shape[0])
                if tri.tree is not None:
                    row["iterations"], row["launches"] = tri.tree.iterations, tri.tree.launches
                    row["ploc_ms"] = _ms(lambda: ploc.PlocBvh(tri.lowers, tri.uppers, stream), 7)
                row["closest_all_ms"] = _ms(lambda: scene.intersect(ray), 20, 3)
                row["closest_minimal_ms"] = _ms(lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal), 20, 3)
                prim = scene.intersect(ray, flags=rt.RayFlags.Minimal).prim_id
                if ref_prim is None:
                    ref_prim, ref_spec = prim, spec
                row["same_prim_as"] = ref_spec
                row["same_prim"] = round(float((prim == ref_prim).float().mean()), 6)
                del scene, tri
            except Exception as exc:  # noqa: BLE001 - report and go on
                row["error"] = repr(exc)
            rows.append(row)
            print(json.dumps(row), flush=True)
        triangles.set_bvh_constructor("sah")
        triangles.set_pair_walk("ifif")
    with open(out_path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    keys = ("tri_build_ms", "ploc_ms", "scene_build_ms", "host_reads", "closest_all_ms", "closest_minimal_ms",
            "same_prim",
            "iterations",
            "launches", "depth")
    print("\n| workload | builder | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for r in rows:
        print(f"| {r['workload']} | {r['builder']} | " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    for r in rows:
        if "stages" in r:
            print(f"stages {r['workload']} {r['builder']}: " + json.dumps(r["stages"]))


if __name__ == "__main__":
    main()
