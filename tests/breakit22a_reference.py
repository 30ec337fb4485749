"""Rays of session 22's break-it checks (helper breakit22a: rayd against Open3D's ``RaycastingScene``).

Rays that run (nearly) along a mesh edge and the float64 distance of a reported hit point from its face
(``test_breakit22a_off_face.py``), and rays that leave a face at a grazing angle
(``test_breakit22a_leaving_rays.py``), for the tests of both frontends.
"""

from __future__ import annotations

import numpy as np

from reference import icosphere


def torus(major: int = 48, minor: int = 24, radius: float = 1.0, tube: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """A closed, outward-wound torus: ``(V, 3)`` float64 vertices and ``(F, 3)`` int64 faces."""
    i, j = np.meshgrid(np.arange(major), np.arange(minor), indexing="ij")
    a = 2 * np.pi * i / major
    b = 2 * np.pi * j / minor
    ring = radius + tube * np.cos(b)
    v = np.stack([ring * np.cos(a), ring * np.sin(a), tube * np.sin(b)], -1).reshape(-1, 3)

    def k(ii, jj):
        return (ii % major) * minor + (jj % minor)

    i, j = i.ravel(), j.ravel()
    f = np.concatenate([np.stack([k(i, j), k(i + 1, j), k(i + 1, j + 1)], -1),
                        np.stack([k(i, j), k(i + 1, j + 1), k(i, j + 1)], -1)])
    return v, f


def along_edges(vertices, faces, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` float32 rays ``(o, d)`` along random face edges ``a -> b``: ``o = a - s (b - a)``,
    ``s`` in ``[0.1, 2]``, ``d = b - a`` (in the planes of the edge's faces up to float32 rounding)."""
    rng = np.random.default_rng(seed)
    face = rng.integers(0, len(faces), n)
    k = rng.integers(0, 3, n)
    a = vertices[faces[face, k]]
    b = vertices[faces[face, (k + 1) % 3]]
    o = a - (b - a) * rng.uniform(0.1, 2.0, n)[:, None]
    return o.astype(np.float32), (b - a).astype(np.float32)


def _segment(p, a, b):
    ab = b - a
    t = np.clip(((p - a) * ab).sum(-1) / (ab * ab).sum(-1), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=-1)


def distance_to_face(p, tri) -> np.ndarray:
    """(N,) float64 distance of each point ``p`` (N, 3) from its triangle ``tri`` (N, 3, 3)."""
    p = np.asarray(p, np.float64)
    a, b, c = (np.asarray(tri, np.float64)[:, k] for k in range(3))
    n = np.cross(b - a, c - a)
    h = ((p - a) * n).sum(-1) / (n * n).sum(-1)
    q = p - h[:, None] * n  # projection onto the plane
    inside = np.ones(len(p), bool)
    for x, y in ((a, b), (b, c), (c, a)):
        inside &= (np.cross(y - x, q - x) * n).sum(-1) >= 0
    edges = np.minimum(np.minimum(_segment(p, a, b), _segment(p, b, c)), _segment(p, c, a))
    return np.where(inside, np.abs(h) * np.linalg.norm(n, axis=-1), edges)


def leaving_rays(n: int, seed: int):
    """Rays from random points of an icosphere's faces, tangent to the face and tilted into the sphere by
    ``1e-4 .. 1e-2`` (so each crosses a neighbouring face a short way on). Returns ``(V, F, o, d, own)``:
    float64 vertices (float32 values), faces, float32 ``o``, ``d``, and (N,) float64 ``t`` at which each ray
    crosses the plane of the face it starts on (rounding: about 0)."""
    v, f = icosphere(3)
    v = v.astype(np.float32).astype(np.float64)
    rng = np.random.default_rng(seed)
    face = rng.integers(0, len(f), n)
    a, b, c = (v[f[face, k]] for k in range(3))
    o = (rng.dirichlet([1, 1, 1], n)[:, :, None] * v[f[face]]).sum(1)
    normal = np.cross(b - a, c - a)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    along = rng.normal(size=(n, 3))
    along -= (along * normal).sum(1, keepdims=True) * normal
    along /= np.linalg.norm(along, axis=1, keepdims=True)
    d = along - normal * 10 ** rng.uniform(-4, -2, n)[:, None]
    o, d = o.astype(np.float32), d.astype(np.float32)
    n64 = np.cross(b - a, c - a)
    own = ((a - o) * n64).sum(1) / (d.astype(np.float64) * n64).sum(1)
    return v, f, o, d, own
