"""The host (Python) time of ``Scene.build()`` of tiny scenes, and what one build asks Warp for (issue 18, "build").

    PYTHONPATH=$PWD/src python3 benchmarks/build_host.py [--ab OTHER_SRC] [--rounds 8] [--builds 5]
    PYTHONPATH=$PWD/src python3 benchmarks/build_host.py --counts terrain:1024 [--src OTHER_SRC]
    PYTHONPATH=$PWD/src python3 benchmarks/build_host.py --ab OTHER_SRC --phases ico0 [--rounds 8] [--builds 5]

1. Wall time of ``build()`` alone (``Scene()`` and ``add_mesh`` are outside the timer) of tiny scenes whose
   build is nearly all host work: icospheres of 0, 2 and 4 subdivisions (20, 320, 5,120 triangles), one flat
   grid (128 triangles), 10 meshes (icospheres of 1 subdivision, 80 triangles each), and one mesh with 4
   instances. Two settings, interleaved build by build in each process: ``cuda`` (the CUDA defaults forced:
   ``ploc`` builder, ``wide4`` layout, as ``engine/triangles.py`` picks them for a CUDA scene) and ``cpu``
   (the CPU defaults, ``auto``: Warp's host SAH and pair nodes). With ``--ab OTHER_SRC`` the script runs
   child processes alternately on this tree and on ``OTHER_SRC`` (e.g. main's ``src`` from
   ``git archive main src``), ``--rounds`` of each, each child timing ``--builds`` builds per scene and
   setting after one warm build; medians over all samples (``rounds x builds``, at least 30).
   ``--phases SCENE`` (with ``--ab``): the inclusive time of each phase of that scene's ``build()``
   (:data:`PHASES`: checks, centre, placement and the flat BVH, PLOC, emission, wide nodes, ``SceneAccel``, ...),
   the CUDA defaults, medians, both trees alternated as above.
2. ``--counts WORKLOAD``: one build of a new scene (``benchmarks/run.py``'s build row: ``Scene()``,
   ``add_mesh(Mesh(V, F), dynamic=True)``, ``build()``, kernels warm), the CUDA defaults forced, with Warp's
   entry points counted: ``wp.launch`` (kernel launches through Warp's packing), ``recorded`` (launches
   recorded with ``record_cmd=True``), ``replays`` (replays of recorded launches: ``Launch.launch`` and
   ``LaunchCache.launch``), ``arrays`` (``wp.array`` constructions, views included), ``allocs`` (Warp's
   allocators), ``uploads`` (``wp.array`` of host data), ``fills`` (``fill_``/``zero_``/``wp.copy``/``assign``),
   ``reads`` (host reads that wait for the device on CUDA: ``runtime.read_back`` (one wait, however many arrays),
   ``numpy()`` of a non-pinned array elsewhere, ``wp.synchronize*``), ``rebound`` (recorded launches kept for the
   process and re-bound to a new build's arrays, ``runtime.kept_launch``). On the CPU a read costs nothing, but
   it is the read a CUDA build makes. ``--src`` counts another tree's build.
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

_src = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else None  # (before rayd is imported)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(_src).resolve()) if _src else str(ROOT / "src"))

SCENES = ("ico0", "ico2", "ico4", "flat", "ten", "inst")


def icosphere(subdivisions: int):
    """Vertices (V, 3) float32 and faces (F, 3) int32 of a unit icosphere (``20 * 4**subdivisions`` faces)."""
    import numpy as np

    t = (1.0 + 5.0 ** 0.5) / 2.0
    v = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t), (0, -1, -t), (0, 1, -t),
         (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    f = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4), (11, 10, 2),
         (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8), (3, 8, 9), (4, 9, 5), (2, 4, 11),
         (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    verts = [np.array(p, dtype=np.float64) / np.linalg.norm(p) for p in v]
    for _ in range(subdivisions):
        mid: dict = {}

        def m(a, b):
            key = (min(a, b), max(a, b))
            if key not in mid:
                p = verts[a] + verts[b]
                verts.append(p / np.linalg.norm(p))
                mid[key] = len(verts) - 1
            return mid[key]

        f = [g for a, b, c in f for g in ((a, m(a, b), m(a, c)), (b, m(b, c), m(a, b)), (c, m(a, c), m(b, c)),
                                          (m(a, b), m(b, c), m(a, c)))]
    return np.array(verts, dtype=np.float32), np.array(f, dtype=np.int32)


def make_scenes(torch):
    import numpy as np

    def t(x):
        return torch.from_numpy(np.ascontiguousarray(x))

    out = {}
    for s in (0, 2, 4):
        v, f = icosphere(s)
        out[f"ico{s}"] = [(t(v), t(f))]
    g = np.stack(np.meshgrid(np.arange(9.0), np.arange(9.0), indexing="ij"), -1).reshape(-1, 2)
    v = np.concatenate([g, np.zeros((81, 1))], 1).astype(np.float32)
    q = np.arange(81).reshape(9, 9)[:-1, :-1].reshape(-1)
    f = np.concatenate([np.stack([q, q + 9, q + 1], 1), np.stack([q + 1, q + 9, q + 10], 1)]).astype(np.int32)
    out["flat"] = [(t(v), t(f))]
    v, f = icosphere(1)
    out["ten"] = [(t(v + np.float32(3 * k)), t(f)) for k in range(10)]
    v, f = icosphere(2)
    out["inst"] = [(t(v), t(f)), "instances"]
    return out


def new_scene(rt, torch, parts):
    scene = rt.Scene()
    for part in parts:
        if part == "instances":
            for k in range(4):
                m = torch.eye(4, dtype=torch.float32)
                m[0, 3] = 3.0 * (k + 1)
                scene.add_instance(0, m)
        else:
            scene.add_mesh(rt.Mesh(*part))
    return scene


def child(builds: int) -> dict:
    import torch

    torch.set_num_threads(1)
    import rayd.torch as rt
    from rayd.engine import triangles

    scenes = make_scenes(torch)
    settings = {"cuda": ("ploc", "wide4"), "cpu": ("auto", "auto")}
    samples: dict = {f"{s}/{name}": [] for s in settings for name in SCENES}
    for s, (ctor, layout) in settings.items():  # warm: kernels loaded, recorded launches made
        triangles.set_bvh_constructor(ctor)
        triangles.set_bvh_layout(layout)
        for name in SCENES:
            new_scene(rt, torch, scenes[name]).build()
    for _ in range(builds):
        for name in SCENES:
            for s, (ctor, layout) in settings.items():
                triangles.set_bvh_constructor(ctor)
                triangles.set_bvh_layout(layout)
                scene = new_scene(rt, torch, scenes[name])
                t0 = time.perf_counter()
                scene.build()
                samples[f"{s}/{name}"].append((time.perf_counter() - t0) * 1e6)
                del scene
    return samples


#: ``--phases``: what is timed inside ``build()`` (inclusive us; nested phases are indented), ``module:attr``.
PHASES = [("rayd.core.scene:SceneCore._check_meshes", " checks"), ("rayd.core.scene:SceneCore._search_centre", " centre"),
          ("rayd.core.scene:SceneCore._build_flat", " build_flat"),
          ("rayd.engine.triangles:TriangleScene.__init__", "  TriangleScene"),
          ("rayd.engine.ploc:PlocBvh.__init__", "   PlocBvh"), ("rayd.engine.ploc:emit_tree", "    emit_tree"),
          ("rayd.engine.wide_nodes:WideNodes.__init__", "   WideNodes"),
          ("rayd.core.scene:SceneCore._build_instances", " instances"), ("rayd.core.scene:SceneAccel", " SceneAccel"),
          ("rayd.core.scene:SceneCore._shape_lookup", " shape_lookup"),
          ("rayd.core.scene:SceneCore._apply_enabled", " apply_enabled"), ("rayd.core.scene:SceneCore.build", "core.build")]


def phases_child(builds: int, scene: str) -> dict:
    """Per phase of :data:`PHASES`, the inclusive us of each of ``builds`` builds of ``scene`` (CUDA defaults)."""
    import importlib

    import torch

    torch.set_num_threads(1)
    import rayd.torch as rt
    from rayd.engine import triangles

    triangles.set_bvh_constructor("ploc")
    triangles.set_bvh_layout("wide4")
    parts = make_scenes(torch)[scene]
    got: dict = {label: [] for _, label in PHASES}
    got["build()"] = []
    acc: dict = {}

    def wrap(owner, name, label):
        real = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                acc[label] = acc.get(label, 0.0) + (time.perf_counter() - t0) * 1e6

        setattr(owner, name, timed)

    for path, label in PHASES:
        mod, attr = path.split(":")
        owner = importlib.import_module(mod)
        *cls, name = attr.split(".")
        for c in cls:
            owner = getattr(owner, c)
        wrap(owner, name, label)
    new_scene(rt, torch, parts).build()
    for _ in range(builds):
        s = new_scene(rt, torch, parts)
        acc.clear()
        t0 = time.perf_counter()
        s.build()
        got["build()"].append((time.perf_counter() - t0) * 1e6)
        for _, label in PHASES:
            got[label].append(acc.get(label, 0.0))
        del s
    return got


def phases_ab(other: str, rounds: int, builds: int, scene: str) -> None:
    trees = {"this": None, "other": other}
    got: dict = {k: collections.defaultdict(list) for k in trees}
    for r in range(rounds):
        for key in (("this", "other") if r % 2 == 0 else ("other", "this")):
            cmd = [sys.executable, __file__, "--phases-child", scene, "--builds", str(builds)]
            if trees[key]:
                cmd += ["--src", trees[key]]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            for k, v in json.loads(out.splitlines()[-1]).items():
                got[key][k] += v
    print(f"{scene}, CUDA defaults: inclusive us per phase of build(), medians of {rounds * builds} (this tree vs "
          f"{other}; processes alternated)")
    print(f"{'phase':18s} {'other':>8s} {'this':>8s} {'saved':>7s}")
    for k in ["build()", *[label for _, label in PHASES]]:
        a, b = statistics.median(got["other"][k]), statistics.median(got["this"][k])
        print(f"{k:18s} {a:8.0f} {b:8.0f} {a - b:7.0f}")


def ab(other: str, rounds: int, builds: int) -> None:
    trees = {"this": None, "other": other}
    got: dict = {k: collections.defaultdict(list) for k in trees}
    for r in range(rounds):
        for key in (("this", "other") if r % 2 == 0 else ("other", "this")):
            cmd = [sys.executable, __file__, "--child", "--builds", str(builds)]
            if trees[key]:
                cmd += ["--src", trees[key]]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            for k, v in json.loads(out.splitlines()[-1]).items():
                got[key][k] += v
    print(f"build() wall, us, medians of {rounds * builds} (this tree vs {other}; processes alternated)")
    print(f"{'setting/scene':14s} {'other':>9s} {'this':>9s} {'saved':>8s} {'ratio':>6s}")
    for k in got["this"]:
        a, b = statistics.median(got["other"][k]), statistics.median(got["this"][k])
        print(f"{k:14s} {a:9.0f} {b:9.0f} {a - b:8.0f} {b / a:6.3f}")


# ------------------------------------------------------------------------------------------------ counts
COUNTS: collections.Counter = collections.Counter()
_PAUSE = [0, 0]  # counting paused (all; host reads only)


def _wrap(owner, name: str, key, skip=None, pause: int | None = None) -> None:
    """Count calls of ``owner.name`` under ``key`` (or ``key(*args)``); ``pause``: 0 to count nothing it calls
    itself, 1 to count no host read it makes."""
    real = getattr(owner, name)

    def counting(*args, **kwargs):
        k = key(*args, **kwargs) if callable(key) else key
        if not _PAUSE[0] and not (k == "reads" and _PAUSE[1]) and k and (skip is None or not skip(*args, **kwargs)):
            COUNTS[k] += 1
        if pause is None:
            return real(*args, **kwargs)
        _PAUSE[pause] += 1
        try:
            return real(*args, **kwargs)
        finally:
            _PAUSE[pause] -= 1

    setattr(owner, name, counting)


def counts(workload: str) -> None:
    import numpy as np
    import torch
    import warp as wp

    import rayd.torch as rt
    from benchmarks import workloads
    from rayd.engine import runtime, triangles

    triangles.set_bvh_constructor("ploc")
    triangles.set_bvh_layout("wide4")
    kind, *size = workload.split(":")
    if kind == "terrain":
        v, f = workloads.terrain_mesh(int(size[0]))
    else:
        v, f = workloads.bumpy_sphere_mesh(int(size[0]), int(size[1]))
    V, F = torch.from_numpy(v), torch.from_numpy(f)

    def build():
        s = rt.Scene()
        s.add_mesh(rt.Mesh(V, F), dynamic=True)
        s.build()
        return s

    runtime._WORKERS = 1  # (one launch per kernel, as on CUDA: no CPU split across cores)
    build()
    cuda_like = False  # (CPU here: every numpy() of a device array is what a CUDA build reads)

    def upload(self, data=None, *a, **k):
        data = k.get("data", data)
        return "uploads" if data is not None and isinstance(data, (np.ndarray, list, tuple)) else None

    _wrap(wp, "launch", lambda *a, **k: "recorded" if k.get("record_cmd") else "wp.launch")
    _wrap(wp.Launch, "launch", "replays")
    if hasattr(runtime, "LaunchCache"):
        _wrap(runtime.LaunchCache, "launch", "replays", pause=0)  # (its first call records: counted as one)
    _wrap(wp.array, "__init__", "arrays")
    _wrap(wp.array, "__init__", upload)
    ctx = wp._src.context
    for cls in ("CpuDefaultAllocator", "CpuPinnedAllocator", "CudaDefaultAllocator", "CudaMempoolAllocator"):
        if hasattr(ctx, cls):
            _wrap(getattr(ctx, cls), "allocate", "allocs")
    for name in ("fill_", "zero_", "assign"):
        _wrap(wp.array, name, "fills")
    _wrap(wp, "copy", "fills")
    _wrap(wp.array, "numpy", "reads", skip=lambda arr, *a, **k: bool(getattr(arr, "pinned", False)) or cuda_like)
    for name in ("synchronize", "synchronize_device", "synchronize_stream", "synchronize_event"):
        _wrap(wp, name, "reads")
    for name in ("array_scan", "radix_sort_pairs"):
        _wrap(wp.utils, name, "scans+sorts")
    from rayd.engine import ploc_ahead

    from rayd.engine import ploc

    _wrap(ploc_ahead, "scan_int", "scans+sorts", pause=0)
    # on the CPU the passes' loop reads each cluster count where the kernel wrote it; a CUDA build copies it
    # to pinned memory (no wait) instead: not counted as reads
    _wrap(ploc, "run_ahead", None, pause=1)
    # runtime.read_back: one wait on CUDA for all its arrays (staged), however many it reads; kept_launch
    # (this branch): a command re-bound, not recorded anew (wrapped where each module imported it)
    real = {name: getattr(runtime, name, None) for name in ("read_back", "kept_launch")}
    for mod in [m for name, m in sys.modules.items() if name.startswith("rayd.") and m is not None]:
        for name, key, pause in (("read_back", "reads", 1), ("kept_launch", "rebound", 0)):
            if real[name] is not None and getattr(mod, name, None) is real[name]:
                _wrap(mod, name, key, pause=pause)
    runs = []
    for _ in range(3):
        COUNTS.clear()
        s = build()
        runs.append(dict(COUNTS))
        del s
    print(json.dumps({"workload": workload, "src": _src or "src", "counts": runs[-1],
                      "same_each_build": all(r == runs[0] for r in runs)}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ab", default=None, help="another tree's src (e.g. main's) to time against, alternately")
    ap.add_argument("--src", default=None, help="import rayd from this tree")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--builds", type=int, default=5)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--counts", default=None, help="terrain:CELLS or sphere:RINGS:SEGMENTS")
    ap.add_argument("--phases", default=None, help=f"with --ab: time the phases of one scene's build ({SCENES})")
    ap.add_argument("--phases-child", default=None)
    a = ap.parse_args()
    if a.phases_child:
        print(json.dumps(phases_child(a.builds, a.phases_child)))
    elif a.phases:
        phases_ab(a.ab, a.rounds, a.builds, a.phases)
    elif a.child:
        print(json.dumps(child(a.builds)))
    elif a.counts:
        counts(a.counts)
    elif a.ab:
        ab(a.ab, a.rounds, a.builds)
    else:
        got = child(a.builds)
        for k, v in got.items():
            print(f"{k:14s} {statistics.median(v):9.0f} us (median of {len(v)})")
