"""Grown triangles for a non-robust Embree scene (:mod:`rayd.engine.cpu_embree`, ``GROWN``; an experiment
of issue 12, off by default): each face ``T`` enters Embree as its own copy ``T'`` grown in its plane by
an absolute margin ``delta`` (every edge moved outward by ``delta`` along its in-plane normal: the
homothety about the incentre ``I`` of ratio ``s = 1 + delta / r``, ``r`` the inradius), so that a ray
crossing ``T`` crosses ``T'`` at least ``delta`` (in the plane) inside it, where Embree's non-robust
test (``RTC_SCENE_FLAG_NONE``) would not need the robust mode or the vertex caps.

Embree's barycentric weights ``b'`` of a crossing of ``T'`` give those of ``T`` (the homothety maps
the weights linearly): ``b = s b' - (s - 1) b_I`` with ``b_I`` the incentre's weights (edge lengths
over the perimeter; Coxeter, *Introduction to Geometry*, 1.4). The search kernel evaluates the
acceptance checks (``EDGE``, the near-tangent check) on ``b``.

Faces thinner than ``8 delta`` (smallest altitude) and degenerate faces are not grown (``s = 0`` in
the table: a hit on one is re-searched by Warp); a sliver gets a rectangle over it with a margin of
``4 delta`` (:func:`rayd.engine.cpu_embree_caps.sliver_caps`, its own geometry: a hit on it is re-searched).
"""

from __future__ import annotations

import numpy as np

from rayd.engine.cpu_embree_caps import sliver_caps


def grown_faces(a: np.ndarray, b: np.ndarray, c: np.ndarray, delta: float,
                degenerate: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple | None]:
    """Each face grown by ``delta`` in its plane, with the table that maps Embree's weights back.

    Args:
        a, b, c: (F, 3) float64 centre-relative corners.
        delta: the margin, in the corners' units.
        degenerate: (F,) bool, faces with a zero cross product (not grown; flagged).

    Returns:
        ``(points (3F, 3) float32, faces (F, 3) int32, table (F, 4) float32, slivers)``: corner
        ``3 f + k`` is corner ``k`` of face ``f`` grown; ``table[f] = (s, (s-1) b_I)`` (``s = 0``: a face
        whose hits are re-searched by Warp); ``slivers``: ``(points, faces)`` of the sliver rectangles, or None.
    """
    la = np.linalg.norm(b - c, axis=1)  # opposite a
    lb = np.linalg.norm(c - a, axis=1)
    lc = np.linalg.norm(a - b, axis=1)
    perim = la + lb + lc
    area2 = np.linalg.norm(np.cross(b - a, c - a), axis=1)
    longest = np.maximum(np.maximum(la, lb), lc)
    with np.errstate(divide="ignore", invalid="ignore"):
        height = area2 / longest
        r = area2 / perim  # inradius = area / semi-perimeter
        s = 1.0 + delta / r
        wi = np.stack([la, lb, lc], 1) / perim[:, None]
    sliver_flag, spts, sfaces = sliver_caps(a, b, c, delta, ~degenerate)
    flat = degenerate | sliver_flag | ~np.isfinite(s)
    s = np.where(flat, 1.0, s)
    wi = np.where(flat[:, None], 0.0, wi)
    centre = wi[:, :1] * a + wi[:, 1:2] * b + wi[:, 2:] * c
    corners = np.stack([a, b, c], 1)
    grown = np.where(flat[:, None, None], corners, centre[:, None, :] + s[:, None, None] * (corners - centre[:, None, :]))
    points = _outward(grown, centre, flat)
    faces = np.arange(3 * len(a), dtype=np.int32).reshape(-1, 3)
    table = np.concatenate([np.where(flat, 0.0, s)[:, None], (s - 1.0)[:, None] * wi], 1).astype(np.float32)
    slivers = (spts, sfaces) if sliver_flag.any() else None
    return points, faces, table, slivers


def _outward(grown: np.ndarray, centre: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """``grown`` (F, 3, 3) float64 rounded to float32 away from ``centre`` per coordinate (grown faces
    only; the others to nearest): the rounded copy still contains the float64 one in projection."""
    g32 = grown.astype(np.float32)
    away = np.sign(grown - centre[:, None, :])
    back = (g32.astype(np.float64) - grown) * away < 0.0  # rounded towards the centre
    bumped = np.nextafter(g32, np.where(away > 0, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
    out = np.where(back & ~flat[:, None, None], bumped, g32)
    return np.ascontiguousarray(out.reshape(-1, 3), dtype=np.float32)
