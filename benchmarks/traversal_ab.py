"""A/B of rayd's traversal variants in one process (issue 18), beside Mitsuba and Warp.

    python benchmarks/traversal_ab.py --device cuda          # terrain 2M coherent + sphere 1M incoherent, 4M rays
    python benchmarks/traversal_ab.py --device cpu           # the CPU sizes (256 k rays)
    python benchmarks/traversal_ab.py --variants warp,pair,pair:cubql --engines mitsuba,warp-sah,warp-cubql

A variant is ``layout[:constructor][+warprefit]``: ``layout`` the node layout the search
walks (``warp``: Warp's nodes, the code before issue 18; ``pair``: rayd's child-pair
nodes, ``rayd.engine.pair_nodes``, with leaf-ordered triangles and the per-ray shear;
``wide4``: 4-wide nodes collapsed from the pair nodes, ``rayd.engine.wide_nodes``; ``wide4q``: the
same with compressed copies of them, 8-bit child boxes, ``rayd.engine.wide_q``; ``wide4q@N``: with
``wide_q.FLOAT_TOP = N``, the nodes the walk reads from their float rows),
``constructor`` the triangle BVH builder (``sah`` default, ``cubql``: Warp 1.19's GPU
binned-SAH builder, CUDA only), ``+warprefit`` Warp's refit plus a copy instead of the
fused refit (``rayd.engine.refit``). Every variant is a separate
``rayd.torch.Scene`` of the same tensors, built in this process; each metric is timed
round-robin over the variants (repeat k of every variant, then repeat k+1), so drift of
the machine hits all variants alike. Metrics (medians, ms): closest hit ``RayFlags.All``
and ``Minimal``, any hit (``shadow_test``), forward+backward (sum of ``t`` over hits to
the vertex tensor), ``update_mesh_vertices`` + ``sync()`` (refit), ``build()``. The
other engines (``benchmarks/engines``) are timed on closest hit only, after the variants.

On the CPU, Embree is turned off (``cpu_embree.set_enabled(False)``; ``--embree`` keeps it), so
the variants timed are rayd's own walks. Clock: wall time on CUDA; on the CPU the process's CPU time (all threads) is the figure
(``--clock wall`` for wall time): on a shared machine it is much less sensitive to other
processes than wall time, though not to their use of caches and memory bandwidth.

Agreement: every variant's ``prim_id`` and ``t`` are compared with the first variant's
(fraction of rays with the same winner; shared-edge ties may differ).
Output: a Markdown table on stdout and one JSON file (``--output``, default
``benchmarks/results/traversal_ab-<device>-<time>.json``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"  # noqa: A001
try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks import workloads as _workloads  # noqa: E402
from benchmarks.measure import git_info, machine_info, median, package_versions  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_WORKLOADS = {"cuda": "terrain_C1024_S2048,sphere_1M_4Mrays", "cpu": "terrain_C256_S512,sphere_64k_256krays"}
METRICS = ("closest_all", "closest_minimal", "any_hit", "forward_backward", "update", "build")


class Variant:
    """One rayd configuration: its scenes (plain and differentiable) over the workload's tensors."""

    def __init__(self, spec: str, torch, rt, vertex_sets, faces, ray, device: str) -> None:
        from rayd.engine import triangles

        self.spec = spec
        base, _, refit = spec.partition("+")
        self.refit = "warp" if refit == "warprefit" else "fused"
        self.layout, _, self.constructor = base.partition(":")
        self.layout, _, top = self.layout.partition("@")
        self.float_top = int(top) if top else None  # wide4q@N: wide_q.FLOAT_TOP = N for its scenes
        self.constructor = self.constructor or "sah"
        self.torch, self.rt, self.triangles = torch, rt, triangles
        self.vertex_sets, self.faces, self.ray, self.device = vertex_sets, faces, ray, device
        self.scene = self._new_scene(vertex_sets[0])
        self.grad_vertices = vertex_sets[0].clone().requires_grad_(True)
        self.grad_scene = self._new_scene(self.grad_vertices)
        self.flip = 0

    def _new_scene(self, vertices):
        t = self.triangles
        was_layout = t.bvh_layout()
        was_constructor = t.bvh_constructor() if hasattr(t, "bvh_constructor") else None
        was_refit = t.refit_kind() if hasattr(t, "refit_kind") else None
        t.set_bvh_layout(self.layout)
        from rayd.engine import wide_q

        was_top = wide_q.FLOAT_TOP
        if self.float_top is not None:
            wide_q.FLOAT_TOP = self.float_top
        if was_refit is not None:
            t.set_refit(self.refit)
        if self.constructor != "sah" or was_constructor is not None:
            if not hasattr(t, "set_bvh_constructor"):
                raise SystemExit(f"variant {self.spec}: this rayd has no set_bvh_constructor")
            t.set_bvh_constructor(self.constructor)
        try:
            scene = self.rt.Scene()
            scene.add_mesh(self.rt.Mesh(vertices, self.faces), dynamic=True)
            scene.build()
        finally:
            wide_q.FLOAT_TOP = was_top
            t.set_bvh_layout(was_layout)
            if was_refit is not None:
                t.set_refit(was_refit)
            if was_constructor is not None:
                t.set_bvh_constructor(was_constructor)
        return scene

    def run(self, metric: str):
        rt = self.rt
        if metric == "closest_all":
            return self.scene.intersect(self.ray, flags=rt.RayFlags.All)
        if metric == "closest_minimal":
            return self.scene.intersect(self.ray, flags=rt.RayFlags.Minimal)
        if metric == "any_hit":
            return self.scene.shadow_test(self.ray)
        if metric == "forward_backward":
            self.grad_vertices.grad = None
            hit = self.grad_scene.intersect(self.ray, flags=rt.RayFlags.Minimal)
            zero = self.torch.zeros((), dtype=hit.t.dtype, device=hit.t.device)
            self.torch.where(hit.is_valid(), hit.t, zero).sum().backward()
            return None
        if metric == "update":
            self.flip ^= 1
            self.scene.update_mesh_vertices(0, self.vertex_sets[self.flip])
            self.scene.sync()
            return None
        if metric == "build":
            return self._new_scene(self.vertex_sets[0])
        raise ValueError(metric)

    def restore(self) -> None:
        if self.flip:
            self.run("update")

    def accel_bytes(self) -> dict:
        flat = self.scene._core.accel.flat
        out = {"warp_nodes": int(flat.nodes.lowers.capacity * 2)}
        if getattr(flat, "pairs", None) is not None:
            out["pair_layout"] = int(flat.pairs.nbytes)
        if getattr(flat, "wide", None) is not None:
            out["wide_layout"] = int(flat.wide.nbytes)
            if getattr(flat.wide, "q", None) is not None:
                out["wide_q_layout"] = 64 * int(flat.wide.count)
        return out


CLOCK = {"clock": "wall"}


def _timed(fn, sync) -> float:
    import time

    clock = time.process_time if CLOCK["clock"] == "cpu" else time.perf_counter
    sync()
    start = clock()
    out = fn()
    sync()
    elapsed = (clock() - start) * 1e3
    del out
    return elapsed


def bench_workload(wl, args, torch, rt) -> dict:
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    vertex_sets = [torch.from_numpy(wl.vertices).to(dev), torch.from_numpy(wl.moved_vertices()).to(dev)]
    faces = torch.from_numpy(wl.faces).to(dev)
    ray = rt.Ray(torch.from_numpy(wl.o).to(dev), torch.from_numpy(wl.d).to(dev))
    variants = [Variant(s, torch, rt, vertex_sets, faces, ray, args.device) for s in args.variants.split(",")]
    result = {"workload": wl.describe(), "variants": {}, "engines": {}}
    ref = variants[0].run("closest_minimal")
    ref_prim, ref_t = ref.prim_id.cpu().numpy(), ref.t.cpu().numpy()
    for v in variants:
        hit = v.run("closest_minimal")
        prim, t = hit.prim_id.cpu().numpy(), hit.t.cpu().numpy()
        both = (prim >= 0) & (ref_prim >= 0)
        result["variants"][v.spec] = {
            "same_winner": float((prim == ref_prim).mean()),
            "same_hit_miss": float(((prim >= 0) == (ref_prim >= 0)).mean()),
            "max_t_rel_diff": float(np.max(np.abs(t[both] - ref_t[both]) / np.maximum(np.abs(ref_t[both]), 1e-30),
                                           initial=0.0)),
            "accel_bytes": v.accel_bytes(),
            "timings_ms": {},
        }
    for metric in args.metrics.split(","):
        repeats = args.build_repeats if metric == "build" else args.repeats
        for v in variants:
            for _ in range(args.warmup if metric != "build" else 1):
                v.run(metric)
        samples = {v.spec: [] for v in variants}
        for _ in range(repeats):
            for v in variants:
                samples[v.spec].append(_timed(lambda v=v: v.run(metric), sync))
        for v in variants:
            result["variants"][v.spec]["timings_ms"][metric] = samples[v.spec]
            result["variants"][v.spec][f"{metric}_ms"] = median(samples[v.spec])
    for v in variants:
        v.restore()
    del variants
    if args.engines:
        result["engines"] = bench_engines(wl, args)
    return result


def bench_engines(wl, args) -> dict:
    from benchmarks.engines import ENGINES

    extra = _extra_engines()
    out = {}
    for name in [n.strip() for n in args.engines.split(",") if n.strip()]:
        cls = ENGINES.get(name) or extra.get(name)
        if cls is None:
            out[name] = {"skipped": f"unknown engine; known: {sorted(set(ENGINES) | set(extra))}"}
            continue
        reason = cls.missing(args.device)
        if reason:
            out[cls.name] = {"skipped": reason}
            continue
        engine = cls(args.device)
        rec = {}
        try:
            engine.load(wl)
            for metric, minimal in (("closest_all", False), ("closest_minimal", True)):
                for _ in range(args.warmup):
                    engine.closest(minimal=minimal)
                samples = [_timed(lambda m=minimal: engine.closest(minimal=m), engine.synchronize)
                           for _ in range(args.repeats)]
                rec[f"{metric}_ms"] = median(samples)
                rec.setdefault("timings_ms", {})[metric] = samples
        except Exception as exc:  # noqa: BLE001 - record and go on
            rec["error"] = f"{type(exc).__name__}: {exc}"
        engine.close()
        out[cls.name] = rec
    return out


def _extra_engines() -> dict:
    """Warp's ``wp.Mesh`` over cuBQL trees (leaf 2), what issue 18's probe measured."""
    from benchmarks.engines.warp_mesh import WarpMesh, wp

    class WarpMeshCubql(WarpMesh):
        name = "warp.mesh_query_ray[cubql leaf 2]"
        constructor = "cubql"

        @classmethod
        def missing(cls, device):
            return "cuBQL builds on CUDA only" if device != "cuda" else WarpMesh.missing(device)

        def _new_mesh(self):
            with wp.ScopedDevice(self.wp_device):
                return wp.Mesh(points=self.points, indices=self.indices, bvh_constructor="cubql", bvh_leaf_size=2)

    return {"warp-cubql": WarpMeshCubql}


def markdown(results: list[dict]) -> str:
    lines = []
    for res in results:
        name = res["workload"]["workload"]
        specs = list(res["variants"])
        engines = [e for e, r in res["engines"].items() if "closest_all_ms" in r]
        head = ["metric (ms)"] + [f"rayd {s}" for s in specs] + [f"{specs[-1]} / {specs[0]}"] + engines
        lines += [f"\n**{name}** ({res['workload']['triangles']} triangles, {res['workload']['rays']} rays)\n",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for metric in METRICS:
            vals = [res["variants"][s].get(f"{metric}_ms") for s in specs]
            if vals[0] is None:
                continue
            row = [metric] + [f"{x:.3f}" for x in vals] + [f"{vals[-1] / vals[0]:.2f}" if vals[0] else "-"]
            row += [f"{res['engines'][e].get(metric + '_ms'):.3f}" if res["engines"][e].get(metric + "_ms") else "-"
                    for e in engines]
            lines.append("| " + " | ".join(row) + " |")
        agree = ", ".join(f"{s}: {res['variants'][s]['same_winner']:.6f}" for s in specs[1:])
        lines.append(f"\nsame winner as {specs[0]}: {agree or '-'}; accel bytes: "
                     + ", ".join(f"{s}: {res['variants'][s]['accel_bytes']}" for s in specs))
        for e, r in res["engines"].items():
            if "closest_all_ms" not in r:
                lines.append(f"- {e}: {r.get('skipped') or r.get('error')}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default=None)
    p.add_argument("--workloads", default=None, help="comma-separated names from benchmarks/workloads.py")
    p.add_argument("--variants", default="warp,pair",
                   help="comma-separated layout[:constructor][+warprefit]; the first is the baseline")
    p.add_argument("--engines", default="mitsuba,warp-sah,warp-cubql", help="other engines ('' for none)")
    p.add_argument("--metrics", default=",".join(METRICS), help=f"comma-separated subset of {','.join(METRICS)}")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--build-repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--output", default=None)
    p.add_argument("--embree", action="store_true", help="CPU: keep Embree serving flat scenes (default: off)")
    p.add_argument("--clock", choices=("wall", "cpu"), default=None,
                   help="default: wall on CUDA, cpu (process time) on the CPU")
    args = p.parse_args(argv)
    import torch

    import rayd.torch as rt

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    CLOCK["clock"] = args.clock or ("wall" if args.device == "cuda" else "cpu")
    if args.device == "cpu" and not args.embree:
        from rayd.engine import cpu_embree

        cpu_embree.set_enabled(False)
    names = (args.workloads or DEFAULT_WORKLOADS[args.device]).split(",")
    factories = {}
    for dev in ("cpu", "cuda"):
        factories.update(_workloads.suite(dev))
    factories.update(_workloads.tiny())
    results = []
    for name in names:
        wl = factories[name]()
        results.append(bench_workload(wl, args, torch, rt))
        del wl
    stamp = _dt.datetime.now(_dt.timezone.utc)
    out = {"time": stamp.isoformat(timespec="seconds"), "argv": sys.argv[1:] if argv is None else argv,
           "machine": machine_info(args.device), "versions": package_versions(), "git": git_info(),
           "clock": CLOCK["clock"], "results": results}
    path = Path(args.output) if args.output else RESULTS_DIR / f"traversal_ab-{args.device}-{stamp:%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"clock: {CLOCK['clock']}")
    print(markdown(results))
    print(f"\nwrote {path}")
    return out


if __name__ == "__main__":
    main()
