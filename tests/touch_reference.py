"""Closed meshes and rays through their vertices and edges, with a float64 inside/outside reference.

Shared by the touch and parity tests of ``count_intersections`` (rayd.torch and rayd.drjit):
a ray from ``o`` to infinity crosses a closed mesh an odd number of times exactly where
``o`` lies inside it, whatever vertex or edge it passes through, and a ray that only
touches the mesh (tangent at a vertex, or over an edge with both faces on one side)
crosses it 0 times there. The reference is the generalised winding number of ``o``
(sum of the faces' signed solid angles, Van Oosterom and Strackee 1983), in float64.
"""

from __future__ import annotations

import numpy as np

from reference import icosphere

OCTA_V = np.array([[1.0, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]])
OCTA_F = np.array([[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]])
CUBE_V = np.array([[x, y, z] for x in (0.0, 1.0) for y in (0.0, 1.0) for z in (0.0, 1.0)])
CUBE_F = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                   [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])


def rotation(rng) -> np.ndarray:
    """A random proper rotation (3, 3)."""
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


def winding_number(points, vertices, faces) -> np.ndarray:
    """(N,) float64 winding number of the closed mesh around each point (1 inside an outward mesh)."""
    p = np.asarray(points, np.float64)[:, None, :]
    a, b, c = (np.asarray(vertices, np.float64)[np.asarray(faces)[:, k]][None] - p for k in range(3))
    la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (a, b, c))
    num = np.einsum("nfk,nfk->nf", a, np.cross(b, c))
    den = la * lb * lc + np.einsum("nfk,nfk->nf", a, b) * lc + np.einsum("nfk,nfk->nf", b, c) * la \
        + np.einsum("nfk,nfk->nf", c, a) * lb
    return 2.0 * np.arctan2(num, den).sum(-1) / (4.0 * np.pi)


def bumpy_sphere(seed: int = 0, subdivisions: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """A closed, outward-wound star-shaped mesh with convex, concave and saddle vertices."""
    rng = np.random.default_rng(seed)
    v, f = icosphere(subdivisions)
    return v * rng.uniform(0.8, 1.2, (len(v), 1)), f


def oriented_cube(rng, scale: float = 1.0, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An outward-wound cube, rotated and moved: (V, 3), (12, 3) and its rotation's matrix (4, 4)."""
    m = np.eye(4)
    m[:3, :3] = rotation(rng) * scale
    m[:3, 3] = offset + rng.normal(size=3) * 0.1
    return (CUBE_V - 0.5) @ m[:3, :3].T + m[:3, 3], CUBE_F, m


def rays_through(targets, directions, reach) -> tuple[np.ndarray, np.ndarray]:
    """Rays ``(o, d)`` that pass through ``targets`` at ``t = 1``, along ``directions``, from ``reach`` before."""
    d = directions / np.linalg.norm(directions, axis=1, keepdims=True) * np.asarray(reach).reshape(-1, 1)
    return targets - d, d


def vertex_and_edge_rays(vertices, faces, rng, per_target: int = 4):
    """Rays through every vertex and a point of every edge, in random directions and in directions
    tangent to the surface there (perpendicular to the target's vertex normal), from random distances
    (origins inside and outside). Returns ``(o, d)``."""
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces)
    area_n = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    vn = np.zeros_like(v)
    for k in range(3):
        np.add.at(vn, f[:, k], area_n)
    vn /= np.linalg.norm(vn, axis=1, keepdims=True)
    edges = np.unique(np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [0, 2]]]), axis=1), axis=0)
    frac = rng.uniform(0.1, 0.9, (len(edges), 1))
    targets = np.concatenate([v, v[edges[:, 0]] * (1 - frac) + v[edges[:, 1]] * frac])
    normals = np.concatenate([vn, vn[edges[:, 0]] + vn[edges[:, 1]]])
    targets = np.repeat(targets, per_target, 0)
    normals = np.repeat(normals, per_target, 0)
    d = rng.normal(size=targets.shape)
    tangent = rng.uniform(size=len(d)) < 0.5
    d[tangent] -= normals[tangent] * (np.einsum("nk,nk->n", d, normals)[tangent] / np.einsum(
        "nk,nk->n", normals, normals)[tangent])[:, None]
    return rays_through(targets, d, rng.uniform(0.05, 3.0, len(d)))


def inside(o, vertices, faces, margin: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """``(inside, clear)``: whether each ``o`` lies inside the closed mesh, and whether it lies clear of
    its surface (winding number within ``margin`` of 0 or 1)."""
    w = winding_number(o, vertices, faces)
    return w > 0.5, np.minimum(np.abs(w), np.abs(1.0 - w)) < margin


def edge_rays(vertices, faces, rng, kind: str, per_edge: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Rays through points of the convex mesh's edges (welded, every edge has two faces), perpendicular
    to the edge plus a random part along it: ``kind = "touch"`` in a direction that leaves both faces
    on one side (``n1 - n2``), ``"cross"`` into the mesh (``-(n1 + n2)``), from 3 units before."""
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces)
    n = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    owner: dict[tuple[int, int], list[int]] = {}
    for i, face in enumerate(f):
        for a, b in ((0, 1), (1, 2), (2, 0)):
            owner.setdefault(tuple(sorted((int(face[a]), int(face[b])))), []).append(i)
    targets, dirs = [], []
    for (a, b), (f1, f2) in owner.items():
        if abs(float(n[f1] @ n[f2])) > 0.999:  # the diagonal of a flat quad: no edge of the solid
            continue
        e = (v[b] - v[a]) / np.linalg.norm(v[b] - v[a])
        for _ in range(per_edge):
            s = rng.uniform(0.1, 0.9)
            base = n[f1] - n[f2] if kind == "touch" else -(n[f1] + n[f2])
            if kind == "touch" and rng.uniform() < 0.5:
                base = -base
            targets.append(v[a] * (1 - s) + v[b] * s)
            dirs.append(base + rng.uniform(-0.5, 0.5) * e)
    return rays_through(np.array(targets), np.array(dirs), 3.0)
