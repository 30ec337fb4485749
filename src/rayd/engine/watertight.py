"""Watertight ray/triangle test (Woop, Benthin, Wald 2013, JCGT 2(1)) as a Warp function."""

from __future__ import annotations

import warp as wp

from rayd.engine.native import mul_rn

INF = wp.constant(float("inf"))

#: Relative ``t`` tolerance under which two hits on faces that share a vertex are one hit
#: (the all-hits merge rule, :mod:`rayd.engine.hit_list`).
MERGE_TOLERANCE = 1.0e-5

#: A candidate whose float64 crossing lies farther than this (in units of the largest search-frame
#: coordinate of the ray's origin and the face) outside the face is no hit (:func:`confirmed_face_t`).
OFF_FACE = wp.constant(2.0**-20)


@wp.func
def _inf_norm(x: wp.vec3d) -> wp.float64:
    return wp.max(wp.max(wp.abs(x[0]), wp.abs(x[1])), wp.abs(x[2]))


@wp.func
def confirmed_t(o64: wp.vec3d, d64: wp.vec3d, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> float:
    """The ``t`` a candidate hit is ranked and bounded by, or ``+inf`` for a triangle without interior.

    Called only for candidates :func:`watertight_t` accepted, so its cost stays out of
    the common path. ``t`` is the float64 solve of ``o + t d = (1-u-v) a + u b + v c``
    (Moeller & Trumbore 1997) from the ray as given (not moved near the scene by the
    traversal) and the float32 corners, rounded to float32: the same formula and
    inputs as the evaluation of the winner (``evaluate.py``, the frontends), so the
    search applies ``tmin < t < tmax`` to the value the user is given. A degenerate triangle (``(b - a) x (c - a) = 0`` in float64: collinear or
    coincident vertices) has no interior and is never hit; neither is a triangle the
    ray lies in the plane of (zero determinant: no unique ``t``). The watertight sheared
    test cannot see either: its float32-rounded projections of such a triangle need not
    be collinear.
    """
    a64 = wp.vec3d(wp.float64(a[0]), wp.float64(a[1]), wp.float64(a[2]))
    e1 = wp.vec3d(wp.float64(b[0]), wp.float64(b[1]), wp.float64(b[2])) - a64
    e2 = wp.vec3d(wp.float64(c[0]), wp.float64(c[1]), wp.float64(c[2])) - a64
    zero = wp.float64(0.0)
    n = wp.cross(e1, e2)
    if n[0] == zero and n[1] == zero and n[2] == zero:
        return INF
    pvec = wp.cross(d64, e2)
    det = wp.dot(e1, pvec)
    if det == zero:
        return INF
    qvec = wp.cross(o64 - a64, e1)
    return float(wp.dot(e2, qvec) / det)


@wp.func
def confirmed_face_t(o64: wp.vec3d, d64: wp.vec3d, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> float:
    """The ``t`` a candidate hit is ranked and bounded by, or ``+inf`` for a triangle without interior.

    Called only for candidates :func:`watertight_t` accepted, so its cost stays out of
    the common path. ``t`` is the float64 solve of ``o + t d = (1-u-v) a + u b + v c``
    (Moeller & Trumbore 1997) from the ray as given (not moved near the scene by the
    traversal) and the float32 corners, rounded to float32: the same formula and
    inputs as the evaluation of the winner (``evaluate.py``, the frontends), so the
    search applies ``tmin < t < tmax`` to the value the user is given. A degenerate triangle (``(b - a) x (c - a) = 0`` in float64: collinear or
    coincident vertices) has no interior and is never hit; neither is a triangle the
    ray lies in the plane of (zero determinant: no unique ``t``). The watertight sheared
    test cannot see either: its float32-rounded projections of such a triangle need not
    be collinear.
    """
    a64 = wp.vec3d(wp.float64(a[0]), wp.float64(a[1]), wp.float64(a[2]))
    e1 = wp.vec3d(wp.float64(b[0]), wp.float64(b[1]), wp.float64(b[2])) - a64
    e2 = wp.vec3d(wp.float64(c[0]), wp.float64(c[1]), wp.float64(c[2])) - a64
    zero = wp.float64(0.0)
    n = wp.cross(e1, e2)
    if n[0] == zero and n[1] == zero and n[2] == zero:
        return INF
    pvec = wp.cross(d64, e2)
    det = wp.dot(e1, pvec)
    if det == zero:
        return INF
    s = o64 - a64
    qvec = wp.cross(s, e1)
    u = wp.dot(s, pvec) / det
    v = wp.dot(d64, qvec) / det
    w = wp.float64(1.0) - u - v
    if u < zero or v < zero or w < zero:
        # The crossing lies outside the face: keep it only within float32 rounding of the
        # search frame (in world units, along the face), else the sheared test's sign was
        # rounding of a ray (nearly) in the face's plane and t is meaningless.
        b64 = a64 + e1
        c64 = a64 + e2
        big = wp.max(wp.max(wp.max(wp.abs(o64[0]), wp.abs(o64[1])), wp.abs(o64[2])),
                     wp.max(wp.max(_inf_norm(a64), _inf_norm(b64)), _inf_norm(c64)))
        tol = wp.float64(OFF_FACE) * big
        area2 = wp.length(n)
        gap = wp.float64(0.0)
        if u < zero:
            gap = wp.max(gap, -u * area2 / wp.length(c64 - a64))
        if v < zero:
            gap = wp.max(gap, -v * area2 / wp.length(e1))
        if w < zero:
            gap = wp.max(gap, -w * area2 / wp.length(c64 - b64))
        if gap > tol:
            return INF
    return float(wp.dot(e2, qvec) / det)


@wp.func
def safe_direction(d: wp.vec3) -> wp.vec3:
    """``d`` with exact zeros replaced by ``2^-126`` (the least normal float32), for slab tests.

    Its reciprocal (``8.5e37``) stays finite, and the slab tests follow a ray within
    ``2^-126 / |d|_max`` of ``d``'s own direction: the old ``1e-30`` tilted a ray with
    ``|d| = 1e-30`` by 45 degrees, and the boxes it truly crosses were missed. A product
    ``(lo - o) / d`` that overflows is an infinite slab end, as it should be.
    """
    out = d
    for k in range(3):
        if out[k] == 0.0:
            out[k] = 1.1754944e-38
    return out


@wp.func
def ray_shear(d: wp.vec3) -> tuple[wp.vec3i, wp.vec3]:
    """The per-ray part of :func:`sheared_t`: axis permutation ``(kx, ky, kz)`` and shear ``(sx, sy, sz)``.

    ``kz`` is the dominant axis of ``d``; ``kx``, ``ky`` follow it cyclically, swapped
    when ``d[kz] < 0`` to keep the winding (Woop, Benthin, Wald 2013, sec. 3).
    """
    kz = int(0)
    if wp.abs(d[1]) > wp.abs(d[kz]):
        kz = 1
    if wp.abs(d[2]) > wp.abs(d[kz]):
        kz = 2
    kx = (kz + 1) % 3
    ky = (kx + 1) % 3
    if d[kz] < 0.0:
        swap = kx
        kx = ky
        ky = swap
    return wp.vec3i(kx, ky, kz), wp.vec3(d[kx] / d[kz], d[ky] / d[kz], 1.0 / d[kz])


@wp.func
def _sheared(p: wp.vec3, k: wp.vec3i, sh: wp.vec3) -> wp.vec2:
    """``p`` (relative to the origin) projected along the ray: the same rounding for every vertex."""
    return wp.vec2(p[k[0]] - mul_rn(sh[0], p[k[2]]), p[k[1]] - mul_rn(sh[1], p[k[2]]))


@wp.func
def _sheared_triangle(o: wp.vec3, d: wp.vec3, a: wp.vec3, b: wp.vec3,
                      c: wp.vec3) -> tuple[wp.vec2, wp.vec2, wp.vec2, wp.vec3]:
    """The corners of (a, b, c) in the ray's sheared frame (:func:`ray_shear`, :func:`_sheared`: the
    rounding of :func:`sheared_t`, no FMA on CUDA, so every query decides a ray through an edge or
    vertex alike) and their scaled depths ``sz * (corner - o)[kz]``."""
    k, sh = ray_shear(d)
    pa = a - o
    pb = b - o
    pc = c - o
    z = wp.vec3(sh[2] * pa[k[2]], sh[2] * pb[k[2]], sh[2] * pc[k[2]])
    return _sheared(pa, k, sh), _sheared(pb, k, sh), _sheared(pc, k, sh), z


@wp.func
def _exact_edges(qa: wp.vec2, qb: wp.vec2, qc: wp.vec2) -> wp.vec3d:
    """Edge functions ``(u, v, w)`` of b -> c, c -> a, a -> b at the origin, in float64: the float32
    products are exact there, so the difference is rounded once and a shared edge gets exactly
    opposite values in its two triangles (Woop, Benthin, Wald 2013, sec. 4)."""
    return wp.vec3d(wp.float64(qc[0]) * wp.float64(qb[1]) - wp.float64(qc[1]) * wp.float64(qb[0]),
                    wp.float64(qa[0]) * wp.float64(qc[1]) - wp.float64(qa[1]) * wp.float64(qc[0]),
                    wp.float64(qb[0]) * wp.float64(qa[1]) - wp.float64(qb[1]) * wp.float64(qa[0]))


@wp.func
def watertight_t(o: wp.vec3, d: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> float:
    """Ray parameter ``t`` of the hit of ``o + t d`` with triangle (a, b, c), or ``+inf``.

    Both faces count. The edge functions are evaluated in a ray-aligned sheared frame,
    in float64 from float32 inputs (exact products), so a ray through a shared edge or
    vertex hits at least one of the adjacent triangles (no leaks) on every device.
    ``t`` may be negative; the caller applies its interval.
    """
    qa, qb, qc, z = _sheared_triangle(o, d, a, b, c)
    e = _exact_edges(qa, qb, qc)
    u = e[0]
    v = e[1]
    w = e[2]
    zero = wp.float64(0.0)
    if (u < zero or v < zero or w < zero) and (u > zero or v > zero or w > zero):
        return INF
    det = u + v + w
    if det == zero:
        return INF
    big_t = u * wp.float64(z[0]) + v * wp.float64(z[1]) + w * wp.float64(z[2])
    return float(big_t / det)


@wp.func
def sheared_t(o: wp.vec3, k: wp.vec3i, sh: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> float:
    """:func:`watertight_t` with the ray's permutation and shear precomputed (:func:`ray_shear`).

    The edge functions are evaluated in float32 from products that are never fused
    into an FMA (:func:`rayd.engine.native.mul_rn`), so a shared edge gets exactly
    opposite values in its two triangles; where one is exactly zero (or one overflowed),
    all three are evaluated again in float64 (exact products), as Woop et al. (2013, sec. 4) do: a
    nonzero float32 value has the sign of the exact one, so the two precisions agree
    on every sign and a ray through a shared edge or vertex hits at least one of the
    adjacent triangles (no leaks). ``t`` (a candidate, confirmed by the caller with
    :func:`confirmed_t`) is computed in float64 for triangles that pass.
    """
    pa = a - o
    pb = b - o
    pc = c - o
    qa = _sheared(pa, k, sh)
    qb = _sheared(pb, k, sh)
    qc = _sheared(pc, k, sh)
    u32 = mul_rn(qc[0], qb[1]) - mul_rn(qc[1], qb[0])
    v32 = mul_rn(qa[0], qc[1]) - mul_rn(qa[1], qc[0])
    w32 = mul_rn(qb[0], qa[1]) - mul_rn(qb[1], qa[0])
    if (u32 < 0.0 or v32 < 0.0 or w32 < 0.0) and (u32 > 0.0 or v32 > 0.0 or w32 > 0.0):
        return INF
    u = wp.float64(u32)
    v = wp.float64(v32)
    w = wp.float64(w32)
    zero = wp.float64(0.0)
    # Also where float32 overflowed (coordinates beyond about 1.8e19 relative to the origin: a
    # product is inf and a difference of two NaN): the float64 products are exact there too.
    if u32 == 0.0 or v32 == 0.0 or w32 == 0.0 or not wp.isfinite(u32 + v32 + w32):
        u = wp.float64(qc[0]) * wp.float64(qb[1]) - wp.float64(qc[1]) * wp.float64(qb[0])
        v = wp.float64(qa[0]) * wp.float64(qc[1]) - wp.float64(qa[1]) * wp.float64(qc[0])
        w = wp.float64(qb[0]) * wp.float64(qa[1]) - wp.float64(qb[1]) * wp.float64(qa[0])
        if (u < zero or v < zero or w < zero) and (u > zero or v > zero or w > zero):
            return INF
    det = u + v + w
    if det == zero:
        return INF
    sz = sh[2]
    big_t = u * wp.float64(sz * pa[k[2]]) + v * wp.float64(sz * pb[k[2]]) + w * wp.float64(sz * pc[k[2]])
    return float(big_t / det)


@wp.func
def _tie(px: float, py: float, qx: float, qy: float) -> int:
    """Sign of the edge function of ``p -> q`` at the origin displaced to ``(e, e^2)``, ``e -> 0+``.

    Where the edge passes exactly through the origin (edge function 0), the displaced origin
    lies on the side ``sign(qy - py)``, else (a horizontal edge) ``sign(px - qx)``: exact
    comparisons of the projected corners, so the reversed edge of the neighbouring face gets
    the opposite sign (simulation of simplicity: Edelsbrunner, Muecke 1990, ACM TOG 9(1)).
    """
    if qy > py:
        return 1
    if qy < py:
        return -1
    if px > qx:
        return 1
    if px < qx:
        return -1
    return 0


@wp.func
def _edge_sign(value: wp.float64) -> int:
    if value > wp.float64(0.0):
        return 1
    if value < wp.float64(0.0):
        return -1
    return 0


@wp.func
def _near_edge(fn: wp.float64, px: float, py: float, qx: float, qy: float, tol: wp.float64) -> bool:
    """True where the edge ``p -> q`` (edge function ``fn``) passes within ``tol`` of the origin (2D)."""
    ex = wp.float64(qx) - wp.float64(px)
    ey = wp.float64(qy) - wp.float64(py)
    return fn * fn <= tol * tol * (ex * ex + ey * ey)


@wp.func
def inner_hit(o: wp.vec3, d: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3, tol: float) -> int:
    """4 (the *inner* flag of :func:`watertight_hit`'s side) where the ray ``o + t d`` passes farther than
    ``tol`` (units of ``o``, in the plane across the ray) from every edge of the triangle, else 0."""
    qa, qb, qc, z = _sheared_triangle(o, d, a, b, c)  # (x and y may be swapped: the same distances)
    e = _exact_edges(qa, qb, qc)
    u = e[0]
    v = e[1]
    w = e[2]
    ax = qa[0]
    ay = qa[1]
    bx = qb[0]
    by = qb[1]
    cx = qc[0]
    cy = qc[1]
    t = wp.float64(tol)
    if _near_edge(u, bx, by, cx, cy, t) or _near_edge(v, cx, cy, ax, ay, t) or _near_edge(w, ax, ay, bx, by, t):
        return 0
    return 4


@wp.func
def watertight_hit(o: wp.vec3, d: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3, shift: float, tmin: float,
                   reach: float) -> tuple[float, int]:
    """:func:`watertight_t` and the hit's *side*: how the face covers the ray, for counting crossings.

    Returns ``(t + shift, side)`` (``shift``: the caller's offset of ``o`` along the ray);
    ``side`` is 0 for a miss and where ``t + shift`` lies outside ``(tmin, reach)``, else
    packs ``16 cover + 8 corner + 4 inner + facing``: ``facing`` is 1 where the face's
    projected winding is positive (``det > 0``), 2 where negative; ``cover`` is ``+-1``
    (the sign of ``det``) where the face contains the ray's origin displaced by an
    infinitesimal ``(e, e^2)`` in the sheared frame, else 0; ``corner`` is 1 where the ray
    passes exactly through a corner of the face (two edge functions are 0); ``inner`` (0
    here) is set by the hit list where the hit merges with another (:func:`inner_hit`).
    The displaced origin lies in exactly one of two faces that share an edge through the
    ray (:func:`_tie`), so summed over the faces of a shared edge or vertex, ``cover`` is
    the signed number of sheets the displaced ray crosses there: ``+-1`` where the ray
    passes through a consistently oriented surface, 0 where it only touches it
    (:func:`crossings`).
    """
    qa, qb, qc, z = _sheared_triangle(o, d, a, b, c)
    e = _exact_edges(qa, qb, qc)  # (as watertight_t: exact signs, opposite on a shared edge)
    u = e[0]
    v = e[1]
    w = e[2]
    ax = qa[0]
    ay = qa[1]
    bx = qb[0]
    by = qb[1]
    cx = qc[0]
    cy = qc[1]
    zero = wp.float64(0.0)
    if (u < zero or v < zero or w < zero) and (u > zero or v > zero or w > zero):
        return INF, 0
    det = u + v + w
    if det == zero:
        return INF, 0
    big_t = u * wp.float64(z[0]) + v * wp.float64(z[1]) + w * wp.float64(z[2])
    t = float(big_t / det) + shift
    if not (t > tmin and t < reach):  # (the caller's own test: not offered)
        return t, 0
    # u, v, w are the edge functions of b -> c, c -> a, a -> b; an exact 0 is decided by the displaced origin.
    su = _edge_sign(u)
    if su == 0:
        su = _tie(bx, by, cx, cy)
    sv = _edge_sign(v)
    if sv == 0:
        sv = _tie(cx, cy, ax, ay)
    sw = _edge_sign(w)
    if sw == 0:
        sw = _tie(ax, ay, bx, by)
    facing = int(1)
    sign = int(1)
    if det < zero:
        facing = 2
        sign = -1
    cover = int(0)
    if su == sign and sv == sign and sw == sign:
        cover = sign
    zeros = int(0)
    if u == zero:
        zeros += 1
    if v == zero:
        zeros += 1
    if w == zero:
        zeros += 1
    corner = int(0)
    if zeros >= 2:
        corner = 8
    return t, 16 * cover + corner + facing


@wp.func
def merge_sides(a: int, b: int) -> int:
    """The side of two hits counted as one (:func:`watertight_hit`): covers add, flags join."""
    fa = a & 15
    fb = b & 15
    return (a - fa) + (b - fb) + (fa | fb)


@wp.func
def crossings(side: int) -> int:
    """The crossings of a merged group of hits of one side (:func:`watertight_hit`, :func:`merge_sides`).

    1 for a group with an *inner* hit (one face crossed away from its edges, flagged by the
    hit list where hits merge: hits merged by their ``t`` alone count once, as listed);
    else ``|cover|`` where it is not 0; where it is 0, 0 for a group that faces both ways
    (the surface folds back over the ray: a touch) or that the ray meets exactly at a
    corner (the displaced ray misses it: a touch, or a part of a vertex's faces that a
    grazing face's ``t`` split off), and 1 for one that faces one way and is met along an
    edge (a lone face, or faces of an open surface, whose edge the ray only grazes: listed
    as a hit, counted as one).
    """
    flags = side & 15
    cover = (side - flags) / 16
    if (flags & 4) != 0:
        return 1
    if cover != 0:
        return wp.abs(cover)
    if (flags & 3) == 3 or (flags & 8) != 0:
        return 0
    return 1
