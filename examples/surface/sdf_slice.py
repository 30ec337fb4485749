"""A slice of the signed distance field through the Stanford bunny.

Builds a rayd scene from the bunny, samples a grid on the plane ``z = z_slice``
through its bounding box, asks ``Scene.signed_distance`` (closest point by BVH, sign
from the hierarchical winding number) for every grid point and writes a PNG: the field
in a diverging colour map (blue inside, red outside), contour lines every
eighths of the largest value, and the zero level (the surface's cut) in black. The gradient
of the summed signed distance with respect to the query points is computed too (one
``backward()``): it is the unit direction away from the closest point, flipped inside,
so its norm is printed (1 up to rounding wherever the distance is not 0).

Usage::

    python examples/get_bunny.py                       # writes .device/meshes/bunny.npz
    python examples/surface/sdf_slice.py --out examples/surface/sdf_slice.png

Args (command line):
    --mesh: an ``.npz`` with ``vertices`` (V, 3) float and ``faces`` (F, 3) int.
    --out: the PNG to write.
    --res: grid resolution along the longer side of the slice.
    --slice: where the plane cuts the box along z, as a fraction in [0, 1].
    --save-values: also write the grid points and values to this ``.npz`` (for tests).
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
    parser.add_argument("--out", type=Path, default=Path("sdf_slice.png"))
    parser.add_argument("--res", type=int, default=500)
    parser.add_argument("--slice", type=float, default=0.5)
    parser.add_argument("--save-values", type=Path, default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    try:
        import matplotlib
    except ImportError as error:
        raise SystemExit(f"{__file__}: its pictures need matplotlib: pip install 'rayd-geom[examples]' ({error})") from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    if not args.mesh.exists():
        sys.exit(f"{args.mesh} not found; run: python {ROOT / 'examples' / 'get_bunny.py'} (or pass --mesh PATH.npz)")
    data = np.load(args.mesh)
    vertices = torch.from_numpy(data["vertices"].astype(np.float32)).to(args.device)
    faces = torch.from_numpy(data["faces"].astype(np.int64)).to(args.device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, faces))
    scene.build()
    print(f"mesh: {vertices.shape[0]} vertices, {faces.shape[0]} faces")

    lo, hi = vertices.min(0).values, vertices.max(0).values
    pad = 0.12 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    z = float(lo[2] + args.slice * (hi[2] - lo[2]))
    aspect = float((hi[1] - lo[1]) / (hi[0] - lo[0]))
    nx = args.res
    ny = max(2, int(round(args.res * aspect)))
    xs = torch.linspace(float(lo[0]), float(hi[0]), nx, device=args.device)
    ys = torch.linspace(float(lo[1]), float(hi[1]), ny, device=args.device)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    points = torch.stack((gx, gy, torch.full_like(gx, z)), dim=-1).requires_grad_(True)  # (ny, nx, 3)

    sdf = scene.signed_distance(points)
    sdf.sum().backward()
    norm = points.grad.norm(dim=-1)
    field = sdf.detach().cpu().numpy()
    inside = float((field < 0).mean())
    print(f"slice z = {z:.4f}: signed distance in [{field.min():.4f}, {field.max():.4f}], "
          f"{100 * inside:.1f} % of the slice inside, |d sdf / d point| in [{float(norm.min()):.6f}, "
          f"{float(norm.max()):.6f}]")
    if args.save_values is not None:
        np.savez(args.save_values, points=points.detach().cpu().numpy(), sdf=field)

    extent = (float(lo[0]), float(hi[0]), float(lo[1]), float(hi[1]))
    fig, ax = plt.subplots(figsize=(7, 7 * aspect + 0.6), dpi=120)
    limit = float(np.abs(field).max())
    image = ax.imshow(field, origin="lower", extent=extent, cmap="RdBu_r",
                      norm=TwoSlopeNorm(vmin=-limit, vcenter=0.0, vmax=limit))
    step = limit / 8
    levels = np.concatenate([-np.arange(step, limit, step)[::-1], np.arange(step, limit, step)])
    ax.contour(field, levels=levels, origin="lower", extent=extent, colors="k", linewidths=0.35, alpha=0.45)
    ax.contour(field, levels=[0.0], origin="lower", extent=extent, colors="k", linewidths=1.6)
    ax.set_title(f"signed distance to the bunny, slice z = {z:.3f} (black: zero level)")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    fig.colorbar(image, ax=ax, shrink=0.8, label="signed distance (world units, < 0 inside)")
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
