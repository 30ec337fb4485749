"""Benchmark workloads: one triangle mesh and one batch of rays each, as NumPy arrays.

Every engine gets exactly the same arrays (float32 vertices, int32 faces, float32
rays with unit directions, so ``t`` is a distance for every engine). Random rays come
from ``numpy.random.default_rng`` with fixed seeds, so a workload is the same on every
machine and in every run.

Sizes follow issue 3: on CUDA 4 M rays and 1-2 M triangles, on the CPU 256 k rays and
65-131 k triangles. Real scans (Stanford bunny 69 k and dragon 871 k triangles) are
read from the ``.npz`` files ``../shared/data/get_meshes.sh DIR all`` writes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: Default folder of the scanned meshes (what ``get_meshes.sh`` writes by default).
DEFAULT_MESH_DIR = Path(__file__).resolve().parent.parent / ".device" / "meshes"


@dataclass
class Workload:
    """A mesh and rays. ``o``, ``d`` (N, 3) float32 with ``|d| = 1``; ``coherent`` is a hint."""

    name: str
    vertices: np.ndarray  # (V, 3) float32
    faces: np.ndarray  # (F, 3) int32
    o: np.ndarray  # (N, 3) float32
    d: np.ndarray  # (N, 3) float32
    coherent: bool
    params: dict = field(default_factory=dict)

    @property
    def num_triangles(self) -> int:
        return int(self.faces.shape[0])

    @property
    def num_rays(self) -> int:
        return int(self.o.shape[0])

    def moved_vertices(self) -> np.ndarray:
        """Every vertex moved (scaled by 1.001 about the mesh centre, then shifted by 1e-3)."""
        c = self.vertices.mean(axis=0)
        return ((self.vertices - c) * 1.001 + c + 1e-3).astype(np.float32)

    def describe(self) -> dict:
        return {
            "workload": self.name,
            "triangles": self.num_triangles,
            "vertices": int(self.vertices.shape[0]),
            "rays": self.num_rays,
            "coherent": self.coherent,
            **self.params,
        }


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def _grid_faces(rows: int, cols: int) -> np.ndarray:
    """Two triangles per cell of a (rows+1) x (cols+1) vertex grid stored row-major
    (row index along x, column index along y)."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    a = (r * (cols + 1) + c).ravel()
    b, cc, dd = a + 1, a + cols + 1, a + cols + 2
    # counter-clockwise seen from +z (the terrain's normals point up)
    return np.concatenate([np.stack([a, dd, b], 1), np.stack([a, cc, dd], 1)]).astype(np.int32)


def terrain_mesh(cells: int) -> tuple[np.ndarray, np.ndarray]:
    """``cells`` x ``cells`` height field z = 0.1 sin(6x) cos(5y) on [-1, 1]^2: float32
    vertices (V, 3) and int32 faces (2 C^2, 3), wound counter-clockwise seen from +z."""
    x = np.linspace(-1.0, 1.0, cells + 1)
    gx, gy = np.meshgrid(x, x, indexing="ij")
    gz = 0.1 * np.sin(6.0 * gx) * np.cos(5.0 * gy)
    return np.stack([gx, gy, gz], -1).reshape(-1, 3).astype(np.float32), _grid_faces(cells, cells)


def terrain(cells: int, side: int) -> Workload:
    """The :func:`terrain_mesh` of ``cells`` cells; ``side`` x ``side`` rays straight down
    from z = 2 through (nearly) the centres of an S x S grid over the same square
    (coherent; every ray hits)."""
    vertices, faces = terrain_mesh(cells)
    # Pixel centres nudged by +-0.1 pixel in x and y, so that no ray runs down a cell's
    # diagonal (a tie between two triangles) when S is a multiple of C.
    step = 2.0 / side
    rx, ry = np.meshgrid(-1.0 + (np.arange(side) + 0.6) * step, -1.0 + (np.arange(side) + 0.4) * step, indexing="ij")
    o = np.stack([rx, ry, np.full_like(rx, 2.0)], -1).reshape(-1, 3).astype(np.float32)
    d = np.tile(np.array([[0.0, 0.0, -1.0]], np.float32), (o.shape[0], 1))
    return Workload(f"terrain_C{cells}_S{side}", vertices, faces, o, d, True, {"C": cells, "S": side})


def bumpy_sphere_mesh(rings: int, segments: int) -> tuple[np.ndarray, np.ndarray]:
    """UV sphere with ``rings`` latitude bands and ``segments`` longitudes (2 S (R-1)
    triangles), radius 1 + 0.05 sin(9 theta) cos(7 phi): closed, no degenerate faces."""
    theta = np.arange(1, rings) * (math.pi / rings)  # interior rings
    phi = np.arange(segments) * (2.0 * math.pi / segments)
    th, ph = np.meshgrid(theta, phi, indexing="ij")
    r = 1.0 + 0.05 * np.sin(9.0 * th) * np.cos(7.0 * ph)
    ring_pts = np.stack([r * np.sin(th) * np.cos(ph), r * np.sin(th) * np.sin(ph), r * np.cos(th)], -1).reshape(-1, 3)
    north, south = len(ring_pts), len(ring_pts) + 1
    vertices = np.concatenate([ring_pts, [[0, 0, 1.0], [0, 0, -1.0]]]).astype(np.float32)
    idx = np.arange((rings - 1) * segments).reshape(rings - 1, segments)
    nxt = np.roll(idx, -1, axis=1)
    a, b, c, d = idx[:-1], nxt[:-1], idx[1:], nxt[1:]
    body = np.concatenate([np.stack([a, c, d], -1).reshape(-1, 3), np.stack([a, d, b], -1).reshape(-1, 3)])
    top = np.stack([np.full(segments, north), idx[0], nxt[0]], -1)
    bottom = np.stack([np.full(segments, south), nxt[-1], idx[-1]], -1)
    faces = np.concatenate([top, body, bottom]).astype(np.int32)
    return vertices, faces


def sphere(rings: int, segments: int, num_rays: int, seed: int = 1) -> Workload:
    """Bumpy sphere; rays from uniform points on a radius-3 sphere toward uniform points
    in the unit cube [-0.5, 0.5]^3 (incoherent; every ray hits)."""
    vertices, faces = bumpy_sphere_mesh(rings, segments)
    rng = np.random.default_rng(seed)
    o = 3.0 * _unit(rng.standard_normal((num_rays, 3)))
    target = rng.uniform(-0.5, 0.5, (num_rays, 3))
    d = _unit(target - o)
    name = f"sphere_{_k(faces.shape[0])}_{_k(num_rays)}rays"
    return Workload(name, vertices, faces, o.astype(np.float32), d, False, {"seed": seed})


def load_scan(name: str, mesh_dir: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Vertices and faces of ``<mesh_dir>/<name>.npz`` (from ``get_meshes.sh``)."""
    path = Path(mesh_dir or os.environ.get("RAYD_MESH_DIR") or DEFAULT_MESH_DIR) / f"{name}.npz"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found; fetch the scans with ../shared/data/get_meshes.sh {path.parent} all"
        )
    data = np.load(path)
    return np.ascontiguousarray(data["vertices"], np.float32), np.ascontiguousarray(data["faces"], np.int32)


def _bounding_sphere(vertices: np.ndarray) -> tuple[np.ndarray, float]:
    center = 0.5 * (vertices.min(0) + vertices.max(0))
    return center, float(np.linalg.norm(vertices - center, axis=1).max())


def scan_camera(name: str, width: int, height: int, mesh_dir=None, fov_deg: float = 40.0) -> Workload:
    """A pinhole camera (``width`` x ``height`` rays, one per pixel centre) looking at the
    scan's bounding-sphere centre from 2.2 radii away along (1, 0.5, 1.5) (coherent)."""
    vertices, faces = load_scan(name, mesh_dir)
    center, radius = _bounding_sphere(vertices)
    eye = center + 2.2 * radius * _unit(np.array([1.0, 0.5, 1.5]))
    forward = _unit(center - eye)
    right = _unit(np.cross(forward, [0.0, 1.0, 0.0]))
    up = np.cross(right, forward)
    half = math.tan(math.radians(fov_deg) / 2)
    px = (np.arange(width) + 0.5) / width * 2.0 - 1.0
    py = 1.0 - (np.arange(height) + 0.5) / height * 2.0
    gx, gy = np.meshgrid(px * half * width / height, py * half, indexing="xy")
    d = _unit(forward + gx[..., None] * right + gy[..., None] * up).reshape(-1, 3)
    o = np.tile(eye.astype(np.float32), (d.shape[0], 1))
    return Workload(f"{name}_camera{width}x{height}", vertices, faces, o, d, True, {"width": width, "height": height})


def scan_bsphere(name: str, num_rays: int, mesh_dir=None, seed: int = 2) -> Workload:
    """Rays from uniform points on 1.5x the scan's bounding sphere toward uniform points
    inside the bounding sphere (incoherent; some miss)."""
    vertices, faces = load_scan(name, mesh_dir)
    center, radius = _bounding_sphere(vertices)
    rng = np.random.default_rng(seed)
    o = center + 1.5 * radius * _unit(rng.standard_normal((num_rays, 3)))
    inside = _unit(rng.standard_normal((num_rays, 3))) * (radius * rng.uniform(0, 1, (num_rays, 1)) ** (1 / 3))
    d = _unit(center + inside - o)
    return Workload(f"{name}_bsphere_{_k(num_rays)}rays", vertices, faces, o.astype(np.float32), d, False, {"seed": seed})


def _k(n: int) -> str:
    """1048576 -> '1M', 262144 -> '256k' (binary multiples), 2000 -> '2000'."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):g}M"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10}k"
    return str(n)


# --------------------------------------------------------------------------- suites
# Each entry: name -> zero-argument factory (mesh_dir is bound by ``suite``).

def suite(device: str, quick: bool = False, mesh_dir=None) -> dict[str, callable]:
    """The workloads of a run, by name, as factories (built lazily, one at a time).

    ``device`` ``"cuda"``: issue 3's GPU sizes (4 M rays); ``"cpu"``: its CPU sizes
    (256 k rays; scans with a 640x360 camera so a 2-core run stays in minutes).
    ``quick``: a small subset for ``python -m rayd bench``.
    """
    if quick:
        return {
            "terrain_C64_S128": lambda: terrain(64, 128),
            "sphere_32k_64krays": lambda: sphere(65, 256, 1 << 16),
        }
    if device == "cuda":
        return {
            "terrain_C64_S128": lambda: terrain(64, 128),
            "terrain_C192_S256": lambda: terrain(192, 256),
            "terrain_C1024_S2048": lambda: terrain(1024, 2048),
            "sphere_1M_4Mrays": lambda: sphere(513, 1024, 1 << 22),
            "bunny_69k_camera1920x1080": lambda: scan_camera("bunny_69k", 1920, 1080, mesh_dir),
            "bunny_69k_bsphere_4Mrays": lambda: scan_bsphere("bunny_69k", 1 << 22, mesh_dir),
            "dragon_871k_camera1920x1080": lambda: scan_camera("dragon_871k", 1920, 1080, mesh_dir),
            "dragon_871k_bsphere_4Mrays": lambda: scan_bsphere("dragon_871k", 1 << 22, mesh_dir),
        }
    return {
        "terrain_C256_S512": lambda: terrain(256, 512),
        "sphere_64k_256krays": lambda: sphere(129, 256, 1 << 18),
        "bunny_69k_camera640x360": lambda: scan_camera("bunny_69k", 640, 360, mesh_dir),
        "bunny_69k_bsphere_256krays": lambda: scan_bsphere("bunny_69k", 1 << 18, mesh_dir),
        "dragon_871k_camera640x360": lambda: scan_camera("dragon_871k", 640, 360, mesh_dir),
        "dragon_871k_bsphere_256krays": lambda: scan_bsphere("dragon_871k", 1 << 18, mesh_dir),
    }


def tiny() -> dict[str, callable]:
    """Seconds-long workloads for the CI smoke test."""
    return {
        "terrain_C8_S16": lambda: terrain(8, 16),
        "sphere_256_2000rays": lambda: sphere(9, 16, 2000),
    }
