"""Instances and occlusion on rayd.torch: transform-update time and any hit vs closest hit.

Usage:
    python benchmarks/instances.py --device cuda [--instances 1000] [--tris 100000] [--mitsuba] [--json OUT]

Workload: ``--instances`` instances of one bumpy UV sphere of about ``--tris``
triangles, placed on a jittered 3-D grid; 4 M (CUDA) or 256 k (CPU) rays from random
points on an enclosing sphere toward random points inside the grid. Measures the median
of 20 synchronised calls after warm-up: ``set_mesh_transform`` on every instance +
``sync()`` (refits only the top level), the same update as one batched
``set_mesh_transform(ids, (N, 4, 4))`` call + ``sync()``, and written in place into the
(N, 4, 4) tensor whose rows the instances hold + ``sync()``; closest hit (``intersect``, all fields and
Minimal) and any hit (``shadow_test``) on the same rays, each with the spread of its samples
and the cudaMalloc calls made while they ran, the closest hit once more with torch's cache
emptied before every call, the GPU's clock, temperature, power, throttle reasons and memory in
use before and after (``nvidia-smi``), the search kernel's walk and register cap, and the
commit: what the figure depends on besides the code. With ``--mitsuba`` the same
scene is also built as Mitsuba 3 instances of one shapegroup and timed the same way
(``benchmarks/engines/mitsuba3_instances.py``), and the closest-hit ``t`` of both
engines is compared ray by ray.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable

from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    import rayd  # noqa: F401
except ImportError:  # a source checkout without `pip install -e .`: use src/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import rayd.torch as rt  # noqa: E402
from benchmarks.measure import git_info, median, time_ms  # noqa: E402
from rayd.engine.instances import instance_max_registers  # noqa: E402


def uv_sphere(tris: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A bumpy UV sphere of about ``tris`` triangles (radius 1 +- 0.05)."""
    n = max(4, int(math.sqrt(tris / 2)))
    lat = torch.linspace(0, math.pi, n + 1)[1:-1]
    lon = torch.linspace(0, 2 * math.pi, n + 1)[:-1]
    la, lo = torch.meshgrid(lat, lon, indexing="ij")
    r = 1 + 0.05 * torch.sin(7 * la) * torch.cos(9 * lo)
    ring = torch.stack((r * la.sin() * lo.cos(), r * la.sin() * lo.sin(), r * la.cos()), -1).reshape(-1, 3)
    v = torch.cat((torch.tensor([[0.0, 0.0, 1.0]]), ring, torch.tensor([[0.0, 0.0, -1.0]])))
    j = torch.arange(n)
    jn = (j + 1) % n
    top = torch.stack((torch.zeros_like(j), 1 + j, 1 + jn), 1)
    i = torch.arange(n - 2)[:, None]
    a, b = 1 + i * n + j, 1 + i * n + jn
    mid = torch.cat((torch.stack((a, a + n, b), -1).reshape(-1, 3), torch.stack((b, a + n, b + n), -1).reshape(-1, 3)))
    last, base = v.shape[0] - 1, 1 + (n - 2) * n
    bottom = torch.stack((base + j, torch.full_like(j, last), base + jn), 1)
    return v, torch.cat((top, mid, bottom)).int()


def placements(count: int, generator: torch.Generator, shift: float = 0.0) -> torch.Tensor:
    """(count, 4, 4) rotations about z, scales 0.3-0.45 and translations on a jittered grid."""
    side = math.ceil(count ** (1 / 3))
    idx = torch.arange(count)
    grid = torch.stack((idx % side, (idx // side) % side, idx // (side * side)), 1).float()
    centre = (grid - (side - 1) / 2) + 0.1 * torch.rand(count, 3, generator=generator) + shift
    angle = torch.rand(count, generator=generator) * 2 * math.pi
    scale = 0.3 + 0.15 * torch.rand(count, generator=generator)
    m = torch.zeros(count, 4, 4)
    m[:, 0, 0], m[:, 0, 1] = scale * angle.cos(), -scale * angle.sin()
    m[:, 1, 0], m[:, 1, 1] = scale * angle.sin(), scale * angle.cos()
    m[:, 2, 2] = scale
    m[:, :3, 3] = centre
    m[:, 3, 3] = 1
    return m


def workload(instances: int, tris: int, rays: int) -> tuple[torch.Tensor, ...]:
    """(vertices, faces, first placements, second placements, ray origins, ray directions), seeded.

    Rays start on a sphere of radius 1.5 x the grid side and aim at random points in
    the grid (unnormalised directions: ``t = 1`` is the target).
    """
    g = torch.Generator().manual_seed(0)
    v, f = uv_sphere(tris)
    first, second = placements(instances, g), placements(instances, g, shift=0.05)
    side = math.ceil(instances ** (1 / 3))
    u = torch.randn(rays, 3, generator=g)
    o = 1.5 * side * u / u.norm(dim=1, keepdim=True)
    d = (torch.rand(rays, 3, generator=g) - 0.5) * side - o
    return v, f, first, second, o, d


def emit(record: dict, path: str | None) -> None:
    """Print ``record`` as one JSON line and append it to ``path`` if given."""
    line = json.dumps(record)
    print(line)
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")


def log(message: str) -> None:
    """Progress on stderr (so a run cut short shows how far it got)."""
    print(f"[instances] {message}", file=sys.stderr, flush=True)


def median_ms(fn: Callable[[], object], sync: Callable[[], object], repeats: int = 20) -> float:
    """Median wall time in ms of ``repeats`` calls of ``fn`` after 3 warm-up calls, ``sync`` around each."""
    return median(time_ms(fn, sync, repeats, warmup=3))


def device_allocations(device: str) -> int | None:
    """cudaMalloc calls torch's caching allocator has made so far (None off CUDA)."""
    if device != "cuda":
        return None
    return int(torch.cuda.memory_stats().get("num_device_alloc", 0))


def timed(fn: Callable[[], object], sync: Callable[[], object], device: str, repeats: int = 20) -> dict:
    """``median_ms`` with what the median depends on: ``min``, ``max`` of the samples and the cudaMalloc
    calls made while they ran (``allocs``: 0 when torch's caching allocator served every call)."""
    before = device_allocations(device)
    samples = time_ms(fn, sync, repeats, warmup=3)
    after = device_allocations(device)
    return {"median": median(samples), "min": min(samples), "max": max(samples),
            "allocs": None if before is None else after - before}


def gpu_state() -> dict:
    """The GPU's SM clock (now / max, MHz), temperature (C), power draw (W), throttle reasons and memory used
    by every process (MiB) from ``nvidia-smi`` ({} where it is absent): a slow figure with a low clock or
    another process on the GPU is the machine's, not the code's. One query per field (a field this driver
    does not know is left out, not the whole record)."""
    import subprocess

    fields = {"sm_clock_mhz": ("clocks.sm",), "sm_clock_max_mhz": ("clocks.max.sm",),
              "temperature_c": ("temperature.gpu",), "power_w": ("power.draw",),
              "throttle_reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
              "memory_used_mib": ("memory.used",), "utilization_pct": ("utilization.gpu",)}
    out = {}
    for key, names in fields.items():
        for name in names:
            try:
                run = subprocess.run(["nvidia-smi", "--id=0", f"--query-gpu={name}", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.SubprocessError):
                return out
            if run.returncode == 0 and run.stdout.strip():
                out[key] = run.stdout.strip()
                break
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--tris", type=int, default=100_000)
    parser.add_argument("--rays", type=int, default=None)
    parser.add_argument("--mitsuba", action="store_true", help="also time Mitsuba 3 instances of the same scene")
    parser.add_argument("--json", default=None, help="append one JSON line here")
    args = parser.parse_args(argv)
    device = args.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rays = args.rays or (1 << 22 if device == "cuda" else 1 << 18)
    v, f, first, second, o, d = workload(args.instances, args.tris, rays)

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.to(device), f.to(device)))
    scene.set_shape_enabled(0, False)  # only the instances are in the scene
    first_d, second_d = first.to(device), second.to(device)
    live = first_d.clone()  # one (N, 4, 4) tensor; each instance holds a view of its row
    ids = [scene.add_instance(0, live[k]) for k in range(args.instances)]
    log("instances added")
    sync()
    start = time.perf_counter()
    scene.build()
    sync()
    build_ms = (time.perf_counter() - start) * 1e3
    ray = rt.Ray(o.to(device), d.to(device))
    id_tensor = torch.tensor(ids)
    state = {"k": 0}

    def chosen() -> torch.Tensor:
        state["k"] ^= 1
        return second_d if state["k"] else first_d

    def update_in_place() -> None:
        live.copy_(chosen())  # one batched write; sync() sees the new version
        scene.sync()

    def update_per_call() -> None:
        matrices = chosen()
        for k, shape_id in enumerate(ids):
            scene.set_mesh_transform(shape_id, matrices[k])
        scene.sync()

    def update_batched() -> None:
        scene.set_mesh_transform(id_tensor, chosen())  # one call, one check
        scene.sync()

    log(f"build {build_ms:.1f} ms; timing")
    record = {
        "benchmark": "instances",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "instances": args.instances,
        "mesh_triangles": int(f.shape[0]),
        "rays": rays,
        "build_ms": build_ms,
        # what the search depends on: the kernel's walk (RAYD_INSTANCE_WALK, RAYD_BVH_LAYOUT) and register cap
        "search_walk": scene._core.accel.search_walk,
        "instance_max_registers": instance_max_registers(),
        # In place first: the other two make the instances hold rows of first/second.
        "update_in_place_sync_ms": median_ms(update_in_place, sync),
        "update_all_transforms_sync_ms": median_ms(update_per_call, sync),
        "update_batched_sync_ms": median_ms(update_batched, sync),
    }
    if state["k"]:  # back to the first placement
        update_batched()
    # Each query's median with its spread and the cudaMalloc calls made while timing it (what the figure
    # depends on besides the code: issue 18 saw this row move 2.4-2.8x between runs).
    record["gpu_before"] = gpu_state() if device == "cuda" else {}
    for key, fn in (("closest_all", lambda: scene.intersect(ray)),
                    ("closest_minimal", lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal)),
                    ("any_hit", lambda: scene.shadow_test(ray))):
        stats = timed(fn, sync, device)
        record[key + "_ms"] = stats["median"]
        record[key + "_min_max_ms"] = [stats["min"], stats["max"]]
        record[key + "_device_allocs"] = stats["allocs"]
    if device == "cuda":
        # The same closest-hit call with torch's cache emptied before each (every output allocated anew by
        # cudaMalloc): how much a cold caching allocator costs the row.
        def cold() -> object:
            torch.cuda.empty_cache()
            return scene.intersect(ray)
        record["closest_all_cold_allocator_ms"] = median_ms(cold, sync, repeats=5)
        record["gpu_after"] = gpu_state()
    git = git_info()
    record["commit"] = git["commit"] if git else None
    t = scene.intersect(ray, flags=rt.RayFlags.Minimal).t.double().cpu()
    record["hit_fraction"] = float(torch.isfinite(t).double().mean())
    if args.mitsuba:
        from benchmarks.engines.mitsuba3_instances import measure

        log("mitsuba")
        figures, t_mi = measure(v.numpy(), f.numpy(), first.numpy(), second.numpy(), o.numpy(), d.numpy(), device,
                                median_ms)
        record.update(figures)
        t_mi = torch.from_numpy(t_mi)
        same = torch.isfinite(t) == torch.isfinite(t_mi)
        both = torch.isfinite(t) & torch.isfinite(t_mi)
        record["agreement_hit_miss"] = float(same.double().mean())
        record["agreement_max_t_rel"] = float(((t - t_mi).abs() / t_mi.abs().clamp_min(1e-6))[both].max())
    emit(record, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
