"""Measuring and checking: timing, memory, hit agreement, and where a run happened."""

from __future__ import annotations

import os
import platform
import re
import statistics
import time
from pathlib import Path

import numpy as np

HIT_AGREEMENT = 0.99999
T_REL_TOL = 1e-5
GRAZING_COS = 0.02


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
        # of the t mismatches: the engine's hit lies beyond the reference's (it missed the
        # nearer surface, e.g. a ray leaking through a shared edge) / before it
        "t_farther_rays": int(((t[both] > ref_t[both]) & ~close).sum()),
        "t_nearer_rays": int(((t[both] < ref_t[both]) & ~close).sum()),
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
        return subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True, timeout=10).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not commit:
        return None
    rayd_path = Path(rayd.__file__).resolve().parent
    in_checkout = rayd_path == root / "src" / "rayd"
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "src/rayd").splitlines()]
    return {
        "commit": commit,
        "rayd_path": str(rayd_path),
        # uncommitted changes under src/rayd (only meaningful when rayd came from this checkout)
        "rayd_dirty": bool(dirty) if in_checkout else None,
        "rayd_dirty_paths": dirty if in_checkout else None,
    }


def load_average() -> float | None:
    """The host's 1-minute load average (other processes skew CPU timings; recorded per engine)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def median(samples):
    return float(statistics.median(samples)) if samples else None


# --------------------------------------------------------------------------- one engine
