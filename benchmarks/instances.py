"""Instances and occlusion on rayd.torch: transform-update time and any hit vs closest hit.

Usage:
    python benchmarks/instances.py --device cuda [--instances 1000] [--tris 100000] [--json OUT]

Workload: ``--instances`` instances of one bumpy UV sphere of about ``--tris``
triangles, placed on a jittered 3-D grid; 4 M (CUDA) or 256 k (CPU) rays from random
points on an enclosing sphere toward random points inside the grid. Measures the median
of 20 synchronised calls after warm-up: ``set_mesh_transform`` on every instance +
``sync()`` (refits only the top level), the same update written in place into the
(N, 4, 4) tensor whose rows the instances hold + ``sync()``, closest hit (``intersect``, all fields and
Minimal) and any hit (``shadow_test``) on the same rays.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch

import rayd.torch as rt


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


def log(message: str) -> None:
    """Progress on stderr (so a run cut short shows how far it got)."""
    print(f"[instances] {message}", file=sys.stderr, flush=True)


def median_ms(fn, device: str, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--tris", type=int, default=100_000)
    parser.add_argument("--rays", type=int, default=None)
    parser.add_argument("--json", default=None, help="append one JSON line here")
    args = parser.parse_args(argv)
    device = args.device
    rays = args.rays or (1 << 22 if device == "cuda" else 1 << 18)
    g = torch.Generator().manual_seed(0)
    v, f = uv_sphere(args.tris)
    v, f = v.to(device), f.to(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.set_shape_enabled(0, True)
    first = placements(args.instances, g).to(device)
    second = placements(args.instances, g, shift=0.05).to(device)
    live = first.clone()  # one (N, 4, 4) tensor; each instance holds a view of its row
    ids = [scene.add_instance(0, live[k]) for k in range(args.instances)]
    log("instances added")
    start = time.perf_counter()
    scene.build()
    if device == "cuda":
        torch.cuda.synchronize()
    build_ms = (time.perf_counter() - start) * 1e3
    side = math.ceil(args.instances ** (1 / 3))
    u = torch.randn(rays, 3, generator=g)
    o = 1.5 * side * u / u.norm(dim=1, keepdim=True)
    target = (torch.rand(rays, 3, generator=g) - 0.5) * side
    ray = rt.Ray(o.to(device), (target - o).to(device))

    state = {"k": 0}

    def update() -> None:
        state["k"] ^= 1
        chosen = second if state["k"] else first
        for k, shape_id in enumerate(ids):
            scene.set_mesh_transform(shape_id, chosen[k])
        scene.sync()

    def update_in_place() -> None:
        state["k"] ^= 1
        live.copy_(second if state["k"] else first)  # one batched write; sync() sees the new version
        scene.sync()

    log(f"build {build_ms:.1f} ms; timing")
    record = {
        "benchmark": "instances",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "instances": args.instances,
        "mesh_triangles": int(f.shape[0]),
        "rays": rays,
        "build_ms": build_ms,
        "update_all_transforms_sync_ms": median_ms(update, device),
        "update_in_place_sync_ms": median_ms(update_in_place, device),
        "closest_all_ms": median_ms(lambda: scene.intersect(ray), device),
        "closest_minimal_ms": median_ms(lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal), device),
        "any_hit_ms": median_ms(lambda: scene.shadow_test(ray), device),
        "hit_fraction": float(scene.intersect(ray, flags=rt.RayFlags.Minimal).is_valid().float().mean()),
    }
    line = json.dumps(record)
    print(line)
    if args.json:
        with open(args.json, "a") as fh:
            fh.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
