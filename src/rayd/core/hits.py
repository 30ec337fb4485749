"""The fixed-winner evaluation of closest hits, written once over a frontend's array ops.

The engine's search kernel picks the winning triangle per ray; both frontends then
recompute ``t, u, v`` for that triangle from the live (differentiable) geometry with
this module, in their own array library, by solving

    o + t d = (1 - u - v) v0 + u v1 + v v2

with Cramer's rule in the form of Moeller & Trumbore (1997, "Fast, Minimum Storage
Ray/Triangle Intersection", JGT 2(1)), and derive ``p, geo_n, n, barycentric, uv``
from it (DESIGN.md, "Differentiation contract"). Rays that missed are evaluated
against a fixed, well-conditioned stand-in triangle and masked out, so misses carry
exactly zero gradient and never NaN, in reverse and in forward mode.

``ops`` is the frontend's vector-ops module (the protocol of :mod:`rayd.core.segments`,
plus ``cross(v, w)``, ``all_zero(v)`` (per row: every component is 0), ``max_abs(v)``
(per row: the largest ``|component|``), ``rsqrt(x)``, ``stack(*xs)``, a per-row vector
of per-row scalars, and ``masked(mask, fn, *rows)``: ``fn(*rows) & mask`` for a per-row
bool ``fn``, which the frontend may evaluate on the rows where ``mask`` holds only). This
module imports no array library.

A query whose evaluation does not see the numbers its search saw (float64 queries: the
search runs on the float32 snapshot of the scene and on float32-rounded rays) passes
``face``: a winner whose re-evaluated crossing lies off its face (:func:`off_face`, the
rule of the engine's ``watertight.confirmed_face_t``) is then a miss, and the frontend
searches on behind it (``_walk_on``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from rayd.engine.watertight import OFF_FACE
from rayd.flags import FIELD_FLAGS, RayFlags

# A triangle and a ray that hits it head-on at t = 1: the evaluation point of misses.
STAND_IN_TRIANGLE = ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0))
STAND_IN_RAY = ((0.25, 0.25, 1.0), (0.0, 0.0, -1.0))
UP = (0.0, 0.0, 1.0)  # the normal of a degenerate face (and of the stand-in)

SURFACE = RayFlags.Geometric | RayFlags.ShadingN | RayFlags.UV

#: The id fields of a hit record: -1 on a miss.
ID_FIELDS = ("prim_id", "shape_id", "global_prim_id")

# (w) -> (per-row interpolated attribute, per-row bool: the face has that attribute)
Interpolate = Callable[[Any], tuple[Any, Any]]


def field_names(flags: RayFlags) -> tuple[str, ...]:
    """The fields of a hit record made with ``flags``, in record order: ``t``, the ids, then the requested ones."""
    return ("t", *ID_FIELDS, *(name for name, flag in FIELD_FLAGS.items() if flags & flag))


def miss_value(name: str) -> float:
    """What field ``name`` of a hit record holds on a miss: -1 for ids, ``inf`` for ``t``, else 0."""
    if name in ID_FIELDS:
        return -1
    return math.inf if name == "t" else 0


def as_misses(fields: dict[str, Any], ok: Any, select: Callable[[Any, Any, float], Any]) -> dict[str, Any]:
    """``fields`` with every row where ``ok`` is false turned into a miss (:func:`miss_value`).

    ``select(ok, value, fill)`` is the frontend's per-row choice (``ok`` is per row;
    ``value`` may have trailing component dimensions).
    """
    return {name: select(ok, value, miss_value(name)) for name, value in fields.items()}


def normalize(ops: Any, v: Any, fallback: Any) -> tuple[Any, Any]:
    """``v / |v|`` with ``fallback`` where ``|v| = 0``; returns (result, per-row ok-mask)."""
    sq = ops.dot(v, v)
    ok = sq > 0
    return ops.scale(ops.rsqrt(ops.where(ok, sq, 1.0)), ops.where3(ok, v, fallback)), ok


def face_frame(core: Any, double: bool) -> tuple[float, float, float] | None:
    """The ``face`` argument of :func:`evaluate` for a query of the scene core ``core``
    (:class:`rayd.core.scene.SceneCore`): its search centre as a tuple where the output is float64
    (``double``: its evaluation sees other numbers than its float32 search), else ``None`` (no face
    rule: the search applied it to the same numbers).

    Also ``None`` for a scene with instances: an instance is searched in its mesh's local frame, to
    float32 rounding of the local coordinates, which the world-frame tolerance of :func:`off_face`
    does not see (a mesh at local ``x ~ 1e4`` placed at the origin lost 6,007 of 20,000 true hits near
    its edges; ``tests/torch/test_review23_offface_instances.py``), so such scenes keep the search's own
    rule (docs/known-limitations.md, "Off-face hits of float64 queries on scenes with instances")."""
    if not double or getattr(core, "instance_ids", None):
        return None
    centre = core.centre
    return (0.0, 0.0, 0.0) if centre is None else tuple(float(c) for c in centre)


def off_face(ops: Any, o: Any, corners: tuple[Any, Any, Any], normal: Any, u: Any, v: Any,
             centre: tuple[float, float, float]) -> Any:
    """Per row: the crossing of ``o + t d`` with the plane of ``corners`` lies off the face.

    The engine's rule for a float32 search (``rayd.engine.watertight.confirmed_face_t``),
    written over a frontend's array ops: with barycentric weights ``(1-u-v, u, v)`` of the
    crossing, the crossing's in-plane distance outside the edge opposite a negative weight
    ``w_i`` is ``-w_i |n| / |edge_i|`` (``n = (v1-v0) x (v2-v0)``); a crossing farther than
    ``OFF_FACE * big`` (``OFF_FACE = 2^-20``; ``big`` the largest ``|coordinate|`` of the
    origin and the corners in the search frame, relative to ``centre``) outside the face is
    no hit. Compared squared (no square root): ``w_i^2 |n|^2 > (OFF_FACE big)^2 |edge_i|^2``.

    The tolerance is float32's, for float64 queries too: their search (and the all-hits
    list their re-check walks on) runs on the float32 snapshot of the scene, so a crossing
    within float32 rounding of its face is all that search can tell from a hit. A float64
    tolerance (``2^-49``) turned 584 of 1,466 float64 hits of rays along a torus' edges into
    misses and lost more of the hits a float64 brute force finds (docs/precision.md,
    "Off-face crossings").

    Args:
        ops: the frontend's vector ops (module docstring).
        o: per-row origins (float64, world space).
        corners: the faces' world-space ``(v0, v1, v2)``, per row (float64).
        normal: ``(v1 - v0) x (v2 - v0)`` per row.
        u, v: the crossing's weights of ``v1`` and ``v2`` per row (Moeller & Trumbore 1997).
        centre: the scene's search centre (world space), ``(0, 0, 0)`` for none.

    Returns:
        Per-row bool, True where the crossing lies off the face.
    """
    v0, v1, v2 = corners
    c = ops.const3(o, *centre)
    big = ops.max_abs(o - c)
    for x in (v0, v1, v2):
        m = ops.max_abs(x - c)
        big = ops.where(m > big, m, big)
    tol2 = (OFF_FACE * big) * (OFF_FACE * big)
    area2 = ops.dot(normal, normal)
    w = 1.0 - u - v
    out = None
    for weight, a, b in ((w, v1, v2), (u, v2, v0), (v, v0, v1)):  # each weight and the edge opposite its corner
        edge = b - a
        far = (weight < 0) & (weight * weight * area2 > tol2 * ops.dot(edge, edge))
        out = far if out is None else out | far
    return out


def dropped_off_face(ops: Any, hit: Any, o: Any, corners: tuple[Any, Any, Any], normal: Any, u: Any, v: Any,
                     face: tuple[float, float, float]) -> Any:
    """Per row: ``hit`` and the crossing lies off the face (:func:`off_face`, same arguments).

    :func:`off_face` runs through ``ops.masked`` on the rows whose crossing has a negative
    weight (the others lie on their face): on the CPU rayd.torch evaluates it on those rows
    alone (hits within rounding of an edge, and the grazing ones), not on every hit."""
    outside = hit & ((u < 0) | (v < 0) | (1.0 - u - v < 0))

    def rule(o, v0, v1, v2, normal, u, v):
        return off_face(ops, o, (v0, v1, v2), normal, u, v, face)

    return ops.masked(outside, rule, o, *corners, normal, u, v)


def crossing_weights(ops: Any, o: Any, d: Any, corners: tuple[Any, Any, Any]) -> tuple[Any, Any]:
    """Per row, the weights ``(u, v)`` of ``v1``, ``v2`` at the crossing of ``o + t d`` with the plane of
    ``corners = (v0, v1, v2)`` (Moeller & Trumbore 1997, as :func:`evaluate` solves them), for
    :func:`off_face` where a caller solved ``t`` otherwise (``trace_reflections``' plane solve). Rows
    whose ray is parallel to the plane get any values (the caller's own test rejects them)."""
    v0, v1, v2 = corners
    e1 = v1 - v0
    e2 = v2 - v0
    pvec = ops.cross(d, e2)
    det = ops.dot(e1, pvec)
    inv_det = 1.0 / ops.where(det == 0, 1.0, det)
    s = o - v0
    return ops.dot(s, pvec) * inv_det, ops.dot(d, ops.cross(s, e1)) * inv_det


def evaluate(
    ops: Any,
    flags: RayFlags,
    hit: Any,
    o: Any,
    d: Any,
    corners: tuple[Any, Any, Any],
    ids: dict[str, Any],
    cast: Callable[[Any], Any],
    normals: Interpolate | None = None,
    uv: Interpolate | None = None,
    face: tuple[float, float, float] | None = None,
) -> dict[str, Any]:
    """Intersection fields of rays ``o + t d`` and their winning triangles ``corners``.

    Args:
        ops: the frontend's vector ops (module docstring).
        flags: which fields to compute (:class:`rayd.flags.RayFlags`).
        hit: per-row bool, rays with a winner.
        o, d, corners: per-row 3-vectors in the working precision (float64): origins,
            directions and the winners' world-space ``(v0, v1, v2)`` (any values where
            not ``hit``: the stand-in replaces them).
        ids: ``prim_id``, ``shape_id``, ``global_prim_id`` per row (set to -1 on a miss).
        cast: the working precision to the output dtype (scalars and vectors).
        normals, uv: given the output-dtype barycentric weights ``w``, the interpolated
            world-space vertex normals / texture coordinates and whether the face has
            them; ``None`` when no mesh has any.
        face: the search centre (:func:`face_frame`) where a winner whose crossing lies off
            its face (:func:`off_face`) is a miss; ``None``: no such check (the search's own).

    Returns:
        The fields of ``Intersection`` that ``flags`` asks for, per row. A winner that is
        degenerate or singular when re-evaluated (no interior, or no unique ``t``) is a
        miss, as the search decides (``watertight.confirmed_t``); with ``face``, so is one
        whose crossing lies off its face (``watertight.confirmed_face_t``).
    """
    v0, v1, v2 = (ops.where3(hit, x, ops.const3(x, *c)) for x, c in zip(corners, STAND_IN_TRIANGLE))
    o = ops.where3(hit, o, ops.const3(o, *STAND_IN_RAY[0]))
    d = ops.where3(hit, d, ops.const3(d, *STAND_IN_RAY[1]))
    e1 = v1 - v0
    e2 = v2 - v0
    normal = ops.cross(e1, e2)
    pvec = ops.cross(d, e2)
    det = ops.dot(e1, pvec)
    singular = (det == 0) | ops.all_zero(normal)
    hit = hit & ~singular
    inv_det = 1.0 / ops.where(singular, 1.0, det)  # a true division (an rcp is approximate on CUDA)
    s = o - v0
    qvec = ops.cross(s, e1)
    t = ops.dot(e2, qvec) * inv_det
    u = v = None
    if face is not None:
        u = ops.dot(s, pvec) * inv_det
        v = ops.dot(d, qvec) * inv_det
        hit = hit & ~dropped_off_face(ops, hit, o, (v0, v1, v2), normal, u, v, face)

    out = {"t": ops.where(hit, cast(t), math.inf)}
    out.update((name, ops.where(hit, value, -1)) for name, value in ids.items())
    if not flags & SURFACE:
        return out

    if u is None:
        u = ops.dot(s, pvec) * inv_det
        v = ops.dot(d, qvec) * inv_det
    w = cast(ops.stack(1.0 - u - v, u, v))
    geo_n, _ = normalize(ops, normal, ops.const3(normal, *UP))
    geo_n = ops.where3(hit, cast(geo_n), 0.0)
    if flags & RayFlags.Geometric:
        out["p"] = ops.where3(hit, cast(o + ops.scale(t, d)), 0.0)
        out["geo_n"] = geo_n
        out["barycentric"] = ops.where3(hit, w, 0.0)
    if flags & RayFlags.ShadingN:
        if normals is None:
            out["n"] = geo_n
        else:
            interpolated, has = normals(w)
            shading, ok = normalize(ops, interpolated, ops.const3(interpolated, *UP))
            out["n"] = ops.where3(ok & has & hit, shading, geo_n)
    if flags & RayFlags.UV:
        fallback = ops.stack(cast(u), cast(v))
        if uv is not None:
            interpolated, has = uv(w)
            fallback = ops.where3(has, interpolated, fallback)
        out["uv"] = ops.where3(hit, fallback, 0.0)
    return out
