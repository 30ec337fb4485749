"""The nearest-edge search kernels: one walk skeleton specialised per query kind (Warp).

The host functions that launch them are in :mod:`rayd.engine.nearest_edge`. The walk
is depth first over an :class:`~rayd.engine.edges.EdgeBvh`, nearer child first, with a
search radius that shrinks to the best candidate so far (the k-th best for top-k).

References:
    Ericson 2004, "Real-Time Collision Detection", Morgan Kaufmann, sec. 5.1.2
    (closest point on a segment) and 5.1.9 (closest points of two segments).
"""


import warp as wp

from rayd.engine.edges import MAX_DEPTH
from rayd.engine.edge_segment import _axpy_rn, _dot_rn  # noqa: F401 - used by the tests and other modules
from rayd.engine.edge_segment import point_segment_dsq as _point_segment_dsq
from rayd.engine.edge_segment import point_segment_dsq_within, load_segment
from rayd.engine.edge_segment import ray_segment_dsq as _ray_segment_dsq
from rayd.engine.radius import magnitude, widened_radius_sq

#: Largest ``k`` of a top-k query (the per-query heap lives in registers).
MAX_K = 16
#: ``cuda_max_registers`` of the search kernels (``None``: the compiler's choice), read when a
#: kernel is first generated. On the H200 (``benchmarks/edge_search_ab.py``, 1 M points) the
#: point search takes 67 registers by itself; capped at 64 it ran 2-7 % faster (48: slower,
#: 96 -> 75 registers: slower); benchmarks/README.md, "Edges".
SEARCH_MAX_REGISTERS: int | None = 64
_STACK = MAX_DEPTH  # >= the deepest tree (SAH trees are checked; Karras trees: <= 62 levels from 62 key bits)

_INF = wp.constant(float("inf"))

# Build and search kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})
_NO_ID = wp.constant(2147483647)
# A box is opened while its squared distance is within a relative 2^-10 of the best squared
# distance (radius 2^-11 for rays): the float32 segment distance can round below the box
# distance of the same segment, and an edge tied with the best must not be hidden by that.
_OPEN = wp.constant(1.0 + 1.0 / 1024.0)
_OPEN_R = wp.constant(1.0 + 1.0 / 2048.0)
_SEG_TOL = wp.constant(1.0 / 262144.0)  # 2^-18: widening of a ray segment's box (segment_box)
#: Ray searches of the binary walk also prune by a lower bound of a child's distance to the ray segment (the
#: distance between its box and the segment's widened box), checked against the shrunk radius before a leaf is
#: tested and when a node is popped, as the point search does (read when a kernel is generated; the same
#: answers; False: the walk of before the 18th session, which entered every popped node).
RAY_BOUND = True
_stack_i = wp.types.vector(length=_STACK, dtype=wp.int32)
_stack_f = wp.types.vector(length=_STACK, dtype=wp.float32)
_heap_i = wp.types.vector(length=MAX_K, dtype=wp.int32)
_heap_f = wp.types.vector(length=MAX_K, dtype=wp.float32)


@wp.func
def _box_dsq(p: wp.vec3, lo: wp.vec3, hi: wp.vec3) -> float:
    """Squared distance from ``p`` to the box ``[lo, hi]`` (``inf`` for an empty box)."""
    q = wp.max(wp.max(lo - p, wp.vec3(0.0)), p - hi)
    if lo[0] > hi[0]:
        return _INF
    return wp.dot(q, q)


@wp.func
def _ray_box_reach(o: wp.vec3, d: wp.vec3, s0: float, s1: float, lo: wp.vec3, hi: wp.vec3, r: float) -> float:
    """Entry parameter of the ray segment into the box grown by ``r`` (``inf`` if it misses).

    A box that the segment misses after growing every side by ``r`` lies farther than
    ``r`` from the segment, so the subtree can be skipped (conservative test).
    """
    if lo[0] > hi[0]:
        return _INF
    if r == _INF:
        return s0
    enter = s0
    leave = s1
    for k in range(3):
        a = lo[k] - r
        b = hi[k] + r
        if d[k] == 0.0:
            if o[k] < a or o[k] > b:
                return _INF
        else:
            inv = 1.0 / d[k]
            ta = (a - o[k]) * inv
            tb = (b - o[k]) * inv
            enter = wp.max(enter, wp.min(ta, tb))
            leave = wp.min(leave, wp.max(ta, tb))
    if enter > leave:
        return _INF
    return enter


@wp.func
def _bounds_ok(s0: float, s1: float) -> bool:
    """Whether ``[s0, s1]`` is a ray segment's parameter interval: no NaN, ``s0 <= s1``, and not a point at
    infinity (``s0 = -inf`` is a half-line backwards, ``s0 = -inf, s1 = inf`` the whole line)."""
    return (not wp.isnan(s0)) and (not wp.isnan(s1)) and s0 <= s1 and s0 < _INF and s1 > -_INF


@wp.func
def _segment_end(o: float, d: float, s: float) -> float:
    """Coordinate ``o + s d`` of a segment's end (``d != 0``), ``+-inf`` where ``s`` is infinite."""
    if wp.isfinite(s):
        return o + s * d
    if (s > 0.0) == (d > 0.0):
        return _INF
    return -_INF


@wp.func
def segment_box(o: wp.vec3, d: wp.vec3, s0: float, s1: float) -> tuple[wp.vec3, wp.vec3]:
    """A box holding the segment ``o + s d, s in [s0, s1]`` (``s1 = inf`` or ``s0 = -inf``: a half-line, both: the
    line), widened by ``2^-18`` of its largest finite coordinate magnitude (the rounding of ``o + s d``)."""
    lo = o
    hi = o
    m = magnitude(o)
    for k in range(3):
        if d[k] != 0.0:
            a = _segment_end(o[k], d[k], s0)
            b = _segment_end(o[k], d[k], s1)
            if wp.isfinite(a):
                m = wp.max(m, wp.abs(a))
            if wp.isfinite(b):
                m = wp.max(m, wp.abs(b))
            lo[k] = wp.min(a, b)
            hi[k] = wp.max(a, b)
    tol = _SEG_TOL * m
    return lo - wp.vec3(tol), hi + wp.vec3(tol)


@wp.func
def _in_range(d: wp.vec3, s0: float, s1: float) -> tuple[wp.vec3, float, float]:
    """The segment ``o + s d, s in [s0, s1]`` with ``|d|_max`` brought into ``[2^-20, 2^20]`` by exact
    powers of two (``s0``, ``s1`` scaled inversely: the same points). The search squares ``d``:
    beyond about ``1e19`` (or below ``1e-19``) ``dot(d, d)`` overflowed (underflowed) float32 and
    the segment was measured as its origin (or dropped). Directions already in range are kept,
    bit for bit."""
    out = d
    a = s0
    b = s1
    m = magnitude(d)
    for _ in range(4):  # float32 magnitudes span 2^-149 .. 2^128
        if m > 1048576.0:
            out = out * 9.094947e-13  # 2^-40
            a = a * 1.0995116e12
            b = b * 1.0995116e12
            m = m * 9.094947e-13
        elif m < 9.536743e-07 and m > 0.0:  # 2^-20
            out = out * 1.0995116e12
            a = a * 9.094947e-13
            b = b * 9.094947e-13
            m = m * 1.0995116e12
    return out, a, b


@wp.func
def _root_magnitude(node_box: wp.array(dtype=wp.vec4)) -> float:
    """The largest coordinate magnitude of the root's two child boxes (empty boxes skipped)."""
    b0 = node_box[0]
    b1 = node_box[1]
    b2 = node_box[2]
    m = float(0.0)
    if b0[0] <= b0[3]:
        m = wp.max(magnitude(wp.vec3(b0[0], b0[1], b0[2])), magnitude(wp.vec3(b0[3], b1[0], b1[1])))
    if b1[2] <= b2[1]:
        m = wp.max(m, wp.max(magnitude(wp.vec3(b1[2], b1[3], b2[0])), magnitude(wp.vec3(b2[1], b2[2], b2[3]))))
    return m


@wp.func
def _box_box_dsq(lo: wp.vec3, hi: wp.vec3, lo2: wp.vec3, hi2: wp.vec3) -> float:
    """Squared distance between the boxes ``[lo, hi]`` and ``[lo2, hi2]`` (0 where they overlap or a plane is NaN)."""
    g = wp.max(wp.max(lo - hi2, lo2 - hi), wp.vec3(0.0))
    d = g[0] * g[0] + g[1] * g[1] + g[2] * g[2]
    if not (d >= 0.0):
        d = 0.0
    return d


@wp.func
def _better(dsq: float, gid: int, best_dsq: float, best_id: int) -> bool:
    """``(dsq, gid) < (best_dsq, best_id)`` in lexicographic order."""
    if dsq < best_dsq:
        return True
    return dsq == best_dsq and gid < best_id


@wp.kernel
def _nearest_edge_order_kernel(
    points: wp.array(dtype=wp.vec3),
    root_box: wp.array(dtype=wp.vec3),
    keys: wp.array(dtype=wp.int32),
    order: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    p = points[i]
    lo = root_box[0]
    hi = root_box[1]
    code = int(0)
    for k in range(3):
        extent = hi[k] - lo[k]
        x = float(0.0)
        if extent > 0.0:
            x = wp.clamp((p[k] - lo[k]) / extent, 0.0, 1.0)
        if not wp.isfinite(x):
            x = 0.0
        q = wp.min(int(x * 1024.0), 1023)
        for b in range(10):
            code = code | (((q >> b) & 1) << (3 * b + 2 - k))
    keys[i] = wp.int32(code)
    order[i] = wp.int32(i)


POINT, RAY, TOPK = 0, 1, 2


def _make_search_kernel(kind: int, counting: bool, seg_test: str = "exact", seg_load: str = "plain"):
    """The one search skeleton, specialised at code generation for a query kind.

    ``kind``: ``POINT`` (nearest edge to a point), ``RAY`` (to a ray segment) or
    ``TOPK`` (the ``k`` nearest to a point). ``counting`` adds a per-query count of
    internal nodes visited and segments tested (``counts[i]``), for measurements.

    The walk: at an internal node both children's boxes and links are read (one 64-byte run)
    and tested; leaf children are tested on the spot, nearer first; of the internal
    children that pass, the nearer is visited next and the farther pushed with its
    key (squared box distance), skipped when popped if the search radius has
    shrunk below it. Ray queries test a box grown by the current radius instead
    (``_ray_box_reach``) and order children by their centres' distance to the ray.
    Segments are read and point distances computed as ``seg_load`` / ``seg_test`` say
    (``edge_segment.seg_modes``; the same answers either way).
    """
    out_type = wp.array2d(dtype=wp.int32) if kind == TOPK else wp.array(dtype=wp.int32)
    ray_bound = kind == RAY and bool(RAY_BOUND)
    seg_pruned = kind != RAY and seg_test == "pruned"
    seg_v2 = seg_load == "v2"

    def search(
        node_box: wp.array(dtype=wp.vec4),
        node_link: wp.array(dtype=wp.vec4i),
        seg: wp.array(dtype=wp.vec3),
        slot_id: wp.array(dtype=wp.int32),
        q0: wp.array(dtype=wp.vec3),
        q0_stride: int,
        q1: wp.array(dtype=wp.vec3),
        q1_stride: int,
        tmin: wp.array(dtype=float),
        tmin_stride: int,
        tmax: wp.array(dtype=float),
        tmax_stride: int,
        active: wp.array(dtype=wp.uint8),
        active_stride: int,
        max_distance_sq: float,
        k: int,
        out: out_type,
        order: wp.array(dtype=wp.int32),
        use_order: int,
        counts: wp.array(dtype=wp.vec2i),
        base: int,
    ):
        i = wp.tid() + base  # a chunk of the queries (CPU launches split across cores)
        if use_order != 0:
            i = int(order[i])
        bound = max_distance_sq  # squared search radius: max_distance, then the best (k-th best)
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
        if wp.static(kind == RAY):
            dir = q1[i * q1_stride]
            s0 = tmin[i * tmin_stride]
            s1 = tmax[i * tmax_stride]
            wellformed = wellformed and wp.isfinite(dir) and _bounds_ok(s0, s1)
            if wellformed:
                dir, s0, s1 = _in_range(dir, s0, s1)
                wellformed = wp.dot(dir, dir) > 0.0
        seg_lo = wp.vec3(0.0)
        seg_hi = wp.vec3(0.0)
        if wp.static(ray_bound):
            if wellformed:
                seg_lo, seg_hi = segment_box(p, dir, s0, s1)
        go = int(0)
        if active[i * active_stride] != wp.uint8(0) and wellformed:
            go = int(1)
            if wp.isfinite(bound):  # widened by rounding: the frontends keep a winner only within max_distance
                reach = magnitude(p)  # (engine/radius.py)
                if wp.static(kind == RAY):
                    reach = 2.0 * reach + 3.0 * _root_magnitude(node_box) + wp.sqrt(bound)
                bound = widened_radius_sq(bound, reach)
        stack = _stack_i()
        stack_key = _stack_f()
        sp = int(0)
        node = int(0)
        limit = node_box.shape[0] // 4  # each internal node is entered at most once: never loop
        while go != 0:
            visited += 1
            if visited > limit:
                break
            b0 = node_box[4 * node]  # one 64-byte run: four 128-bit loads
            b1 = node_box[4 * node + 1]
            b2 = node_box[4 * node + 2]
            ch = node_link[4 * node + 3]
            lo_a = wp.vec3(b0[0], b0[1], b0[2])
            hi_a = wp.vec3(b0[3], b1[0], b1[1])
            lo_b = wp.vec3(b1[2], b1[3], b2[0])
            hi_b = wp.vec3(b2[1], b2[2], b2[3])
            ok_a = False
            ok_b = False
            key_a = float(0.0)
            key_b = float(0.0)
            lb_a = float(0.0)  # rays: lower bounds of the children's distances (0: none)
            lb_b = float(0.0)
            if wp.static(kind == RAY):
                r = wp.sqrt(bound) * _OPEN_R
                ok_a = _ray_box_reach(p, dir, s0, s1, lo_a, hi_a, r) < _INF
                ok_b = _ray_box_reach(p, dir, s0, s1, lo_b, hi_b, r) < _INF
                ca = 0.5 * (lo_a + hi_a)
                cb = 0.5 * (lo_b + hi_b)
                key_a = _ray_segment_dsq(p, dir, s0, s1, ca, ca)
                key_b = _ray_segment_dsq(p, dir, s0, s1, cb, cb)
                if wp.static(ray_bound):
                    lb_a = _box_box_dsq(lo_a, hi_a, seg_lo, seg_hi)
                    lb_b = _box_box_dsq(lo_b, hi_b, seg_lo, seg_hi)
            else:
                key_a = _box_dsq(p, lo_a, hi_a)
                key_b = _box_dsq(p, lo_b, hi_b)
                ok_a = key_a <= bound * _OPEN and key_a < _INF
                ok_b = key_b <= bound * _OPEN and key_b < _INF
            # near = the child to take first
            near = int(ch[0])
            near_n = int(ch[2])
            near_ok = ok_a
            near_key = key_a
            near_lb = lb_a
            far = int(ch[1])
            far_n = int(ch[3])
            far_ok = ok_b
            far_key = key_b
            far_lb = lb_b
            if key_b < key_a:
                near = int(ch[1])
                near_n = int(ch[3])
                near_ok = ok_b
                near_key = key_b
                near_lb = lb_b
                far = int(ch[0])
                far_n = int(ch[2])
                far_ok = ok_a
                far_key = key_a
                far_lb = lb_a
            for c in range(2):
                leaf_ok = near_ok and near_n > 0
                if wp.static(ray_bound):
                    leaf_ok = leaf_ok and near_lb <= bound * _OPEN
                first = near
                count = near_n
                if c == 1:
                    leaf_ok = far_ok and far_n > 0
                    if wp.static(kind != RAY):
                        leaf_ok = leaf_ok and far_key <= bound * _OPEN
                    if wp.static(ray_bound):
                        leaf_ok = leaf_ok and far_lb <= bound * _OPEN
                    first = far
                    count = far_n
                if leaf_ok:
                    for s in range(first, first + count):
                        if wp.static(counting):
                            tested += 1
                        dsq = float(0.0)
                        sa = wp.vec3(0.0)
                        sb = wp.vec3(0.0)
                        if wp.static(seg_v2):
                            sa, sb = load_segment(seg, s)
                        else:
                            sa = seg[2 * s]
                            sb = seg[2 * s + 1]
                        if wp.static(kind == RAY):
                            dsq = _ray_segment_dsq(p, dir, s0, s1, sa, sb)
                        elif wp.static(seg_pruned):
                            dsq = point_segment_dsq_within(p, sa, sb, bound)
                        else:
                            dsq = _point_segment_dsq(p, sa, sb)
                        # the id (or -1: masked out) is read only for a candidate within the radius
                        gid = int(-1)
                        if dsq <= bound:
                            gid = int(slot_id[s])
                        if gid >= 0:
                            if wp.static(kind == TOPK):
                                if dsq <= bound and _better(dsq, gid, heap_d[k - 1], int(heap_id[k - 1])):
                                    j = k - 1  # sorted insertion into the fixed-size list
                                    while j > 0 and _better(dsq, gid, heap_d[j - 1], int(heap_id[j - 1])):
                                        heap_d[j] = heap_d[j - 1]
                                        heap_id[j] = heap_id[j - 1]
                                        j -= 1
                                    heap_d[j] = dsq
                                    heap_id[j] = wp.int32(gid)
                                    if heap_id[k - 1] != _NO_ID:
                                        bound = wp.min(bound, heap_d[k - 1])
                            else:
                                if dsq <= bound and _better(dsq, gid, bound, best_id):
                                    bound = dsq
                                    best_id = gid
            near_in = near_ok and near_n == 0
            far_in = far_ok and far_n == 0
            if wp.static(ray_bound):  # the bounds against the radius shrunk by this node's leaves
                near_in = near_in and near_lb <= bound * _OPEN
                far_in = far_in and far_lb <= bound * _OPEN
            if near_in:
                node = near
                if far_in and sp < _STACK:
                    stack[sp] = wp.int32(far)
                    stack_key[sp] = far_key
                    if wp.static(ray_bound):
                        stack_key[sp] = far_lb
                    sp += 1
            elif far_in:
                node = far
            else:
                go = int(0)
                while sp > 0:
                    sp -= 1
                    if wp.static(kind != RAY or ray_bound):
                        if stack_key[sp] > bound * _OPEN:
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

    name = (f"nearest_edge_search_{('point', 'ray', 'topk')[kind]}{'_counting' if counting else ''}"
            f"{'_bound' if ray_bound else ''}{'_pruned' if seg_pruned else ''}{'_v2' if seg_v2 else ''}")
    options = {} if SEARCH_MAX_REGISTERS is None else {"cuda_max_registers": int(SEARCH_MAX_REGISTERS)}
    return wp.kernel(search, name=name, enable_backward=False, module="unique", **options)


_KERNELS: dict = {}
