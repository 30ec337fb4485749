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



def degenerate_scene(seed=0, count=40, rays_per_face=6):
    """Degenerate, near-degenerate and ordinary triangles, and rays aimed at them (item 1 of issue 19).

    Returns ``vertices`` (V, 3) float64 (every value a float32), ``faces`` (F, 3),
    ``degenerate`` (F,) bool (exactly collinear or coincident corners), ``o``, ``d``
    (N, 3) float64. Collinear corners are small integers on an integer line, so they are
    collinear in float32 too; the rays pass exactly through points of those lines
    (the issue's repro is one of them), or through random points of the other faces.
    """
    rng = np.random.default_rng(seed)
    vertices, faces, degenerate, o, d = [], [], [], [], []
    for k in range(count):
        base = rng.integers(-6, 7, 3).astype(np.float64)
        step = rng.integers(-2, 3, 3).astype(np.float64)
        if not step.any():
            step[0] = 1.0
        kind = k % 4
        if kind == 0:  # collinear: base, base + step, base + 2 step (in shuffled order)
            corners = [base, base + step, base + 2 * step]
            rng.shuffle(corners)
        elif kind == 1:  # two coincident corners
            corners = [base, base, base + step]
        elif kind == 2:  # a sliver: the third corner a little off the line
            off = rng.normal(size=3) * 10.0 ** rng.uniform(-6, -2)
            corners = [base, base + 2 * step, base + step + off]
        else:  # an ordinary triangle
            corners = [base, base + rng.normal(size=3) * 2, base + rng.normal(size=3) * 2]
        corners = [np.asarray(c, dtype=np.float32).astype(np.float64) for c in corners]
        first = len(vertices)
        vertices += corners
        faces.append([first, first + 1, first + 2])
        degenerate.append(kind < 2)
        a, b, c = corners
        for _ in range(rays_per_face):
            if kind < 2:
                target = a + (b - a) * rng.choice([0.25, 0.5, 0.75]) if rng.random() < 0.5 else c + (b - c) * 0.5
            else:
                w = rng.dirichlet([1.0, 1.0, 1.0])
                target = w[0] * a + w[1] * b + w[2] * c
            origin = np.round(target + rng.normal(size=3) * 6.0)
            o.append(origin)
            d.append((target - origin) * rng.choice([0.5, 1.0, 2.0]))
    # The repro.
    first = len(vertices)
    vertices += [np.array(v, dtype=np.float64) for v in ((-2, 3, -2), (-3, 4, -1), (-4, 5, 0))]
    faces.append([first, first + 1, first + 2])
    degenerate.append(True)
    o.append(np.array([-5.0, -2.0, 3.0]))
    d.append(np.array([2.5, 5.5, -4.5]))
    return (np.array(vertices), np.array(faces, dtype=np.int64), np.array(degenerate), np.array(o), np.array(d))


def check_degenerate_hits(prim, t, p, geo_n, shadow, vertices, faces, degenerate, o, d, tol):
    """Asserts of the degenerate-triangle contract against :func:`closest_hit` on the faces with interior.

    ``prim`` (N,) int (-1 miss), ``t``, ``p`` (N, 3), ``geo_n`` (N, 3), ``shadow`` (N,)
    bool from rayd (float64 NumPy). Degenerate faces are never hit; every hit is a real
    one (unit normal, ``p = o + t d``, ``t > 0``); rays that the float64 reference hits
    well inside a face (farther than 1e-4 from its edges) hit that face at its ``t``;
    ``shadow`` agrees with the hit.
    """
    hit = prim >= 0
    assert not degenerate[prim[hit]].any(), "a degenerate triangle was hit"
    assert (t[hit] > 0).all()
    np.testing.assert_allclose(np.linalg.norm(geo_n[hit], axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(p[hit], o[hit] + t[hit, None] * d[hit], rtol=tol, atol=tol)
    np.testing.assert_array_equal(shadow, hit)
    keep = np.flatnonzero(~degenerate)
    ref = closest_hit(o, d, vertices, faces[keep])
    ref_prim = np.where(ref["prim"] >= 0, keep[np.maximum(ref["prim"], 0)], -1)
    # Well inside: farther than 1e-4 from every edge (float32 cannot resolve thinner slivers).
    f = faces[np.maximum(ref_prim, 0)]
    a, b, c = (vertices[f[:, k]] for k in range(3))
    area2 = np.linalg.norm(np.cross(b - a, c - a), axis=1)
    opposite = np.stack([np.linalg.norm(x, axis=1) for x in (c - b, c - a, b - a)], 1)
    distance = ref["barycentric"] * (area2[:, None] / np.maximum(opposite, 1e-300))
    robust = (ref_prim >= 0) & (distance.min(1) > 1e-4)
    np.testing.assert_array_equal(prim[robust], ref_prim[robust])
    np.testing.assert_allclose(t[robust], ref["t"][robust], rtol=tol, atol=tol)
    missed = (ref_prim < 0) & hit  # rayd hits where the reference does not: only on a face's boundary
    assert missed.sum() <= max(2, hit.size // 100), f"{missed.sum()} rays hit where float64 sees no hit"
    return int(hit.sum()), int(robust.sum())


def box_walk_rays(n=600, seed=0):
    """Issue 19 item 13 (trimesh issue 2504): a unit box seen from 10 m, rays through the diagonal of its z = -0.5 face.

    Returns ``vertices`` (8, 3), ``faces`` (12, 3), ``o``, ``d`` (n, 3) float64 (float32 values). Every ray
    enters through the face diagonal and leaves through the opposite face: exactly two hits.
    """
    rng = np.random.default_rng(seed)
    vertices = np.array([[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)])
    faces = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1], [2, 3, 7], [2, 7, 6],
                      [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    s = rng.uniform(-0.45, 0.45, n)
    targets = np.stack([s, s, np.full(n, -0.5)], 1)
    o = (targets + np.array([0.3, -0.2, -10.0]) + rng.normal(size=(n, 3)) * 0.1).astype(np.float32)
    d = (targets - o).astype(np.float32)
    return vertices, faces, o.astype(np.float64), d.astype(np.float64)


def far_scene(n=400, seed=0):
    """Issue 19 item 12 (trimesh issue 48): two faces at x ~ 5.3e5, y ~ 1.8e5, origins 0.01 off a face.

    Returns ``vertices`` (4, 3) float64, ``faces`` (2, 3), ``o``, ``d`` (n, 3) float64, ``t_towards``
    (the ray parameter of the face for rays pointing at it, 0.01) : half the rays point away from
    the face (no hit: the face is behind), the other half along ``-d`` towards it.
    """
    rng = np.random.default_rng(seed)
    centre = np.array([530123.4567, 180456.789, 12.345])
    vertices = centre + np.array([[0, 0, 0], [1.3, 0.2, 0.1], [0.1, 1.1, -0.3], [1.2, 1.4, 0.2]])
    faces = np.array([[0, 1, 2], [1, 3, 2]])
    normal = np.cross(vertices[1] - vertices[0], vertices[2] - vertices[0])
    normal /= np.linalg.norm(normal)
    w = rng.dirichlet([1.0, 1.0, 1.0], n) * 0.98 + 0.02 / 3  # inside face 0, off its edges
    p = w @ vertices[[0, 1, 2]]
    side = np.where(rng.random(n) < 0.5, 1.0, -1.0)[:, None]
    return vertices, faces, p + 0.01 * side * normal, side * normal
