"""Work per ray of the pair walk, the 4-wide walk and the compressed 4-wide walk over the same tree
(issue 18), and their search-kernel times in the same process.

    python benchmarks/wide_counts.py                          # terrain 2 M, sphere 1 M, dragon 871 k (CPU)
    python benchmarks/wide_counts.py --workloads terrain_C8_S16 --rays 256 --repeats 1
    python benchmarks/wide_counts.py --workloads terrain_C1024_S2048,sphere_1M_4Mrays --constructor ploc

One ``TriangleScene(layout="wide4q")`` per workload holds the three layouts of one tree (SAH, or PLOC with
``--constructor ploc``: the wide nodes are collapsed from its pair nodes and share their leaves, the
compressed nodes, ``wide_q.py``, are quantised from the wide ones), so the walks see the same
triangles. Counting copies of the walks (``pair_walk._walk_flat_pairs``, ``wide_walk.make_wide_walk``
over float and compressed rows, same arithmetic, plus per-ray tallies) give, per ray (mean):
inner nodes fetched, child boxes tested (non-empty slots), child boxes entered, triangle tests,
stack pushes and pops, and node bytes read (pair: 48 B of boxes + 16 B of refs when a child is
entered; wide: 96 + 16; compressed: 48 + 16, except the top ``wide_q.FLOAT_TOP`` nodes, read from the
float rows; ``--float-top`` sets it). The compressed walk's extra entries and triangle tests
are what its looser (decoded) boxes cost. Winners are compared between the production kernels
(fraction of rays with the same face). Times: the production search kernels (``intersect.search_kernel``,
``flat_pair`` / ``flat_wide`` / ``flat_wide_q``), closest and any hit, round-robin, medians of ``--repeats``;
wall and process-CPU time (a shared machine: read the counts first). The rays are every
k-th ray of the workload (``--rays`` of them), Embree off; ``--collapse`` picks how the wide
nodes are grouped (``wide_nodes.COLLAPSE``).
Output: a table on stdout and JSON (``--output``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"  # noqa: A001
try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import warp as wp  # noqa: E402

from benchmarks import workloads as _workloads  # noqa: E402
from benchmarks.measure import git_info, machine_info, median  # noqa: E402
from rayd.engine.native import load4, load4i  # noqa: E402
from rayd.engine.pair_walk import _slab, _slot_face  # noqa: E402
from rayd.engine.traversal import SceneView, _approach  # noqa: E402
from rayd.engine.watertight import INF, ray_shear, safe_direction  # noqa: E402
from rayd.engine.wide_nodes import STACK  # noqa: E402
from rayd.engine.wide_walk import _float_children, _float_refs, _near_rows, _q_children, _q_refs, _sort2  # noqa: E402

K = 7
NAMES = ("nodes", "boxes_tested", "boxes_entered", "tri_tests", "pushes", "pops", "node_bytes")


@wp.func
def _tally(stats: wp.array(dtype=wp.int32), row: int, k: int, amount: int):
    stats[K * row + k] = stats[K * row + k] + amount


@wp.func
def _count_pair(view: SceneView, o0: wp.vec3, d: wp.vec3, stats: wp.array(dtype=wp.int32), row: int) -> int:
    s = _approach(o0, d, view.flat_magnitude[0])
    if s < 0.0:
        return -1
    o = o0 + s * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    k, sh = ray_shear(d)
    best = float(INF)
    face = int(-1)
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    ref = view.flat_pair_root
    while True:
        if ref >= 0:
            _tally(stats, row, 0, 1)
            _tally(stats, row, 1, 2)
            _tally(stats, row, 6, 48)
            b0 = load4(view.flat_pair_boxes, 4 * ref)
            b1 = load4(view.flat_pair_boxes, 4 * ref + 1)
            b2 = load4(view.flat_pair_boxes, 4 * ref + 2)
            reach = best - s
            t_left = _slab(o, inv_d, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], reach)
            t_right = _slab(o, inv_d, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3], reach)
            if t_left < INF or t_right < INF:
                _tally(stats, row, 6, 16)
                links = load4i(view.flat_pair_links, 4 * ref + 3)
                if t_left < INF and t_right < INF:
                    _tally(stats, row, 2, 2)
                    _tally(stats, row, 4, 1)
                    if t_right < t_left:
                        stack[count] = links[0]
                        ref = links[1]
                    else:
                        stack[count] = links[1]
                        ref = links[0]
                    count += 1
                elif t_left < INF:
                    _tally(stats, row, 2, 1)
                    ref = links[0]
                else:
                    _tally(stats, row, 2, 1)
                    ref = links[1]
                continue
        else:
            code = -1 - ref
            first = code >> 3
            for slot in range(first, first + (code & 7) + 1):
                _tally(stats, row, 3, 1)
                th, f = _slot_face(view, slot, o, k, sh, s, o0, d, 0.0, best, -1)
                if th < best:
                    best = th
                    face = f
        if count == 0:
            break
        _tally(stats, row, 5, 1)
        count -= 1
        ref = stack[count]
    return face


def _make_count_wide(children: wp.Function, refs: wp.Function, compressed: int) -> wp.Function:
    """A counting copy of ``wide_walk.make_wide_walk(children, refs)``; box bytes read per node fetch: float
    rows 96, compressed 48 (header, xy, z; ``compressed``, for the nodes from ``view.flat_wide_qfrom`` on),
    16 more for the refs when a child is entered."""

    @wp.func
    def count_wide(view: SceneView, o0: wp.vec3, d: wp.vec3, stats: wp.array(dtype=wp.int32), row: int) -> int:
        s = _approach(o0, d, view.flat_magnitude[0])
        if s < 0.0:
            return -1
        o = o0 + s * d
        inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
        near = _near_rows(inv_d)
        k, sh = ray_shear(d)
        best = float(INF)
        face = int(-1)
        stack = wp.vector(dtype=wp.int32, length=STACK)
        count = int(0)
        ref = view.flat_wide_root
        while True:
            if ref >= 0:
                _tally(stats, row, 0, 1)
                _tally(stats, row, 6, wp.where(compressed != 0 and ref >= view.flat_wide_qfrom, 48, 96))
                src = load4i(view.flat_wide_links, 8 * ref + 7)  # counting only: which slots are used
                for j in range(4):
                    if src[j] >= 0:
                        _tally(stats, row, 1, 1)
                t = children(view, ref, near, o, inv_d, best - s)
                if t[0] < INF or t[1] < INF or t[2] < INF or t[3] < INF:
                    _tally(stats, row, 6, 16)
                    r = refs(view, ref)
                    d0, r0, d1, r1 = _sort2(t[0], r[0], t[1], r[1])
                    d2, r2, d3, r3 = _sort2(t[2], r[2], t[3], r[3])
                    d0, r0, d2, r2 = _sort2(d0, r0, d2, r2)
                    d1, r1, d3, r3 = _sort2(d1, r1, d3, r3)
                    d1, r1, d2, r2 = _sort2(d1, r1, d2, r2)
                    _tally(stats, row, 2, 1)
                    if d3 < INF:
                        _tally(stats, row, 2, 1)
                        _tally(stats, row, 4, 1)
                        stack[count] = r3
                        count += 1
                    if d2 < INF:
                        _tally(stats, row, 2, 1)
                        _tally(stats, row, 4, 1)
                        stack[count] = r2
                        count += 1
                    if d1 < INF:
                        _tally(stats, row, 2, 1)
                        _tally(stats, row, 4, 1)
                        stack[count] = r1
                        count += 1
                    ref = r0
                    continue
            else:
                code = -1 - ref
                first = code >> 3
                for slot in range(first, first + (code & 7) + 1):
                    _tally(stats, row, 3, 1)
                    th, f = _slot_face(view, slot, o, k, sh, s, o0, d, 0.0, best, -1)
                    if th < best:
                        best = th
                        face = f
            if count == 0:
                break
            _tally(stats, row, 5, 1)
            count -= 1
            ref = stack[count]
        return face

    return count_wide


_count_wide = _make_count_wide(_float_children, _float_refs, 0)
_count_wide_q = _make_count_wide(_q_children, _q_refs, 1)


@wp.kernel
def _count_kernel(view: SceneView, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), wide: int,
                  stats: wp.array(dtype=wp.int32), faces: wp.array(dtype=wp.int32)):
    i = wp.tid()
    if wide == 2:
        faces[i] = _count_wide_q(view, o[i], d[i], stats, i)
    elif wide == 1:
        faces[i] = _count_wide(view, o[i], d[i], stats, i)
    else:
        faces[i] = _count_pair(view, o[i], d[i], stats, i)


def run_workload(name: str, factory, args) -> dict:
    from rayd.engine import cpu_embree, intersect
    from rayd.engine.accel import flat_accel
    from rayd.engine.rays import RayBatch
    from rayd.engine.runtime import launch_rows
    from rayd.engine.triangles import TriangleScene

    cpu_embree.set_enabled(False)
    device = wp.get_device(args.device)
    wl = factory()
    stride = max(1, wl.num_rays // args.rays)
    o_np, d_np = wl.o[::stride][: args.rays], wl.d[::stride][: args.rays]
    n = len(o_np)
    points = wp.array(wl.vertices, dtype=wp.vec3, device=device)
    indices = wp.array(wl.faces.ravel(), dtype=wp.int32, device=device)
    t0 = time.perf_counter()
    tri = TriangleScene(points, indices, layout="wide4q", bvh_constructor=args.constructor)
    wp.synchronize_device(device)
    build_s = time.perf_counter() - t0
    assert tri.wide is not None, "the wide walk's stack would overflow on this tree"
    accel = flat_accel(tri)
    o = wp.array(o_np, dtype=wp.vec3, device=device)
    d = wp.array(d_np, dtype=wp.vec3, device=device)
    res = {"workload": wl.describe(), "collapse": tri.wide.collapse, "rays_counted": n, "build_s": round(build_s, 3),
           "pair_inner_nodes": tri.pairs.boxes.shape[0] // 4, "wide_nodes": tri.wide.count,
           "wide_stack_need": tri.wide.stack_need, "pair_layout_bytes": int(tri.pairs.boxes.capacity),
           "wide_layout_bytes": int(tri.wide.nbytes), "wide_q_bytes": 64 * tri.wide.count, "constructor": args.constructor,
           "float_top": int(tri.wide.q_from),
           "counts": {}, "times_ms": {}}
    faces = {}
    for kind, flag in (("pair", 0), ("wide4", 1), ("wide4q", 2)):
        stats = wp.zeros(K * n, dtype=wp.int32, device=device)
        out = wp.empty(n, dtype=wp.int32, device=device)
        wp.launch(_count_kernel, n, [accel.view, o, d, flag], [stats, out], device=device)
        per = stats.numpy().reshape(n, K).astype(np.float64)
        res["counts"][kind] = {k: round(float(per[:, j].mean()), 3) for j, k in enumerate(NAMES)}
        faces[kind] = out.numpy()
    res["count_walks_same_face"] = float((faces["pair"] == faces["wide4"]).mean())
    res["count_walks_same_face_q"] = float((faces["wide4q"] == faces["wide4"]).mean())
    tmin = wp.zeros(1, dtype=float, device=device)
    tmax = wp.full(1, float("inf"), dtype=float, device=device)
    active = wp.ones(1, dtype=wp.uint8, device=device)
    rays = RayBatch(o, d, tmin, tmax, active, accel.no_ignore)
    outs = {k: wp.empty(n, dtype=wp.int32, device=device) for k in ("flat_pair", "flat_wide", "flat_wide_q")}

    def search(walk, any_hit):
        launch_rows(intersect.search_kernel(walk), n, [accel.view, *rays.launch_args(n), int(any_hit)], [outs[walk]],
                    device, None)
        wp.synchronize_device(device)

    for any_hit in (0, 1):
        label = "any_hit" if any_hit else "closest"
        samples = {w: ([], []) for w in outs}
        for w in outs:
            search(w, any_hit)  # compile / warm
        if not any_hit:
            res["kernels_same_face"] = float((outs["flat_pair"].numpy() == outs["flat_wide"].numpy()).mean())
            res["kernels_same_face_q"] = float((outs["flat_wide_q"].numpy() == outs["flat_wide"].numpy()).mean())
        for _ in range(args.repeats):
            for w in outs:
                c0, w0 = time.process_time(), time.perf_counter()
                search(w, any_hit)
                samples[w][0].append(1e3 * (time.perf_counter() - w0))
                samples[w][1].append(1e3 * (time.process_time() - c0))
        for w, (wall, cpu) in samples.items():
            res["times_ms"][f"{w}_{label}"] = {"wall": round(median(wall), 2), "cpu": round(median(cpu), 2)}
    return res


def markdown(results: list[dict]) -> str:
    lines = ["| workload | layout | " + " | ".join(NAMES) + " | closest wall / cpu ms | any hit wall / cpu ms |",
             "|---|---|" + "---|" * (len(NAMES) + 2)]
    for r in results:
        for kind, walk in (("pair", "flat_pair"), ("wide4", "flat_wide"), ("wide4q", "flat_wide_q")):
            c = r["counts"][kind]
            tc, ta = r["times_ms"][f"{walk}_closest"], r["times_ms"][f"{walk}_any_hit"]
            lines.append(f"| {r['workload']['workload']} | {kind} | " + " | ".join(f"{c[k]:.2f}" for k in NAMES)
                         + f" | {tc['wall']:.1f} / {tc['cpu']:.1f} | {ta['wall']:.1f} / {ta['cpu']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--workloads", default="terrain_C1024_S2048,sphere_1M_4Mrays,dragon_871k_bsphere_4Mrays")
    p.add_argument("--rays", type=int, default=65536)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--mesh-dir", default=None)
    p.add_argument("--collapse", choices=("sah", "greedy"), default="sah", help="wide_nodes.COLLAPSE")
    p.add_argument("--constructor", choices=("sah", "ploc"), default="sah", help="the tree's builder")
    p.add_argument("--float-top", type=int, default=None, help="wide_q.FLOAT_TOP (default: the module's)")
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)
    wp.init()
    from rayd.engine import wide_nodes

    wide_nodes.COLLAPSE = args.collapse
    if args.float_top is not None:
        from rayd.engine import wide_q

        wide_q.FLOAT_TOP = args.float_top
    factories = {**_workloads.suite("cuda", mesh_dir=args.mesh_dir), **_workloads.suite("cpu", mesh_dir=args.mesh_dir),
                 **_workloads.tiny()}
    results = []
    for name in args.workloads.split(","):
        results.append(run_workload(name, factories[name], args))
        r = results[-1]
        print(f"{name}: {r['pair_inner_nodes']} pair nodes -> {r['wide_nodes']} wide nodes "
              f"(stack need {r['wide_stack_need']}), build {r['build_s']} s, same face {r['kernels_same_face']:.6f}, "
              f"wide4q vs wide4 {r['kernels_same_face_q']:.6f}",
              flush=True)
    print(markdown(results))
    out = {"argv": sys.argv[1:] if argv is None else argv, "machine": machine_info(args.device), "git": git_info(),
           "results": results}
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.output}")
    return out


if __name__ == "__main__":
    main()
