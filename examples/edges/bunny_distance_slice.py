"""Colour the distance to the nearest mesh edge on a slice through the Stanford bunny.

Builds a rayd scene from the bunny, samples a grid of points on the plane
``z = z_slice`` through the mesh's bounding box, asks ``Scene.nearest_edge`` for the
closest edge of each, and writes a PNG: the distance field as colours with iso-lines,
plus the points where the slice is within a hair of an edge. The gradient of the
summed distance with respect to the vertices is computed too (one ``backward()``),
to show that the query is differentiable; its magnitude per vertex is printed.

Usage::

    python examples/get_bunny.py                       # writes .device/meshes/bunny.npz
    python examples/edges/bunny_distance_slice.py --out bunny_distance_slice.png

Args (command line):
    --mesh: an ``.npz`` with ``vertices`` (V, 3) float and ``faces`` (F, 3) int.
    --out: the PNG to write.
    --res: grid resolution along the longer side of the slice.
    --slice: where the plane cuts the box along z, as a fraction in [0, 1].
    --device: ``cpu`` or ``cuda``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

import rayd.torch as rt

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mesh", type=Path, default=ROOT / ".device" / "meshes" / "bunny.npz")
    parser.add_argument("--out", type=Path, default=Path("bunny_distance_slice.png"))
    parser.add_argument("--res", type=int, default=400)
    parser.add_argument("--slice", type=float, default=0.5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    try:
        import matplotlib
    except ImportError as error:
        raise SystemExit(f"{__file__}: its pictures need matplotlib: pip install 'rayd-geom[examples]' ({error})") from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not args.mesh.exists():
        sys.exit(f"{args.mesh} not found; run: python {ROOT / 'examples' / 'get_bunny.py'} (or pass --mesh PATH.npz)")
    data = np.load(args.mesh)
    vertices = torch.from_numpy(data["vertices"].astype(np.float32)).to(args.device).requires_grad_(True)
    faces = torch.from_numpy(data["faces"].astype(np.int64)).to(args.device)

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, faces))
    scene.build()
    topology = scene.edge_topology()
    print(f"bunny: {vertices.shape[0]} vertices, {faces.shape[0]} faces, {topology.num_edges} edges "
          f"({int(topology.is_boundary.sum())} boundary)")

    lo = vertices.detach().min(0).values
    hi = vertices.detach().max(0).values
    pad = 0.08 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    z = float(lo[2] + args.slice * (hi[2] - lo[2]))
    aspect = float((hi[1] - lo[1]) / (hi[0] - lo[0]))
    nx = args.res
    ny = max(2, int(round(args.res * aspect)))
    xs = torch.linspace(float(lo[0]), float(hi[0]), nx, device=args.device)
    ys = torch.linspace(float(lo[1]), float(hi[1]), ny, device=args.device)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    points = torch.stack((gx, gy, torch.full_like(gx, z)), dim=-1)  # (ny, nx, 3)

    hit = scene.nearest_edge(points)
    hit.distance.sum().backward()
    distance = hit.distance.detach()
    print(f"slice z = {z:.4f}: distance in [{float(distance.min()):.2e}, {float(distance.max()):.2e}], "
          f"max |d(sum distance)/d vertex| = {float(vertices.grad.norm(dim=-1).max()):.3f}")

    distance = hit.distance.detach().cpu().numpy()
    extent = (float(lo[0]), float(hi[0]), float(lo[1]), float(hi[1]))
    fig, ax = plt.subplots(figsize=(7, 7 * aspect + 0.6), dpi=120)
    image = ax.imshow(distance, origin="lower", extent=extent, cmap="magma_r")
    ax.contour(distance, levels=12, origin="lower", extent=extent, colors="white", linewidths=0.4, alpha=0.6)
    near = distance < 0.6 * float(np.median(np.diff(xs.cpu().numpy())))
    yy, xx = np.nonzero(near)
    ax.scatter(xs.cpu().numpy()[xx], ys.cpu().numpy()[yy], s=0.3, c="cyan", linewidths=0)
    ax.set_title(f"distance to the nearest edge, bunny slice z = {z:.3f}")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    fig.colorbar(image, ax=ax, shrink=0.8, label="distance (world units)")
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
