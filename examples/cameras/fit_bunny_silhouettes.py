"""Fit an icosphere to the Stanford bunny's silhouettes from 8 views (issue 15).

The loss compares each view's box-filtered pixel coverage of the current mesh with the
bunny's (the targets are rendered by rayd too: 4 x 4 stratified supersampling of camera
rays). The coverage of a constant-coloured mesh over a black background has no interior
derivative, so its whole gradient is the visibility-boundary term::

    coverage_k = hit_k (value, rays through pixel centres) + boundary_k (value 0)
    boundary   = EdgeSamples.boundary_term(hit(ray_inside), hit(ray_outside), filter="box")

with the samples from ``Camera.sample_edges`` (silhouette edges of the current mesh, seen
from each camera). The loss is ``Σ_views mean_k (coverage_k − target_k)²`` plus a uniform
Laplacian regulariser ``λ mean_i |v_i − mean_{j∈N(i)} v_j|²`` (torch), minimised by Adam on
per-vertex offsets; the IoU of each view (pixel-centre masks) is reported every iteration.

    python examples/cameras/fit_bunny_silhouettes.py                # fetches the bunny if missing
    python examples/cameras/fit_bunny_silhouettes.py --quick        # a few iterations, small images

Writes ``views.png`` (the 8 views before and after: target outline over the current mask),
``iou.png`` (IoU per view and mean against iteration) and ``fit.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import rayd.torch as rt

ROOT = Path(__file__).resolve().parents[2]
GET_BUNNY = ROOT / "examples" / "get_bunny.py"


# ---------------------------------------------------------------------- data
def load_bunny(meshes: Path) -> tuple[np.ndarray, np.ndarray]:
    """The 3.6k-triangle bunny from ``meshes/bunny.npz``, fetched with examples/get_bunny.py if missing.

    ``RAYD_GET_MESHES`` may name a ``get_meshes.sh``-style script (``bash SCRIPT DIR small``)
    to run instead.
    """
    path = meshes / "bunny.npz"
    if not path.exists():
        script = os.environ.get("RAYD_GET_MESHES")
        command = (["bash", script, str(meshes), "small"] if script
                   else [sys.executable, str(GET_BUNNY), "--out", str(path)])
        print(f"{path} missing: running {' '.join(command)}", flush=True)
        subprocess.run(command, check=False)
        if not path.exists():
            sys.exit(f"fit_bunny_silhouettes.py: {path} not found; fetch it with "
                     f"`python {GET_BUNNY} --out {path}` (needs npm or network access) "
                     f"or pass --meshes DIR holding bunny.npz")
    data = np.load(path)
    return data["vertices"].astype(np.float64), data["faces"].astype(np.int64)


def normalise(vertices: np.ndarray) -> np.ndarray:
    """Centre the bounding box at the origin and scale the farthest vertex to radius 1."""
    v = vertices - 0.5 * (vertices.min(0) + vertices.max(0))
    return v / np.linalg.norm(v, axis=1).max()


def look_at(eye: np.ndarray, target=(0.0, 0.0, 0.0), up=(0.0, 1.0, 0.0)) -> torch.Tensor:
    """(4, 4) float64 camera-to-world matrix, OpenCV axes (x right, y down, z forward)."""
    eye = np.asarray(eye, float)
    forward = np.asarray(target, float) - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = right, down, forward, eye
    return torch.tensor(m)


def make_cameras(size: int, device: str, distance: float = 3.2, fov_y: float = 45.0) -> list[rt.Camera]:
    """8 cameras around the origin: azimuths every 45°, elevations alternating 30° and -10°."""
    cams = []
    for k in range(8):
        az, el = math.radians(45.0 * k), math.radians(30.0 if k % 2 == 0 else -10.0)
        eye = distance * np.array([math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)])
        cams.append(rt.Camera(size, size, fov_y=fov_y, to_world=look_at(eye).to(device)))
    return cams


# ---------------------------------------------------------------------- rendering
def hit(scene: rt.Scene, ray: rt.Ray) -> torch.Tensor:
    """Float 0/1 of each ray hitting the scene (no gradient)."""
    with torch.no_grad():
        return scene.intersect(ray, flags=rt.RayFlags.Minimal).is_valid().to(ray.d.dtype)


def coverage_supersampled(scene: rt.Scene, cam: rt.Camera, spp_side: int = 4) -> torch.Tensor:
    """(H, W) box-filtered pixel coverage by ``spp_side²`` stratified sub-pixel rays (fixed grid)."""
    device = cam.device
    offsets = (torch.arange(spp_side, dtype=torch.float64, device=device) + 0.5) / spp_side
    ys = torch.arange(cam.height, dtype=torch.float64, device=device)[:, None] + offsets
    xs = torch.arange(cam.width, dtype=torch.float64, device=device)[:, None] + offsets
    gy = ys[:, None, :, None].expand(cam.height, cam.width, spp_side, spp_side)
    gx = xs[None, :, None, :].expand(cam.height, cam.width, spp_side, spp_side)
    samples = torch.stack((gx, gy), dim=-1).reshape(-1, 2)
    return hit(scene, cam.generate_rays(samples)).reshape(cam.height, cam.width, -1).mean(-1)


def coverage(scene: rt.Scene, cam: rt.Camera, num_edge_samples: int, generator: torch.Generator):
    """(H, W) pixel-centre hit mask plus the boundary term (value 0, gradient dcoverage/dθ)."""
    mask = hit(scene, cam.generate_rays())
    edges = cam.sample_edges(scene, num_edge_samples, generator=generator)
    if len(edges) == 0:
        return mask, mask
    term = edges.boundary_term(hit(scene, edges.ray_inside), hit(scene, edges.ray_outside), filter="box")
    return mask + term, mask


def iou(mask: torch.Tensor, target: torch.Tensor) -> float:
    a, b = mask > 0.5, target > 0.5
    return float((a & b).sum()) / max(float((a | b).sum()), 1.0)


# ---------------------------------------------------------------------- regulariser
def uniform_laplacian(faces: torch.Tensor, num_vertices: int) -> torch.Tensor:
    """Sparse (V, V) ``I − D⁻¹A`` of the mesh graph (float64)."""
    e = torch.cat([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    e = torch.unique(torch.sort(torch.cat([e, e.flip(1)]), dim=1)[0], dim=0)
    e = torch.cat([e, e.flip(1)])
    deg = torch.bincount(e[:, 0], minlength=num_vertices).double()
    idx = torch.cat([e.T, torch.arange(num_vertices).repeat(2, 1)], dim=1)
    val = torch.cat([-1.0 / deg[e[:, 0]], torch.ones(num_vertices, dtype=torch.float64)])
    return torch.sparse_coo_tensor(idx, val, (num_vertices, num_vertices), check_invariants=False).coalesce()


# ---------------------------------------------------------------------- fit
def fit(target_v: np.ndarray, target_f: np.ndarray, *, size: int = 128, iterations: int = 150,
        subdivisions: int = 4, radius: float = 0.75, lr: float = 0.01, edge_samples: int = 8192,
        lam: float = 20.0, lam_final: float = 2.0, device: str = "cpu", seed: int = 0,
        log=print) -> dict:
    """Fit an icosphere to the silhouettes of (target_v, target_f); returns a dict of results."""
    try:
        import trimesh
    except ImportError as error:
        raise SystemExit(f"{__file__}: the icosphere needs trimesh: pip install 'rayd-geom[examples]' ({error})") from error

    cams = make_cameras(size, device)
    target_scene = rt.Scene()
    target_scene.add_mesh(rt.Mesh(torch.tensor(target_v, device=device), torch.tensor(target_f, device=device)))
    target_scene.build()
    targets = [coverage_supersampled(target_scene, c) for c in cams]
    masks = [hit(target_scene, c.generate_rays()) for c in cams]

    sphere = trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)
    base = torch.tensor(sphere.vertices, dtype=torch.float64, device=device)
    faces = torch.tensor(sphere.faces, dtype=torch.int64, device=device)
    lap = uniform_laplacian(faces.cpu(), len(base)).to(device)
    offset = torch.zeros_like(base, requires_grad=True)
    scene = rt.Scene()
    mesh_id = scene.add_mesh(rt.Mesh(base.clone(), faces), dynamic=True)
    scene.build()
    opt = torch.optim.Adam([offset], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    history, first_masks, start = [], None, time.perf_counter()
    for it in range(iterations + 1):
        v = base + offset
        scene.update_mesh_vertices(mesh_id, v)
        scene.sync()
        loss, ious, cur = 0.0, [], []
        for cam, target, tmask in zip(cams, targets, masks):
            cov, mask = coverage(scene, cam, edge_samples, gen)
            loss = loss + ((cov - target) ** 2).mean()
            ious.append(iou(mask, tmask))
            cur.append(mask)
        history.append(ious)
        if first_masks is None:
            first_masks = cur
        if it % 10 == 0 or it == iterations:
            log(f"iter {it:4d}  loss {float(loss.detach()):.5f}  mean IoU {np.mean(ious):.4f}  "
                f"IoU/view {' '.join(f'{x:.3f}' for x in ious)}  ({time.perf_counter() - start:.1f} s)")
        if it == iterations:
            break
        weight = lam * (lam_final / lam) ** (it / max(iterations - 1, 1))
        reg = (torch.sparse.mm(lap, v) ** 2).sum(-1).mean()
        opt.zero_grad()
        (loss + weight * reg).backward()
        opt.step()
    return dict(history=history, targets=[t.cpu() for t in masks], first=[m.cpu() for m in first_masks],
                last=[m.cpu() for m in cur], seconds=time.perf_counter() - start,
                vertices=(base + offset).detach().cpu().numpy(), faces=faces.cpu().numpy())


# ---------------------------------------------------------------------- pictures
def outline(mask: np.ndarray) -> np.ndarray:
    """Boolean image of the mask's boundary pixels (4-neighbourhood)."""
    m = mask > 0.5
    p = np.pad(m, 1, mode="edge")
    inner = p[:-2, 1:-1] & p[2:, 1:-1] & p[1:-1, :-2] & p[1:-1, 2:]
    return m & ~inner


def save_pictures(result: dict, out: Path) -> None:
    try:
        import matplotlib
    except ImportError as error:
        raise SystemExit(f"{__file__}: its pictures need matplotlib: pip install 'rayd-geom[examples]' ({error})") from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = np.asarray(result["history"])
    fig, axes = plt.subplots(2, 8, figsize=(16, 4.6))
    for row, (key, label) in enumerate((("first", "before"), ("last", "after"))):
        for k in range(8):
            cur = result[key][k].numpy()
            img = np.stack([cur * 0.55 + 0.2] * 3, -1)
            img[outline(result["targets"][k].numpy())] = (1.0, 0.1, 0.1)
            ax = axes[row, k]
            ax.imshow(img, interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(f"view {k} {label}: IoU {history[0 if row == 0 else -1, k]:.3f}", fontsize=8)
    fig.suptitle("icosphere fitted to the bunny's silhouettes (grey: current mask, red: target outline)")
    fig.tight_layout()
    fig.savefig(out / "views.png", dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for k in range(8):
        ax.plot(history[:, k], lw=0.8, alpha=0.6, label=f"view {k}")
    ax.plot(history.mean(1), "k", lw=2, label="mean")
    ax.axhline(0.95, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("iteration"), ax.set_ylabel("IoU (pixel-centre masks)")
    ax.set_ylim(max(0.0, history.min() - 0.05), 1.0)
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    ax.set_title(f"final mean IoU {history[-1].mean():.4f}")
    fig.tight_layout()
    fig.savefig(out / "iou.png", dpi=100)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshes", type=Path, default=Path(os.environ.get("RAYD_MESH_DIR", ROOT / ".device" / "meshes")))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--subdivisions", type=int, default=4)
    parser.add_argument("--edge-samples", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: the per-view tensors are small, more threads only contend)")
    parser.add_argument("--quick", action="store_true", help="64x64, subdivision 3, at most 12 iterations, no pictures")
    parser.add_argument("--no-pictures", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.subdivisions, args.edge_samples = 64, 3, 2048
        args.iterations = min(args.iterations, 12)
        args.no_pictures = True
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    v, f = load_bunny(args.meshes)
    result = fit(normalise(v), f, size=args.size, iterations=args.iterations, subdivisions=args.subdivisions,
                 lr=args.lr, edge_samples=args.edge_samples, device=args.device, seed=args.seed)
    history = np.asarray(result["history"])
    summary = dict(size=args.size, iterations=args.iterations, subdivisions=args.subdivisions,
                   edge_samples=args.edge_samples, lr=args.lr, device=args.device, seconds=result["seconds"],
                   initial_mean_iou=float(history[0].mean()), final_mean_iou=float(history[-1].mean()),
                   final_iou_per_view=history[-1].tolist(), mean_iou_curve=history.mean(1).tolist())
    print(f"mean IoU {summary['initial_mean_iou']:.4f} -> {summary['final_mean_iou']:.4f} "
          f"in {result['seconds']:.1f} s ({args.iterations} iterations, {args.size}x{args.size}, 8 views)")
    if not args.no_pictures:
        args.out.mkdir(parents=True, exist_ok=True)
        save_pictures(result, args.out)
        (args.out / "fit.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wrote {args.out / 'views.png'}, {args.out / 'iou.png'}, {args.out / 'fit.json'}")
    result["summary"] = summary
    return result


if __name__ == "__main__":
    main()
