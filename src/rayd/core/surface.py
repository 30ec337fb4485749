"""Surface queries written once for both frontends: the Scene methods and the formulas.

- :class:`SurfaceQueries`: ``closest_point``, ``winding_number``, ``contains``,
  ``signed_distance`` of a frontend's ``Scene`` (lifecycle check and ``exact`` check
  here, the work in the frontend's module ``_SURFACE``); the frontends give the methods
  their docstrings with :func:`rayd.core.edges.document`.
- :func:`voronoi`, :func:`regions`, :func:`parameters`: the terms of the closest point
  on a triangle by Voronoi regions (Ericson 2004, "Real-Time Collision Detection",
  5.1.5), in the engine's cascade order, on any array type with ``+ - * /``,
  comparisons and ``& | ~`` on masks (torch tensors, Dr.Jit arrays); the frontend
  passes its ``dot`` and ``div``.
- :func:`solid_angle`: the signed solid angle of a triangle seen from the origin
  (Van Oosterom, Strackee 1983) with the frontend's vector ops.
- :func:`enabled_face_ids`: the ``global_prim_id`` of every enabled face (meshes and
  instances), for the differentiable exact winding-number sums.

Never imports torch or drjit.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from rayd.core.docs import FrontendDocs

#: contains()/signed_distance(): hierarchical winding numbers within this of 0.5 are recomputed exactly.
REFINE_MARGIN = 0.05


def check_exact(call: str, exact: object) -> bool:
    """``exact`` as a bool; ``TypeError`` naming the call otherwise."""
    if not isinstance(exact, bool):
        raise TypeError(f"{call}: 'exact' must be a bool, got {type(exact).__name__}")
    return exact


def annotations(array: type, optional: Any, record: type) -> dict[str, dict[str, Any]]:
    """The annotations :class:`SurfaceQueries`' methods show in a frontend (its ``ANNOTATIONS``).

    Args:
        array: the frontend's array type (``torch.Tensor``, ``drjit.ArrayBase``).
        optional: the type of an optional array (``torch.Tensor | None``).
        record: the frontend's ``ClosestPoint``.

    Returns:
        method name -> parameter name (and ``"return"``) -> annotation, for
        :func:`rayd.core.docs.document`.
    """
    points = {"points": array, "active": optional}
    out = {"closest_point": {**points, "max_distance": float, "return": record}}
    for name in ("winding_number", "contains", "signed_distance"):
        out[name] = {**points, "exact": bool, "return": array}
    return out


class SurfaceQueries(FrontendDocs):
    """The surface methods of a frontend's ``Scene`` (a mixin over :class:`rayd.core.frontend.SceneBase`).

    Documented in each frontend's words from ``rayd.<frontend>._scene_surface.DOCS``
    (:class:`rayd.core.docs.FrontendDocs`).

    Hooks: ``_PREFIX`` (``"rayd.torch.Scene"``) and ``_SURFACE``, the frontend's module
    with ``closest_point(scene, call, points, active, max_distance)``,
    ``winding_number(scene, call, points, active, exact)``, ``contains(...)`` and
    ``signed_distance(...)`` (same arguments), which check the arrays, search and evaluate.
    """

    _PREFIX = "rayd.Scene"
    _DOCS_MODULE = "_scene_surface"
    _SURFACE: Any = None

    def closest_point(self, points, active=None, *, max_distance: float = math.inf):
        call = f"{self._PREFIX}.closest_point()"
        self._require_ready(call)
        return self._SURFACE.closest_point(self, call, points, active, max_distance)

    def winding_number(self, points, active=None, *, exact: bool = False):
        call = f"{self._PREFIX}.winding_number()"
        self._require_ready(call)
        return self._SURFACE.winding_number(self, call, points, active, check_exact(call, exact))

    def contains(self, points, active=None, *, exact: bool = False):
        call = f"{self._PREFIX}.contains()"
        self._require_ready(call)
        return self._SURFACE.contains(self, call, points, active, check_exact(call, exact))

    def signed_distance(self, points, active=None, *, exact: bool = False):
        call = f"{self._PREFIX}.signed_distance()"
        self._require_ready(call)
        return self._SURFACE.signed_distance(self, call, points, active, check_exact(call, exact))


def voronoi(p, a, b, c, dot: Callable) -> tuple:
    """``(ab, ac, d, v)``: edges, the six dot products ``d = (d1, ..., d6)`` and ``v = (va, vb, vc)``.

    As in Ericson 2004, 5.1.5 (and ``rayd.engine.closest_walk.closest_on_triangle``):
    ``d1 = ab.ap, d2 = ac.ap, d3 = ab.bp, d4 = ac.bp, d5 = ab.cp, d6 = ac.cp``.
    """
    ab, ac, ap = b - a, c - a, p - a
    bp, cp = p - b, p - c
    d1, d2 = dot(ab, ap), dot(ac, ap)
    d3, d4 = dot(ab, bp), dot(ac, bp)
    d5, d6 = dot(ab, cp), dot(ac, cp)
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4
    return ab, ac, (d1, d2, d3, d4, d5, d6), (va, vb, vc)


def regions(d: tuple, v: tuple) -> tuple:
    """Masks ``(r_a, r_b, r_ab, r_c, r_ac, r_bc, r_face)``: the region of the closest point, first test wins.

    The engine's cascade order (vertex a, vertex b, edge ab, vertex c, edge ac, edge
    bc, else the face); exactly one mask is true per element.
    """
    d1, d2, d3, d4, d5, d6 = d
    va, vb, vc = v
    r_a = (d1 <= 0) & (d2 <= 0)
    r_b = (d3 >= 0) & (d4 <= d3) & ~r_a
    taken = r_a | r_b
    r_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0) & ~taken
    taken = taken | r_ab
    r_c = (d6 >= 0) & (d5 <= d6) & ~taken
    taken = taken | r_c
    r_ac = (vb <= 0) & (d2 >= 0) & (d6 <= 0) & ~taken
    taken = taken | r_ac
    r_bc = (va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0) & ~taken
    return r_a, r_b, r_ab, r_c, r_ac, r_bc, ~(taken | r_bc)


def parameters(d: tuple, v: tuple, div: Callable) -> tuple:
    """``(t_ab, t_ac, t_bc, v, w, den)``: edge parameters and face weights (``div``: a safe division, 0 where den <= 0)."""
    d1, d2, d3, d4, d5, d6 = d
    va, vb, vc = v
    den = va + vb + vc
    t_ab = div(d1, d1 - d3)
    t_ac = div(d2, d2 - d6)
    t_bc = div(d4 - d3, (d4 - d3) + (d5 - d6))
    return t_ab, t_ac, t_bc, div(vb, den), div(vc, den), den


def solid_angle(x, y, z, dot: Callable, cross: Callable, norm: Callable, atan2: Callable):
    """Signed solid angle of the triangle ``x, y, z`` (corners relative to the point), Van Oosterom, Strackee 1983."""
    lx, ly, lz = norm(x), norm(y), norm(z)
    num = dot(x, cross(y, z))
    den = lx * ly * lz + dot(x, y) * lz + dot(y, z) * lx + dot(z, x) * ly
    return 2.0 * atan2(num, den)


def enabled_face_ids(shapes: list) -> np.ndarray:
    """int64 ``global_prim_id`` of every face of the enabled shapes (meshes and instances), ascending."""
    ids = [np.arange(s.face_offset, s.face_offset + s.num_faces) for s in shapes if s.enabled and s.num_faces]
    return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
