"""Surface queries side by side: closest point (distance), signed distance, occupancy.

Usage:
    python benchmarks/surface.py --device cpu|cuda [--meshes /work/meshes] [--mesh bunny_69k dragon_871k]
        [--points 1000000] [--brute-points 2000] [--repeats 5] [--json OUT]

Engines, each on the same float32 query points in the same run:

- ``rayd``: ``rayd.torch.Scene.closest_point(q).distance``, ``signed_distance(q)``,
  ``contains(q)`` (on the CPU the occupancy grid of ``rayd.engine.occupancy``, built by
  the second query of at least 65,536 points of a geometry: the ``occupancy_first_call``
  (a walk) and ``occupancy_second_call`` (the grid build) rows; the hierarchical winding number, ``beta = 2``, order 3, exact re-sum within 0.05
  of 0.5, for the points it leaves undecided and on CUDA), no gradients requested;
- ``open3d`` (CPU): ``RaycastingScene.compute_distance``, ``compute_signed_distance``,
  ``compute_occupancy`` (ray-parity occupancy, ``nsamples = 1``);
- ``warp``: kernels calling ``wp.mesh_query_point_no_sign`` (distance) and
  ``wp.mesh_query_point_sign_winding_number`` (signed distance; occupancy is its sign,
  Warp has no cheaper inside test), on ``--device``;
- ``brute``: a PyTorch3D-style brute force in torch: all points x all faces in
  chunks (point-triangle distance; winding number as the sum of solid angles), float32,
  run on the first ``--brute-points`` points only; its time is scaled to ``--points``
  (marked ``scaled``).

Query points: uniform in the mesh's bounding box grown by 10 % per side (seed 0).
Agreement, per engine, against rayd on the points both ran: ``max_rel_diff`` = max over
points of ``|d - d_rayd| / max(d_rayd, 1e-12)`` (distances, |signed distances|),
``max_abs_diff``, ``max_rel_err_f64`` = the same against a float64 brute force on the
first ``--brute-points`` points (every engine, rayd too), and
``inside_agree`` = fraction of points with the same inside/outside answer among those
farther than 1e-3 of the box diagonal from the surface. Times: median of ``--repeats``
synchronised calls after one warm-up, milliseconds (the brute force: one call); ``cpu_ms``: the
process CPU time (all threads, ``time.process_time``) per call, warm-up included, the fairer
figure on a shared, loaded machine. One JSON line per (mesh, engine, query) to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import warp as wp  # noqa: E402

import rayd.torch as rt  # noqa: E402
from benchmarks.measure import median, time_ms  # noqa: E402

QUERIES = ("distance", "signed_distance", "occupancy")


# ------------------------------------------------------------------------------ engines
class Rayd:
    name = "rayd"

    def __init__(self, v, f, device):
        self.scene = rt.Scene()
        self.scene.add_mesh(rt.Mesh(torch.as_tensor(v, device=device), torch.as_tensor(f, device=device)))
        self.scene.build()

    def run(self, query, q):
        with torch.no_grad():
            if query == "distance":
                return self.scene.closest_point(q).distance
            if query == "signed_distance":
                return self.scene.signed_distance(q)
            return self.scene.contains(q)


class Open3D:
    name = "open3d"

    def __init__(self, v, f, device):
        import open3d as o3d

        self.o3d = o3d
        mesh = o3d.t.geometry.TriangleMesh()
        mesh.vertex.positions = o3d.core.Tensor(np.ascontiguousarray(v, np.float32))
        mesh.triangle.indices = o3d.core.Tensor(np.ascontiguousarray(f, np.uint32))
        self.scene = o3d.t.geometry.RaycastingScene()
        self.scene.add_triangles(mesh)

    def run(self, query, q):
        t = self.o3d.core.Tensor.from_numpy(q.cpu().numpy())
        if query == "distance":
            out = self.scene.compute_distance(t)
        elif query == "signed_distance":
            out = self.scene.compute_signed_distance(t)
        else:
            return torch.from_numpy(self.scene.compute_occupancy(t).numpy() > 0.5)
        return torch.from_numpy(out.numpy())


@wp.kernel
def _warp_distance(mesh: wp.uint64, points: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    p = points[i]
    hit = wp.mesh_query_point_no_sign(mesh, p, 1.0e30)
    d = float(1.0e30)
    if hit.result:
        d = wp.length(p - wp.mesh_eval_position(mesh, hit.face, hit.u, hit.v))
    out[i] = d


@wp.kernel
def _warp_signed(mesh: wp.uint64, points: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    p = points[i]
    hit = wp.mesh_query_point_sign_winding_number(mesh, p, 1.0e30, 2.0, 0.5)
    d = float(1.0e30)
    if hit.result:
        d = hit.sign * wp.length(p - wp.mesh_eval_position(mesh, hit.face, hit.u, hit.v))
    out[i] = d


class Warp:
    name = "warp"

    def __init__(self, v, f, device):
        self.device = "cuda:0" if device == "cuda" else "cpu"
        self.mesh = wp.Mesh(points=wp.array(np.asarray(v, np.float32), dtype=wp.vec3, device=self.device),
                            indices=wp.array(np.asarray(f, np.int32).ravel(), dtype=wp.int32, device=self.device),
                            support_winding_number=True)

    def run(self, query, q):
        points = wp.from_torch(q.contiguous(), dtype=wp.vec3)
        out = torch.empty(q.shape[0], dtype=torch.float32, device=q.device)
        kernel = _warp_distance if query == "distance" else _warp_signed
        wp.launch(kernel, q.shape[0], [self.mesh.id, points], [wp.from_torch(out)], device=self.device)
        return out < 0 if query == "occupancy" else out


def _point_triangle_dsq(p, a, b, c):
    """(P, F) squared distances, Ericson 5.1.5 by regions, vectorised (PyTorch3D-style brute force)."""
    ab, ac = b - a, c - a
    ap = p[:, None] - a
    dot = lambda x, y: (x * y).sum(-1)  # noqa: E731
    d1, d2 = dot(ab, ap), dot(ac, ap)
    bp = ap - ab
    d3, d4 = dot(ab, bp), dot(ac, bp)
    cp = ap - ac
    d5, d6 = dot(ab, cp), dot(ac, cp)
    vc, vb, va = d1 * d4 - d3 * d2, d5 * d2 - d1 * d6, d3 * d6 - d5 * d4
    den = (va + vb + vc).clamp_min(1e-30)
    v, w = vb / den, vc / den
    q = a + v[..., None] * ab + w[..., None] * ac
    best = dot(p[:, None] - q, p[:, None] - q)
    inside = (va >= 0) & (vb >= 0) & (vc >= 0)
    best = torch.where(inside, best, torch.full_like(best, math.inf))
    for u, e in ((a, ab), (a, ac), (b, c - b)):
        t = (dot(p[:, None] - u, e) / dot(e, e).clamp_min(1e-30)).clamp(0, 1)
        r = p[:, None] - (u + t[..., None] * e)
        best = torch.minimum(best, dot(r, r))
    return best


class Brute:
    name = "brute"

    def __init__(self, v, f, device, dtype=torch.float32):
        tri = torch.as_tensor(np.asarray(v, np.float32)[np.asarray(f)], device=device).to(dtype)
        self.a, self.b, self.c = tri[:, 0], tri[:, 1], tri[:, 2]
        self.chunk = max(1, (1 << 24) // tri.shape[0])

    def _distance(self, q):
        return torch.cat([_point_triangle_dsq(q[i:i + self.chunk], self.a, self.b, self.c).min(1).values.sqrt()
                          for i in range(0, q.shape[0], self.chunk)])

    def _winding(self, q):
        parts = []
        for i in range(0, q.shape[0], self.chunk):
            p = q[i:i + self.chunk, None]
            x, y, z = self.a - p, self.b - p, self.c - p
            lx, ly, lz = x.norm(dim=-1), y.norm(dim=-1), z.norm(dim=-1)
            num = (x * torch.linalg.cross(y, z)).sum(-1)
            den = lx * ly * lz + (x * y).sum(-1) * lz + (y * z).sum(-1) * lx + (z * x).sum(-1) * ly
            parts.append(torch.atan2(num, den).sum(-1) / (2 * math.pi))
        return torch.cat(parts)

    def run(self, query, q):
        if query == "distance":
            return self._distance(q)
        inside = self._winding(q) > 0.5
        if query == "occupancy":
            return inside
        d = self._distance(q)
        return torch.where(inside, -d, d)


ENGINES = {"rayd": Rayd, "open3d": Open3D, "warp": Warp, "brute": Brute}


# ------------------------------------------------------------------------------ driver
def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()
        wp.synchronize()


def _compare(query, got, ref, near_ok, truth):
    """Agreement with rayd (``ref``) and the float64 brute force (``truth``, on its first points)."""
    if query == "occupancy":
        g, r = got.bool().cpu().numpy(), ref.bool().cpu().numpy()
        return {"inside_agree": float((g == r)[near_ok].mean())}
    g, r = np.abs(got.double().cpu().numpy()), np.abs(ref.double().cpu().numpy())
    t = np.abs(truth.double().cpu().numpy())
    k = min(len(t), len(g))
    out = {"max_rel_diff": float(np.max(np.abs(g - r) / np.maximum(r, 1e-12))),
           "max_abs_diff": float(np.max(np.abs(g - r))),
           "max_rel_err_f64": float(np.max(np.abs(g[:k] - t[:k]) / np.maximum(t[:k], 1e-12)))}
    if query == "signed_distance":
        out["inside_agree"] = float(((got.cpu().numpy() < 0) == (ref.cpu().numpy() < 0))[near_ok].mean())
    return out


def run_mesh(path, args, emit):
    data = np.load(path)
    v, f = data["vertices"].astype(np.float32), data["faces"].astype(np.int64)
    lo, hi = v.min(0), v.max(0)
    grow = 0.1 * (hi - lo)
    rng = np.random.default_rng(0)
    pts = torch.as_tensor(rng.uniform(lo - grow, hi + grow, (args.points, 3)).astype(np.float32), device=args.device)
    diag = float(np.linalg.norm(hi - lo))
    engines = {}
    for name in args.engines:
        if name == "open3d" and args.device != "cpu":
            continue
        try:
            start = time.perf_counter()
            engines[name] = ENGINES[name](v, f, args.device)
            build_ms = (time.perf_counter() - start) * 1e3
            emit({"mesh": path.stem, "faces": len(f), "engine": name, "query": "build", "ms": build_ms})
        except Exception as exc:  # an engine that is not installed: say so, go on
            print(f"  {name}: not available ({type(exc).__name__}: {exc})")
    # The first two large calls of a geometry: on the CPU the first walks, the second builds the
    # occupancy grid (rayd.engine.occupancy.grid); both are timed here, outside the medians.
    for which in ("occupancy_first_call", "occupancy_second_call"):
        start = time.perf_counter()
        ref = {"occupancy": engines["rayd"].run("occupancy", pts)}
        _sync(args.device)
        emit({"mesh": path.stem, "faces": len(f), "engine": "rayd", "query": which, "device": args.device,
              "points": args.points, "ms": (time.perf_counter() - start) * 1e3})
    ref.update({query: engines["rayd"].run(query, pts) for query in QUERIES if query != "occupancy"})
    near_ok = np.abs(ref["distance"].double().cpu().numpy()) > 1e-3 * diag
    # float64 ground truth on the first --brute-points points (untimed)
    truth = Brute(v, f, args.device, torch.float64).run("distance", pts[:args.brute_points].double())
    for name, engine in engines.items():
        for query in QUERIES:
            n = args.points if name != "brute" else min(args.points, args.brute_points)
            q = pts[:n]
            # the brute force: one untimed-warm-up-free call (it is the slow reference)
            reps, warm = (1, 0) if name == "brute" else (args.repeats, 1)
            cpu0 = time.process_time()
            samples = time_ms(lambda: engine.run(query, q), lambda: _sync(args.device), reps, warm)
            cpu_ms = (time.process_time() - cpu0) * 1e3 / (reps + warm) * (args.points / n)
            ms = median(samples) * (args.points / n)
            row = {"mesh": path.stem, "faces": len(f), "engine": name, "query": query, "device": args.device,
                   "points": args.points, "ran_points": n, "scaled": n != args.points, "ms": ms, "cpu_ms": cpu_ms}
            got = engine.run(query, q)
            if name != "rayd":
                row.update(_compare(query, got, ref[query][:n], near_ok[:n], truth))
            elif query != "occupancy":
                k = len(truth)
                row["max_rel_err_f64"] = float(np.max(np.abs(np.abs(got[:k].double().cpu().numpy())
                                                             - truth.cpu().numpy()) / np.maximum(truth.cpu().numpy(),
                                                                                                 1e-12)))
            emit(row)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--meshes", type=Path, default=Path("/work/meshes"))
    parser.add_argument("--mesh", nargs="+", default=["bunny_69k", "dragon_871k"])
    parser.add_argument("--points", type=int, default=None, help="default: 1M (CUDA), 100k (CPU)")
    parser.add_argument("--brute-points", type=int, default=None, help="default: 20k (CUDA), 1000 (CPU)")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    args.points = args.points or (1_000_000 if cuda else 100_000)
    args.brute_points = args.brute_points or (20_000 if cuda else 1000)
    if "rayd" not in args.engines:
        args.engines.insert(0, "rayd")
    wp.init()
    rows = []
    out = open(args.json, "w") if args.json else None

    def emit(row):
        rows.append(row)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()

    for name in args.mesh:
        path = args.meshes / f"{name}.npz"
        if not path.exists():
            print(f"{path} missing (bash ../shared/data/get_meshes.sh {args.meshes} all)")
            continue
        run_mesh(path, args, emit)
    if out:
        out.close()
    print(table(rows))
    return rows


def table(rows):
    """The results as a fixed-width text table."""
    lines = [f"{'mesh':<12} {'faces':>8} {'query':<16} {'engine':<7} {'points':>9} {'ms':>10} {'cpu ms':>10} {'Mpts/s':>8} "
             f"{'rel vs rayd':>11} {'abs vs rayd':>11} {'rel vs f64':>10} {'in/out agree':>12}"]
    for r in rows:
        if r["query"] in ("build", "occupancy_first_call", "occupancy_second_call"):
            if r["query"] != "build":
                what = ("first occupancy call (rayd, walk)" if r["query"] == "occupancy_first_call"
                        else "second occupancy call (rayd, CPU: grid build)")
                lines.append(f"{r['mesh']:<12} {r['faces']:>8} {what} {r['points']:>9} {r['ms']:>10.1f}")
            continue
        rate = r["points"] / (r["ms"] * 1e3)
        rel = f"{r['max_rel_diff']:.1e}" if "max_rel_diff" in r else "-"
        dab = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else "-"
        f64 = f"{r['max_rel_err_f64']:.1e}" if "max_rel_err_f64" in r else "-"
        agree = f"{100 * r['inside_agree']:.4f}%" if "inside_agree" in r else "-"
        pts = f"{r['ran_points']}{'*' if r['scaled'] else ''}"
        cpu = f"{r['cpu_ms']:.1f}" if "cpu_ms" in r else "-"
        lines.append(f"{r['mesh']:<12} {r['faces']:>8} {r['query']:<16} {r['engine']:<7} {pts:>9} {r['ms']:>10.1f} {cpu:>10} "
                     f"{rate:>8.2f} {rel:>11} {dab:>11} {f64:>10} {agree:>12}")
    lines.append("* ran on that many points; ms scaled to all points. 'vs rayd': max over the points both ran; "
                 "'rel vs f64': max relative error vs a float64 brute force on the first --brute-points points; "
                 "in/out: points farther than 1e-3 of the diagonal from the surface.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
