"""Scenes and a float64 brute force for the float64 off-face checks of session 23 (helper offface23).

A float64 query is searched on the float32 snapshot of the scene and then re-evaluated on the
float64 vertices; the re-evaluated crossing of a grazing ray can lie far off the face the search
chose (``rayd.core.hits.off_face``). Used by ``tests/torch/test_offface23_float64.py`` and
``tests/drjit/test_drjit_offface23_float64.py``.
"""

from __future__ import annotations

import numpy as np

#: ``rayd.engine.watertight.OFF_FACE``: a crossing farther than this x the search-frame magnitude outside
#: its face is no hit.
OFF_FACE = 2.0**-20

#: float32 ulp of 1 (``2^-23``).
ULP1 = 2.0**-23


def tilted_face_and_wall() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """A face whose float32 snapshot lies in ``z = 1`` and whose float64 plane is ``z = 1 + eps y``,
    a wall at ``x = 5`` behind it, and one grazing ray the float32 search sends through the face.

    Face 0: ``A = (0, 0, 1)``, ``B = (2, 0, 1)``, ``C = (0, 1, 1 + eps)``, ``eps = 0.99 * 2^-24``
    (rounds to 1 in float32). Face 1: the wall, a large triangle in the plane ``x = 5``. The ray
    (float32 values, so the search sees it exactly): ``o = (-2, 0.6, 1 + 2^-23)``,
    ``d = (1, 0, -2^-23 / 2.3)``. Snapshot: it crosses ``z = 1`` at ``t = 2.3``, at ``(0.3, 0.6)``, inside
    the face (``x/2 + y = 0.75``). float64: it crosses ``z = 1 + 0.6 eps`` at ``t = 2.3 (1 - 0.6 eps / 2^-23)
    = 1.617...``, at ``x = -0.38``: outside the face's edge ``x = 0`` by 0.38. So the float64 ray meets only
    the wall, at ``t = 7`` (``x = -2 + t = 5``).

    Returns ``(vertices (6, 3) float64, faces (2, 3), o (3,) float64, d (3,) float64, t_wall)``.
    """
    eps = 0.99 * 2.0**-24
    v = np.array([[0, 0, 1], [2, 0, 1], [0, 1, 1 + eps],
                  [5, -10, -10], [5, 10, -10], [5, 0, 10]], dtype=np.float64)
    f = np.array([[0, 1, 2], [3, 4, 5]])
    o = np.array([-2.0, 0.6, 1.0 + ULP1], dtype=np.float32).astype(np.float64)
    d = np.array([1.0, 0.0, -ULP1 / 2.3], dtype=np.float32).astype(np.float64)
    return v, f, o, d, 7.0


def float64_plane_crossing(v: np.ndarray, o: np.ndarray, d: np.ndarray) -> tuple[float, np.ndarray]:
    """``(t, barycentric)`` of the crossing of ``o + t d`` with the plane of triangle ``v`` (3, 3), float64."""
    e1, e2 = v[1] - v[0], v[2] - v[0]
    p = np.cross(d, e2)
    det = e1 @ p
    s = o - v[0]
    q = np.cross(s, e1)
    u, w = (s @ p) / det, (d @ q) / det
    return float((e2 @ q) / det), np.array([1 - u - w, u, w])


def brute_force(o: np.ndarray, d: np.ndarray, v: np.ndarray, f: np.ndarray, tol_rel: float = OFF_FACE,
                chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """float64 brute force over every face: ``(t_loose, t_strict)``, (N,) each (``inf``: none).

    ``t_loose``: the closest ``t > 0`` whose crossing lies within ``tol`` of its face (inside, or
    outside by at most ``tol``); ``t_strict``: the closest whose crossing lies inside its face
    farther than ``tol`` from every edge; ``tol = tol_rel * max(|o|_inf, |v|_inf)`` (the scene about
    the origin: its search centre is 0). A query that decides within float32 rounding of the faces
    reports, per ray, a ``t`` with ``t_loose <= t <= t_strict`` (a miss only where ``t_strict = inf``).
    """
    o = np.asarray(o, np.float64)
    d = np.asarray(d, np.float64)
    a, b, c = (v[f[:, k]] for k in range(3))
    e1, e2 = b - a, c - a
    n = np.cross(e1, e2)
    area = np.linalg.norm(n, axis=1)
    lengths = [np.linalg.norm(c - b, axis=1), np.linalg.norm(e2, axis=1), np.linalg.norm(e1, axis=1)]
    loose = np.full(len(o), np.inf)
    strict = np.full(len(o), np.inf)
    vmax = np.abs(v).max()
    for lo in range(0, len(o), chunk):
        oo, dd = o[lo:lo + chunk, None, :], d[lo:lo + chunk, None, :]
        p = np.cross(dd, e2)
        det = (e1 * p).sum(-1)
        s = oo - a
        q = np.cross(s, e1)
        with np.errstate(all="ignore"):
            u = (s * p).sum(-1) / det
            w = (dd * q).sum(-1) / det
            t = (e2 * q).sum(-1) / det
            gap = np.minimum(np.minimum((1 - u - w) * area / lengths[0], u * area / lengths[1]),
                             w * area / lengths[2])  # signed in-plane distance inside the face
        tol = tol_rel * np.maximum(np.abs(o[lo:lo + chunk]).max(-1), vmax)[:, None]
        ok = (det != 0) & np.isfinite(t) & (t > 0)
        loose[lo:lo + chunk] = np.where(ok & (gap >= -tol), t, np.inf).min(-1)
        strict[lo:lo + chunk] = np.where(ok & (gap > tol), t, np.inf).min(-1)
    return loose, strict


def grazing_rays_near_corner() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A float64 triangle (corners no float32 values) and rays that hit it near an edge or a vertex at
    grazing angles: ``(v (3, 3), o (N, 3), d (N, 3), t (N,))``, ``t`` the hand-derived hit distance (2).

    The triangle lies in the plane ``z = 1 + 0.1 x + 0.2 y`` over ``(0, 0), (0.7, 0), (0, 0.7)``. Each ray
    reaches its point ``P`` of the face at ``t = 2`` (``o = P - 2 d``), descending onto the plane with a
    slope ``s`` (``1e-2`` to ``1e-6``: ``d = (a, b, 0.1 a + 0.2 b - s)`` for the in-plane heading
    ``(a, b)``). Near an edge (``1e-6`` from it) the heading runs along the edge, near a vertex
    (``1e-4`` from both of its edges) along its bisector, into the face: the float32 rounding of the
    search moves the crossing along the heading (by about ``2^-24 |o| / s``), so the float32
    search finds each of these faces, and the float64 crossing lies inside it.
    """
    def plane(x, y):
        return 1.0 + 0.1 * x + 0.2 * y
    v = np.array([[0.0, 0.0, plane(0, 0)], [0.7, 0.0, plane(0.7, 0)], [0.0, 0.7, plane(0, 0.7)]])
    h = 1e-6 / np.sqrt(2.0)
    cases = [((0.3, 1e-6), (1.0, 0.0)),  # edge A-B (y = 0), heading along it
             ((1e-6, 0.3), (0.0, 1.0)),  # edge A-C (x = 0)
             ((0.4 - h, 0.3 - h), (1.0, -1.0)),  # the long edge (x + y = 0.7)
             ((1e-4, 1e-4), (1.0, 1.0))]  # vertex A, along its bisector
    o, d = [], []
    for (x, y), (a, b) in cases:
        for slope in (1e-2, 1e-4, 1e-6):
            if x == y and slope < 1e-3:  # (a vertex: the crossing's rounding along the heading stays below 1e-4)
                continue
            direction = np.array([a, b, 0.1 * a + 0.2 * b - slope])
            o.append(np.array([x, y, plane(x, y)]) - 2.0 * direction)
            d.append(direction)
    return v, np.array(o), np.array(d), np.full(len(o), 2.0)
