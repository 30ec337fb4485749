"""The closest point of a triangle to a point, as barycentric weights, written once over the frontend's ops.

Ericson 2004, "Real-Time Collision Detection", 5.1.5: the Voronoi region of the closest
point (three vertices, three edges, the face) is chosen with the engine's tests
(:func:`rayd.core.surface.regions`), then the region's formula gives the weights. Both
frontends evaluate it with their own differentiable ops (the region is held fixed); this
module imports no array library.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from rayd.core import surface as _surface


def region_weights(p: Any, a: Any, b: Any, c: Any, dot: Callable[[Any, Any], Any], div: Callable[[Any, Any], Any],
                   select: Callable[[Any, Any, Any], Any]) -> tuple[Any, Any, Any, Any, Any]:
    """``(w0, w1, w2, ab, ac)``: the weights of the closest points of triangles ``abc`` to ``p``, and two edges.

    Args:
        p, a, b, c: (N, 3) points and triangle corners in the frontend's 3-vector arrays.
        dot: row-wise dot product of two such arrays, (N,).
        div: a safe division, ``num / den`` where ``den > 0``, else 0.
        select: ``select(mask, x, y)``: ``x`` where ``mask`` else ``y`` (either may be a number).

    Returns:
        ``w0, w1, w2`` (N,) each: ``closest = w0 a + w1 b + w2 c``; a face of zero area
        (``den <= 0`` in the face region) gives vertex ``a``, as the engine does. ``ab =
        b - a`` and ``ac = c - a`` for the caller's sliver test.

    Gradients:
        Flow through ``p, a, b, c`` for the fixed region (the masks carry none).

    References:
        C. Ericson, Real-Time Collision Detection (2004), 5.1.5.
    """
    ab, ac, d, vs = _surface.voronoi(p, a, b, c, dot)
    r_a, r_b, r_ab, r_c, r_ac, r_bc, r_face = _surface.regions(d, vs)  # masks: no derivative
    t_ab, t_ac, t_bc, v, w, den = _surface.parameters(d, vs, div)
    degenerate = r_face & ~(den > 0)  # the engine returns vertex a there
    w0, w1, w2 = select(degenerate, 1.0, 1 - v - w), select(degenerate, 0.0, v), select(degenerate, 0.0, w)
    # the cascade's first region wins: applied last
    for mask, (x0, x1, x2) in ((r_bc, (0.0, 1 - t_bc, t_bc)), (r_ac, (1 - t_ac, 0.0, t_ac)), (r_c, (0.0, 0.0, 1.0)),
                               (r_ab, (1 - t_ab, t_ab, 0.0)), (r_b, (0.0, 1.0, 0.0)), (r_a, (1.0, 0.0, 0.0))):
        w0, w1, w2 = select(mask, x0, w0), select(mask, x1, w1), select(mask, x2, w2)
    return w0, w1, w2, ab, ac


def within_max_distance(fields: dict[str, Any], max_distance: float,
                        select: Callable[[Any, Any, float], Any]) -> dict[str, Any]:
    """``fields`` of a ``ClosestPoint`` / ``NearestEdge`` record with every result farther than
    ``max_distance`` turned into a miss (``distance = inf``, ids ``-1``, zeros elsewhere).

    The engine's searches start from ``max_distance`` widened by a float32 rounding allowance
    (:mod:`rayd.engine.radius`), so that a triangle or edge whose reported distance is
    ``<= max_distance`` is always found; this keeps the contract's other half: a reported
    distance never exceeds ``max_distance``. ``max_distance = inf`` returns ``fields``.

    Args:
        fields: the record's fields, each of shape ``(N, ...)`` (per query or per slot).
        max_distance: the query's bound (a float ``>= 0`` or ``inf``).
        select: the frontend's ``select(ok, value, fill)``: ``value`` where ``ok`` (the shape
            of ``fields["distance"]``, broadcast over trailing component dimensions), else ``fill``.
    """
    if math.isinf(max_distance):
        return fields
    ok = fields["distance"] <= max_distance
    return {name: select(ok, value, _miss(name)) for name, value in fields.items()}


def _miss(name: str) -> float:
    if name == "distance":
        return math.inf
    return -1 if name.endswith("_id") else 0
