"""Cap geometry of the CPU Embree path (:mod:`rayd.engine.cpu_embree`): small extra triangles,
their own Embree geometries, that a ray crosses where Embree's robust test and rayd's watertight
test (Woop et al. 2013) may disagree. A ray whose closest Embree hit is a cap is re-searched by
rayd's Warp search, so its answer is the Warp path's.

- :func:`vertex_caps`: around each vertex (Embree 4.4 leaks there);
- :func:`sliver_caps`: over faces thinner than the rounding (every point near an edge);
- :func:`edge_caps`: along each edge, for rays that only graze a silhouette edge or cross the
  plane of a face just outside its boundary edge (a hit for one test, a miss for the other).

All take centre-relative float64 coordinates and return float32 points and int32 faces.
"""

from __future__ import annotations

import numpy as np


def vertex_caps(vertices: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
    """Three small triangles around each vertex ``V``, one in each axis plane through ``V``.

    Each is equilateral with its incentre at ``V`` and inradius ``4 r``. A line passing
    within ``r`` of ``V`` crosses the plane normal to its dominant axis (``|d_k| >= |d|/sqrt 3``)
    within ``2 r`` of ``V`` (the crossing lies at most ``r sqrt 3`` along the line from the
    closest point), so at least ``2 r`` inside that triangle: far from the cap's own edges
    in float32 units, where Embree's test is reliable.

    Args:
        vertices: (V, 3) float64 centre-relative vertices.
        r: the radius around each vertex that must be caught.

    Returns:
        float32 points (9 V, 3) and int32 faces (3 V, 3).
    """
    corners = []
    for axis in range(3):
        a1, a2 = [k for k in range(3) if k != axis]
        for angle in (0.5 * np.pi, 7.0 / 6.0 * np.pi, 11.0 / 6.0 * np.pi):
            offset = np.zeros(3)
            offset[a1], offset[a2] = 8.0 * r * np.cos(angle), 8.0 * r * np.sin(angle)
            corners.append(vertices + offset)
    points = np.stack(corners, 1).reshape(-1, 3).astype(np.float32)
    return points, np.arange(points.shape[0], dtype=np.int32).reshape(-1, 3)


def sliver_caps(a: np.ndarray, b: np.ndarray, c: np.ndarray, r: float,
                keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Caps over the slivers: faces (of ``keep``) whose smallest altitude is below ``8 r``.

    Every point of a sliver lies within float32 rounding of its edges, where Embree's and
    rayd's tests may disagree away from any vertex. Each sliver gets a rectangle in its
    plane, along its longest edge, covering it with a margin of ``4 r``: a ray through
    the sliver crosses the rectangle well inside it.

    Args:
        a, b, c: (F, 3) float64 corners.
        r: the vertex-cap radius.
        keep: (F,) bool, the faces that may be slivers (not degenerate).

    Returns:
        ``(sliver (F,) bool, points (4 S, 3) float32, faces (2 S, 3) int32)``.
    """
    cross = np.cross(b - a, c - a)
    area2 = np.linalg.norm(cross, axis=1)
    edges = np.stack([b - a, c - b, a - c], 1)  # edge k runs from corner k to corner k + 1
    lengths = np.linalg.norm(edges, axis=2)
    k = lengths.argmax(1)
    longest = lengths[np.arange(len(k)), k]
    with np.errstate(divide="ignore", invalid="ignore"):
        height = area2 / longest
    sliver = keep & (height < 8.0 * r)
    corners = np.stack([a, b, c], 1)[sliver]
    k, longest, height = k[sliver], longest[sliver], height[sliver]
    idx = np.arange(len(k))
    p, q, other = corners[idx, k], corners[idx, (k + 1) % 3], corners[idx, (k + 2) % 3]
    u = (q - p) / longest[:, None]
    w = other - p - np.sum((other - p) * u, 1)[:, None] * u  # towards the third corner, in-plane
    norm = np.linalg.norm(w, axis=1)[:, None]
    n = cross[sliver] / area2[sliver][:, None]
    w = np.where(norm > 0, w / np.where(norm > 0, norm, 1.0), np.cross(n, u))
    m = 4.0 * r
    rect = np.stack([p - m * u - m * w, q + m * u - m * w, q + m * u + (height[:, None] + m) * w,
                     p - m * u + (height[:, None] + m) * w], 1)
    base = 4 * idx[:, None]
    tris = np.concatenate([base + [0, 1, 2], base + [0, 2, 3]], 1).reshape(-1, 3)
    return sliver, rect.reshape(-1, 3).astype(np.float32), tris.astype(np.int32)


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm > 0.0, norm, 1.0)


def _rectangles(p0: np.ndarray, p1: np.ndarray, e: np.ndarray, m: np.ndarray,
                half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rectangles ``p0 - h e -+ h m, p1 + h e -+ h m`` (``h = half``), two triangles each."""
    h = half[:, None]
    rect = np.stack([p0 - h * e - h * m, p1 + h * e - h * m, p1 + h * e + h * m, p0 - h * e + h * m], 1)
    base = 4 * np.arange(len(p0))[:, None]
    tris = np.concatenate([base + [0, 1, 2], base + [0, 2, 3]], 1).reshape(-1, 3)
    return rect.reshape(-1, 3), tris


def edge_caps(points: np.ndarray, faces: np.ndarray, r: float, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A thin rectangle along each edge of the faces ``keep``, where the two tests may disagree.

    An edge shared by two faces (a wedge of interior angle ``alpha`` between them) gets a
    rectangle in the plane through the edge that bisects the wedge (for a nearly flat edge,
    the plane through the edge and the normal), reaching ``h = min(4 r / |a - b|, 64 r)``
    to both sides of the edge and ``h`` past its ends (``a``, ``b``: the unit in-plane
    directions from the edge to each face's third corner; ``|a - b| = 2 sin(alpha / 2)``).
    A line that passes within ``r`` of the edge without crossing either face (it grazes a
    silhouette edge: both faces lie on one side of it) makes an angle of at least
    ``alpha / 2`` with that plane's cross-section, so it crosses the rectangle within
    ``r / sin(alpha / 2) = h / 2`` of the edge: well inside it. Lines within a few degrees
    of the edge's own direction can cross the plane beyond the rectangle's ends (there they
    pass near a vertex, which :func:`vertex_caps` cover, unless nearly parallel to the edge).
    An edge with one face (a boundary edge) or more than two gets, per face, a rectangle in
    that face's plane reaching ``4 r`` to both sides of the edge: a ray crossing the plane
    within rounding of the boundary crosses it.

    Args:
        points: (P, 3) float64 centre-relative vertices.
        faces: (F, 3) integer faces.
        r: the distance from an edge that must be caught (the rounding of the two tests).
        keep: (F,) bool, the faces whose edges get caps (not degenerate).

    Returns:
        float32 points (4 S, 3) and int32 faces (2 S, 3) (``S`` rectangles).
    """
    f = np.asarray(faces, dtype=np.int64)[keep]
    if f.size == 0:
        return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32)
    i0, i1, i2 = f.ravel(), f[:, [1, 2, 0]].ravel(), f[:, [2, 0, 1]].ravel()  # edge i0-i1, third corner i2
    lo, hi = np.minimum(i0, i1), np.maximum(i0, i1)
    key = lo * (int(points.shape[0]) + 1) + hi
    order = np.argsort(key, kind="stable")
    ks = key[order]
    start = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    count = np.diff(np.r_[start, ks.size])
    pairs = start[count == 2]
    other = order[np.repeat(count != 2, count)]

    def frame(h: np.ndarray):
        p0, p1 = points[lo[h]], points[hi[h]]
        e = _unit(p1 - p0)
        a = points[i2[h]] - p0
        return p0, p1, e, _unit(a - np.sum(a * e, 1, keepdims=True) * e)

    p0, p1, e, a = frame(order[pairs])
    b = frame(order[pairs + 1])[3]
    s = a + b
    flat = np.linalg.norm(s, axis=1) < 0.1  # nearly flat: the bisector is about the normal
    m = np.where(flat[:, None], _unit(np.cross(e, a)), _unit(s))
    with np.errstate(divide="ignore"):
        half = np.minimum(4.0 * r / np.linalg.norm(a - b, axis=1), 64.0 * r)
    rect, tris = _rectangles(p0, p1, e, m, half)
    if other.size:
        q0, q1, qe, qa = frame(other)
        rect2, tris2 = _rectangles(q0, q1, qe, qa, np.full(other.size, 4.0 * r))
        rect, tris = np.concatenate([rect, rect2]), np.concatenate([tris, tris2 + len(rect)])
    return rect.astype(np.float32), tris.astype(np.int32)
