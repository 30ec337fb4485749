"""The exact point-triangle distance of the closest-point queries (one place for both walks).

References:
    Ericson 2004, "Real-Time Collision Detection", Morgan Kaufmann, sec. 5.1.5
    (closest point on a triangle to a point).
"""

from __future__ import annotations

import warp as wp

wp.set_module_options({"enable_backward": False})


#: A triangle is degenerate (a segment or a point) when ``|ab x ac|^2 <= SLIVER |ab|^2 |ac|^2``
#: (the sine of its angle at ``a`` below 1e-6): its closest point is then taken on its three
#: sides, because the face region's barycentric solve divides by rounding noise there
#: (with FMA contraction on CUDA it put the point anywhere on the supporting line).
SLIVER = 1.0e-12
_SLIVER = wp.constant(SLIVER)


@wp.func
def _on_segment(p: wp.vec3, a: wp.vec3, b: wp.vec3) -> wp.vec3:
    """The point of segment ``ab`` closest to ``p`` (clamped projection; ``a`` if ``a == b``)."""
    ab = b - a
    den = wp.dot(ab, ab)
    if den > 0.0:
        return a + wp.clamp(wp.dot(p - a, ab) / den, 0.0, 1.0) * ab
    return a


@wp.func
def _on_sides(p: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> wp.vec3:
    """The closest point to ``p`` on the sides ab, ac, bc of a degenerate triangle (first on ties)."""
    best = _on_segment(p, a, b)
    q = best - p
    best_dsq = wp.dot(q, q)
    x = _on_segment(p, a, c)
    q = x - p
    if wp.dot(q, q) < best_dsq:
        best = x
        best_dsq = wp.dot(q, q)
    x = _on_segment(p, b, c)
    q = x - p
    if wp.dot(q, q) < best_dsq:
        best = x
    return best


@wp.func
def closest_on_triangle(p: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> wp.vec3:
    """The point of triangle ``abc`` closest to ``p`` (Ericson 2004, 5.1.5, by Voronoi regions).

    Degenerate triangles (see :data:`SLIVER`) are measured on their three sides.
    """
    ab = b - a
    ac = c - a
    n = wp.cross(ab, ac)
    if wp.dot(n, n) <= _SLIVER * wp.dot(ab, ab) * wp.dot(ac, ac):
        return _on_sides(p, a, b, c)
    ap = p - a
    d1 = wp.dot(ab, ap)
    d2 = wp.dot(ac, ap)
    if d1 <= 0.0 and d2 <= 0.0:
        return a
    bp = p - b
    d3 = wp.dot(ab, bp)
    d4 = wp.dot(ac, bp)
    if d3 >= 0.0 and d4 <= d3:
        return b
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        den = d1 - d3
        if den > 0.0:
            return a + (d1 / den) * ab
        return a
    cp = p - c
    d5 = wp.dot(ab, cp)
    d6 = wp.dot(ac, cp)
    if d6 >= 0.0 and d5 <= d6:
        return c
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        den = d2 - d6
        if den > 0.0:
            return a + (d2 / den) * ac
        return a
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        den = (d4 - d3) + (d5 - d6)
        if den > 0.0:
            return b + ((d4 - d3) / den) * (c - b)
        return b
    den = va + vb + vc
    if den > 0.0:
        v = vb / den
        w = vc / den
        return a + v * ab + w * ac
    return a  # degenerate (zero-area) triangle that no edge region claimed
