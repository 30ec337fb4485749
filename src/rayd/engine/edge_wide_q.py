"""Compressed 4-wide edge nodes: child boxes quantised to 8 bits per plane (64 bytes a node, opt-in).

A wide node of ``edge_wide.py`` is 112 bytes (six rows of float32 box planes, one of refs). Here
(after Ylitie, Karras & Laine 2017, sec. 3.1) each node stores, in four 16-byte rows:

- ``q[4 c + 0]`` = ``(origin.x, origin.y, origin.z, exponents)``: the float32 origin (the least
  corner of the children's union box) and, in the last word, the biased IEEE exponents
  ``e_x | e_y << 8 | e_z << 16`` of the per-axis scales ``s = 2^(e - 127)``; bit 24 set means
  "open every non-empty child" (a child box with a non-finite coordinate cannot be quantised);
- ``q[4 c + 1]`` = the children's ``lo.x, hi.x, lo.y, hi.y`` as four bytes each (child ``j`` in
  byte ``j``); ``q[4 c + 2]`` = ``lo.z, hi.z`` (the last two words unused);
- ``q[4 c + 3]`` = the children's refs (those of :class:`rayd.engine.wide_nodes.WideNodes`).

Decoded planes are ``origin + q s``; ``q s`` is exact (``s`` a power of two, ``q < 256``), so the
one rounding is the sum, with or without FMA; the encoder rounds ``lo`` down and ``hi`` up and
checks the decoded plane against the true one in the same float32 operations, so every decoded
box holds its child's box and the walk stays exact (it opens a few more boxes). An empty child
(an empty slot, or a subtree whose edges are all masked) gets ``lo.x = 255 > hi.x = 0``.
The encoder reads the children's boxes from the edge tree's ``node_box`` through the
``WideNodes`` box codes, so the refit needs one launch (this one) after the tree's own.
"""

import warp as wp

from rayd.engine.native import bits_float, float_bits
from rayd.engine.refit import _load_l2
from rayd.engine.wide_nodes import _child_box

wp.set_module_options({"enable_backward": False})

_OPEN_ALL = wp.constant(1 << 24)
_ALWAYS = wp.constant(1 << 16)
_BIG = wp.constant(3.0e38)


@wp.func
def _scale_exponent(extent: float) -> int:
    """Biased exponent ``e`` (1..254) of the least power of two ``s`` with ``250 s >= extent``. The start is
    ``extent``'s own exponent less 7 (``250 < 2^8``: one step short at most), the loops make it the least."""
    e = int(1)
    if extent > 0.0:
        e = wp.clamp(((float_bits(extent) >> 23) & 255) - 7, 1, 254)
        while e < 254 and 250.0 * bits_float(e << 23) < extent:
            e += 1
        while e > 1 and 250.0 * bits_float((e - 1) << 23) >= extent:
            e -= 1
    return e


@wp.func
def _quantise(lo: float, hi: float, origin: float, s: float) -> wp.vec2i:
    """Bytes ``(q_lo, q_hi)`` with ``origin + q_lo s <= lo`` and ``origin + q_hi s >= hi``. ``s`` is a power of
    two: its reciprocal ``2^(127 - e)`` is exact (``s = 2^(e - 127)``, ``e <= 253``; 0 for ``e = 254``, where the
    loops alone find the bytes), so the products equal the quotients ``/ s`` without a division."""
    inv_s = bits_float((254 << 23) - float_bits(s))
    a = wp.clamp(int(wp.floor((lo - origin) * inv_s)), 0, 255)
    while a > 0 and origin + float(a) * s > lo:
        a -= 1
    b = wp.clamp(int(wp.ceil((hi - origin) * inv_s)), 0, 255)
    while b < 255 and origin + float(b) * s < hi:
        b += 1
    return wp.vec2i(a, b)


@wp.func
def _seg_word(a: wp.vec3, b: wp.vec3, live: int, origin: wp.vec3, e: wp.vec3i) -> wp.vec2i:
    """A segment's box on its node's grid: ``(lo.x | hi.x << 8 | lo.y << 16 | hi.y << 24, lo.z | hi.z << 8)``;
    masked out (``live = 0``): empty (``lo.x = 255 > hi.x = 0``); a box off the grid (not finite):
    bit 16 of the second word, "always test"."""
    if live == 0:
        return wp.vec2i(255, 0)
    lo = wp.min(a, b)
    hi = wp.max(a, b)
    if not (wp.isfinite(lo) and wp.isfinite(hi)):
        return wp.vec2i(0, _ALWAYS)
    x = wp.vec3i(0)
    y = wp.vec3i(0)
    for k in range(3):
        s = bits_float(e[k] << 23)
        if lo[k] < origin[k] or hi[k] > origin[k] + 255.0 * s:
            return wp.vec2i(0, _ALWAYS)
        qb = _quantise(lo[k], hi[k], origin[k], s)
        x[k] = qb[0]
        y[k] = qb[1]
    return wp.vec2i(x[0] | (y[0] << 8) | (x[1] << 16) | (y[1] << 24), x[2] | (y[2] << 8))


@wp.func
def _child_box_at(node_box: wp.array(dtype=wp.vec4), code: int, l2: int):
    """``_child_box`` (child ``code & 1`` of packed node ``code >> 1``); ``l2``: read through L2
    (``_load_l2``), for a node that another thread of the same launch has just written."""
    if l2 == 0:
        lo, hi = _child_box(node_box, code)
        return lo, hi
    k = code >> 1
    if (code & 1) == 0:
        b0 = _load_l2(node_box, 4 * k)
        b1 = _load_l2(node_box, 4 * k + 1)
        return wp.vec3(b0[0], b0[1], b0[2]), wp.vec3(b0[3], b1[0], b1[1])
    b1 = _load_l2(node_box, 4 * k + 1)
    b2 = _load_l2(node_box, 4 * k + 2)
    return wp.vec3(b1[2], b1[3], b2[0]), wp.vec3(b2[1], b2[2], b2[3])


#: Four children's box corners (rows ``j = 0..3``), the input of :func:`compress_boxes`.
mat43 = wp.types.matrix(shape=(4, 3), dtype=float)


@wp.func
def compress_node(node_box: wp.array(dtype=wp.vec4), wlinks: wp.array(dtype=wp.vec4i),
                  seg: wp.array(dtype=wp.vec3), slot_id: wp.array(dtype=wp.int32), seg_boxes: int,
                  q: wp.array(dtype=wp.vec4i), segq: wp.array(dtype=wp.vec2i), w: int, l2: int):
    """Wide node ``w``: its children's boxes (from the edge tree's packed nodes) quantised; with
    ``seg_boxes``, also the boxes of its leaf children's segments, on the same grid. ``l2``: read
    the packed boxes through L2 (the fused refit of ``edge_refit_fused.py``)."""
    codes = wlinks[8 * w + 7]
    lo_m = mat43()
    hi_m = mat43()
    for j in range(4):
        if codes[j] >= 0:
            lo, hi = _child_box_at(node_box, codes[j], l2)
            lo_m[j] = lo
            hi_m[j] = hi
    compress_boxes(lo_m, hi_m, codes, wlinks[8 * w + 6], seg, slot_id, seg_boxes, q, segq, w)


@wp.func
def quantise_children(lo_m: mat43, hi_m: mat43,
                      codes: wp.vec4i) -> tuple[wp.vec4i, wp.vec4i, wp.vec4i, wp.vec3, wp.vec3i]:
    """The first three rows of a compressed node (module docstring) from its children's boxes
    ``(lo_m[j], hi_m[j])`` (rows with ``codes[j] < 0`` are empty slots, not read): ``(header, xy, z,
    origin, exponents)``, ``header = (origin, exponents | flags)`` as ``float_bits``. The one quantiser
    of rayd's compressed wide nodes (edges here, triangles in ``wide_q.py``)."""
    origin = wp.vec3(_BIG)
    top = wp.vec3(-_BIG)
    kind = wp.vec4i(0)  # 0 empty, 1 quantised, 2 not finite
    flags = int(0)
    for j in range(4):
        if codes[j] >= 0:
            lo = lo_m[j]
            hi = hi_m[j]
            if not lo[0] > hi[0]:
                if wp.isfinite(lo) and wp.isfinite(hi):
                    kind[j] = 1
                    origin = wp.min(origin, lo)
                    top = wp.max(top, hi)
                else:
                    kind[j] = 2
                    flags = _OPEN_ALL
    e = wp.vec3i(1)
    if origin[0] > top[0]:
        origin = wp.vec3(0.0)
    else:
        for k in range(3):
            e[k] = _scale_exponent(top[k] - origin[k])
    words = wp.vec4i(0)  # lo.x, hi.x, lo.y, hi.y
    zw = wp.vec4i(0)  # lo.z, hi.z
    for j in range(4):
        sh = 8 * j
        if kind[j] == 1:
            lo = lo_m[j]
            hi = hi_m[j]
            for k in range(3):
                qb = _quantise(lo[k], hi[k], origin[k], bits_float(e[k] << 23))
                if k < 2:
                    words[2 * k] = words[2 * k] | (qb[0] << sh)
                    words[2 * k + 1] = words[2 * k + 1] | (qb[1] << sh)
                else:
                    zw[0] = zw[0] | (qb[0] << sh)
                    zw[1] = zw[1] | (qb[1] << sh)
        elif kind[j] == 2:  # opened by the node's flag: any non-empty pattern
            words[1] = words[1] | (255 << sh)
            words[3] = words[3] | (255 << sh)
            zw[1] = zw[1] | (255 << sh)
        else:  # empty: lo.x = 255 > hi.x = 0
            words[0] = words[0] | (255 << sh)
    header = wp.vec4i(float_bits(origin[0]), float_bits(origin[1]), float_bits(origin[2]),
                      e[0] | (e[1] << 8) | (e[2] << 16) | flags)
    return header, words, zw, origin, e


@wp.func
def compress_boxes(lo_m: mat43, hi_m: mat43, codes: wp.vec4i, refs: wp.vec4i, seg: wp.array(dtype=wp.vec3),
                   slot_id: wp.array(dtype=wp.int32), seg_boxes: int, q: wp.array(dtype=wp.vec4i),
                   segq: wp.array(dtype=wp.vec2i), w: int):
    """Wide node ``w`` quantised from its children's boxes ``(lo_m[j], hi_m[j])`` (rows with
    ``codes[j] < 0`` are empty slots, not read): the four rows ``q[4 w .. 4 w + 3]`` (``refs`` the last)
    and, with ``seg_boxes``, its leaf children's segment boxes ``segq`` (:func:`compress_node`)."""
    header, words, zw, origin, e = quantise_children(lo_m, hi_m, codes)
    q[4 * w] = header
    q[4 * w + 1] = words
    q[4 * w + 2] = zw
    q[4 * w + 3] = refs
    if seg_boxes != 0:
        for j in range(4):
            if codes[j] >= 0 and refs[j] < 0:
                code = -1 - refs[j]
                first = code >> 3
                for sl in range(first, first + (code & 7) + 1):
                    live = int(slot_id[sl] >= 0)
                    segq[sl] = _seg_word(seg[2 * sl], seg[2 * sl + 1], live, origin, e)


@wp.kernel
def _compress_kernel(node_box: wp.array(dtype=wp.vec4), wlinks: wp.array(dtype=wp.vec4i),
                     seg: wp.array(dtype=wp.vec3), slot_id: wp.array(dtype=wp.int32), seg_boxes: int,
                     q: wp.array(dtype=wp.vec4i), segq: wp.array(dtype=wp.vec2i)):
    """Wide node ``w`` quantised (:func:`compress_node`)."""
    compress_node(node_box, wlinks, seg, slot_id, seg_boxes, q, segq, wp.tid(), 0)


class CompressedWide:
    """The compressed rows of a :class:`WideNodes` over an edge tree (see the module docstring).

    Args:
        node_box: the edge tree's packed nodes (``EdgeBvh.node_box``), refitted.
        wlinks: the wide nodes' ``links`` (refs in row 6, box codes in row 7).
        count: W, the wide nodes.
        seg, slot_id: the edge tree's segments and slot ids (``EdgeBvh.seg`` / ``slot_id``): with
            ``seg_boxes``, each slot's segment box is quantised on its leaf's node grid (``segq``).
        seg_boxes: keep ``segq`` (8 bytes a slot), which the walk tests before each segment.
        stream: the stream to build on (``None`` on the CPU).

    Attributes:
        q: ``wp.array(dtype=wp.vec4i)`` (4 W,); qf: the same memory as ``wp.vec4``.
        segq: ``wp.array(dtype=wp.vec2i)`` (slots,), or a one-entry dummy without ``seg_boxes``.

    :meth:`refresh` after each refit (one launch).
    """

    def __init__(self, node_box: wp.array, wlinks: wp.array, count: int, seg: wp.array, slot_id: wp.array,
                 seg_boxes: bool = False, stream: wp.Stream | None = None) -> None:
        dev = node_box.device
        self.node_box, self.wlinks, self.count, self.seg, self.slot_id = node_box, wlinks, count, seg, slot_id
        self.seg_boxes = bool(seg_boxes)
        self.q = wp.zeros(4 * count, dtype=wp.vec4i, device=dev)
        self.qf = wp.array(ptr=self.q.ptr, dtype=wp.vec4, shape=self.q.shape, device=dev)
        self.segq = wp.zeros(slot_id.shape[0] if seg_boxes else 1, dtype=wp.vec2i, device=dev)
        self.refresh(stream)

    @property
    def nbytes(self) -> int:
        """Bytes of the compressed nodes (and segment boxes)."""
        return 64 * self.count + (8 * self.segq.shape[0] if self.seg_boxes else 0)

    def refresh(self, stream: wp.Stream | None = None) -> None:
        """Quantise the boxes again from the refitted ``node_box`` and ``seg`` (one launch)."""
        wp.launch(_compress_kernel, self.count,
                  [self.node_box, self.wlinks, self.seg, self.slot_id, int(self.seg_boxes)], [self.q, self.segq],
                  device=self.q.device, stream=stream)
