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
import os
import platform
import re
import statistics
import sys
import time
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

RESULTS_DIR = Path(__file__).resolve().parent / "results"
HIT_AGREEMENT = 0.99999
T_REL_TOL = 1e-5
GRAZING_COS = 0.02
STAGES = ("load", "agree", "closest_all", "closest_minimal", "memory", "forward_backward", "update", "build")


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


def time_ms(fn, sync, repeats: int, warmup: int) -> list[float]:
    """Wall-clock milliseconds of ``fn(); sync()`` for ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        out = fn()
        sync()
        del out
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        out = fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
        del out
    return samples


def _proc_kib(key: str) -> int:
    with open("/proc/self/status") as fh:
        return int(re.search(rf"^{key}:\s+(\d+)", fh.read(), re.M).group(1))


def _release_free_host_memory(engine) -> None:
    """Hand cached free memory back to the OS, so that a call's allocations show in RSS."""
    import ctypes
    import gc

    gc.collect()
    engine.release_cached_memory()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def host_peak_memory(fn, sync, engine) -> int | None:
    """Growth of the process's peak resident memory during ``fn()`` (Linux; bytes).

    Free memory cached by malloc and by the engine's allocator is released first; the
    figure is then what one call touches beyond the memory held before it.
    """
    try:
        _release_free_host_memory(engine)
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM to the current resident size
        base = _proc_kib("VmRSS")
        out = fn()
        sync()
        peak = _proc_kib("VmHWM")
        del out
        return max(0, peak - base) * 1024
    except (OSError, AttributeError):
        return None


def grazing_cosine(wl, prim: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """|cos| of the angle between ray ``rows``' directions and the normals of triangles ``prim``."""
    v = wl.vertices.astype(np.float64)[wl.faces[prim].astype(np.int64)]
    n = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    d = wl.d[rows].astype(np.float64)
    denom = np.maximum(np.linalg.norm(n, axis=1) * np.linalg.norm(d, axis=1), 1e-300)
    return np.abs((n * d).sum(1)) / denom


def agreement(ref: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray], wl=None) -> dict:
    """Compare closest hits ``(prim_id, t)``: hit/miss agreement and relative ``t`` error.

    ``ok``: hit/miss agrees on >= 99.999 % of rays, and ``t`` agrees within 1e-5
    relative on >= 99.999 % of the rays both hit. With ``wl`` given, a ``t`` that differs
    at grazing incidence (|cos| < 0.02 against the reference triangle, where float32
    ``t`` has a condition number above 50 and two correct engines differ by more than
    1e-5) is counted in ``t_grazing_exempt`` instead of as a disagreement.
    """
    (ref_prim, ref_t), (prim, t) = ref, other
    ref_hit, hit = ref_prim >= 0, prim >= 0
    n = len(ref_hit)
    both = ref_hit & hit
    rel = np.abs(t[both] - ref_t[both]) / np.maximum(np.abs(ref_t[both]), 1e-30)
    close = rel <= T_REL_TOL
    exempt = np.zeros_like(close)
    if wl is not None and (~close).any():
        rows = np.nonzero(both)[0][~close]
        exempt[~close] = grazing_cosine(wl, ref_prim[rows], rows) < GRAZING_COS
    hit_agree = float(np.mean(ref_hit == hit)) if n else 1.0
    t_within = float(np.mean(close)) if both.any() else 1.0
    t_agree = float(np.mean(close | exempt)) if both.any() else 1.0
    return {
        "rays": int(n),
        "hits_reference": int(ref_hit.sum()),
        "hits": int(hit.sum()),
        "hit_agree": hit_agree,
        "hit_disagree_rays": int((ref_hit != hit).sum()),
        "t_within_1e-5": t_within,
        "t_outside_1e-5_rays": int((~close).sum()),
        "t_grazing_exempt": int(exempt.sum()),
        "t_max_rel_err": float(rel.max()) if both.any() else 0.0,
        "same_prim": float(np.mean(ref_prim[both] == prim[both])) if both.any() else 1.0,
        "ok": hit_agree >= HIT_AGREEMENT and t_agree >= HIT_AGREEMENT,
    }


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 - not installed
        return None


def machine_info(device: str) -> dict:
    info = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": None,
        "cpu_count": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            m = re.search(r"^model name\s*:\s*(.+)$", fh.read(), re.M)
            info["cpu"] = m.group(1).strip() if m else None
    except OSError:
        pass
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    if device == "cuda":
        try:
            import torch

            props = torch.cuda.get_device_properties(0)
            info["gpu"] = props.name
            info["gpu_memory_bytes"] = int(props.total_memory)
            info["cuda_runtime_torch"] = torch.version.cuda
        except Exception as exc:  # noqa: BLE001
            info["gpu"] = f"unknown ({exc})"
    return info


def package_versions() -> dict:
    import rayd

    out = {"rayd": rayd.__version__, "numpy": np.__version__}
    for name in ("torch", "warp-lang", "drjit", "mitsuba", "embreex", "tqdm"):
        out[name] = _version(name)
    return out


def git_info() -> dict | None:
    """Commit of the checkout and of the rayd that was imported (None outside git)."""
    import subprocess

    import rayd

    root = Path(__file__).resolve().parent.parent

    def git(*cmd):
        return subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return None
    if not commit:
        return None
    rayd_path = Path(rayd.__file__).resolve().parent
    in_checkout = rayd_path == root / "src" / "rayd"
    return {
        "commit": commit,
        "rayd_path": str(rayd_path),
        # uncommitted changes under src/rayd (only meaningful when rayd came from this checkout)
        "rayd_dirty": bool(git("status", "--porcelain", "--", "src/rayd")) if in_checkout else None,
    }


def _load_average() -> float | None:
    """The host's 1-minute load average (other processes skew CPU timings; recorded per engine)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _median(samples):
    return float(statistics.median(samples)) if samples else None


# --------------------------------------------------------------------------- one engine
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
        metrics[f"{metric}_ms"] = _median(samples)
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
        metrics["forward_backward_ms"] = _median(samples)
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
        metrics["update_ms"] = _median(samples)
        metrics["update_kind"] = engine.update_kind
    except NotSupported as exc:
        metrics["update_ms"] = None
        notes.append(str(exc))
    bar.step(f"{label} update")

    repeats = args.build_repeats if args.build_repeats is not None else args.repeats
    samples = time_ms(engine.build, sync, repeats, min(args.warmup, 1))
    timings["build"] = samples
    metrics["build_ms"] = _median(samples)
    bar.step(f"{label} build")

    metrics["load_average_1min"] = _load_average()
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
        "load_average_1min_at_start": _load_average(),
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
