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

The per-face work is one Warp kernel (:func:`grown_faces`), run in chunks on all cores: a rebuild or
a refit of the mirror after every vertex update costs a few milliseconds instead of the ~80 ms of
the NumPy expressions it replaced (terrain, 131 k faces).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.cpu_embree_caps import sliver_caps
from rayd.engine.runtime import launch_offset_rows

#: ``flag`` values of :func:`grown_faces` (read by the search kernels: a non-zero flag re-searches the
#: ray on Warp): a zero cross product (a miss in rayd), a sliver (not grown; a rectangle over it).
DEGENERATE, SLIVER = 1, 2


@wp.kernel(enable_backward=False)
def _grow_kernel(points: wp.array(dtype=wp.vec3), indices: wp.array(dtype=wp.int32), face_base: int,
                 centre: wp.vec3d, delta: wp.float64, grown: wp.array(dtype=wp.vec3, ndim=2),
                 table: wp.array(dtype=wp.vec4), flag: wp.array(dtype=wp.uint8), longest: wp.array(dtype=wp.float64),
                 row_base: int):
    i = wp.tid() + row_base
    base = 3 * (face_base + i)
    a = wp.vec3d(points[indices[base]]) - centre
    b = wp.vec3d(points[indices[base + 1]]) - centre
    c = wp.vec3d(points[indices[base + 2]]) - centre
    cross = wp.cross(b - a, c - a)
    la = wp.length(b - c)  # opposite a, b, c
    lb = wp.length(c - a)
    lc = wp.length(a - b)
    perim = la + lb + lc
    area2 = wp.length(cross)
    top = wp.max(la, wp.max(lb, lc))
    longest[i] = top
    zero = wp.float64(0.0)
    degenerate = cross[0] == zero and cross[1] == zero and cross[2] == zero
    code = wp.uint8(0)
    if degenerate:
        code = wp.uint8(DEGENERATE)
    elif area2 < wp.float64(8.0) * delta * top:  # smallest altitude area2 / top below 8 delta
        code = wp.uint8(SLIVER)
    flag[i] = code
    if code != wp.uint8(0):
        grown[i, 0] = wp.vec3(a)
        grown[i, 1] = wp.vec3(b)
        grown[i, 2] = wp.vec3(c)
        table[i] = wp.vec4(0.0)
        return
    s = wp.float64(1.0) + delta * perim / area2  # r = area2 / perimeter
    wa = la / perim
    wb = lb / perim
    wc = lc / perim
    inc = wa * a + wb * b + wc * c
    # (rounded to nearest: at most 2^-24 R per coordinate, 2^-11 of the margin 2^-13 R)
    grown[i, 0] = wp.vec3(inc + s * (a - inc))
    grown[i, 1] = wp.vec3(inc + s * (b - inc))
    grown[i, 2] = wp.vec3(inc + s * (c - inc))
    k = s - wp.float64(1.0)
    table[i] = wp.vec4(wp.float32(s), wp.float32(k * wa), wp.float32(k * wb), wp.float32(k * wc))


def grown_faces(points: wp.array, indices: wp.array, face_base: int, num_faces: int, centre: np.ndarray,
                delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple | None, float]:
    """Each face grown by ``delta`` in its plane, with the table that maps Embree's weights back.

    Args:
        points: ``wp.array(dtype=wp.vec3)`` (V,) float32 vertices (CPU).
        indices: ``wp.array(dtype=wp.int32)`` flat triangle list; face ``f`` is
            ``indices[3 (face_base + f) + k]``.
        face_base, num_faces: the faces covered, ``face_base .. face_base + num_faces - 1``.
        centre: (3,) float64, subtracted from every vertex in float64 (Embree's coordinates are
            centre-relative).
        delta: the margin, in the vertices' units (``GROW * R``).

    Returns:
        ``(points, table, flag, slivers, longest)``: ``points`` (3F, 3) float32, corner ``k`` of face
        ``f`` grown at row ``3 f + k`` (Embree's faces are ``[3f, 3f+1, 3f+2]``: :func:`face_rows`);
        ``table`` (F, 4) float32 ``(s, (s - 1) b_I)`` (all 0: a face whose hits are re-searched by Warp);
        ``flag`` (F,) uint8, 0, :data:`DEGENERATE` (zero float64 cross product) or :data:`SLIVER`
        (smallest altitude below ``8 delta``); ``slivers``: ``(points (4S, 3) float32, faces (2S, 3) int32)``
        of the sliver rectangles, or None; ``longest``: the longest edge (float, the near-tangent
        check's scale).
    """
    dev = points.device
    grown = np.empty((num_faces, 3, 3), np.float32)
    table = np.empty((num_faces, 4), np.float32)
    flag = np.empty(num_faces, np.uint8)
    longest = np.empty(num_faces, np.float64)
    out = [wp.array(x, dtype=t, device=dev, copy=False) for x, t in
           ((grown.reshape(num_faces, 3, 3), wp.vec3), (table, wp.vec4), (flag, wp.uint8), (longest, wp.float64))]
    launch_offset_rows(_grow_kernel, num_faces,
                       [points, indices, face_base, wp.vec3d(*np.asarray(centre, np.float64)), float(delta), *out], dev, None)
    slivers = None
    thin = np.flatnonzero(flag == SLIVER)
    if thin.size:
        # the centre-relative corners in float64, as the kernel saw them (rounded to float32, a sliver can
        # become a segment: its rectangle would be NaN and never hit)
        ids = indices.numpy()[3 * (face_base + thin)[:, None] + np.arange(3)]
        corners = points.numpy()[ids].astype(np.float64) - np.asarray(centre, np.float64)
        _, spts, sfaces = sliver_caps(corners[:, 0], corners[:, 1], corners[:, 2], delta, np.ones(thin.size, bool))
        slivers = (spts, sfaces)
    return grown.reshape(-1, 3), table, flag, slivers, float(longest.max(initial=0.0))


def face_rows(num_faces: int) -> np.ndarray:
    """Embree's faces of the grown points: (F, 3) int32 ``[3f, 3f+1, 3f+2]``."""
    return np.arange(3 * num_faces, dtype=np.int32).reshape(-1, 3)
