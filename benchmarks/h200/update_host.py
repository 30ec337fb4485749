"""Where the host time of one ``update_mesh_vertices`` + ``sync()`` goes, phase by phase (issue 18, "update").

    PYTHONPATH=$PWD/src python3 benchmarks/h200/update_host.py [--size 1024] [--modes wide,wide_tris] [--calls 200]
        [--src .device/baseline/src]

Terrain of ``2 size^2`` triangles (1024: the 2 M of the goal), one dynamic mesh, the CUDA defaults (PLOC +
4-wide nodes; ``--device cpu`` for a check here). Per ``RAYD_TRI_REFIT`` mode (interleaved call by call), medians over ``--calls``
update + sync calls (the device synchronised before each), in microseconds from the call of
``update_mesh_vertices``: ``update`` (that call), ``sync->place`` (``sync()`` until the placement of the
points is launched: the core's plan, checks, stream), ``place`` (``assemble.place_points``: its argument
packing and the launch), ``copy`` (the finite-check flags' copy to pinned memory and its event),
``refit`` (``TriangleScene.refit``: the magnitude's launches and the refit's), ``climb at`` (when the last
refit launch has been enqueued), ``wait`` (``DeferredChecks.results``: the wait for the flags),
``sync end`` (``sync()`` returns), ``wall`` (the device done). The GPU is idle until ``place`` launches,
so ``wall ~ climb at + the climb kernel`` when the host is slower than the kernels before the climb.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

_src = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv else None  # (before rayd is imported)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(_src).resolve()) if _src else str(Path(__file__).resolve().parents[2] / "src"))
import torch  # noqa: E402

import rayd.core.scene as core_scene  # noqa: E402
import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from rayd.engine import assemble, triangles, wide_refit  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--size", type=int, default=1024)
ap.add_argument("--modes", default="wide,wide_tris")
ap.add_argument("--calls", type=int, default=200)
ap.add_argument("--src", default=None, help="import rayd from this tree (e.g. .device/baseline/src) for an A/B")
a = ap.parse_args()
cuda = a.device.startswith("cuda")
if not cuda:
    triangles.set_bvh_constructor("ploc")
    triangles.set_bvh_layout("wide4")

marks: dict[str, float] = {}


def wrap(owner, name: str, key: str) -> None:
    """Record the perf_counter at the entry and the exit of ``owner.name`` as ``key0`` / ``key1``."""
    inner = getattr(owner, name)

    def timed(*args, **kwargs):
        marks[key + "0"] = time.perf_counter()
        out = inner(*args, **kwargs)
        marks[key + "1"] = time.perf_counter()
        return out

    setattr(owner, name, timed)


wrap(core_scene, "place_points", "place")
wrap(assemble.DeferredChecks, "copy", "copy")
wrap(assemble.DeferredChecks, "results", "wait")
wrap(triangles.TriangleScene, "refit", "refit")


def done() -> None:
    if cuda:
        torch.cuda.synchronize()


w = workloads.terrain(a.size, 2 * a.size)
V = torch.tensor(w.vertices, device=a.device)
F = torch.tensor(w.faces, device=a.device)
sets = [V, V * 1.0001]
scene = rt.Scene()
scene.add_mesh(rt.Mesh(V.clone(), F), dynamic=True)
scene.build()
print(f"terrain {w.num_triangles:,d} tris on {a.device}; medians of {a.calls} calls, us from update_mesh_vertices(); "
      f"rayd from {Path(rt.__file__).parents[1]}")
modes = a.modes.split(",")
rows: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
for k in range(a.calls + 10):
    for mode in modes:  # interleaved call by call
        wide_refit.set_tri_refit(mode)
        done()
        t0 = time.perf_counter()
        scene.update_mesh_vertices(0, sets[k & 1])
        t1 = time.perf_counter()
        scene.sync()
        t2 = time.perf_counter()
        done()
        t3 = time.perf_counter()
        if k < 10:
            continue
        got = {"update": t1 - t0, "sync->place": marks["place0"] - t1, "place": marks["place1"] - marks["place0"],
               "copy": marks["copy1"] - marks["copy0"], "refit": marks["refit1"] - marks["refit0"],
               "climb at": marks["refit1"] - t0, "wait": marks["wait1"] - marks["wait0"], "sync end": t2 - t0,
               "wall": t3 - t0}
        for key, value in got.items():
            rows[mode].setdefault(key, []).append(value * 1e6)
for mode in modes:
    print(f"  {mode:12s} " + "  ".join(f"{key} {statistics.median(v):7.1f}" for key, v in rows[mode].items()), flush=True)
