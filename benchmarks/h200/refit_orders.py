"""`update_mesh_vertices` + `sync()` per builder, node layout and fused-refit order, one process (issue 18, "update").

    python3 benchmarks/h200/refit_orders.py [--orders climb1] [--builders auto,sah] [--layouts auto,pair]
        [--warp] [--edges] [--list] [--json $OUT/refit.json] [--device cpu --size 64]

Terrain 2M on CUDA (``--size``: a terrain of 2 size^2 triangles; 128 by default on the CPU):
per (builder, layout, order) a new scene (``auto``/``auto``: the defaults, PLOC and 4-wide nodes
on CUDA), then

- ``update+sync``: wall time of update + sync (synchronised before and after; median of 30 after 5);
- ``host``: the same calls' host time alone (timer stopped when ``sync()`` returns, before the
  device synchronize; it includes sync()'s one wait, for the finite-check flags);
- ``refit GPU``: CUDA events around ``TriangleScene.refit`` (magnitude + refit kernels), median;
- ``kernel``: torch.profiler, GPU time of the refit kernel alone per update+sync, and the
  kernels/memsets/copies per update+sync (all of them, with ``--list``).

``--edges``: also update+sync after one nearest-edge query (the edge BVH exists; its refit is
deferred to the next edge query, so the figure should equal update+sync). ``--warp``: Warp's
``wp.Mesh.refit`` over the same terrain in the same process (``wp.copy`` of the points + refit,
CUDA events), the goal's reference (``<= 1.3 x`` of it). (The refit kernel variants this script
also timed, ``RAYD_REFIT_VARIANT``, were removed in session 13: none beat the default on the H200.)

``--tri-refits full,wide`` (17th session): per scene, each of ``wide_refit.TRI_REFITS`` (``full``: the
fused refit of every structure at sync(); ``wide``: the climb over the 4-wide nodes alone, the rest
when a query reads it), measured on the same scene, interleaved call by call (``ab`` line: medians
and the ratio to full of update+sync and of the refit's GPU time by CUDA events; ``wide_node`` and
``wide_levels`` too), the equality of
the two (``same``: wide rows and leaf triangles right after the wide refit; every structure after
``complete()``), and the cost of that completion (the fused refit, run by the first query that reads
the binary or pair boxes; with ``--layouts wide4q`` also the compressed rows, ``wide_q.py``, which the
``full`` refit re-quantises in a launch after it and ``wide_tris`` in its climb). ``--workloads terrain,sphere``: the terrain 2 M and the bumpy sphere 1 M;
``--warp`` then measures ``wp.Mesh.refit`` on each. (18th session: ``wide_v4``, ``wide_tris`` and
``wide_tris_r`` too, ``engine/wide_refit_tris.py``; their ``kernel`` figure adds the leaf-triangle launch
of the last two, which also folds the magnitude: the refit's launches per call stay at three. A mode
``name@threads``, e.g. ``wide_tris@262144``, also sets the threads of the magnitude's first pass, folded into
the placement of the points, ``refit.set_magnitude_threads``; default 65,536.)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
import torch  # noqa: E402
import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402
from rayd.engine import refit, triangles, wide_refit  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--orders", default="climb1")
ap.add_argument("--builders", default="auto")
ap.add_argument("--layouts", default="auto")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--size", type=int, default=0, help="terrain of 2 size^2 triangles (0: 2 M on CUDA, 32 k on the CPU)")
ap.add_argument("--repeats", type=int, default=30)
ap.add_argument("--warp", action="store_true")
ap.add_argument("--edges", action="store_true")
ap.add_argument("--list", action="store_true", help="print every kernel of one update+sync")
ap.add_argument("--json", default=None)
ap.add_argument("--tri-refits", default="", help="e.g. full,wide: A/B of wide_refit.TRI_REFITS on each scene")
ap.add_argument("--workloads", default="terrain", help="terrain and/or sphere (1 M triangles on CUDA)")
ap.add_argument("--quick", action="store_true",
                help="--tri-refits: timings only (no kernel census, tris floor, equality check or completion time)")
a = ap.parse_args()
dev = a.device
cuda = dev.startswith("cuda")


def workload(name: str):
    """The terrain (2 M triangles on CUDA) or the bumpy sphere (1 M), smaller on the CPU or with --size."""
    if name == "sphere":
        if a.size:
            return workloads.sphere(a.size, 2 * a.size, 1)
        return workloads.sphere(512, 1024, 1) if cuda else workloads.sphere(64, 128, 1)
    if a.size:
        return workloads.terrain(a.size, 2 * a.size)
    return workloads.terrain(1024, 2048) if cuda else workloads.terrain(128, 256)


records = []


def use(name: str) -> None:
    """Make ``name``'s mesh the one measured (globals w, V, F, sets)."""
    global w, V, F, sets
    w = workload(name)
    V = torch.tensor(w.vertices, device=dev)
    F = torch.tensor(w.faces, device=dev)
    sets = [V, V * 1.0001]


def sync():
    if cuda:
        torch.cuda.synchronize()


def update_loop(scene, repeats, edge_pts=None):
    k, wall, host = 0, [], []
    for i in range(repeats + 5):
        k ^= 1
        sync()
        t0 = time.perf_counter()
        scene.update_mesh_vertices(0, sets[k])
        scene.sync()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        if edge_pts is not None and i == 2:
            scene.nearest_edge(edge_pts)  # (once in the warm-up: the edge BVH exists, then is left stale)
        if i >= 5:
            wall.append((t2 - t0) * 1e3)
            host.append((t1 - t0) * 1e6)
    return statistics.median(wall), min(wall), statistics.median(host)


def kernel_census(scene, kernel_prefixes):
    """(GPU ms of kernels whose name starts with one of ``kernel_prefixes``, kernels+copies per call, rows)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    k = 0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            k ^= 1
            scene.update_mesh_vertices(0, sets[k])
            scene.sync()
        sync()
    ev = [e for e in prof.key_averages() if e.device_type != DeviceType.CPU and e.self_device_time_total > 0]
    refit_ms = sum(e.self_device_time_total for e in ev if e.key.startswith(kernel_prefixes)) / 5 / 1e3
    rows = [(e.count / 5, e.self_device_time_total / e.count, e.key[:90]) for e in ev]
    return refit_ms, sum(e.count for e in ev) / 5, rows


def refit_events(scene):
    flat = scene._core.flat
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    g = []
    for _ in range(25):
        ev[0].record()
        flat.refit(wp.stream_from_torch(torch.cuda.current_stream()))
        ev[1].record()
        torch.cuda.synchronize()
        g.append(ev[0].elapsed_time(ev[1]))
    return statistics.median(g[5:])


def measure(builder: str, layout: str, order: str) -> dict:
    """One scene built with this builder, node layout and refit order; its figures (and one printed line)."""
    triangles.set_bvh_constructor(builder)
    triangles.set_bvh_layout(layout)
    refit.set_refit_order(order)
    t0 = time.perf_counter()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(V.clone(), F), dynamic=True)
    scene.build()
    build_s = time.perf_counter() - t0
    fused = scene._core.flat.fused
    med, low, host = update_loop(scene, a.repeats)
    flat = scene._core.flat
    rec = dict(builder=builder, layout=layout, order=order, triangles=w.num_triangles, device=dev,
               update_sync_ms=med, update_sync_min_ms=low, host_us=host, build_s=build_s,
               fused=fused is not None, constructor_used=flat.constructor, wide=flat.wide is not None)
    line = (f"builder {builder:4s} ({flat.constructor}) layout {layout:5s} (wide {int(flat.wide is not None)}) "
            f"order {order:6s} update+sync {med:7.3f} ms "
            f"(min {low:.3f}) host {host:7.1f} us")
    if cuda:
        rec["refit_gpu_ms"] = refit_events(scene)
        rec["refit_kernel_ms"], rec["kernels_per_call"], rows = kernel_census(
            scene, ("_fused_refit_kernel", "_level_refit_kernel"))
        line += (f"  refit GPU {rec['refit_gpu_ms']:6.3f} ms  kernel {rec['refit_kernel_ms']:6.3f} ms  "
                 f"{rec['kernels_per_call']:.0f} kernels+copies/call")
        if a.list:
            line += "".join(f"\n      {c:4.0f} x {us:9.1f} us  {key}" for c, us, key in rows)
    if a.edges:
        e_med, _, e_host = update_loop(scene, a.repeats, edge_pts=pts)
        rec.update(edges_update_sync_ms=e_med, edges_host_us=e_host)
        line += f"  | after an edge query: update+sync {e_med:7.3f} ms host {e_host:7.1f} us"
    print(line, flush=True)
    return rec


def state(flat) -> dict:
    """Bits of every structure a refit writes (wide rows, leaf triangles, binary, per-face and pair boxes)."""
    out = dict(tris=flat.pairs.tris.numpy().view("int32"), nodes_lo=flat.nodes.lowers.numpy().view("int32"),
               nodes_hi=flat.nodes.uppers.numpy().view("int32"), items_lo=flat.lowers.numpy().view("int32"),
               items_hi=flat.uppers.numpy().view("int32"), magnitude=flat.magnitude.numpy().view("int32"))
    boxes = flat.pairs.boxes.numpy()
    out["pairs"] = boxes.reshape(-1, 4, 4)[:, :3].view("int32")
    if flat.wide is not None:
        out["wide"] = flat.wide.data.numpy().view("int32")
        if getattr(flat.wide, "q", None) is not None:  # compressed rows (layout wide4q, wide_q.py)
            out["q"] = flat.wide.q.numpy()
    return out


MAG_THREADS = refit.magnitude_threads()


def set_mode(m: str) -> None:
    """``m``: a ``wide_refit.TRI_REFITS`` name, optionally ``@threads`` of the magnitude's first pass
    (``refit.set_magnitude_threads``; without it the default)."""
    name, _, threads = m.partition("@")
    wide_refit.set_tri_refit(name)
    refit.set_magnitude_threads(int(threads) if threads else MAG_THREADS)


def tri_refit_ab(scene, modes: list[str]) -> dict:
    """The refits of ``modes`` on one scene, interleaved call by call: update+sync wall and refit GPU time
    (CUDA events around ``TriangleScene.refit``) medians, the equality check and the completion's cost."""
    flat = scene._core.flat
    default = wide_refit.tri_refit()
    wall = {m: [] for m in modes}
    gpu = {m: [] for m in modes}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if cuda else None
    stream = wp.stream_from_torch(torch.cuda.current_stream()) if cuda else None
    k = 0
    for i in range(a.repeats + 5):
        for m in modes:
            set_mode(m)
            k ^= 1
            sync()
            t0 = time.perf_counter()
            scene.update_mesh_vertices(0, sets[k])
            scene.sync()
            sync()
            if i >= 5:
                wall[m].append((time.perf_counter() - t0) * 1e3)
            if cuda:
                ev[0].record()
                flat.refit(stream)
                ev[1].record()
                torch.cuda.synchronize()
                if i >= 5:
                    gpu[m].append(ev[0].elapsed_time(ev[1]))
    rec = {f"{m}_update_sync_ms": statistics.median(wall[m]) for m in modes}
    rec.update({f"{m}_refit_gpu_ms": statistics.median(gpu[m]) for m in modes if gpu[m]})
    if cuda and flat.pairs is not None and not a.quick:  # the floor: the leaf triangles alone (a thread per slot)
        from rayd.engine.pair_nodes import _leaf_tris_kernel
        g = []
        for _ in range(25):
            ev[0].record()
            wp.launch(_leaf_tris_kernel, flat.num_triangles,
                      [flat.points, flat.indices, flat.face_base, flat.nodes.primitives], [flat.pairs.tris],
                      device=flat.device, stream=stream)
            ev[1].record()
            torch.cuda.synchronize()
            g.append(ev[0].elapsed_time(ev[1]))
        rec["tris_floor_ms"] = statistics.median(g[5:])
    # equality: the full refit's bits against each wide refit's (at once, then after complete())
    rec["same"] = {}
    for m in [x for x in modes if x != "full" and not a.quick]:
        if flat.wide is None:
            break
        set_mode("full")
        scene.update_mesh_vertices(0, sets[0])
        scene.sync()
        want = state(flat)
        scene.update_mesh_vertices(0, sets[1])  # every structure now holds the other vertex set
        scene.sync()
        set_mode(m)
        scene.update_mesh_vertices(0, sets[0])
        scene.sync()
        sync()
        got = state(flat)
        same_now = all(bool((got[x] == want[x]).all()) for x in ("wide", "tris", "magnitude", "q") if x in want)
        flat.complete(stream)
        sync()
        got = state(flat)
        rec["same"][m] = f"{same_now}/{all(bool((got[x] == want[x]).all()) for x in want)}"
    if len(rec["same"]):
        done = []
        for _ in range(12):  # the completion's cost (the fused refit), timed as a query would run it
            scene.update_mesh_vertices(0, sets[0])
            scene.sync()
            sync()
            t0 = time.perf_counter()
            flat.complete(stream)
            sync()
            done.append((time.perf_counter() - t0) * 1e3)
        rec.update(complete_ms=statistics.median(done[2:]))
    if cuda and not a.quick:
        for m in modes:
            set_mode(m)
            ms, per_call, rows = kernel_census(scene, ("_fused_refit_kernel", "_level_refit_kernel",
                                                       "_leaf_climb_kernel", "_node_climb_kernel",
                                                       "_leaf_boxes_kernel", "_level_kernel",
                                                       "_leaf_climb_rows", "_tris_fold_kernel", "_split_",
                                                       "_quantise_kernel"))
            rec[f"{m}_kernel_ms"], rec[f"{m}_kernels_per_call"] = ms, per_call
            if a.list:
                print(f"    {m}: " + "".join(f"\n      {c:4.0f} x {us:9.1f} us  {key}" for c, us, key in rows))
    set_mode(default)
    return rec


def warp_refit() -> float:
    """``wp.Mesh.refit`` of the current mesh (CUDA events, median of 30 after 5)."""
    wdev = wp.device_from_torch(V.device)
    p0 = wp.array(w.vertices.astype("float32"), dtype=wp.vec3, device=wdev)
    p1 = wp.array((w.vertices * 1.0001).astype("float32"), dtype=wp.vec3, device=wdev)
    mesh = wp.Mesh(points=wp.clone(p0), indices=wp.array(w.faces.astype("int32").ravel(), dtype=wp.int32, device=wdev))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    g = []
    stream = wp.stream_from_torch(torch.cuda.current_stream())
    with wp.ScopedStream(stream):
        for i in range(35):
            wp.copy(mesh.points, p1 if i % 2 else p0)
            ev[0].record()
            mesh.refit()
            ev[1].record()
            torch.cuda.synchronize()
            g.append(ev[0].elapsed_time(ev[1]))
    return statistics.median(g[5:])


modes = [m for m in a.tri_refits.split(",") if m]
for wname in a.workloads.split(","):
    use(wname)
    print(f"{wname} {w.num_triangles:,d} tris on {dev}", flush=True)
    pts = torch.tensor(w.o[:1], device=dev)
    wref = None
    if a.warp and cuda:
        wref = warp_refit()
        print(f"warp wp.Mesh.refit {wref:.3f} ms (goal <= 1.3 x = {1.3 * wref:.3f} ms of update+sync)", flush=True)
        records.append(dict(engine="warp", workload=wname, refit_ms=wref, triangles=w.num_triangles))
    for builder in a.builders.split(","):
        for layout in a.layouts.split(","):
            for order in a.orders.split(","):
                try:
                    if modes:
                        triangles.set_bvh_constructor(builder)
                        triangles.set_bvh_layout(layout)
                        refit.set_refit_order(order)
                        scene = rt.Scene()
                        scene.add_mesh(rt.Mesh(V.clone(), F), dynamic=True)
                        scene.build()
                        flat = scene._core.flat
                        rec = dict(workload=wname, builder=builder, layout=layout, order=order,
                                   triangles=w.num_triangles, constructor_used=flat.constructor,
                                   wide=flat.wide is not None, **tri_refit_ab(scene, modes))
                        line = f"ab {wname} {builder}/{layout}/{order} ({flat.constructor}, wide {int(flat.wide is not None)})"
                        for m in modes:
                            line += f"  {m}: update+sync {rec[m + '_update_sync_ms']:.3f} ms"
                            if cuda:
                                line += f" refit GPU {rec[m + '_refit_gpu_ms']:.3f}"
                            if m + "_kernel_ms" in rec:
                                line += f" kernel {rec[m + '_kernel_ms']:.3f} ({rec[m + '_kernels_per_call']:.0f}/call)"
                            if wref:
                                line += f" = {rec[m + '_update_sync_ms'] / wref:.2f} x warp"
                        for m in modes[1:]:
                            r = rec[m + "_update_sync_ms"] / rec[modes[0] + "_update_sync_ms"]
                            line += f"  ratio {m}/{modes[0]} {r:.3f}"
                            if cuda:
                                line += f" (GPU {rec[m + '_refit_gpu_ms'] / rec[modes[0] + '_refit_gpu_ms']:.3f})"
                        if rec.get("tris_floor_ms") is not None:
                            line += f"  tris-only kernel {rec['tris_floor_ms']:.3f} ms"
                        if rec.get("complete_ms") is not None:
                            line += f"  complete {rec['complete_ms']:.3f} ms"
                        line += "  same " + " ".join(f"{m} {x}" for m, x in rec["same"].items())
                        print(line, flush=True)
                        records.append(rec)
                    else:
                        records.append(measure(builder, layout, order))
                except Exception as error:  # (one case failing must not lose the others' figures)
                    print(f"{wname} builder {builder} layout {layout} order {order}: FAILED {type(error).__name__}: "
                          f"{error}", flush=True)
                    records.append(dict(workload=wname, builder=builder, layout=layout, order=order,
                                        error=repr(error)))
triangles.set_bvh_constructor("auto")
triangles.set_bvh_layout("auto")
refit.set_refit_order("climb1")
if a.json:
    Path(os.path.dirname(a.json) or ".").mkdir(parents=True, exist_ok=True)
    with open(a.json, "w") as fh:
        json.dump(records, fh, indent=1)
    print("wrote", a.json)
