"""Point-to-segment and ray-to-segment formulas, written once over a frontend's array ops.

Both frontends evaluate a fixed winning edge with these expressions in their own
array library, so the formulas (and hence the gradients their autodiff derives from
them) are the same in rayd.torch and rayd.drjit:

- point ``p`` and segment ``[a, b]``:
  ``edge_t = clamp(dot(p - a, b - a) / |b - a|^2, 0, 1)``,
  ``edge_point = a + edge_t (b - a)``, ``distance = |(p - a) - edge_t (b - a)|``
  (the form that keeps float32 distances accurate near the edge, as the engine's
  fused kernel computes them);
- ray segment ``o + s d, s in [tmin, tmax]`` and segment ``a + t e, t in [0, 1]``:
  the minimiser of ``|o + s d - a - t e|^2`` over the box, by clamping the
  unconstrained solution and re-solving on the clamped side (Ericson 2004,
  "Real-Time Collision Detection", sec. 5.1.9), with the engine's branch logic.

Queries without an edge are evaluated on a fixed stand-in edge (and a stand-in
point or ray off it) and masked out: zero gradient, never NaN.

``ops`` is the frontend's vector-ops module (:mod:`rayd.torch._vector`,
:mod:`rayd.drjit._vector`), which provides, for per-row scalars ``x`` and per-row
3-vectors ``v``: ``dot(v, w)``, ``scale(x, v)`` (``x v``), ``where(mask, x, y)``,
``where3(mask, v, w)`` (a per-row mask choosing 3-vectors; ``w`` may be a number),
``const3(like, x, y, z)``, ``sqrt(x)``, ``clamp(x, lo, hi)`` (``lo``/``hi`` numbers
or arrays). This module imports no array library.
"""

from __future__ import annotations

import math
from typing import Any

STAND_IN_EDGE = ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0))  # a unit edge along x at the origin
STAND_IN_POINT = (0.5, 1.0, 0.0)  # off the stand-in edge
STAND_IN_RAY = ((0.5, 1.0, -1.0), (0.0, 0.0, 1.0))  # passes the stand-in edge at distance 1


def safe_div(ops: Any, num: Any, den: Any) -> Any:
    """``num / den``, 0 (with zero gradient, never NaN) where ``den = 0``."""
    ok = den != 0
    return ops.where(ok, num / ops.where(ok, den, 1.0), 0.0)


def norm(ops: Any, v: Any) -> Any:
    """``|v|`` with gradient 0 (not NaN) at ``v = 0``."""
    sq = ops.dot(v, v)
    ok = sq > 0
    return ops.where(ok, ops.sqrt(ops.where(ok, sq, 1.0)), 0.0)


def point_segment(ops: Any, p: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """``(edge_t, edge_point)`` of the point of ``[a, b]`` closest to ``p``."""
    ab = b - a
    t = ops.clamp(safe_div(ops, ops.dot(p - a, ab), ops.dot(ab, ab)), 0.0, 1.0)
    return t, a + ops.scale(t, ab)


def ray_segment(ops: Any, o: Any, d: Any, s0: Any, s1: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """``(s, t)`` minimising ``|o + s d - a - t (b - a)|`` for ``s in [s0, s1]``, ``t in [0, 1]``.

    ``d`` must be non-zero; ``s1`` may be ``inf``. Same branch logic as the engine.
    """
    e = b - a
    r = o - a
    dd = ops.dot(d, d)
    ee = ops.dot(e, e)
    de = ops.dot(d, e)
    c = ops.dot(d, r)
    f = ops.dot(e, r)
    den = dd * ee - de * de
    free = den > 1.0e-12 * dd * ee
    s_line = safe_div(ops, de * f - c * ee, den)
    s_proj = ops.clamp(safe_div(ops, -c, dd), s0, s1)  # closest s to the edge start a
    s = ops.where(free, ops.clamp(s_line, s0, s1), s_proj)
    t = safe_div(ops, de * s + f, ee)
    s_end = ops.clamp(safe_div(ops, de - c, dd), s0, s1)  # closest s to the edge end b
    s = ops.where(t < 0, s_proj, ops.where(t > 1, s_end, s))
    t = ops.where(ee > 0, ops.clamp(t, 0.0, 1.0), 0.0)
    return s, t


def stand_in_edge(ops: Any, found: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """The winners' endpoints ``a, b``, the stand-in edge's where not ``found``."""
    (a0, b0) = STAND_IN_EDGE
    return ops.where3(found, a, ops.const3(a, *a0)), ops.where3(found, b, ops.const3(b, *b0))


def point_fields(ops: Any, found: Any, p: Any, a: Any, b: Any) -> dict[str, Any]:
    """``distance``, ``edge_t``, ``edge_point`` of points ``p`` and their winning edges ``[a, b]``.

    ``found`` is the per-row mask of queries with a winner; ``a``, ``b`` must already
    be the stand-in edge elsewhere (:func:`stand_in_edge`). Misses: ``inf`` and zeros.
    """
    p = ops.where3(found, p, ops.const3(p, *STAND_IN_POINT))
    t, q = point_segment(ops, p, a, b)
    return {
        # At t = 1 the end vertex itself (not (p - a) - (b - a)): the edges of a vertex tie exactly
        # there, as in the search, so nearest_edges orders them by id.
        "distance": ops.where(found, norm(ops, ops.where3(t >= 1.0, p - b, (p - a) - ops.scale(t, b - a))), math.inf),
        "edge_t": ops.where(found, t, 0.0),
        "edge_point": ops.where3(found, q, 0.0),
    }


def ray_fields(ops: Any, found: Any, o: Any, d: Any, s0: Any, s1: Any, a: Any, b: Any) -> dict[str, Any]:
    """:func:`point_fields` for rays ``o + s d, s in [s0, s1]``, plus ``ray_t`` and ``ray_point``."""
    o = ops.where3(found, o, ops.const3(o, *STAND_IN_RAY[0]))
    d = ops.where3(found, d, ops.const3(d, *STAND_IN_RAY[1]))
    s, t = ray_segment(ops, o, d, ops.where(found, s0, 0.0), ops.where(found, s1, math.inf), a, b)
    ray_point = o + ops.scale(s, d)
    edge_point = a + ops.scale(t, b - a)
    return {
        "distance": ops.where(found, norm(ops, ray_point - edge_point), math.inf),
        "edge_t": ops.where(found, t, 0.0),
        "edge_point": ops.where3(found, edge_point, 0.0),
        "ray_t": ops.where(found, s, 0.0),
        "ray_point": ops.where3(found, ray_point, 0.0),
    }
