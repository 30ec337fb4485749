"""A tiny NumPy float64 brute-force reference for ray/triangle closest hits, and test meshes.

Everything here is deliberately simple and slow (every ray against every triangle)
so that it is obviously right; rayd is checked against it, never the reverse.
"""

from __future__ import annotations

import numpy as np


def closest_hit(o, d, vertices, faces, tmin=0.0, tmax=np.inf, chunk=256):
    """Closest hit of rays ``o + t d`` among the triangles ``faces`` of ``vertices``.

    Args:
        o, d: (N, 3) ray origins and directions (``d`` need not be unit length).
        vertices: (V, 3); faces: (F, 3) vertex indices.
        tmin, tmax: scalars or (N,); a hit counts for ``tmin < t < tmax``. Back faces count.

    Returns:
        dict of float64/int64 arrays: ``t`` (N,) (``inf`` on a miss), ``prim`` (N,)
        (-1 on a miss), ``barycentric`` (N, 3) ``(1-u-v, u, v)``, ``geo_n`` (N, 3)
        ``normalize((v1-v0) x (v2-v0))``, ``p`` (N, 3) ``o + t d`` (zeros on a miss).
        Rays with a NaN/inf component or a zero direction miss.

    Concretely, ``t, u, v`` solve ``o + t d = (1-u-v) v0 + u v1 + v v2`` with
    ``u, v >= 0`` and ``u + v <= 1``, by Cramer's rule.
    """
    o = np.asarray(o, dtype=np.float64).reshape(-1, 3)
    d = np.asarray(d, dtype=np.float64).reshape(-1, 3)
    o, d = np.broadcast_arrays(o, d)
    n = o.shape[0]
    tmin = np.broadcast_to(np.asarray(tmin, dtype=np.float64), (n,))
    tmax = np.broadcast_to(np.asarray(tmax, dtype=np.float64), (n,))
    vertices = np.asarray(vertices, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    v0, v1, v2 = (vertices[faces[:, k]] for k in range(3))
    e1, e2 = v1 - v0, v2 - v0

    best_t = np.full(n, np.inf)
    best_f = np.full(n, -1, dtype=np.int64)
    best_uv = np.zeros((n, 2))
    ok_ray = np.isfinite(o).all(1) & np.isfinite(d).all(1) & (np.abs(d).sum(1) > 0)
    with np.errstate(all="ignore"):
        for start in range(0, n, chunk):
            sl = slice(start, min(start + chunk, n))
            ro, rd = o[sl, None, :], d[sl, None, :]  # (n, 1, 3)
            pvec = np.cross(rd, e2[None])  # (n, F, 3)
            det = (e1[None] * pvec).sum(-1)
            inv = 1.0 / det
            s = ro - v0[None]
            u = (s * pvec).sum(-1) * inv
            qvec = np.cross(s, e1[None])
            v = (rd * qvec).sum(-1) * inv
            t = (e2[None] * qvec).sum(-1) * inv
            hit = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1)
            hit &= (t > tmin[sl, None]) & (t < tmax[sl, None])
            hit &= ok_ray[sl, None]
            t = np.where(hit, t, np.inf)
            f = np.argmin(t, axis=1)
            rows = np.arange(t.shape[0])
            tt = t[rows, f]
            got = np.isfinite(tt)
            best_t[sl] = tt
            best_f[sl] = np.where(got, f, -1)
            best_uv[sl] = np.where(got[:, None], np.stack((u[rows, f], v[rows, f]), -1), 0.0)

    got = best_f >= 0
    fi = np.where(got, best_f, 0)
    normal = np.cross(e1[fi], e2[fi])
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    bary = np.stack((1.0 - best_uv[:, 0] - best_uv[:, 1], best_uv[:, 0], best_uv[:, 1]), -1)
    with np.errstate(invalid="ignore"):
        p = np.where(got[:, None], o + np.where(got, best_t, 0.0)[:, None] * d, 0.0)
    return {
        "t": best_t,
        "prim": best_f,
        "barycentric": np.where(got[:, None], bary, 0.0),
        "geo_n": np.where(got[:, None], normal, 0.0),
        "p": p,
    }


def grid(cells, span=2.0):
    """The seed's flat ``z = 0`` grid over ``[-span/2, span/2]^2``: (V, 3) float32, (2 cells^2, 3) int32."""
    axis = np.linspace(-0.5 * span, 0.5 * span, cells + 1, dtype=np.float32)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    vertices = np.stack((x.ravel(), y.ravel(), np.zeros(x.size, np.float32)), 1)
    index = np.arange((cells + 1) ** 2, dtype=np.int32).reshape(cells + 1, cells + 1)
    a, b = index[:-1, :-1].ravel(), index[:-1, 1:].ravel()
    c, e = index[1:, :-1].ravel(), index[1:, 1:].ravel()
    faces = np.concatenate((np.stack((a, b, c), 1), np.stack((b, e, c), 1)))
    return vertices, faces


def icosphere(subdivisions=2, radius=1.0):
    """A closed, consistently outward-wound unit icosphere: (V, 3) float64, (F, 3) int64."""
    g = (1.0 + 5.0**0.5) / 2.0
    verts = [
        (-1, g, 0), (1, g, 0), (-1, -g, 0), (1, -g, 0),
        (0, -1, g), (0, 1, g), (0, -1, -g), (0, 1, -g),
        (g, 0, -1), (g, 0, 1), (-g, 0, -1), (-g, 0, 1),
    ]  # fmt: skip
    faces = [
        (0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11),
        (1, 5, 9), (5, 11, 4), (11, 10, 2), (10, 7, 6), (7, 1, 8),
        (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8), (3, 8, 9),
        (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1),
    ]  # fmt: skip
    verts = [np.array(p, dtype=np.float64) / np.linalg.norm(p) for p in verts]
    for _ in range(subdivisions):
        midpoint: dict[tuple[int, int], int] = {}

        def mid(i, j):
            key = (min(i, j), max(i, j))
            if key not in midpoint:
                m = verts[i] + verts[j]
                verts.append(m / np.linalg.norm(m))
                midpoint[key] = len(verts) - 1
            return midpoint[key]

        new = []
        for a, b, c in faces:
            ab, bc, ca = mid(a, b), mid(b, c), mid(c, a)
            new += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        faces = new
    return radius * np.array(verts), np.array(faces, dtype=np.int64)

