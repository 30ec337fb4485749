"""A 4-wide copy of an edge BVH and the point / top-k searches that walk it (opt-in).

The binary edge tree (:class:`rayd.engine.edges.EdgeBvh`, packed as child pairs) is collapsed
into the 4-wide node layout of the triangle engine (:class:`rayd.engine.wide_nodes.WideNodes`,
reused as it is: its SAH collapse of Ylitie, Karras & Laine 2017, its rows and its refresh).
One wide node is seven 128-bit loads (six rows of the four children's box coordinates and
their refs, 112 bytes): a point query tests four boxes per dependent fetch instead of two.

For the collapse, the edge links ``(code_a, code_b, count_a, count_b)`` are rewritten once, at
build, into the pair-node refs of ``pair_nodes.py`` (``r >= 0`` inner node ``r``; a leaf of
``count`` slots from ``first`` as ``r = -1 - (8 first + count - 1)``, so leaves of at most 8
segments) in a temporary copy of the packed nodes; afterwards the wide nodes take their boxes
from the edge tree's own ``node_box`` (:meth:`EdgeWide.refresh`, one launch after each refit).
Leaf segments are the edge tree's (``seg``, ``slot_id``, same slots).

The walk: at a wide node the four box distances are computed and sorted (five comparators);
leaf children within the radius are tested nearest first (the radius shrinks), then the inner
children still within it are taken nearest first (the nearest next, the others pushed, farthest
first, with their keys, skipped when popped if the radius has shrunk below them). Boxes open
within the relative ``2^-10`` of the binary walk, and ties go to the smaller id, so both walks
return the same edges (tested).

References:
    Ylitie, Karras, Laine 2017, "Efficient Incoherent Ray Traversal on GPUs Through
    Compressed Wide BVHs", HPG 2017.
"""


import os
import types

import warp as wp

from rayd.engine.edge_wide_q import CompressedWide
from rayd.engine.native import bits_float, load4, load4i
from rayd.engine.nearest_edge_kernels import (
    _INF,
    _NO_ID,
    _OPEN,
    SEARCH_MAX_REGISTERS,
    TOPK,
    _better,
    _heap_f,
    _heap_i,
    _point_segment_dsq,
)
from rayd.engine.wide_nodes import STACK, WideNodes
from rayd.engine.wide_walk import _sort2

wp.set_module_options({"enable_backward": False})

#: Most segments per leaf the pair ref encoding holds (trees with larger leaves stay binary).
MAX_LEAF = 8
#: ``cuda_max_registers`` of the wide search kernels of trees built from now on (0: the compiler's
#: choice; ``RAYD_EDGE_WIDE_MAXREG``, default the binary search's :data:`SEARCH_MAX_REGISTERS`). Not yet
#: timed on a GPU: the wide walk holds more values (six box rows) than the binary one.
WIDE_MAX_REGISTERS = int(os.environ.get("RAYD_EDGE_WIDE_MAXREG", str(SEARCH_MAX_REGISTERS or 0)) or 0)
_wstack_i = wp.types.vector(length=STACK, dtype=wp.int32)
_wstack_f = wp.types.vector(length=STACK, dtype=wp.float32)


@wp.func
def _pair_ref(code: int, count: int) -> int:
    """Edge child ``(code, count)`` as a ``pair_nodes.py`` ref (leaf: count 1..8)."""
    if count == 0:
        return code
    return -1 - (8 * code + count - 1)


@wp.kernel
def _edge_pair_kernel(node_box: wp.array(dtype=wp.vec4), node_link: wp.array(dtype=wp.vec4i),
                      pair_box: wp.array(dtype=wp.vec4), pair_link: wp.array(dtype=wp.vec4i)):
    """Packed edge node ``j`` as a pair node: the same three box rows, the links as refs."""
    j = wp.tid()
    for r in range(3):
        pair_box[4 * j + r] = node_box[4 * j + r]
    ch = node_link[4 * j + 3]
    pair_link[4 * j + 3] = wp.vec4i(_pair_ref(ch[0], ch[2]), _pair_ref(ch[1], ch[3]), 0, 0)


class EdgeWide:
    """The 4-wide nodes of one edge BVH (see the module docstring).

    Args:
        node_box: the edge tree's packed nodes, ``wp.array(dtype=wp.vec4)`` (4 M,), M internal
            nodes, root 0, boxes already refitted.
        node_link: the same memory as ``wp.vec4i``.
        depth: an upper bound of the binary tree's depth (levels collapsed).
        stream: the stream to build on (``None`` on the CPU).
        compressed: also keep the 64-byte compressed nodes (:mod:`rayd.engine.edge_wide_q`), which the
            searches then read instead of the 112-byte ones.
        seg, slot_id, seg_boxes: with ``compressed``, the edge tree's segments and slot ids, and whether
            to keep their quantised boxes (8 bytes a slot), tested before each segment.

    The caller makes sure the root is a real internal node with leaves of at most
    :data:`MAX_LEAF` segments (``EdgeBvh`` builds one only then).

    Attributes:
        nodes: the :class:`WideNodes` (``data``/``links`` rows, ``count``, ``stack_need``).
        ok: the collapse finished and its walk fits the stack (else the search stays binary).
        max_registers: :data:`WIDE_MAX_REGISTERS` at build (the searches of this tree use it).
        compressed: the :class:`~rayd.engine.edge_wide_q.CompressedWide` rows, or None.
    """

    def __init__(self, node_box: wp.array, node_link: wp.array, depth: int, stream: wp.Stream | None = None,
                 compressed: bool = False, seg: wp.array | None = None, slot_id: wp.array | None = None,
                 seg_boxes: bool = False) -> None:
        device = node_box.device
        self.max_registers = WIDE_MAX_REGISTERS
        inner = node_box.shape[0] // 4
        pair_box = wp.zeros(4 * inner, dtype=wp.vec4, device=device)
        pair_link = wp.array(ptr=pair_box.ptr, dtype=wp.vec4i, shape=pair_box.shape, device=device)
        wp.launch(_edge_pair_kernel, inner, [node_box, node_link], [pair_box, pair_link], device=device,
                  stream=stream)
        pairs = types.SimpleNamespace(boxes=pair_box, links=pair_link, root=0)
        self.nodes = WideNodes(pairs, depth, stream)
        # later refreshes read the edge tree's own boxes (the same three rows per node)
        self.nodes.pairs = types.SimpleNamespace(boxes=node_box, links=node_link, root=0)
        self.ok = bool(self.nodes.ok)
        self.compressed = None
        if compressed and self.ok:
            self.compressed = CompressedWide(node_box, self.nodes.links, self.nodes.count, seg, slot_id,
                                             seg_boxes, stream)
        if stream is not None:
            wp.synchronize_stream(stream)  # before the temporary pair copy is released

    @property
    def nbytes(self) -> int:
        """Bytes of the nodes the searches read (the full rows' refs and box codes stay for the refit)."""
        return self.nodes.nbytes if self.compressed is None else self.compressed.nbytes

    def refresh(self, stream: wp.Stream | None = None) -> None:
        """Take the children's boxes again from the edge tree's refitted ``node_box`` (one launch)."""
        if self.compressed is None:
            self.nodes.refresh(stream)
        else:
            self.compressed.refresh(stream)


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


def _make_wide_kernel(kind: int, counting: bool, max_registers: int, compressed: bool, seg_boxes: bool):
    """The wide walk for ``POINT`` or ``TOPK`` queries over full (``data``, ``links``) or compressed
    (``links`` = the rows ``q`` of ``edge_wide_q.py``) nodes, the latter optionally with the leaf
    segments' quantised boxes (``segq``, tested before each segment); other arguments as the binary
    search's. ``counts`` then holds the segments tested exactly."""
    out_type = wp.array2d(dtype=wp.int32) if kind == TOPK else wp.array(dtype=wp.int32)

    def search(
        data: wp.array(dtype=wp.vec4),
        links: wp.array(dtype=wp.vec4i),
        num_nodes: int,
        seg: wp.array(dtype=wp.vec3),
        slot_id: wp.array(dtype=wp.int32),
        segq: wp.array(dtype=wp.vec2i),
        q0: wp.array(dtype=wp.vec3),
        q0_stride: int,
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
        i = wp.tid() + base
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
        go = int(0)
        if active[i * active_stride] != wp.uint8(0) and wp.isfinite(p):
            go = int(1)
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
            for j in range(4):  # leaf children within the radius, nearest first
                r = int(rs[j])
                if r < 0 and ks[j] < _INF and ks[j] <= bound * _OPEN:
                    code = -1 - r
                    first = code >> 3
                    count = (code & 7) + 1
                    for sl in range(first, first + count):
                        near = int(1)
                        if wp.static(seg_boxes):  # the segment's 8-byte box first
                            if _seg_box_dsq(segq[sl], o, sc, p) > bound * _OPEN:
                                near = 0
                        if near != 0:
                            if wp.static(counting):
                                tested += 1
                            dsq = _point_segment_dsq(p, seg[2 * sl], seg[2 * sl + 1])
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
                if r >= 0 and ks[j] < _INF and ks[j] <= bound * _OPEN:
                    if nxt >= 0 and sp < STACK:
                        stack[sp] = wp.int32(nxt)
                        stack_key[sp] = nxt_key
                        sp += 1
                    nxt = r
                    nxt_key = ks[j]
            if nxt >= 0:
                node = nxt
            else:
                go = int(0)
                while sp > 0:
                    sp -= 1
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

    name = (f"nearest_edge_wide{'_q' if compressed else ''}{'s' if seg_boxes else ''}_{('point', 'ray', 'topk')[kind]}"
            f"{'_counting' if counting else ''}_r{max_registers}")
    options = {"cuda_max_registers": int(max_registers)} if max_registers > 0 else {}
    return wp.kernel(search, name=name, enable_backward=False, module="unique", **options)


_WIDE_KERNELS: dict = {}


def wide_kernel(kind: int, counting: bool = False, max_registers: int = 0, compressed: bool = False,
                seg_boxes: bool = False):
    """The (cached) wide search kernel of ``kind`` (``POINT`` or ``TOPK``), capped at ``max_registers``
    (0: none), over compressed nodes or not, with quantised segment boxes or not."""
    key = (kind, counting, int(max_registers), bool(compressed), bool(seg_boxes))
    if key not in _WIDE_KERNELS:
        _WIDE_KERNELS[key] = _make_wide_kernel(*key)
    return _WIDE_KERNELS[key]

