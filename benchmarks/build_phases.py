"""What one ``build()`` of a new scene costs, phase by phase (issue 18, "build").

    PYTHONPATH=$PWD/src python3 benchmarks/build_phases.py [--device cpu|cuda] [--workload terrain:1024,sphere:513:1024]
        [--builds 10] [--src .device/baseline/src] [--set ploc_ahead.AHEAD=0,...] [--ab "a=...;b=..."] [--mitsuba]

The build is the one ``benchmarks/run.py`` times in its build row (``engines/rayd_torch.py``): a new
``rayd.torch.Scene()``, ``add_mesh(Mesh(vertices, faces), dynamic=True)``, ``build()``, the tensors
already on the device, the kernels warm (one build first). On the CPU the CUDA defaults are forced
(``ploc`` builder, ``wide4`` layout), so the same kernels run.

1. ``wall``: the median of ``--builds`` builds, synchronised before and after each (as run.py).
2. One more build with every phase wrapped (the device synchronised around each, so the phases add
   a little): per phase its inclusive ms and what Warp was asked for inside it, device-independent:
   ``launch`` kernel launches (``wp.launch`` and replays of recorded launches), ``scan`` scans and
   sorts (``wp.utils.array_scan``, ``radix_sort_pairs``: one or more kernels each), ``copy``
   (``wp.copy``, ``assign``, fills and memsets), ``upload`` (``wp.array`` of host data: an allocation and a
   host-to-device copy, which may wait for the stream), ``read`` host reads that wait for the device
   (``wp.array.numpy`` of a non-pinned array, ``wp.synchronize*``, torch ``item``/``tolist``/``cpu``/
   ``numpy``; ``wp.synchronize_event``), ``event`` events recorded, ``alloc`` allocations of Warp's allocators (torch's on CUDA, from its allocator stats,
   in ``talloc``). On the CPU the reads of CPU arrays cost nothing, but they are the reads a CUDA
   build makes. ``ploc.*`` lines are the PLOC build's own stages (``ploc.PROFILE``).

``--set mod.NAME=value,...`` sets module switches of ``rayd.engine`` before the builds (e.g.
``ploc_ahead.AHEAD=0`` for main's pass loop); ``--ab "name=sets;name=sets"`` instead times the named
settings interleaved, build by build (``--builds`` each), and prints their medians and ratios to the first
(a tree check too: each setting's nodes and pair/wide arrays against the first's, bit for bit).
``--src`` imports rayd from another tree (main's, for an A/B across processes). ``--json FILE`` writes
the figures.
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

_src = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else None  # (before rayd is imported)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(_src).resolve()) if _src else str(Path(__file__).resolve().parents[1] / "src"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from rayd.engine import ploc, triangles  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--workload", default="terrain:1024,sphere:513:1024",
                help="comma-separated terrain:CELLS (2 C^2 triangles) or sphere:RINGS:SEGMENTS (2 S (R - 1))")
ap.add_argument("--builds", type=int, default=10)
ap.add_argument("--src", default=None)
ap.add_argument("--set", default="", help="mod.NAME=value,... of rayd.engine modules")
ap.add_argument("--ab", default="", help="name=mod.NAME=v,mod.NAME=v;name=...: interleaved builds")
ap.add_argument("--no-phases", action="store_true")
ap.add_argument("--mitsuba", action="store_true", help="--ab: time Mitsuba 3's build of the same mesh too (run.py's)")
ap.add_argument("--json", default=None)
a = ap.parse_args()
CUDA = a.device.startswith("cuda")
if not CUDA:
    torch.set_num_threads(1)
triangles.set_bvh_constructor("ploc")  # the CUDA defaults (auto) on every device
triangles.set_bvh_layout("wide4")


def _apply(sets: str) -> dict:
    """Set ``mod.NAME=value`` switches (ints, floats or strings); returns the previous values."""
    import importlib

    old = {}
    for item in filter(None, (s.strip() for s in sets.split(","))):
        key, value = item.split("=", 1)
        mod, name = key.rsplit(".", 1)
        module = importlib.import_module(f"rayd.engine.{mod}")
        if not hasattr(module, name):
            raise SystemExit(f"rayd.engine.{mod} has no switch {name} (this tree: {_src or 'src'})")
        old[key] = getattr(module, name)
        cur = old[key]
        setattr(module, name, type(cur)(int(value)) if isinstance(cur, (bool, int)) else type(cur)(value))
    return old


def _sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


MESH: dict = {}  # the workload's vertices, faces (numpy) and V, F (tensors on the device)


def load_mesh(workload: str) -> None:
    kind, *size = workload.split(":")
    if kind == "terrain":
        vertices, faces = workloads.terrain_mesh(int(size[0]))
    else:
        vertices, faces = workloads.bumpy_sphere_mesh(int(size[0]), int(size[1]))
    MESH.clear()
    MESH.update(vertices=vertices, faces=faces, V=torch.from_numpy(vertices).to(a.device),
                F=torch.from_numpy(faces).to(a.device))


def build():
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(MESH["V"], MESH["F"]), dynamic=True)
    scene.build()
    return scene


def timed_builds(count: int) -> list[float]:
    out = []
    for _ in range(count):
        _sync()
        t0 = time.perf_counter()
        s = build()
        _sync()
        out.append((time.perf_counter() - t0) * 1e3)
        del s
    return out


def tree_of(scene) -> dict:
    """Host copies of the flat BVH's arrays (for the bit-equality check of --ab)."""
    tri = scene._core.flat
    out = {"nodes_lo": tri.nodes.lowers, "nodes_hi": tri.nodes.uppers, "prims": tri.nodes.primitives}
    if tri.pairs is not None:
        out["pair_boxes"] = tri.pairs.boxes
        out["tris"] = tri.pairs.tris
    if tri.wide is not None:
        out["wide"] = _wide_dfs(tri.wide)
    if tri.fused is not None:
        out["fused"] = [x for x in vars(tri.fused).values() if isinstance(x, wp.array)]
    # (copies: on the CPU numpy() views the scene's memory, which the next build reuses)
    return {k: v if isinstance(v, np.ndarray) else [x.numpy().copy() for x in v] if isinstance(v, list)
            else v.numpy().copy() for k, v in out.items()}


def _wide_dfs(wide) -> np.ndarray:
    """The wide nodes' rows in a numbering-free order (CUDA numbers them by an atomic counter, in any order):
    each node by the least pair-box code among its slots (a code is in one slot of one node), child refs
    renamed to that order."""
    data = wide.data.numpy().reshape(-1, 8, 4)[: wide.count].copy()
    links = data.view(np.int32)
    codes = links[:, 7]
    order = np.argsort(np.where(codes >= 0, codes, np.iinfo(np.int32).max).min(1), kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    refs = links[:, 6]
    links[:, 6] = np.where(refs >= 0, rank[np.maximum(refs, 0)], refs)
    return data[order]


def same(x, y) -> bool:
    if isinstance(x, list):
        return len(x) == len(y) and all(same(p, q) for p, q in zip(x, y))
    return x.shape == y.shape and x.tobytes() == y.tobytes()


# ------------------------------------------------------------------------------------------------ counting
COUNTS: collections.Counter = collections.Counter()
_wrapped: list = []


def _wrap(owner, name: str, key, skip=None, exclusive: bool = False, pause_reads: bool = False) -> None:
    """Count calls of ``owner.name`` under ``key`` (``exclusive``: not what it calls itself; ``pause_reads``:
    not the host reads it makes)."""
    real = getattr(owner, name)
    inherited = isinstance(owner, type) and name not in owner.__dict__

    def counting(*args, **kwargs):
        if not _PAUSED[0] and not (key == "read" and _PAUSED[1]) and (skip is None or not skip(*args, **kwargs)):
            COUNTS[key] += 1
        if not (exclusive or pause_reads):
            return real(*args, **kwargs)
        at = 0 if exclusive else 1
        _PAUSED[at] += 1
        try:
            return real(*args, **kwargs)
        finally:
            _PAUSED[at] -= 1

    setattr(owner, name, counting)
    _wrapped.append((owner, name, None if inherited else real))


def _pinned_or_cpu_view(arr, *_a, **_k) -> bool:
    return bool(getattr(arr, "pinned", False)) or (CUDA and arr.device.is_cpu)


_PAUSED = [0, 0]  # counting paused (all; host reads only)


def _not_upload(self, data=None, *args, **kwargs) -> bool:
    """Whether a ``wp.array(...)`` call is no copy of host data (a list, tuple, NumPy array or scalar)."""
    data = kwargs.get("data", data)
    return data is None or isinstance(data, wp.array) or hasattr(data, "__cuda_array_interface__") or \
        hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray)


def install_counters() -> None:
    from rayd.engine import runtime

    real_mark = runtime.StageTimer.mark

    def mark(self, name):  # the stage timers' own synchronisations are not the build's
        _PAUSED[0] += 1
        try:
            return real_mark(self, name)
        finally:
            _PAUSED[0] -= 1

    real_init = runtime.StageTimer.__init__

    def init(self, *args, **kwargs):
        _PAUSED[0] += 1
        try:
            return real_init(self, *args, **kwargs)
        finally:
            _PAUSED[0] -= 1

    runtime.StageTimer.mark = mark
    runtime.StageTimer.__init__ = init
    _wrapped.append((runtime.StageTimer, "mark", real_mark))
    _wrapped.append((runtime.StageTimer, "__init__", real_init))
    from rayd.engine import ploc as ploc_mod

    try:
        from rayd.engine import ploc_ahead
    except ImportError:  # (main before this branch)
        ploc_ahead = None
    if ploc_ahead is not None:
        for owner in (ploc_ahead, ploc_mod):
            _wrap(owner, "scan_int", "scan", exclusive=True)  # (its fallback is wp.utils.array_scan: counted once)
        # on the CPU the ahead loop reads each count where the kernel wrote it (free); a CUDA build copies it
        # to pinned memory instead (counted under copy, its waits under read)
        for owner in (ploc_ahead, ploc_mod):
            _wrap(owner, "run_ahead", "ahead_loops", pause_reads=not CUDA)
    _wrap(wp.Stream, "record_event", "event")
    _wrap(wp.array, "__init__", "upload", skip=_not_upload)
    core = getattr(getattr(wp._src.context, "runtime", None), "core", None)
    if CUDA and core is not None:
        _wrap(core, "wp_memcpy_d2h", "copy")
    _wrap(wp, "launch", "launch", skip=lambda *a, **k: k.get("record_cmd", False))  # (recording is no launch)
    _wrap(wp.Launch, "launch", "launch")
    _wrap(wp.utils, "array_scan", "scan")
    _wrap(wp.utils, "radix_sort_pairs", "scan")
    _wrap(wp, "copy", "copy")
    for name in ("fill_", "zero_", "assign"):
        _wrap(wp.array, name, "copy")
    _wrap(wp.array, "numpy", "read", skip=_pinned_or_cpu_view)
    for name in ("synchronize", "synchronize_device", "synchronize_stream", "synchronize_event"):
        _wrap(wp, name, "read")
    for name in ("item", "tolist", "cpu", "numpy"):
        _wrap(torch.Tensor, name, "read")
    ctx = wp._src.context
    for cls in ("CpuDefaultAllocator", "CpuPinnedAllocator", "CudaDefaultAllocator", "CudaMempoolAllocator"):
        if hasattr(ctx, cls):
            _wrap(getattr(ctx, cls), "allocate", "alloc")


def remove_counters() -> None:
    for owner, name, real in reversed(_wrapped):
        if real is None:
            delattr(owner, name)
        else:
            setattr(owner, name, real)
    _wrapped.clear()


def _torch_allocs() -> int:
    return int(torch.cuda.memory_stats().get("allocation.all.allocated", 0)) if CUDA else 0


# ------------------------------------------------------------------------------------------------ phases
def phase_targets():
    import rayd.core.scene as core_scene
    import rayd.engine.morton as morton
    import rayd.engine.ploc_emit as ploc_emit
    import rayd.engine.triangles as tri_mod
    import rayd.torch.scene as torch_scene
    from rayd.engine import wide_nodes, wide_refit
    from rayd.engine.refit import FusedRefit

    t = [
        (rt.Scene, "__init__", "Scene()"), (rt.Mesh, "__init__", "Mesh()"), (rt.Scene, "add_mesh", "add_mesh"),
        (rt.Scene, "build", "build"), (core_scene.SceneCore, "build", " core.build"),
        (core_scene.SceneCore, "_check_meshes", "  check_meshes"), (core_scene.SceneCore, "_search_centre", "  centre"),
        (core_scene.SceneCore, "_build_flat", "  build_flat"), (core_scene.SceneCore, "_place_flat", "   place_points"),
        (core_scene, "place_faces", "   place_faces"), (core_scene, "place_face_ids", "   place_face_ids"),
        (tri_mod.TriangleScene, "__init__", "   TriangleScene"), (tri_mod.TriangleScene, "_bounds", "    tri.bounds"),
        (ploc.PlocBvh, "__init__", "    PlocBvh"), (ploc, "sorted_box_keys", "     keys+sort"),
        (ploc, "emit_tree", "     layout+emit"), (wide_nodes.WideNodes, "__init__", "    WideNodes"),
        (FusedRefit, "__init__", "    FusedRefit"), (wide_refit.WideRefit, "__init__", "    WideRefit"),
        (core_scene, "SceneAccel", "  SceneAccel"), (core_scene.SceneCore, "_shape_lookup", "  shape_lookup"),
        (core_scene.SceneCore, "_apply_enabled", "  apply_enabled"), (torch_scene.Scene, "_built", " after_build"),
    ]
    del morton, ploc_emit
    return [x for x in t if hasattr(x[0], x[1])]


def phases_of_one_build() -> list[tuple[str, float, dict]]:
    rows: dict = {}
    order: list[str] = []
    saved = []

    def timed(f, label):
        def run(*args, **kwargs):
            _sync()
            before, talloc, t0 = COUNTS.copy(), _torch_allocs(), time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                _sync()
                ms = (time.perf_counter() - t0) * 1e3
                if label not in rows:
                    rows[label] = [0.0, collections.Counter(), 0]
                    order.append(label)
                rows[label][0] += ms
                rows[label][1].update(COUNTS - before)
                rows[label][2] += _torch_allocs() - talloc
        return run

    for owner, name, label in phase_targets():
        real = getattr(owner, name)
        inherited = isinstance(owner, type) and name not in owner.__dict__
        saved.append((owner, name, None if inherited else real))
        setattr(owner, name, timed(real, label))
    COUNTS.clear()
    install_counters()
    ploc.PROFILE = {}
    try:
        _sync()
        t0, talloc = time.perf_counter(), _torch_allocs()
        s = build()
        _sync()
        total = ((time.perf_counter() - t0) * 1e3, COUNTS.copy(), _torch_allocs() - talloc)
        iterations = s._core.flat.tree.iterations if s._core.flat.tree is not None else None
        del s
    finally:
        remove_counters()
        for owner, name, real in reversed(saved):
            if real is None:
                delattr(owner, name)
            else:
                setattr(owner, name, real)
        prof, ploc.PROFILE = ploc.PROFILE, None
    out = [("total (phases synchronised)", total[0], {**total[1], "talloc": total[2]})]
    out += [(label, rows[label][0], {**rows[label][1], "talloc": rows[label][2]}) for label in order]
    out += [(f"     ploc.{k}", v, {}) for k, v in prof.items()]
    out.append((f"PLOC passes {iterations}", 0.0, {}))
    return out


KEYS = ("launch", "scan", "copy", "upload", "event", "read", "alloc", "talloc")


def print_phases(rows) -> None:
    print(f"{'phase':34s} {'ms':>9s} " + " ".join(f"{k:>6s}" for k in KEYS))
    for label, ms, c in rows:
        print(f"{label:34s} {ms:9.3f} " + " ".join(f"{c.get(k, 0):6d}" for k in KEYS))


# ------------------------------------------------------------------------------------------------ main
def run(workload: str) -> dict:
    """Everything above for one workload; returns its figures."""
    load_mesh(workload)
    vertices, faces, F = MESH["vertices"], MESH["faces"], MESH["F"]
    results: dict = {"workload": workload, "device": a.device, "src": _src or "src", "faces": int(F.shape[0])}
    build()  # warm: kernels compiled and loaded, recorded launches made
    _sync()
    if a.ab:
        specs = [tuple(s.split("=", 1)) if "=" in s else (s, "") for s in a.ab.split(";") if s.strip()]
        ref, agree = None, {}
        for name, sets in specs:  # warm each setting once, and check its tree against the first setting's
            old = _apply(sets)
            tree = tree_of(build())
            if ref is None:
                ref = tree
            differ = sorted(k for k in set(ref) | set(tree) if k not in ref or k not in tree or not same(tree[k], ref[k]))
            agree[name] = not differ
            if differ:
                print(f"ab {workload} {name}: differs from {specs[0][0]} in {differ}")
            _apply(",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in old.items()))
        samples = {name: [] for name, _ in specs}
        mitsuba = None
        if a.mitsuba:
            from benchmarks.engines.mitsuba3 import Mitsuba3

            why = Mitsuba3.missing("cuda" if CUDA else "cpu")
            if why:
                print(f"mitsuba: skipped ({why})")
            else:
                rays = np.zeros((16, 3), np.float32)
                mitsuba = Mitsuba3("cuda" if CUDA else "cpu")
                mitsuba.load(workloads.Workload(workload, vertices, faces, rays, rays + np.float32(1.0), False, {}))
                mitsuba.build()
                mitsuba.synchronize()
                samples["mitsuba"] = []
        for _ in range(a.builds):
            for name, sets in specs:
                old = _apply(sets)
                samples[name] += timed_builds(1)
                _apply(",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in old.items()))
            if mitsuba is not None:
                _sync()
                mitsuba.synchronize()
                t0 = time.perf_counter()
                mitsuba.build()
                mitsuba.synchronize()
                samples["mitsuba"].append((time.perf_counter() - t0) * 1e3)
                mitsuba.built = None
        base = statistics.median(samples[specs[0][0]])
        print(f"ab {workload} ({F.shape[0]} faces, {a.device}, src {_src or 'src'}), build ms, medians of {a.builds}:")
        mi = statistics.median(samples["mitsuba"]) if samples.get("mitsuba") else None
        for name, sets in specs:
            m = statistics.median(samples[name])
            vs = f" = {m / mi:5.2f} x mitsuba" if mi else ""
            print(f"ab {workload} {name:12s} {m:8.3f} min {min(samples[name]):8.3f} ratio {m / base:5.3f}{vs} "
                  f"same_tree {agree[name]}  [{sets}]")
        if mi:
            print(f"ab {workload} {'mitsuba':12s} {mi:8.3f} min {min(samples['mitsuba']):8.3f}")
        results["ab"] = {name: {"median": statistics.median(v), "samples": v, "same_tree": agree.get(name)}
                         for name, v in samples.items()}
        if mitsuba is not None:
            mitsuba.close()
    else:
        walls = timed_builds(a.builds)
        results["wall_ms"] = statistics.median(walls)
        print(f"build {workload} ({F.shape[0]} faces, {a.device}, src {_src or 'src'}, set [{a.set}]): wall "
              f"median {statistics.median(walls):.3f} ms, min {min(walls):.3f} ({a.builds} builds)")
        if not a.no_phases:
            rows = phases_of_one_build()
            print_phases(rows)
            results["phases"] = [[label, round(ms, 4), c] for label, ms, c in rows]
    return results


_apply(a.set)
every = [run(w) for w in a.workload.split(",")]
if a.json:
    Path(a.json).write_text(json.dumps(every if len(every) > 1 else every[0], indent=1, default=str))
