"""Run the benchmark suite: every installed engine on the same workloads, JSON lines out.

    python benchmarks/run.py --device cpu                  # issue 3's CPU sizes
    python benchmarks/run.py --device cuda                 # issue 3's GPU sizes (4 M rays)
    python benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays
    python benchmarks/run.py --quick                       # small subset (python -m rayd bench)

Per workload and engine: closest hit (all fields; rayd ``RayFlags.All``), reduced
(``RayFlags.Minimal``), forward+backward (sum of ``t`` over hits, backward to the vertex
tensor), update (all vertices moved, then sync/refit), build (after the first), peak
memory of one closest-hit call, and rays/s. Each timing is the median of ``--repeats``
(default 20) synchronised calls after ``--warmup`` calls, in one warm process.

Agreement: every engine's closest hits are compared with the first engine's (rayd when
installed): hit/miss must agree on >= 99.999 % of rays, and ``t`` within 1e-5 relative
where both hit on >= 99.999 % of those rays (ties on shared edges may pick different
triangles with the same ``t``); a ``t`` difference at grazing incidence (|cos| < 0.02,
where float32 ``t`` is ill-conditioned) is reported but not held against the engine.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"  # noqa: A001
try:
    import rayd  # noqa: F401
except ImportError:  # a source checkout without `pip install -e .`: use src/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks import workloads as _workloads  # noqa: E402
from benchmarks.engines import ENGINES, NotSupported  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    agreement,
    git_info,
    host_peak_memory,
    load_average,
    machine_info,
    median,
    package_versions,
    time_ms,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
STAGES = ("load", "agree", "closest_all", "closest_minimal", "memory", "forward_backward", "update", "update_closest",
          "build")


# --------------------------------------------------------------------------- helpers
class _Bar:
    """tqdm if installed, else one line per step on stderr."""

    def __init__(self, total: int, disable: bool = False) -> None:
        try:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="step", dynamic_ncols=True, disable=disable, file=sys.stderr)
        except ImportError:
            self._bar = None
        self.total, self.n, self.disable = total, 0, disable

    def step(self, label: str) -> None:
        self.n += 1
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(1)
        elif not self.disable:
            print(f"[{self.n}/{self.total}] {label}", file=sys.stderr, flush=True)

    def write(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def bench_engine(engine, wl, args, bar, reference) -> dict:
    """All metrics of one engine on one workload (the engine is loaded already)."""
    sync = engine.synchronize
    metrics, timings, notes = {}, {}, []
    label = f"{wl.name} {engine.name}"

    handle = engine.closest(minimal=False)
    sync()
    hits = engine.hits(handle)
    del handle
    agree = None if reference is None else agreement(reference["hits"], hits, wl)
    bar.step(f"{label} agree")

    for metric, minimal in (("closest_all", False), ("closest_minimal", True)):
        samples = time_ms(lambda m=minimal: engine.closest(minimal=m), sync, args.repeats, args.warmup)
        timings[metric] = samples
        metrics[f"{metric}_ms"] = median(samples)
        metrics[f"{metric}_min_ms"] = min(samples)
        metrics[f"{metric}_rays_per_s"] = wl.num_rays / (metrics[f"{metric}_ms"] * 1e-3)
        bar.step(f"{label} {metric}")

    if args.device == "cpu":
        metrics["peak_memory_bytes"] = host_peak_memory(lambda: engine.closest(minimal=False), sync, engine)
        metrics["peak_memory_kind"] = "host peak RSS growth during one call"
    else:
        metrics["peak_memory_bytes"] = engine.peak_memory(lambda: engine.closest(minimal=False))
        metrics["peak_memory_kind"] = "device allocations during one call (engine's allocator)"
    bar.step(f"{label} memory")

    gradient = None
    try:
        samples = time_ms(engine.forward_backward, sync, args.repeats, args.warmup)
        timings["forward_backward"] = samples
        metrics["forward_backward_ms"] = median(samples)
        grad = engine.last_gradient()
        if grad is not None:
            gradient = {"abs_sum": float(np.abs(grad).sum())}
            if reference is not None and reference.get("gradient") is not None:
                ref = reference["gradient"]
                gradient["rel_l2_vs_reference"] = float(np.linalg.norm(grad - ref) / max(np.linalg.norm(ref), 1e-30))
            else:
                gradient["array"] = grad
    except NotSupported as exc:
        metrics["forward_backward_ms"] = None
        notes.append(str(exc))
    bar.step(f"{label} forward_backward")

    try:
        calls = iter(range(1, 10**9))  # vertex sets 1, 0, 1, ...: every call moves all vertices
        samples = time_ms(lambda: engine.update(next(calls) % 2), sync, args.repeats, args.warmup)
        engine.update(0)
        sync()
        timings["update"] = samples
        metrics["update_ms"] = median(samples)
        metrics["update_kind"] = engine.update_kind
    except NotSupported as exc:
        metrics["update_ms"] = None
        notes.append(str(exc))
    bar.step(f"{label} update")

    try:  # an optimisation step's queries: all vertices moved, then the closest hits (Minimal) on the new geometry
        calls = iter(range(1, 10**9))
        samples = time_ms(lambda: (engine.update(next(calls) % 2), engine.closest(minimal=True)), sync, args.repeats,
                          args.warmup)
        engine.update(0)
        sync()
        timings["update_closest"] = samples
        metrics["update_closest_ms"] = median(samples)
    except NotSupported as exc:
        metrics["update_closest_ms"] = None
        notes.append(str(exc))
    bar.step(f"{label} update_closest")

    repeats = args.build_repeats if args.build_repeats is not None else args.repeats
    samples = time_ms(engine.build, sync, repeats, min(args.warmup, 1))
    timings["build"] = samples
    metrics["build_ms"] = median(samples)
    bar.step(f"{label} build")

    metrics["load_average_1min"] = load_average()
    return {"metrics": metrics, "timings_ms": timings, "agreement": agree, "notes": notes,
            "hits": hits, "gradient": gradient}


# --------------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if available, else cpu")
    p.add_argument("--quick", action="store_true", help="small subset, 5 repeats (what `python -m rayd bench` runs)")
    p.add_argument("--tiny", action="store_true", help="seconds-long workloads (CI smoke test)")
    p.add_argument("--workloads", default=None, help="comma-separated names (default: the device's suite); 'list' lists them")
    p.add_argument("--engines", default=None, help=f"comma-separated, from {','.join(ENGINES)} (default: all installed)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per metric (default 20; 5 with --quick)")
    p.add_argument("--build-repeats", type=int, default=None, help="timed builds (default: --repeats)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--meshes", default=None, help="folder of get_meshes.sh .npz files (default .device/meshes)")
    p.add_argument("--output", default=None, help="JSON lines file (default benchmarks/results/<device>-<time>.jsonl)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.device is None:
        args.device = _default_device()
    if args.repeats is None:
        args.repeats = 5 if (args.quick or args.tiny) else 20
    return args


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def select_workloads(args) -> dict:
    if args.tiny:
        available = _workloads.tiny()
    else:
        available = _workloads.suite(args.device, args.quick, args.meshes)
        if args.workloads:  # allow any suite's names (e.g. a GPU size on the CPU)
            for dev in ("cpu", "cuda"):
                for k, v in _workloads.suite(dev, False, args.meshes).items():
                    available.setdefault(k, v)
            available.update({k: v for k, v in _workloads.tiny().items() if k not in available})
    if args.workloads in (None, "", "all"):
        return available
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in available]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {sorted(available)}")
    return {n: available[n] for n in names}


def select_engines(args, bar_write=print) -> dict:
    names = list(ENGINES) if not args.engines else [n.strip() for n in args.engines.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise SystemExit(f"unknown engine(s) {unknown}; known: {list(ENGINES)}")
    chosen, skipped = {}, {}
    for n in names:
        reason = ENGINES[n].missing(args.device)
        if reason:
            skipped[ENGINES[n].name] = reason
            bar_write(f"skipping {ENGINES[n].name} on {args.device}: {reason}")
        else:
            chosen[n] = ENGINES[n]
    return chosen, skipped


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    if args.workloads == "list":
        for dev in ("cpu", "cuda"):
            print(dev + ":", ", ".join(_workloads.suite(dev, False, args.meshes)))
        print("quick:", ", ".join(_workloads.suite("cpu", True)), "| tiny:", ", ".join(_workloads.tiny()))
        return []
    workloads = select_workloads(args)
    engines, skipped = select_engines(args, lambda m: print(m, file=sys.stderr))
    if not engines:
        raise SystemExit("no engine available")

    stamp = _dt.datetime.now(_dt.timezone.utc)
    out_path = Path(args.output) if args.output else (
        RESULTS_DIR / ("quick" if (args.quick or args.tiny) else "") / f"{args.device}-{stamp:%Y%m%d-%H%M%S}.jsonl"
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    run_info = {
        "time": stamp.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "argv": list(sys.argv[1:] if argv is None else argv),
        "machine": machine_info(args.device),
        "versions": package_versions(),
        "git": git_info(),
        "device": args.device,
        "load_average_1min_at_start": load_average(),
        "repeats": args.repeats,
        "warmup": args.warmup,
    }
    records = []
    bar = _Bar(len(workloads) * len(engines) * len(STAGES), disable=args.no_progress)
    with open(out_path, "a") as out:
        for wl_name, factory in workloads.items():
            try:
                wl = factory()
            except FileNotFoundError as exc:
                bar.write(f"skipping workload {wl_name}: {exc}")
                for _ in range(len(engines) * len(STAGES)):
                    bar.step(f"{wl_name} skipped")
                continue
            reference = None
            for engine_cls in engines.values():
                engine = engine_cls(args.device)
                record = {**run_info, "engine": engine.name, "engine_versions": engine_cls.versions(), **wl.describe()}
                steps_before = bar.n
                try:
                    engine.load(wl)
                    bar.step(f"{wl.name} {engine.name} load")
                    result = bench_engine(engine, wl, args, bar, reference)
                except Exception as exc:  # noqa: BLE001 - record the failure, keep going
                    bar.write(f"{engine.name} failed on {wl.name}: {type(exc).__name__}: {exc}")
                    record["error"] = f"{type(exc).__name__}: {exc}"
                    result = None
                    for _ in range(len(STAGES) - (bar.n - steps_before)):
                        bar.step(f"{wl.name} {engine.name} failed")
                if result is not None:
                    if reference is None:
                        grad = result["gradient"].pop("array", None) if result["gradient"] else None
                        reference = {"engine": engine.name, "hits": result["hits"], "gradient": grad}
                        result["agreement"] = {"reference": engine.name, "is_reference": True, "ok": True}
                    else:
                        result["agreement"]["reference"] = reference["engine"]
                        if result["gradient"]:
                            result["gradient"].pop("array", None)
                    del result["hits"]
                    record.update(result)
                    if not record["agreement"]["ok"]:
                        bar.write(f"DISAGREEMENT {engine.name} vs {reference['engine']} on {wl.name}: {record['agreement']}")
                engine.close()
                del engine
                out.write(json.dumps(record) + "\n")
                out.flush()
                records.append(record)
            for name, reason in skipped.items():
                rec = {**run_info, "engine": name, **wl.describe(), "skipped": reason}
                out.write(json.dumps(rec) + "\n")
                records.append(rec)
            del wl
    bar.close()
    from benchmarks.report import markdown_table

    print(markdown_table(records))
    print(f"\nwrote {out_path}")
    return records


if __name__ == "__main__":
    main()
