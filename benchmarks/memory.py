"""Acceleration-structure memory per triangle and peak device memory of a large query (issue 18).

    python3 benchmarks/memory.py [--device cuda] [--rays 16777216] [--json FILE]

Per workload (terrain 2 M, sphere 1 M triangles on CUDA; smaller on the CPU): the bytes of
every Warp array the scene's engine structures hold (flat BVH nodes, child-pair nodes,
leaf-ordered corners, boxes, refit tables, the flat point/index buffers; arrays that alias
one allocation counted once), per triangle; Warp's own BVH arrays that rayd cannot see
(its parents and counters) are added from its descriptor sizes. Then the peak device
memory of one ``intersect(flags=RayFlags.All)`` of ``--rays`` rays, above what the scene
and the rays already held: torch's caching allocator (``max_memory_allocated``) plus
Warp's mempool high-water mark (``wp.get_mempool_used_mem_high``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks import workloads  # noqa: E402


def _arrays(obj, seen_objs, found, names, path="", depth=0):
    """Every wp.array reachable from ``obj``'s attributes (dicts, lists, objects), by pointer."""
    if depth > 6 or id(obj) in seen_objs:
        return
    seen_objs.add(id(obj))
    if isinstance(obj, wp.array):
        if obj.ptr:
            size = obj.capacity or obj.size * wp.types.type_size_in_bytes(obj.dtype)
            if size > found.get(obj.ptr, 0):
                found[obj.ptr], names[obj.ptr] = size, path
        return
    if isinstance(obj, (list, tuple)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        keys = list(getattr(obj, "__dict__", {})) + list(getattr(obj, "__slots__", ()))
        items = [(f"{path}.{k}", getattr(obj, k, None)) for k in keys]
    else:
        return
    for sub, it in items:
        if isinstance(it, (int, float, str, bytes, np.ndarray, torch.Tensor)) or it is None:
            continue
        _arrays(it, seen_objs, found, names, sub, depth + 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rays", type=int, default=None, help="default: 16 M on CUDA, 256 k on the CPU")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = a.device
    cuda = dev.startswith("cuda")
    n_rays = a.rays or ((1 << 24) if cuda else (1 << 18))
    loads = ([("terrain_2M", lambda: workloads.terrain(1024, 2048)), ("sphere_1M", lambda: workloads.sphere(513, 1024, 1 << 22))]
             if cuda else [("terrain_131k", lambda: workloads.terrain(256, 512)), ("sphere_65k", lambda: workloads.sphere(129, 256, 1 << 18))])
    for name, make in loads:
        w = make()
        V = torch.tensor(w.vertices, device=dev)
        F = torch.tensor(w.faces, device=dev)
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(V, F))
        scene.build()
        found: dict = {}
        names: dict = {}
        seen: set = set()
        _arrays(scene._core.accel, seen, found, names, "accel")
        _arrays(scene._core, seen, found, names, "core")
        accel_bytes = sum(found.values())
        top = sorted(found, key=found.get, reverse=True)[:12]
        breakdown = {names[p]: found[p] for p in top}
        ntri = w.num_triangles
        # rays: repeat the workload's rays up to n_rays (sources are shuffled; repeats trace the same paths)
        reps = -(-n_rays // w.num_rays)
        o = torch.tensor(w.o, device=dev).repeat(reps, 1)[:n_rays].contiguous()
        d = torch.tensor(w.d, device=dev).repeat(reps, 1)[:n_rays].contiguous()
        ray = rt.Ray(o, d)
        scene.intersect(rt.Ray(o[:1024], d[:1024]))
        peak_torch = peak_warp = None
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            wbase = wp.get_mempool_used_mem_current(dev) if wp.is_mempool_enabled(dev) else 0
            hit = scene.intersect(ray)
            torch.cuda.synchronize()
            peak_torch = torch.cuda.max_memory_allocated() - base
            peak_warp = (wp.get_mempool_used_mem_high(dev) - wbase) if wp.is_mempool_enabled(dev) else 0
            out_bytes = sum(v.numel() * v.element_size() for v in (getattr(hit, f) for f in hit.fields) if isinstance(v, torch.Tensor))
        else:
            hit = scene.intersect(ray)
            out_bytes = None
        row = {"benchmark": "memory", "workload": name, "device": dev, "triangles": ntri, "rays": n_rays,
               "accel_bytes": accel_bytes, "accel_bytes_per_triangle": accel_bytes / ntri,
               "arrays": len(found), "largest_arrays_bytes": breakdown, "query_peak_torch_bytes": peak_torch, "query_peak_warp_bytes": peak_warp,
               "record_bytes": out_bytes, "record_bytes_per_ray": None if out_bytes is None else out_bytes / n_rays}
        print(f"{name:14s} {ntri:>9,d} tris  engine arrays {accel_bytes / 2**20:8.1f} MiB = {accel_bytes / ntri:6.1f} B/tri"
              + ("" if not cuda else f"   {n_rays:,d}-ray All query: peak +{peak_torch / 2**20:.0f} MiB torch, "
                 f"+{peak_warp / 2**20:.0f} MiB warp mempool; record {out_bytes / 2**20:.0f} MiB ({out_bytes / n_rays:.0f} B/ray)"))
        for k, v in breakdown.items():
            print(f"      {v / ntri:7.1f} B/tri  {k}")
        if a.json:
            with open(a.json, "a") as fh:
                fh.write(json.dumps(row) + "\n")
        del scene, hit, ray, o, d


if __name__ == "__main__":
    main()
