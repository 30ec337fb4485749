"""The point / ray / top-k nearest-edge walks of the 4-wide edge nodes (``edge_wide.py``, ``edge_wide_q.py``).

One skeleton for the three query kinds (specialised at code generation with ``wp.static``), as the binary
walk of ``nearest_edge_kernels.py``, which only trees without a wide copy use (the CPU default).
At a wide node the four box distances are computed and sorted (five comparators); leaf children
within the radius are tested nearest first (the radius shrinks), then the inner children still
within it are taken nearest first (the nearest next, the others pushed, farthest first, with their
keys, skipped when popped if the radius has shrunk below them). Boxes open within the relative
``2^-10`` of the binary walk (``nearest_edge_kernels.py``), whose segment distance and tie rule
(smaller id) this walk shares, so both return the same edges (tested). Over compressed nodes the
decoded boxes hold the true ones; with quantised segment boxes a segment whose box lies beyond the
radius is skipped unread (it could not have shrunk the radius).

References:
    Ylitie, Karras, Laine 2017, "Efficient Incoherent Ray Traversal on GPUs Through
    Compressed Wide BVHs", HPG 2017.
"""

import os

import warp as wp

from rayd.engine.edge_leaf_slab import slab_skips
from rayd.engine.edge_segment import load_segment, point_segment_dsq_within
from rayd.engine.edge_wide_ray import box_magnitude, ray_keys_compressed, ray_keys_full, segment_box, sort2p
from rayd.engine.native import bits_float, load4, load4i
from rayd.engine.radius import magnitude, widened_radius_sq
from rayd.engine.nearest_edge_kernels import (
    _INF,
    _NO_ID,
    _OPEN,
    _OPEN_R,
    RAY,
    TOPK,
    _better,
    _bounds_ok,
    _heap_f,
    _heap_i,
    _in_range,
    _point_segment_dsq,
    _ray_segment_dsq,
)
from rayd.engine.wide_nodes import STACK
from rayd.engine.wide_walk import _sort2

wp.set_module_options({"enable_backward": False})

_wstack_i = wp.types.vector(length=STACK, dtype=wp.int32)
_wstack_f = wp.types.vector(length=STACK, dtype=wp.float32)

#: Seeded point searches (opt-in, ``RAYD_EDGE_SEED``; read at each search): over Morton-sorted queries,
#: every ``SEED_STRIDE``-th query is answered first (one launch), then the others start from its edge's
#: distance (a second launch); 0: off (one launch, no seed). The answers are the same either way.
SEED_STRIDE = int(os.environ.get("RAYD_EDGE_SEED", "0") or 0)
#: Ray searches of a tree with a wide copy walk it (True, ``RAYD_EDGE_WIDE_RAYS=1``, the default since the
#: 18th session: then no query reads the binary boxes) or the binary tree (False, the walk of before; after a
#: wide-tree refit it first pays a binary climb, ``EdgeBvh.binary_boxes``). Read at each search; same answers.
WIDE_RAYS = os.environ.get("RAYD_EDGE_WIDE_RAYS", "1").strip() != "0"
#: Pruning of the wide ray walk (read when a kernel is generated; ``RAYD_EDGE_RAY_KEY``). Children are taken in
#: the order of the squared distance from the ray segment to their box centres (the binary walk's order) either
#: way. ``"center"``: a child reached by the segment grown by the radius at its parent's visit is entered, a
#: popped node always (the binary walk's rule). ``"box"``: each child also keeps the squared distance between
#: its box and the segment's own (widened) box, a lower bound of its distance to the segment, checked against
#: the shrunk radius before its segments are tested and when it is popped, as the point walk does (the default:
#: CPU counts, cpu-size ``ploc+q:8``, rays of 2 % of the diagonal: terrain 634 -> 217 segment tests a ray, sphere
#: 1,342 -> 250; half-lines 714 -> 583 / 627 -> 527; the same edges).
RAY_KEY = os.environ.get("RAYD_EDGE_RAY_KEY", "box").strip().lower()
#: ``cuda_max_registers`` of the wide ray kernels (``None``: the tree's, ``edge_wide.WIDE_MAX_REGISTERS``, 64; 0: the
#: compiler's choice). The ray walk holds more values than the point walk (direction, interval, segment box, four
#: bounds); ``benchmarks/edge_ray_ab.py`` times ``wide r0`` (no cap) beside it. Read at each search.
RAY_MAX_REGISTERS: int | None = None


@wp.kernel
def _edge_slot_kernel(slot_edge: wp.array(dtype=wp.int32), edge_slot: wp.array(dtype=wp.int32)):
    """``edge_slot[slot_edge[s]] = s`` (the slot of each edge)."""
    s = wp.tid()
    edge_slot[slot_edge[s]] = s


@wp.func
def _keys_full(data: wp.array(dtype=wp.vec4), links: wp.array(dtype=wp.vec4i), node: int,
               p: wp.vec3) -> tuple[wp.vec4, wp.vec4i]:
    """Squared distances from ``p`` to the four children's boxes of wide node ``node`` (inf: empty), refs."""
    b = 8 * node
    lx = load4(data, b)
    hx = load4(data, b + 1)
    ly = load4(data, b + 2)
    hy = load4(data, b + 3)
    lz = load4(data, b + 4)
    hz = load4(data, b + 5)
    refs = load4i(links, b + 6)
    key = wp.vec4(_INF)
    for j in range(4):
        if lx[j] <= hx[j]:
            dx = wp.max(wp.max(lx[j] - p[0], 0.0), p[0] - hx[j])
            dy = wp.max(wp.max(ly[j] - p[1], 0.0), p[1] - hy[j])
            dz = wp.max(wp.max(lz[j] - p[2], 0.0), p[2] - hz[j])
            key[j] = dx * dx + dy * dy + dz * dz
    return key, refs


@wp.func
def _keys_compressed(q: wp.array(dtype=wp.vec4i), node: int,
                     p: wp.vec3) -> tuple[wp.vec4, wp.vec4i, wp.vec3, wp.vec3]:
    """The same for a compressed node (``edge_wide_q.py``): decoded boxes hold the true ones; also the
    node's grid (origin, scales), on which its leaves' segment boxes are quantised."""
    r0 = load4i(q, 4 * node)
    r1 = load4i(q, 4 * node + 1)
    r2 = load4i(q, 4 * node + 2)
    refs = load4i(q, 4 * node + 3)
    ex = r0[3]
    o = wp.vec3(bits_float(r0[0]), bits_float(r0[1]), bits_float(r0[2]))
    s = wp.vec3(bits_float((ex & 255) << 23), bits_float(((ex >> 8) & 255) << 23), bits_float(((ex >> 16) & 255) << 23))
    open_all = (ex & (1 << 24)) != 0
    key = wp.vec4(_INF)
    for j in range(4):
        sh = 8 * j
        qlx = (r1[0] >> sh) & 255
        qhx = (r1[1] >> sh) & 255
        if qlx <= qhx:
            if open_all:
                key[j] = 0.0
            else:
                lo = o + wp.cw_mul(wp.vec3(float(qlx), float((r1[2] >> sh) & 255), float((r2[0] >> sh) & 255)), s)
                hi = o + wp.cw_mul(wp.vec3(float(qhx), float((r1[3] >> sh) & 255), float((r2[1] >> sh) & 255)), s)
                d = wp.max(wp.max(lo - p, wp.vec3(0.0)), p - hi)
                key[j] = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    return key, refs, o, s


@wp.func
def _seg_box_dsq(w: wp.vec2i, o: wp.vec3, s: wp.vec3, p: wp.vec3) -> float:
    """Squared distance from ``p`` to a segment's box quantised on its node's grid (inf: masked out;
    0: a box off the grid, always tested)."""
    if (w[1] & 65536) != 0:
        return 0.0
    a = w[0]
    lo = o + wp.cw_mul(wp.vec3(float(a & 255), float((a >> 16) & 255), float(w[1] & 255)), s)
    hi = o + wp.cw_mul(wp.vec3(float((a >> 8) & 255), float((a >> 24) & 255), float((w[1] >> 8) & 255)), s)
    if lo[0] > hi[0]:
        return _INF
    d = wp.max(wp.max(lo - p, wp.vec3(0.0)), p - hi)
    return d[0] * d[0] + d[1] * d[1] + d[2] * d[2]


def _make_wide_kernel(kind: int, counting: bool, max_registers: int, compressed: bool, seg_boxes: bool,
                      seeded: bool = False, leaf_slab: int = 0, ray_box_key: bool = False, seg_test: str = "exact",
                      seg_load: str = "plain"):
    """The wide walk for ``POINT``, ``RAY`` or ``TOPK`` queries over full (``data``, ``links``) or compressed
    (``links`` = the rows ``q`` of ``edge_wide_q.py``) nodes, the latter optionally with the leaf
    segments' quantised boxes (``segq``, tested before each segment); other arguments as the binary
    search's. ``counts`` then holds the segments tested exactly. ``seeded`` (``POINT`` over sorted
    queries, :data:`SEED_STRIDE`): ``phase`` 1 answers every ``stride``-th query in sorted order; phase 2
    the others, each starting with the radius and answer of the better of the edges of its group's first
    query and of the next group's (real unmasked segments, so the least (distance, id) over all edges
    is unchanged). ``leaf_slab``: a leaf child within the radius is skipped when its oriented slab
    (``slab[first]``, :mod:`rayd.engine.edge_leaf_slab`) lies beyond it: 1, tested just before its segments
    (with the radius then); 2, the records of all the node's leaf children read and tested at once, with the
    radius at the node's visit (independent loads in flight together; ``edge_leaf_slab.AHEAD``). ``RAY``
    reads ``q1`` (directions), ``tmin``, ``tmax`` and ``root_box`` (for the radius' rounding margin); it takes
    neither segment boxes, seeds nor slabs (point tests), which the other kinds take instead. ``seg_test`` /
    ``seg_load``: how point distances are computed and segments read (``edge_segment.SEG_TEST`` / ``SEG_LOAD``;
    the same answers either way)."""
    out_type = wp.array2d(dtype=wp.int32) if kind == TOPK else wp.array(dtype=wp.int32)
    seg_pruned = kind != RAY and seg_test == "pruned"
    seg_v2 = seg_load == "v2"
    box_key = int(kind == RAY and ray_box_key)  # rays keyed by a distance bound: pruned as points are

    def search(
        data: wp.array(dtype=wp.vec4),
        links: wp.array(dtype=wp.vec4i),
        num_nodes: int,
        seg: wp.array(dtype=wp.vec3),
        slot_id: wp.array(dtype=wp.int32),
        segq: wp.array(dtype=wp.vec2i),
        slab: wp.array(dtype=wp.vec4i),
        q0: wp.array(dtype=wp.vec3),
        q0_stride: int,
        active: wp.array(dtype=wp.uint8),
        active_stride: int,
        q1: wp.array(dtype=wp.vec3),
        q1_stride: int,
        tmin: wp.array(dtype=float),
        tmin_stride: int,
        tmax: wp.array(dtype=float),
        tmax_stride: int,
        root_box: wp.array(dtype=wp.vec3),
        max_distance_sq: float,
        k: int,
        out: out_type,
        order: wp.array(dtype=wp.int32),
        use_order: int,
        counts: wp.array(dtype=wp.vec2i),
        edge_slot: wp.array(dtype=wp.int32),
        stride: int,
        phase: int,
        base: int,
    ):
        i = wp.tid() + base
        seed_slot = int(-1)
        seed_slot2 = int(-1)
        if wp.static(seeded):
            if phase == 1:
                i = i * stride
            elif i % stride == 0:
                return  # answered in phase 1
            else:
                rep = i - i % stride
                if use_order != 0:
                    rep = int(order[rep])
                gid0 = int(out[rep])
                if gid0 >= 0:
                    seed_slot = int(edge_slot[gid0])
                nxt_rep = i - i % stride + stride  # and the next group's first query, when there is one
                if nxt_rep < out.shape[0]:
                    if use_order != 0:
                        nxt_rep = int(order[nxt_rep])
                    gid2 = int(out[nxt_rep])
                    if gid2 >= 0:
                        seed_slot2 = int(edge_slot[gid2])
        if use_order != 0:
            i = int(order[i])
        bound = max_distance_sq
        best_id = int(_NO_ID)
        heap_d = _heap_f()
        heap_id = _heap_i()
        if wp.static(kind == TOPK):
            for j in range(k):
                heap_d[j] = _INF
                heap_id[j] = wp.int32(_NO_ID)
        visited = int(0)
        tested = int(0)
        p = q0[i * q0_stride]
        dir = wp.vec3(0.0)
        s0 = float(0.0)
        s1 = float(0.0)
        wellformed = wp.isfinite(p)
        if wp.static(kind == RAY):  # as the binary walk (nearest_edge_kernels.py)
            dir = q1[i * q1_stride]
            s0 = tmin[i * tmin_stride]
            s1 = tmax[i * tmax_stride]
            wellformed = wellformed and wp.isfinite(dir) and _bounds_ok(s0, s1)
            if wellformed:
                dir, s0, s1 = _in_range(dir, s0, s1)
                wellformed = wp.dot(dir, dir) > 0.0
        seg_lo = wp.vec3(0.0)
        seg_hi = wp.vec3(0.0)
        if wp.static(box_key != 0):
            if wellformed:
                seg_lo, seg_hi = segment_box(p, dir, s0, s1)
        go = int(0)
        if active[i * active_stride] != wp.uint8(0) and wellformed:
            go = int(1)
            if wp.static(kind == RAY):
                if wp.isfinite(bound):
                    reach = 2.0 * magnitude(p) + 3.0 * box_magnitude(root_box) + wp.sqrt(bound)
                    bound = widened_radius_sq(bound, reach)
            else:
                bound = widened_radius_sq(bound, magnitude(p))  # the frontends re-check (engine/radius.py)
        if wp.static(seeded):
            if go != 0 and seed_slot >= 0:
                gid0 = int(slot_id[seed_slot])
                dsq0 = _point_segment_dsq(p, seg[2 * seed_slot], seg[2 * seed_slot + 1])
                if wp.static(counting):
                    tested += 1
                if gid0 >= 0 and dsq0 <= bound:
                    bound = dsq0
                    best_id = gid0
            if go != 0 and seed_slot2 >= 0:
                gid2 = int(slot_id[seed_slot2])
                dsq2 = _point_segment_dsq(p, seg[2 * seed_slot2], seg[2 * seed_slot2 + 1])
                if wp.static(counting):
                    tested += 1
                if gid2 >= 0 and dsq2 <= bound and _better(dsq2, gid2, bound, best_id):
                    bound = dsq2
                    best_id = gid2
        stack = _wstack_i()
        stack_key = _wstack_f()
        sp = int(0)
        node = int(0)
        while go != 0:
            visited += 1
            if visited > num_nodes:  # each wide node is entered at most once: never loop
                break
            key = wp.vec4(_INF)
            refs = wp.vec4i(0)
            o = wp.vec3(0.0)
            sc = wp.vec3(0.0)
            ks = wp.vec4(_INF)  # the children's order keys, sorted
            rs = wp.vec4i(0)  # their refs
            pk = wp.vec4(_INF)  # the keys checked against the radius (points: ks; rays: the lower bounds)
            if wp.static(kind == RAY):
                rr = wp.sqrt(bound) * _OPEN_R
                lbs = wp.vec4(_INF)
                if wp.static(compressed):
                    key, lbs, refs = ray_keys_compressed(links, node, p, dir, s0, s1, rr, box_key, seg_lo, seg_hi)
                else:
                    key, lbs, refs = ray_keys_full(data, links, node, p, dir, s0, s1, rr, box_key, seg_lo, seg_hi)
                d0, r0, l0, d1, r1, l1 = sort2p(key[0], refs[0], lbs[0], key[1], refs[1], lbs[1])
                d2, r2, l2, d3, r3, l3 = sort2p(key[2], refs[2], lbs[2], key[3], refs[3], lbs[3])
                d0, r0, l0, d2, r2, l2 = sort2p(d0, r0, l0, d2, r2, l2)
                d1, r1, l1, d3, r3, l3 = sort2p(d1, r1, l1, d3, r3, l3)
                d1, r1, l1, d2, r2, l2 = sort2p(d1, r1, l1, d2, r2, l2)
                ks = wp.vec4(d0, d1, d2, d3)
                rs = wp.vec4i(r0, r1, r2, r3)
                pk = wp.vec4(l0, l1, l2, l3)
            else:
                if wp.static(compressed):
                    key, refs, o, sc = _keys_compressed(links, node, p)
                else:
                    key, refs = _keys_full(data, links, node, p)
                d0, r0, d1, r1 = _sort2(key[0], refs[0], key[1], refs[1])
                d2, r2, d3, r3 = _sort2(key[2], refs[2], key[3], refs[3])
                d0, r0, d2, r2 = _sort2(d0, r0, d2, r2)
                d1, r1, d3, r3 = _sort2(d1, r1, d3, r3)
                d1, r1, d2, r2 = _sort2(d1, r1, d2, r2)
                ks = wp.vec4(d0, d1, d2, d3)
                rs = wp.vec4i(r0, r1, r2, r3)
                pk = ks
            skip = int(0)
            if wp.static(leaf_slab == 2):  # every leaf child's slab at once (loads in flight together)
                for j in range(4):
                    r = int(rs[j])
                    if r < 0 and ks[j] <= bound * _OPEN:
                        if slab_skips(load4i(slab, (-1 - r) >> 3), p, bound * _OPEN):
                            skip = skip | (1 << j)
            for j in range(4):  # leaf children within the radius, nearest first
                r = int(rs[j])
                # rays: reached at the visit (the box grown by the radius then), bound re-checked now
                within = ks[j] < _INF and pk[j] <= bound * _OPEN
                if r < 0 and within:
                    code = -1 - r
                    first = code >> 3
                    count = (code & 7) + 1
                    if wp.static(leaf_slab == 1):  # the leaf's oriented slab first (16 bytes)
                        if slab_skips(load4i(slab, first), p, bound * _OPEN):
                            count = 0
                    if wp.static(leaf_slab == 2):
                        if ((skip >> j) & 1) != 0:
                            count = 0
                    for sl in range(first, first + count):
                        near = int(1)
                        if wp.static(seg_boxes and kind != RAY):  # the segment's 8-byte box first
                            if _seg_box_dsq(segq[sl], o, sc, p) > bound * _OPEN:
                                near = 0
                        if near != 0:
                            if wp.static(counting):
                                tested += 1
                            dsq = float(0.0)
                            sa = wp.vec3(0.0)
                            sb = wp.vec3(0.0)
                            if wp.static(seg_v2):  # three 64-bit loads (edge_segment.SEG_LOAD)
                                sa, sb = load_segment(seg, sl)
                            else:
                                sa = seg[2 * sl]
                                sb = seg[2 * sl + 1]
                            if wp.static(kind == RAY):
                                dsq = _ray_segment_dsq(p, dir, s0, s1, sa, sb)
                            elif wp.static(seg_pruned):  # inf for a segment whose line lies beyond (SEG_TEST)
                                dsq = point_segment_dsq_within(p, sa, sb, bound)
                            else:
                                dsq = _point_segment_dsq(p, sa, sb)
                            if dsq <= bound:
                                gid = int(slot_id[sl])  # -1: masked out
                                if gid >= 0:
                                    if wp.static(kind == TOPK):
                                        if _better(dsq, gid, heap_d[k - 1], int(heap_id[k - 1])):
                                            m = k - 1  # sorted insertion into the fixed-size list
                                            while m > 0 and _better(dsq, gid, heap_d[m - 1], int(heap_id[m - 1])):
                                                heap_d[m] = heap_d[m - 1]
                                                heap_id[m] = heap_id[m - 1]
                                                m -= 1
                                            heap_d[m] = dsq
                                            heap_id[m] = wp.int32(gid)
                                            if heap_id[k - 1] != _NO_ID:
                                                bound = wp.min(bound, heap_d[k - 1])
                                    elif _better(dsq, gid, bound, best_id):
                                        bound = dsq
                                        best_id = gid
            nxt = int(-1)
            nxt_key = float(0.0)
            for jj in range(4):  # inner children within the radius: the nearest next, the others pushed
                j = 3 - jj
                r = int(rs[j])
                within = ks[j] < _INF and pk[j] <= bound * _OPEN
                if r >= 0 and within:
                    if nxt >= 0 and sp < STACK:
                        stack[sp] = wp.int32(nxt)
                        stack_key[sp] = nxt_key
                        sp += 1
                    nxt = r
                    nxt_key = pk[j]
            if nxt >= 0:
                node = nxt
            else:
                go = int(0)
                while sp > 0:
                    sp -= 1
                    if stack_key[sp] > bound * _OPEN:  # rays without box keys: 0, always entered
                        continue
                    node = int(stack[sp])
                    go = int(1)
                    break
        if wp.static(counting):
            counts[i] = wp.vec2i(visited, tested)
        if wp.static(kind == TOPK):
            for j in range(k):
                gid = int(heap_id[j])
                if gid == _NO_ID:
                    gid = -1
                out[i, j] = wp.int32(gid)
        else:
            if best_id == _NO_ID:
                best_id = -1
            out[i] = wp.int32(best_id)

    name = (f"nearest_edge_wide{'_q' if compressed else ''}{'s' if seg_boxes else ''}_{('point', 'ray', 'topk')[kind]}"
            f"{'_counting' if counting else ''}{'_seeded' if seeded else ''}{'_slab' + str(leaf_slab) if leaf_slab else ''}"
            f"{'_boxkey' if box_key else ''}{'_pruned' if seg_pruned else ''}{'_v2' if seg_v2 else ''}"
            f"_r{max_registers}")
    options = {"cuda_max_registers": int(max_registers)} if max_registers > 0 else {}
    return wp.kernel(search, name=name, enable_backward=False, module="unique", **options)


_WIDE_KERNELS: dict = {}


def wide_kernel(kind: int, counting: bool = False, max_registers: int = 0, compressed: bool = False,
                seg_boxes: bool = False, seeded: bool = False, leaf_slab: int = 0,
                seg: tuple[str, str] = ("exact", "plain")):
    """The (cached) wide search kernel of ``kind`` (``POINT``, ``RAY`` or ``TOPK``), capped at ``max_registers``
    (0: none), over compressed nodes or not, with quantised segment boxes or not, with leaf slabs (1, 2) or not;
    segments read and point distances computed as ``seg`` = ``(test, load)`` says (``edge_segment.seg_modes``)."""
    ray_box_key = False
    if kind == RAY:  # point tests: not taken by ray walks
        seg_boxes, seeded, leaf_slab = False, False, 0
        ray_box_key = RAY_KEY == "box"
    key = (kind, counting, int(max_registers), bool(compressed), bool(seg_boxes), bool(seeded), int(leaf_slab),
           ray_box_key, *seg)
    if key not in _WIDE_KERNELS:
        _WIDE_KERNELS[key] = _make_wide_kernel(*key)
    return _WIDE_KERNELS[key]

