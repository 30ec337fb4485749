"""rayd.drjit quick start: closest hits of a camera's rays, and their gradients.

    python3 examples/drjit/quickstart.py [--backend llvm|cuda] [--size N] [--out depth.png]

(with rayd installed, ``pip install ".[drjit,examples]"``; in a checkout without installing,
prefix ``PYTHONPATH=src``).

Builds a bumpy grid mesh from Dr.Jit arrays, shoots one ray per pixel from a pinhole
camera, prints what the hits look like, then differentiates the mean hit distance
with respect to the vertices (reverse mode, ``dr.backward``) and with respect to a
vertical shift of the mesh (forward mode, ``dr.forward_to``). With matplotlib
installed, ``--out`` saves the depth image (misses in grey).
"""

from __future__ import annotations

import argparse
import importlib
import math

import numpy as np

import rayd.drjit as rd  # first: without Dr.Jit it names the package and the pip extra to install

import drjit as dr  # noqa: E402  (isort: skip)


def bumpy_grid(m, cells: int):
    """A (cells+1)^2 grid over [-1, 1]^2 with a bump in the middle: Array3f vertices, Array3u faces."""
    axis = np.linspace(-1.0, 1.0, cells + 1)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    z = 0.3 * np.exp(-4.0 * (x**2 + y**2))
    vertices = np.stack([x.ravel(), y.ravel(), z.ravel()]).astype(np.float32)  # (3, V): Dr.Jit's layout
    index = np.arange((cells + 1) ** 2).reshape(cells + 1, cells + 1)
    a, b, c, d = index[:-1, :-1].ravel(), index[:-1, 1:].ravel(), index[1:, :-1].ravel(), index[1:, 1:].ravel()
    faces = np.concatenate([np.stack([a, b, c]), np.stack([b, d, c])], axis=1).astype(np.uint32)  # (3, F)
    return m.Array3f(vertices), m.Array3u(faces)


def camera_rays(m, width: int, height: int):
    """One ray per pixel from a pinhole above the grid, looking down at it."""
    index = dr.arange(m.UInt, width * height)
    px = m.Float(index % width) + 0.5
    py = m.Float(index // width) + 0.5
    x = (px / width - 0.5) * 2.4
    y = (py / height - 0.5) * 2.4 * height / width
    origin = m.Array3f(0.0, 0.0, 3.0)
    direction = dr.normalize(m.Array3f(x, y, -3.0))
    return origin, direction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = "cuda" if dr.has_backend(dr.JitBackend.CUDA) else "llvm"
    parser.add_argument("--backend", choices=["llvm", "cuda"], default=default)
    parser.add_argument("--size", type=int, default=128, help="image width and height")
    parser.add_argument("--out", default=None, help="save the depth image here (needs matplotlib)")
    args = parser.parse_args()
    m = importlib.import_module(f"drjit.{args.backend}.ad")  # .ad: arrays that can carry gradients

    vertices, faces = bumpy_grid(m, 32)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vertices, faces))
    scene.build()

    o, d = camera_rays(m, args.size, args.size)
    ray = rd.Ray(o, d)  # one origin (width 1) broadcasts against all directions

    # Gradients flow where inputs are .ad arrays with gradients enabled.
    dr.enable_grad(vertices)
    hit = scene.intersect(ray)
    valid = hit.is_valid()
    count = dr.count(valid)[0]
    mean_t = dr.sum(dr.select(valid, hit.t, 0)) / dr.maximum(count, 1)
    print(f"backend={args.backend} rays={dr.width(hit.t)} hits={count} mean t={mean_t[0]:.4f}")
    center = args.size * args.size // 2 + args.size // 2
    p, n = (np.array(dr.detach(x)).T[center] for x in (hit.p, hit.geo_n))  # NumPy (N, 3) rows
    print(f"center ray: t={hit.t[center]:.4f} p={np.round(p, 4)} geo_n={np.round(n, 4)}")

    # Reverse mode: d(mean t)/d(vertices), one Array3f of width V.
    dr.backward(mean_t)
    grad = dr.grad(vertices)
    print(f"reverse mode: |d mean_t / d vertices| = {math.sqrt(dr.sum(dr.squared_norm(grad))[0]):.4f}")

    # Forward mode: move the whole mesh up by s; d(mean t)/ds at s = 0.
    shift = m.Float(0.0)
    dr.enable_grad(shift)
    moved = vertices + m.Array3f(0, 0, shift)
    scene_moved = rd.Scene()
    scene_moved.add_mesh(rd.Mesh(moved, faces))
    scene_moved.build()
    hit = scene_moved.intersect(ray)
    mean_t = dr.sum(dr.select(hit.is_valid(), hit.t, 0)) / dr.maximum(dr.count(hit.is_valid()), 1)
    dr.forward_from(shift)
    print(f"forward mode: d mean_t / d shift = {dr.grad(mean_t)[0]:.4f} (negative: a raised mesh is closer)")

    if args.out:
        hit = scene.intersect(ray)
        t = np.array(dr.detach(hit.t)).reshape(args.size, args.size)  # +inf on a miss
        save_depth(args.out, t, np.array(hit.is_valid()).reshape(args.size, args.size))
        print(f"wrote {args.out}")


def save_depth(path: str, t: np.ndarray, valid: np.ndarray) -> None:
    """Save hit distances as an opaque PNG: viridis over the hits' range, misses in a flat grey.

    Misses must not reach the colour map as NaN or inf: ``plt.imsave`` scales by the
    array's min and max, so a single NaN made the whole picture transparent.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise SystemExit(f"{__file__}: the depth image needs matplotlib: pip install 'rayd-geom[examples]' ({error})") from error
    from matplotlib import colormaps

    rgba = np.empty(t.shape + (4,))
    rgba[:] = (0.2, 0.2, 0.2, 1.0)  # background: misses
    if valid.any():
        low, high = float(t[valid].min()), float(t[valid].max())
        scaled = (t[valid] - low) / max(high - low, 1e-12)
        rgba[valid] = colormaps["viridis"](1.0 - scaled)  # near is bright
    plt.imsave(path, rgba)


if __name__ == "__main__":
    main()
