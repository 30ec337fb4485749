"""Who is right where rayd and Mitsuba 3 disagree on the instances workload.

Usage:
    python benchmarks/instances_agreement.py --device cpu [--rays 4194304] [--json OUT]

Builds the scene of ``benchmarks/instances.py`` (1,000 instances of a ~100 k-triangle
bumpy sphere), traces the same rays with rayd (closest hit) and Mitsuba 3
(``ray_intersect_preliminary``), and for every ray where they disagree (hit/miss, or
``t`` apart by more than 1e-4 relative) computes the reference answer in float64 by
brute force over every triangle of each instance the ray passes near (Moller and
Trumbore 1997, closed barycentric interval). Prints how many of those rays each engine
gets wrong (``t`` off the reference by more than 1e-4 relative, or hit/miss differs).
Rays on which both engines agree are not checked.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.engines.mitsuba3_instances import measure  # noqa: E402
from benchmarks.instances import emit, workload  # noqa: E402

import rayd.torch as rt  # noqa: E402


def brute_force_t(o: np.ndarray, d: np.ndarray, world: np.ndarray, faces: np.ndarray) -> float:
    """Smallest t > 0 of ray (o, d) over triangles ``world[faces]`` in float64, or inf."""
    a, b, c = world[faces[:, 0]], world[faces[:, 1]], world[faces[:, 2]]
    e1, e2 = b - a, c - a
    p = np.cross(d, e2)
    det = (e1 * p).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / det
        s = o - a
        u = (s * p).sum(1) * inv
        q = np.cross(s, e1)
        v = (d * q).sum(1) * inv
        t = (e2 * q).sum(1) * inv
    ok = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 0)
    return float(t[ok].min()) if ok.any() else float("inf")


def wrong(t: float, reference: float) -> bool:
    if np.isinf(reference) or np.isinf(t):
        return bool(np.isinf(reference) != np.isinf(t))
    return abs(t - reference) > 1e-4 * reference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--tris", type=int, default=100_000)
    parser.add_argument("--rays", type=int, default=1 << 22)
    parser.add_argument("--json", default=None, help="append one JSON line here")
    args = parser.parse_args(argv)
    v, f, first, second, o, d = workload(args.instances, args.tris, args.rays)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.to(args.device), f.to(args.device)))
    scene.set_shape_enabled(0, False)
    for k in range(args.instances):
        scene.add_instance(0, first[k].to(args.device))
    scene.build()
    t_rayd = scene.intersect(rt.Ray(o.to(args.device), d.to(args.device)), flags=rt.RayFlags.Minimal).t
    t_rayd = t_rayd.double().cpu().numpy()
    _, t_mi = measure(v.numpy(), f.numpy(), first.numpy(), second.numpy(), o.numpy(), d.numpy(), args.device,
                      lambda fn, sync: 0.0)
    both_miss = np.isinf(t_rayd) & np.isinf(t_mi)
    with np.errstate(invalid="ignore"):
        apart = np.abs(t_rayd - t_mi) > 1e-4 * np.minimum(np.abs(t_mi), 1e30)
    disagree = np.nonzero((np.isinf(t_rayd) != np.isinf(t_mi)) | (apart & ~both_miss))[0]

    vertices, faces, placements = v.double().numpy(), f.long().numpy(), first.double().numpy()
    centres = placements[:, :3, 3]
    reach = 1.1 * 1.05 * np.linalg.norm(placements[:, :3, :3], ord=2, axis=(1, 2))  # bounding sphere radius
    rayd_wrong = mitsuba_wrong = 0
    for i in disagree.tolist():
        oi, di = o[i].double().numpy(), d[i].double().numpy()
        unit = di / np.linalg.norm(di)
        w = centres - oi
        distance = np.linalg.norm(w - (w @ unit)[:, None] * unit, axis=1)
        reference = float("inf")
        for k in np.nonzero(distance < reach)[0]:
            world = vertices @ placements[k, :3, :3].T + placements[k, :3, 3]
            reference = min(reference, brute_force_t(oi, di, world, faces))
        rayd_wrong += wrong(float(t_rayd[i]), reference)
        mitsuba_wrong += wrong(float(t_mi[i]), reference)
    record = {
        "benchmark": "instances_agreement",
        "device": args.device,
        "instances": args.instances,
        "mesh_triangles": int(f.shape[0]),
        "rays": args.rays,
        "disagreeing_rays": int(disagree.size),
        "rayd_wrong": int(rayd_wrong),
        "mitsuba_wrong": int(mitsuba_wrong),
    }
    emit(record, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
