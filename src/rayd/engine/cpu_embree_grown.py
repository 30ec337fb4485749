"""Grown triangles for a non-robust Embree scene (:mod:`rayd.engine.cpu_embree`, ``GROWN``, the default).

Each face ``T`` enters Embree as its own copy ``T'`` grown in its plane by an absolute margin ``delta``:
every edge moved outward by ``delta`` along its in-plane normal, i.e. the homothety about the incentre
``I`` of ratio ``s = 1 + delta / r`` (``r`` the inradius), per-face vertices rounded to float32. A ray
that crosses ``T`` crosses ``T'`` at least ``delta`` (in the plane) inside it, and the copies of the
faces around an edge or a vertex overlap there, so Embree's non-robust test (``RTC_SCENE_FLAG_NONE``,
Mitsuba's setting) finds a face where its robust mode leaked (near vertices, and through edges of
non-convex meshes: ``tests/torch/test_cpu_embree_stress.py``) without vertex or edge caps.

Embree's barycentric weights ``b'`` of a crossing of ``T'`` give those of ``T`` (the homothety maps the
weights affinely): ``b = s b' - (s - 1) b_I``, ``b_I`` the incentre's weights (the edge lengths over the
perimeter; e.g. Coxeter, *Introduction to Geometry*, 1.4). The search kernel checks the crossing on
``T`` with them (:mod:`rayd.engine.cpu_embree_kernels`).

Faces thinner than ``8 delta`` (smallest altitude) and degenerate faces are not grown (``s = 0`` in
the table: a hit on one is re-searched by Warp); a sliver gets a rectangle over it with a margin of
``4 delta`` (:func:`rayd.engine.cpu_embree_caps.sliver_caps`, geomID 1: a hit on it is re-searched).
"""

from __future__ import annotations

import numpy as np

from rayd.engine.cpu_embree_caps import sliver_caps


def _norm(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", x, x))


def grown_faces(a: np.ndarray, b: np.ndarray, c: np.ndarray, delta: float, degenerate: np.ndarray,
                cross: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple | None, float]:
    """Each face grown by ``delta`` in its plane, with the table that maps Embree's weights back.

    Args:
        a, b, c: (F, 3) float64 centre-relative corners.
        delta: the margin, in the corners' units (``GROW * R``).
        degenerate: (F,) bool, faces with a zero cross product (not grown; flagged).
        cross: (F, 3) float64 ``(b - a) x (c - a)`` if already computed.

    Returns:
        ``(points, faces, table, slivers, longest)``: ``points`` (3F, 3) float32, corner ``k`` of face
        ``f`` grown at row ``3 f + k``; ``faces`` (F, 3) int32 ``[3f, 3f+1, 3f+2]``; ``table`` (F, 4)
        float32 ``(s, (s - 1) b_I)`` (``s = 0``: a face whose hits are re-searched by Warp); ``slivers``:
        ``(points (4S, 3) float32, faces (2S, 3) int32)`` of the sliver rectangles, or None; ``longest``:
        the longest edge (float, the near-tangent check's scale).
    """
    if cross is None:
        cross = np.cross(b - a, c - a)
    lengths = np.stack([_norm(b - c), _norm(c - a), _norm(a - b)], 1)  # opposite a, b, c
    perim = lengths.sum(1)
    area2 = _norm(cross)
    longest = lengths.max(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sliver = ~degenerate & (area2 / longest < 8.0 * delta)
        flat = degenerate | sliver
        s = np.where(flat, 1.0, 1.0 + delta * perim / np.where(flat, 1.0, area2))  # r = area2 / perimeter
        wi = np.where(flat[:, None], 0.0, lengths / np.where(perim > 0, perim, 1.0)[:, None])
    centre = wi[:, :1] * a + wi[:, 1:2] * b + wi[:, 2:] * c
    corners = np.stack([a, b, c], 1)
    grown = np.where(flat[:, None, None], corners, centre[:, None, :] + s[:, None, None] * (corners - centre[:, None, :]))
    # (rounded to nearest: at most 2^-24 R per coordinate, 2^-11 of the margin 2^-13 R)
    points = np.ascontiguousarray(grown.reshape(-1, 3), dtype=np.float32)
    faces = np.arange(3 * len(a), dtype=np.int32).reshape(-1, 3)
    table = np.concatenate([np.where(flat, 0.0, s)[:, None], (s - 1.0)[:, None] * wi], 1).astype(np.float32)
    slivers = None
    if sliver.any():
        _, spts, sfaces = sliver_caps(a[sliver], b[sliver], c[sliver], delta, np.ones(int(sliver.sum()), bool))
        slivers = (spts, sfaces)
    return points, faces, table, slivers, float(longest.max(initial=0.0))
