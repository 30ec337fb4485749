"""Child keys of the 4-wide ray walk over edge nodes (``edge_wide_walk.py``, issue 11, 18th session).

A ray query (the segment ``o + s d``, ``s in [tmin, tmax]``) takes a child box whose growth by the search radius
the segment reaches (``nearest_edge_kernels._ray_box_reach``, the binary walk's test), in the order of the squared
distance from the segment to the box centre (the binary walk's order), and, with ``edge_wide_walk.RAY_KEY``
``"box"``, keeps a lower bound of its distance to the segment (the distance between the child's box and the
segment's own box, widened for rounding) that the walk checks against the shrunk radius before testing the child's
segments and when it pops it.
"""

import warp as wp

from rayd.engine.native import bits_float, load4, load4i
from rayd.engine.nearest_edge_kernels import _INF, _ray_box_reach, _ray_segment_dsq, segment_box  # noqa: F401
from rayd.engine.radius import magnitude

wp.set_module_options({"enable_backward": False})

@wp.func
def ray_key(lo: wp.vec3, hi: wp.vec3, o: wp.vec3, d: wp.vec3, s0: float, s1: float, r: float, box_key: int,
             seg_lo: wp.vec3, seg_hi: wp.vec3) -> wp.vec2:
    """A child's keys for a ray: ``(order, bound)``. ``order``: ``inf`` when the segment misses its box grown by
    ``r`` (or the box is empty), else the squared distance from the segment to the box centre (the binary walk's
    order). ``bound``: with ``box_key``, the squared distance from the segment's box ``[seg_lo, seg_hi]`` to the
    child's box, a lower bound of the segment's distance to it (re-checked against the shrunk radius); else 0."""
    if _ray_box_reach(o, d, s0, s1, lo, hi, r) < _INF:
        c = 0.5 * (lo + hi)
        lb = float(0.0)
        if box_key != 0:
            g = wp.max(wp.max(lo - seg_hi, seg_lo - hi), wp.vec3(0.0))
            lb = g[0] * g[0] + g[1] * g[1] + g[2] * g[2]
            if not (lb >= 0.0):  # NaN (a box with a non-finite plane): no bound
                lb = 0.0
        return wp.vec2(_ray_segment_dsq(o, d, s0, s1, c, c), lb)
    return wp.vec2(_INF, _INF)


@wp.func
def sort2p(da: float, ra: int, la: float, db: float, rb: int, lb: float) -> tuple[float, int, float, float, int, float]:
    """``wide_walk._sort2`` carrying a second key."""
    if db < da:
        return db, rb, lb, da, ra, la
    return da, ra, la, db, rb, lb


@wp.func
def ray_keys_full(data: wp.array(dtype=wp.vec4), links: wp.array(dtype=wp.vec4i), node: int, o: wp.vec3,
                   d: wp.vec3, s0: float, s1: float, r: float, box_key: int, seg_lo: wp.vec3,
                   seg_hi: wp.vec3) -> tuple[wp.vec4, wp.vec4, wp.vec4i]:
    """ray_key of the four children of full wide node ``node`` (order keys, bounds), and their refs."""
    b = 8 * node
    lx = load4(data, b)
    hx = load4(data, b + 1)
    ly = load4(data, b + 2)
    hy = load4(data, b + 3)
    lz = load4(data, b + 4)
    hz = load4(data, b + 5)
    refs = load4i(links, b + 6)
    key = wp.vec4(_INF)
    lbs = wp.vec4(_INF)
    for j in range(4):
        if lx[j] <= hx[j]:
            kk = ray_key(wp.vec3(lx[j], ly[j], lz[j]), wp.vec3(hx[j], hy[j], hz[j]), o, d, s0, s1, r, box_key,
                          seg_lo, seg_hi)
            key[j] = kk[0]
            lbs[j] = kk[1]
    return key, lbs, refs


@wp.func
def ray_keys_compressed(q: wp.array(dtype=wp.vec4i), node: int, o: wp.vec3, d: wp.vec3, s0: float, s1: float,
                         r: float, box_key: int, seg_lo: wp.vec3, seg_hi: wp.vec3) -> tuple[wp.vec4, wp.vec4, wp.vec4i]:
    """The same for a compressed node (decoded boxes hold the true ones; a node flagged "open all" opens
    every non-empty child, key 0)."""
    r0 = load4i(q, 4 * node)
    r1 = load4i(q, 4 * node + 1)
    r2 = load4i(q, 4 * node + 2)
    refs = load4i(q, 4 * node + 3)
    ex = r0[3]
    org = wp.vec3(bits_float(r0[0]), bits_float(r0[1]), bits_float(r0[2]))
    s = wp.vec3(bits_float((ex & 255) << 23), bits_float(((ex >> 8) & 255) << 23), bits_float(((ex >> 16) & 255) << 23))
    open_all = (ex & (1 << 24)) != 0
    key = wp.vec4(_INF)
    lbs = wp.vec4(_INF)
    for j in range(4):
        sh = 8 * j
        qlx = (r1[0] >> sh) & 255
        qhx = (r1[1] >> sh) & 255
        if qlx <= qhx:
            if open_all:
                key[j] = 0.0
                lbs[j] = 0.0
            else:
                lo = org + wp.cw_mul(wp.vec3(float(qlx), float((r1[2] >> sh) & 255), float((r2[0] >> sh) & 255)), s)
                hi = org + wp.cw_mul(wp.vec3(float(qhx), float((r1[3] >> sh) & 255), float((r2[1] >> sh) & 255)), s)
                kk = ray_key(lo, hi, o, d, s0, s1, r, box_key, seg_lo, seg_hi)
                key[j] = kk[0]
                lbs[j] = kk[1]
    return key, lbs, refs


@wp.func
def box_magnitude(root_box: wp.array(dtype=wp.vec3)) -> float:
    """The largest coordinate magnitude of the root box (0 when empty): that of the binary root's two child
    boxes (``nearest_edge_kernels._root_magnitude``; the union's extreme planes are theirs)."""
    lo = root_box[0]
    hi = root_box[1]
    if lo[0] <= hi[0]:
        return wp.max(magnitude(lo), magnitude(hi))
    return 0.0
