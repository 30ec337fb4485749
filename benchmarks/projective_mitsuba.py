"""rayd's edge-sampled boundary term beside Mitsuba 3's ``direct_projective`` (issue 15).

Scene: one emissive object (radiance 1, black BSDF) over a black background, seen by a
pinhole camera with a box pixel filter, so each pixel is the object's box-filtered
coverage. The quantity is the gradient image ``dI_k/dt`` for a translation ``t`` of the
object along world x, at ``t = 0``; it is all visibility-boundary term (the interior term
of a constant emitter is zero). Three estimates:

* ``reference``: central finite differences (float64) of the exact pixel coverage of the
  projected object (convex polygon clipped against each pixel square: the limit of
  supersampling), and, as a check of the reference, of 1024-spp stratified supersampled
  coverage (32 x 32 jittered strata per pixel, the same points at ``t ± h``);
* ``rayd``: ``Camera.sample_edges`` + ``EdgeSamples.boundary_term`` (box filter), the
  per-pixel derivative by double backward, N edge samples;
* ``mitsuba``: ``direct_projective`` with ``sppc = sppi = 0`` and ``sppp = K`` (primary
  visibility only; ``K · W · H`` silhouette samples), forward mode (``dr.forward`` on the
  translation).

At equal samples (``N = K · W · H``) over S seeds: relative L2 error of one gradient
image and of the seed mean, the summed gradient against the reference's, the per-pixel
variance summed over the image, and the time of one gradient image.

Conventions (matched, and checked by comparing Mitsuba's primal image with the exact
coverage): rayd's camera is OpenCV (x right, y down, z forward) at the origin; Mitsuba's
``perspective`` sensor looks along +z of ``look_at(origin=0, target=+z, up=-y)``, whose
camera x is ``cross(up, dir) = -x`` ("left") and y is ``-y``, so world +x is image right and
world +y image down in both. ``fov_axis='y'`` with the same ``fov`` (degrees), a square
image, ``rfilter = box`` (pixel mean over its unit square, as rayd's ``filter="box"``),
``sample_border = True``. Area emitters emit on the front side only: faces are wound so
their normals face the camera (triangle) or outwards (cube).

    python benchmarks/projective_mitsuba.py                      # CPU: llvm_ad_rgb, 64 x 64
    python benchmarks/projective_mitsuba.py --device cuda        # cuda_ad_rgb
    python benchmarks/projective_mitsuba.py --quick              # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import rayd.torch as rt

FOV_Y = 40.0
Z = 3.0


# ---------------------------------------------------------------------- scenes
def make_object(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(V, 3) float64 vertices and (F, 3) faces of ``triangle``, ``cube`` or ``cube_split``.

    Front faces toward the camera (triangle) or outwards (cube). ``cube_split`` is the
    same cube with its vertices split per side (24 vertices, 4 per side, like Mitsuba's
    built-in ``cube`` shape, so every cube edge is a pair of boundary edges).
    """
    if name == "cube_split":
        v, f = make_object("cube")
        verts, faces = [], []
        for side in range(6):
            tri = f[2 * side: 2 * side + 2]
            ids, inverse = np.unique(tri.reshape(-1), return_inverse=True)
            faces.append(inverse.reshape(2, 3) + len(verts))
            verts.extend(v[ids])
        return np.array(verts), np.concatenate(faces)
    if name == "triangle":
        v = np.array([[-0.5, -0.4, 3.0], [0.6, -0.3, 3.2], [0.05, 0.5, 2.8]])
        f = np.array([[0, 1, 2]])
    elif name == "cube":
        a, ax = 0.6, np.array([1.0, 2.0, 0.5]) / math.sqrt(5.25)
        k = np.array([[0, -ax[2], ax[1]], [ax[2], 0, -ax[0]], [-ax[1], ax[0], 0]])
        rot = np.eye(3) + math.sin(a) * k + (1 - math.cos(a)) * k @ k
        corners = np.array([[x, y, z] for x in (-.3, .3) for y in (-.3, .3) for z in (-.3, .3)])
        v = corners @ rot.T + [0.1, -0.1, Z]
        f = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                      [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    else:
        raise ValueError(f"unknown object {name!r}")
    centre = v.mean(0)
    for i, (p, q, r) in enumerate(f):
        n = np.cross(v[q] - v[p], v[r] - v[p])
        facing = -(v[p] + v[q] + v[r]) / 3 if name == "triangle" else (v[p] + v[q] + v[r]) / 3 - centre
        if n @ facing < 0:
            f[i] = (p, r, q)
    return v, f


def focal(size: int) -> float:
    return 0.5 * size / math.tan(math.radians(FOV_Y) / 2)


def project(v: np.ndarray, size: int) -> np.ndarray:
    fx = focal(size)
    return np.stack((fx * v[:, 0] / v[:, 2] + size / 2, fx * v[:, 1] / v[:, 2] + size / 2), -1)


# ---------------------------------------------------------------------- reference (float64)
def hull(points: np.ndarray) -> np.ndarray:
    """Counter-clockwise convex hull (Andrew's monotone chain)."""
    pts = sorted(map(tuple, points))
    cross = lambda o, a, b: (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])  # noqa: E731
    lower, upper = [], []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return np.array(lower[:-1] + upper[:-1])


def exact_coverage(poly: np.ndarray, size: int) -> np.ndarray:
    """(size, size) area of the convex ccw polygon inside each unit pixel (clip the polygon to each pixel)."""
    out = np.zeros((size, size))
    lo, hi = np.floor(poly.min(0)).astype(int), np.ceil(poly.max(0)).astype(int)
    for j in range(max(lo[1], 0), min(hi[1], size)):
        for i in range(max(lo[0], 0), min(hi[0], size)):
            p = [tuple(x) for x in poly]
            for axis, bound, above in ((0, i, True), (0, i + 1, False), (1, j, True), (1, j + 1, False)):
                q = []
                for a, b in zip(p, p[1:] + p[:1]):
                    ina, inb = (a[axis] >= bound) == above, (b[axis] >= bound) == above
                    if ina:
                        q.append(a)
                    if ina != inb:
                        s = (bound - a[axis]) / (b[axis] - a[axis])
                        q.append((a[0] + s * (b[0] - a[0]), a[1] + s * (b[1] - a[1])))
                p = q
                if not p:
                    break
            if len(p) >= 3:
                x, y = np.array(p).T
                out[j, i] = 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))
    return out


def supersampled_coverage(poly: np.ndarray, size: int, points: torch.Tensor) -> np.ndarray:
    """(size, size) fraction of the (size, size, S, 2) points inside the convex ccw polygon."""
    inside = torch.ones(points.shape[:-1], dtype=torch.bool)
    p = torch.tensor(poly)
    for a, b in zip(p, torch.roll(p, -1, 0)):
        e = b - a
        inside &= (e[0] * (points[..., 1] - a[1]) - e[1] * (points[..., 0] - a[0])) >= 0
    return inside.double().mean(-1).numpy()


def reference(v: np.ndarray, size: int, shift: np.ndarray, h_exact: float = 1e-5, shift_ss: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Central differences in t of the exact and of the 1024-spp coverage (float64).

    ``h_exact`` is the step in t for the exact coverage; the supersampled one steps by
    about ``shift_ss`` pixels (so that some 8 strata rows are crossed each way).
    """
    h_ss = shift_ss * Z / focal(size) / max(np.linalg.norm(shift[:2]), 0.1)
    cover = lambda t: exact_coverage(hull(project(v + t * shift, size)), size)  # noqa: E731
    exact = (cover(h_exact) - cover(-h_exact)) / (2 * h_exact)
    g = torch.Generator().manual_seed(1234)
    side = 32
    strata = torch.arange(side, dtype=torch.float64)
    base = torch.stack(torch.meshgrid(strata, strata, indexing="xy"), -1).reshape(-1, 2)
    pix = torch.stack(torch.meshgrid(torch.arange(size, dtype=torch.float64), torch.arange(size, dtype=torch.float64),
                                     indexing="xy"), -1)
    points = pix[:, :, None, :] + (base[None, None] + torch.rand(size, size, side * side, 2, generator=g,
                                                                 dtype=torch.float64)) / side
    ss = lambda t: supersampled_coverage(hull(project(v + t * shift, size)), size, points)  # noqa: E731
    return exact, (ss(h_ss) - ss(-h_ss)) / (2 * h_ss)


# ---------------------------------------------------------------------- rayd
class RaydEstimator:
    def __init__(self, v: np.ndarray, f: np.ndarray, size: int, device: str, shift: np.ndarray) -> None:
        self.shift = torch.tensor(shift, dtype=torch.float64, device=device)
        self.t = torch.zeros((), dtype=torch.float64, device=device, requires_grad=True)
        self.v0 = torch.tensor(v, device=device)
        self.scene = rt.Scene()
        self.id = self.scene.add_mesh(rt.Mesh(self.v0.clone(), torch.tensor(f, device=device)), dynamic=True)
        self.scene.build()
        self.cam = rt.Camera(size, size, fov_y=FOV_Y)
        self.device = device

    def __call__(self, num_samples: int, seed: int) -> np.ndarray:
        self.scene.update_mesh_vertices(self.id, self.v0 + self.t * self.shift)
        self.scene.sync()
        gen = torch.Generator(device=self.device).manual_seed(seed)
        s = self.cam.sample_edges(self.scene, num_samples, generator=gen)
        with torch.no_grad():
            f_in = self.scene.intersect(s.ray_inside, flags=rt.RayFlags.Minimal).is_valid().double()
            f_out = self.scene.intersect(s.ray_outside, flags=rt.RayFlags.Minimal).is_valid().double()
        image = s.boundary_term(f_in, f_out, filter="box")
        # d image / dt by double backward: g(u) = Σ u_k dI_k/dt is linear in u.
        u = torch.zeros_like(image, requires_grad=True)
        (g,) = torch.autograd.grad(image, self.t, grad_outputs=u, create_graph=True)
        (jac,) = torch.autograd.grad(g, u)
        return jac.cpu().numpy()


# ---------------------------------------------------------------------- Mitsuba
class MitsubaEstimator:
    def __init__(self, v: np.ndarray, f: np.ndarray, size: int, variant: str, tmp: Path, shift: np.ndarray) -> None:
        self.shift = [float(x) for x in shift]
        import drjit as dr
        import mitsuba as mi

        mi.set_variant(variant)
        self.dr, self.mi = dr, mi
        ply = tmp / "object.ply"
        with open(ply, "w") as fh:
            fh.write(f"ply\nformat ascii 1.0\nelement vertex {len(v)}\nproperty float x\nproperty float y\n"
                     f"property float z\nelement face {len(f)}\nproperty list uchar int vertex_indices\nend_header\n")
            fh.writelines(f"{x:.17g} {y:.17g} {z:.17g}\n" for x, y, z in v)
            fh.writelines(f"3 {a} {b} {c}\n" for a, b, c in f)
        self.scene = mi.load_dict({
            "type": "scene",
            "integrator": {"type": "direct_projective", "sppc": 0, "sppi": 0, "sppp": 1},
            "sensor": {
                "type": "perspective", "fov": FOV_Y, "fov_axis": "y",
                "to_world": mi.ScalarTransform4f().look_at(origin=[0, 0, 0], target=[0, 0, 1], up=[0, -1, 0]),
                "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"},
                         "sample_border": True, "pixel_format": "rgb"},
                "sampler": {"type": "independent", "sample_count": 1},
            },
            "object": {"type": "ply", "filename": str(ply), "face_normals": True,
                       "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.0, 0.0, 0.0]}},
                       "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [1.0, 1.0, 1.0]}}},
        })
        self.params = mi.traverse(self.scene)
        self.key = "object.vertex_positions"
        self.v0 = dr.unravel(mi.Point3f, self.params[self.key])
        self.integrator = self.scene.integrator()

    def primal(self, spp: int) -> np.ndarray:
        mi = self.mi
        direct = mi.load_dict({"type": "direct"})
        return np.asarray(mi.render(self.scene, integrator=direct, spp=spp, seed=7))[..., 0].astype(np.float64)

    def __call__(self, sppp: int, seed: int) -> np.ndarray:
        dr, mi = self.dr, self.mi
        t = mi.Float(0.0)
        dr.enable_grad(t)
        self.params[self.key] = dr.ravel(self.v0 + t * mi.Vector3f(*self.shift))
        self.params.update()
        img = mi.render(self.scene, self.params, spp=sppp, seed=seed)
        dr.forward(t)
        grad = dr.grad(img)
        dr.eval(grad)
        return np.asarray(grad)[..., 0].astype(np.float64)


# ---------------------------------------------------------------------- driver
def rel_l2(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def evaluate(name: str, images: list[np.ndarray], seconds: list[float], ref: np.ndarray) -> dict:
    stack = np.stack(images)
    mean = stack.mean(0)
    return dict(
        estimator=name,
        rel_l2_one=float(np.mean([rel_l2(x, ref) for x in stack])),
        rel_l2_mean=rel_l2(mean, ref),
        sum_ratio=float(stack.sum((1, 2)).mean() / ref.sum()),
        signed_sum_ratio=float((stack.mean(0) * np.sign(ref)).sum() / np.abs(ref).sum()),
        variance_sum=float(stack.var(0, ddof=1).sum()),
        seconds=float(np.median(seconds)),
    )


def run(obj: str, size: int, sppp: int, seeds: int, device: str, tmp: Path, direction: str = "x", log=print) -> dict:
    v, f = make_object(obj)
    shift = np.array({"x": [1.0, 0.0, 0.0], "y": [0.0, 1.0, 0.0], "z": [0.0, 0.0, 1.0]}[direction])
    exact, ss = reference(v, size, shift)
    n = sppp * size * size
    rows = [dict(estimator="fd_supersampled_1024spp", rel_l2_one=rel_l2(ss, exact), rel_l2_mean=rel_l2(ss, exact),
                 sum_ratio=float(ss.sum() / exact.sum()),
                 signed_sum_ratio=float((ss * np.sign(exact)).sum() / np.abs(exact).sum()),
                 variance_sum=None, seconds=None)]
    images = {"exact": exact}
    rayd = RaydEstimator(v, f, size, device, shift)
    rayd(n, 10_000)  # warm-up (kernel loads)
    out, secs = [], []
    for s in range(seeds):
        t0 = time.perf_counter()
        out.append(rayd(n, s))
        secs.append(time.perf_counter() - t0)
    rows.append(evaluate(f"rayd (N={n})", out, secs, exact))
    images["rayd"] = out[0]
    primal_err = None
    try:
        variant = "cuda_ad_rgb" if device.startswith("cuda") else "llvm_ad_rgb"
        mts = MitsubaEstimator(v, f, size, variant, tmp, shift)
    except Exception as exc:  # noqa: BLE001 - Mitsuba missing or the variant unavailable
        log(f"Mitsuba skipped: {type(exc).__name__}: {exc}")
    else:
        primal = mts.primal(1024)
        cover = exact_coverage(hull(project(v, size)), size)
        primal_err = float(np.abs(primal - cover).max())  # MC: σ <= 0.5 / 32 per pixel
        mts(sppp, 10_000)  # warm-up (JIT compilation)
        out, secs = [], []
        for s in range(seeds):
            t0 = time.perf_counter()
            out.append(mts(sppp, s))
            secs.append(time.perf_counter() - t0)
        rows.append(evaluate(f"mitsuba direct_projective (sppp={sppp})", out, secs, exact))
        images["mitsuba"] = out[0]
    return dict(object=obj, direction=direction, size=size, samples=n, sppp=sppp, seeds=seeds, device=device,
                reference_sum=float(exact.sum()), reference_abs_sum=float(np.abs(exact).sum()),
                mitsuba_primal_max_abs_err_1024spp=primal_err, rows=rows), images


def table(result: dict) -> str:
    lines = [f"{result['object']}, translation along {result['direction']}, {result['size']}x{result['size']}, N = {result['samples']} samples, "
             f"{result['seeds']} seeds, {result['device']}; reference Σ dI/dt = {result['reference_sum']:.4f}, "
             f"Σ|dI/dt| = {result['reference_abs_sum']:.3f}; Mitsuba primal vs exact coverage (1024 spp): max |err| = "
             f"{result['mitsuba_primal_max_abs_err_1024spp']}",
             "| estimator | rel L2 (1 image) | rel L2 (seed mean) | Σ / Σ_ref | Σ sign(ref)·mean / Σ|ref| | Σ_k Var | time / image (s) |",
             "|---|---|---|---|---|---|---|"]
    fmt = lambda x, p: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
    for r in result["rows"]:
        lines.append(f"| {r['estimator']} | {fmt(r['rel_l2_one'], 4)} | {fmt(r['rel_l2_mean'], 4)} | "
                     f"{fmt(r['sum_ratio'], 4)} | {fmt(r['signed_sum_ratio'], 4)} | {fmt(r['variance_sum'], 3)} | "
                     f"{fmt(r['seconds'], 4)} |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--sppp", type=int, default=4, help="Mitsuba's primary-boundary spp; rayd gets sppp·W·H samples")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--objects", default="triangle:x,cube:x,cube:z,cube_split:x,cube_split:z",
                        help="comma-separated OBJECT:DIRECTION (objects triangle, cube, cube_split; directions x, y, z)")
    parser.add_argument("--output", type=Path, default=None, help="JSON file (default: none)")
    parser.add_argument("--picture", type=Path, default=None, help="PNG of the gradient images (default: none)")
    parser.add_argument("--quick", action="store_true", help="32 x 32, 4 seeds")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.seeds = 32, 4
    results, pictures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for item in args.objects.split(","):
            obj, _, direction = item.partition(":")
            result, images = run(obj, args.size, args.sppp, args.seeds, args.device, Path(tmp), direction or "x")
            print(table(result) + "\n", flush=True)
            results.append(result)
            pictures.append((item, images))
    meta = dict(python=platform.python_version(), torch=torch.__version__, machine=platform.machine())
    try:
        import drjit
        import mitsuba

        meta.update(mitsuba=mitsuba.__version__, drjit=drjit.__version__)
    except ImportError:
        pass
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(dict(meta=meta, results=results), indent=1) + "\n")
    if args.picture:
        save_picture(pictures, args.picture)
    return results


def save_picture(pictures, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(images) for _, images in pictures)
    fig, axes = plt.subplots(len(pictures), cols, figsize=(3.2 * cols, 3.2 * len(pictures)), squeeze=False)
    for row, (obj, images) in enumerate(pictures):
        scale = np.abs(images["exact"]).max()
        for col, (name, img) in enumerate(images.items()):
            ax = axes[row, col]
            ax.imshow(img, cmap="coolwarm", vmin=-scale, vmax=scale, interpolation="nearest")
            ax.set_title(f"{obj}: {name}", fontsize=9)
            ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle("dI/dt for a translation (one seed each)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
