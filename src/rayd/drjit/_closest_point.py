"""Surface queries of rayd.drjit: closest point, winding number, inside test, signed distance.

The engine (:mod:`rayd.engine.closest_point`) picks the closest triangle per point
(the same float32 BVH search as rayd.torch); this module recomputes the closest
point on that triangle from the live (differentiable) vertex and transform arrays
with Dr.Jit ops, in float64 inside (Ericson 2004, "Real-Time Collision Detection",
5.1.5: the Voronoi region is chosen by the engine's tests and held fixed, its
formula is differentiated). Queries without a winner are evaluated on a stand-in
and masked with ``dr.select``: zero gradient, never NaN.

The winding number is the engine's (:mod:`rayd.engine.winding`): hierarchical by
default (Barill et al. 2018), the exact ``O(F)`` sum with ``exact=True``. When an
input has gradients enabled, the value and its derivatives (reverse and forward
mode) come from the exact sum written in Dr.Jit ops in float64, as in rayd.torch.
"""

from __future__ import annotations

import math
from types import ModuleType

import drjit as dr
import numpy as np

from rayd.core import surface as _surface
from rayd.core.closest import region_weights
from rayd.core.edges import document
from rayd.drjit import _check, _convert
from rayd.drjit._intersect import locate
from rayd.drjit._nearest_edge import _check_points, _kind, _norm, _relative, _safe_div, within
from rayd.drjit.intersection import DrjitRecord
from rayd.engine import closest_point as _engine
from rayd.engine import winding as _winding
from rayd.records import ClosestPointRecord


class ClosestPoint(DrjitRecord, ClosestPointRecord):
    """The closest point on the scene's enabled triangles per query point.

    Attributes (N queries; Dr.Jit types of the scene's backend, ``.ad`` when any input was):
        distance: (N,) ``Float``/``Float64`` Euclidean distance to ``p``; ``+inf``
            where no triangle lies within ``max_distance``.
        p: (N, 3) the closest point; 0 if none.
        barycentric: (N, 3) weights ``(w0, w1, w2)``, ``p = w0 v0 + w1 v1 + w2 v2``; 0 if none.
        geo_n: (N, 3) unit geometric normal ``normalize((v1 - v0) x (v2 - v0))``; 0 if none.
        prim_id, shape_id, global_prim_id: (N,) ``Int``; -1 if none.

    Float fields are differentiable for the fixed winning triangle (DESIGN.md). Never NaN.
    """

    _width_field = "distance"

    @property
    def shape(self) -> tuple[int]:
        """The batch shape ``(N,)``."""
        return (dr.width(self._fields["distance"]),)


document(ClosestPoint, {"is_valid": """(N,) ``Bool``: True where a triangle was found."""},
         {"is_valid": {"return": dr.ArrayBase}})


def closest_on_triangles(m: ModuleType, p, a, b, c):
    """``Array3f64`` barycentric weights of the closest points of triangles ``abc`` to ``p`` (Ericson 5.1.5)."""
    Work = m.Array3f64
    w0, w1, w2, ab, ac = region_weights(p, a, b, c, dr.dot, _safe_pos_div, dr.select)
    weights = Work(w0, w1, w2)
    n = dr.detach(dr.cross(ab, ac))
    sliver = dr.dot(n, n) <= _engine.SLIVER * dr.detach(dr.dot(ab, ab) * dr.dot(ac, ac))
    return dr.select(sliver, _on_sides(m, p, a, b, c), weights)


def _on_sides(m: ModuleType, p, a, b, c):
    """Weights of the closest point on the sides ab, ac, bc (the engine's rule for degenerate faces)."""
    Work = m.Array3f64
    best_w, best_gap = None, None
    for x, y, side in ((a, b, 0), (a, c, 1), (b, c, 2)):
        xy = y - x
        t = _safe_pos_div(dr.dot(p - x, xy), dr.dot(xy, xy))
        t = dr.select(t < 0, 0, dr.select(t > 1, 1, t))  # not dr.clip: LLVM 15 cannot lower fminimum
        w = (Work(1 - t, t, 0), Work(1 - t, 0, t), Work(0, 1 - t, t))[side]
        gap = dr.detach(dr.squared_norm(x + t * xy - p))
        if best_w is None:
            best_w, best_gap = w, gap
        else:
            better = gap < best_gap  # first on ties, as the engine
            best_w, best_gap = dr.select(better, w, best_w), dr.select(better, gap, best_gap)
    return best_w


def _safe_pos_div(num, den):
    ok = dr.detach(den > 0)
    return dr.select(ok, num / dr.select(ok, den, 1), 0)


def _corners(m: ModuleType, double: bool, gid, geometry):
    """``(found, shape, prim, a, b, c)``: world corners (float64) of the winners, stand-ins where none."""
    Array3 = m.Array3f64 if double else m.Array3f
    _, found, shape, prim, _, _, (v0, v1, v2) = locate(m, Array3, gid, geometry)
    Work = m.Array3f64
    a = dr.select(found, v0, Work(0, 0, 0))  # float64 corners (placed in float64 by locate)
    b = dr.select(found, v1, Work(1, 0, 0))
    c = dr.select(found, v2, Work(0, 1, 0))
    return found, shape, prim, a, b, c


def _empty(m: ModuleType, double: bool) -> dict:
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    return {"distance": Float(), "p": Array3(), "barycentric": Array3(), "geo_n": Array3(), "prim_id": m.Int(),
            "shape_id": m.Int(), "global_prim_id": m.Int()}


def closest_point(scene, call: str, points: object, active: object, max_distance: object) -> ClosestPoint:
    """``Scene.closest_point`` after its lifecycle check: see its docstring."""
    points, n, active = _check_points(scene, call, points, active)
    max_distance = _check.max_distance(call, max_distance)
    m, double = _kind(scene, points)
    if n == 0:
        return ClosestPoint(**_empty(m, double))
    backend, device = scene._backend, scene._device
    winner = _convert.empty_int32(n, backend)
    flag = _convert.uint8(active, backend)
    p_view, p_buffer = _convert.vec3_view(_relative(scene, points), device)
    _convert.launch(device, _engine.closest_point_search, scene._core.accel, p_view, _convert.scalar_view(flag, device),
                    max_distance, _convert.scalar_view(winner, device))
    del p_buffer
    gid = m.Int(winner)
    found, shape, prim, a, b, c = _corners(m, double, gid, scene._live_geometry(m, double))
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    Work = m.Array3f64
    q = Work(points)
    if dr.width(q) != n:
        q = dr.gather(Work, q, dr.zeros(m.UInt, n))
    q = dr.select(found, q, a)
    w = closest_on_triangles(m, q, a, b, c)
    p = w.x * a + w.y * b + w.z * c
    normal = dr.cross(b - a, c - a)
    length = _norm(normal)
    geo_n = normal * _safe_div(m.Float64(1), length)
    fields = {
        "distance": dr.select(found, Float(_norm(q - p)), math.inf),
        "p": dr.select(found, Array3(p), 0),
        "barycentric": dr.select(found, Array3(w), 0),
        "geo_n": dr.select(found, Array3(geo_n), 0),
        "prim_id": dr.select(found, m.Int(prim), -1),
        "shape_id": dr.select(found, m.Int(shape), -1),
        "global_prim_id": gid,
    }
    return ClosestPoint(**within(fields, max_distance))


def winding_number(scene, call: str, points: object, active: object, exact: bool, refine: float = 0.0,
                   value_only: bool = False):
    """``Scene.winding_number`` after its checks (``value_only``: the engine kernel even for AD inputs)."""
    points, n, active = _check_points(scene, call, points, active)
    m, double = _kind(scene, points)
    if not value_only and _wants_grad(scene, points):
        return _exact_sum(scene, m, double, points, n, active)
    plain = _convert.module(scene._backend, False)
    Float = plain.Float64 if double else plain.Float
    if n == 0:
        return Float()
    backend, device = scene._backend, scene._device
    out = dr.empty(plain.Float64, n)
    dr.make_opaque(out)
    flag = _convert.uint8(active, backend)
    p_view, p_buffer = _convert.vec3_view(_relative(scene, points), device)
    _convert.launch(device, _winding.winding_number, scene._core.accel, scene._core.table.num_flat_faces, p_view,
                    _convert.scalar_view(flag, device), _convert.scalar_view(out, device), exact=exact, refine=refine)
    del p_buffer
    return Float(out)


#: Point-face pairs per chunk of the differentiable (Dr.Jit) winding-number sum.
_CHUNK_PAIRS = 1 << 22


def _grad_on(array) -> bool:
    return array is not None and _convert.is_ad(array) and dr.grad_enabled(array)


def _wants_grad(scene, points) -> bool:
    """Whether ``points``, a mesh's vertices or a registered matrix has gradients enabled (either AD mode)."""
    return _grad_on(points) or any(_grad_on(s.vertices) or _grad_on(s.matrix) for s in scene._core.table.shapes)


def _exact_sum(scene, m: ModuleType, double: bool, points, n: int, active):
    """The exact winding number as Dr.Jit ops in float64 (differentiable in reverse and forward mode).

    ``sum_f Omega_f / (4 pi)`` over the enabled faces (world corners from the live
    vertices and transforms), ``Omega_f`` the signed solid angle (Van Oosterom,
    Strackee 1983) as in rayd.torch; chunks of ``_CHUNK_PAIRS`` point-face pairs,
    each summed per point with ``dr.scatter_reduce``. 0 for inactive or non-finite points.
    """
    Float = m.Float64 if double else m.Float
    if n == 0:
        return Float()
    Work = m.Array3f64
    ids = _surface.enabled_face_ids(scene._core.table.shapes)
    total = dr.zeros(m.Float64, n)
    q = Work(points)
    if dr.width(q) != n:
        q = dr.gather(Work, q, dr.zeros(m.UInt, n))
    if ids.size:
        gid = m.Int(ids.astype(np.int32))
        _, _, _, a, b, c = _corners(m, True, gid, scene._live_geometry(m, True))
        faces = dr.width(gid)
        step = max(1, _CHUNK_PAIRS // faces)
        for start in range(0, n, step):
            count = min(step, n - start)
            k = dr.arange(m.UInt, count * faces)
            i = k // faces
            j = k - i * faces
            x = dr.gather(Work, q, i + start)
            omega = _solid_angle(dr.gather(Work, a, j) - x, dr.gather(Work, b, j) - x, dr.gather(Work, c, j) - x)
            dr.scatter_reduce(dr.ReduceOp.Add, total, omega, i + start)
    on = dr.isfinite(q.x) & dr.isfinite(q.y) & dr.isfinite(q.z)
    if active is not None:
        on &= m.Bool(active)
    return Float(dr.select(on, total / (4.0 * math.pi), 0))


def _solid_angle(x, y, z):
    """Signed solid angle of the triangle with corners ``x, y, z`` (relative to the point)."""
    return _surface.solid_angle(x, y, z, dr.dot, dr.cross, dr.norm, _atan2)


def _atan2(y, x):
    """``atan2(y, x)`` from arithmetic, ``sqrt`` and ``select`` only (differentiable; float64-accurate).

    Dr.Jit's ``atan``/``atan2`` use ``maximum``, which LLVM 15 cannot lower for the
    LLVM backend (as ``dr.clip``). Quadrant reduction to ``t = min/max`` in
    ``[0, 1]``, two half-angle steps ``t -> t / (1 + sqrt(1 + t^2))`` (``t <= 0.199``),
    then the Taylor series of ``atan`` to ``t^27`` (truncation below 1e-18).

    ``|x|``, ``|y|`` are taken by selects, not ``dr.abs``: Dr.Jit's derivative of ``abs`` at 0
    is 0, which dropped the derivative ``1 / x`` of ``atan2(y, x)`` along ``y`` at ``y = 0``
    (a point in the plane of a face, off it: its solid angle is 0, its derivative along the
    normal is not; helper breakit25, ``tests/drjit/test_drjit_breakit25_winding_coplanar.py``).
    """
    ax, ay = dr.select(x < 0, -x, x), dr.select(y < 0, -y, y)
    swap = ay > ax
    lo, hi = dr.select(swap, ax, ay), dr.select(swap, ay, ax)
    ok = hi > 0
    t = dr.select(ok, lo / dr.select(ok, hi, 1), 0)
    for _ in range(2):
        t = t / (1 + dr.sqrt(1 + t * t))
    t2 = t * t
    acc = t2 * 0 + (1.0 / 27)  # Horner form of sum_k (-1)^k t^(2k+1) / (2k+1), k = 0..13
    for k in range(12, -1, -1):
        acc = 1.0 / (2 * k + 1) - t2 * acc
    r = 4 * t * acc
    r = dr.select(swap, math.pi / 2 - r, r)
    r = dr.select(x < 0, math.pi - r, r)
    return dr.select(y < 0, -r, r)


def contains(scene, call: str, points: object, active: object, exact: bool):
    """``Scene.contains`` after its checks: see its docstring."""
    w = winding_number(scene, call, points, active, exact, _surface.REFINE_MARGIN, value_only=True)
    if dr.width(w) == 0:
        return dr.mask_t(w)()  # Dr.Jit cannot compare width 0 with a literal
    return w > 0.5


def signed_distance(scene, call: str, points: object, active: object, exact: bool):
    """``Scene.signed_distance`` after its checks: see its docstring."""
    w = winding_number(scene, call, points, active, exact, _surface.REFINE_MARGIN, value_only=True)
    near = closest_point(scene, call, points, active, math.inf)
    distance = near.distance
    if dr.width(w) == 0:
        return distance
    inside = w > 0.5
    return dr.select(_mask(distance, inside), -distance, distance)


def _mask(distance, inside):
    """``inside`` as the mask type of ``distance`` (the winding number is not AD)."""
    return dr.mask_t(distance)(inside)
