"""Edge refit that climbs the compressed 4-wide nodes themselves, no binary level (issue 11, opt-in).

The default refit of a tree with compressed wide nodes (``+q``/``+qs``, :mod:`rayd.engine.edge_wide_q`)
climbs the binary tree (about 22 levels for 3.1 M edges in leaves of 8: per level a fence, an atomic and
a dependent L2 read) and then re-quantises every wide node in one more launch. Here the climb runs on
the wide tree (about 8-11 levels): a thread per leaf, in slot order, forms its leaf's box from the
segments and stores it as floats in its wide parent's child slot (``cbox``, two vec4 per child, a
node's four children in one 128-byte line); an arrival counter per wide node counts its non-empty
children; the last to arrive reads the children's boxes back through L2 (others wrote them before
their fence and increment), quantises the node at once (:func:`~rayd.engine.edge_wide_q.compress_boxes`,
the code of the separate launch, so the rows are bit-identical), stores the union in its own slot of
its parent and goes up. The root writes ``root_box``. The last thread also resets the counter (no one
else touches it in this launch), so no reset launch and no parity rule.

The binary tree's packed boxes (``EdgeBvh.node_box``) are not written. No query reads them (point, ray
and top-k searches walk the wide tree since the 18th session); the binary walk (``WIDE_RAYS`` off),
``EdgeBvh.packed_nodes`` and anything else that reads them call ``EdgeBvh.binary_boxes()``, which runs
the binary climb once (from the final slots) when the last refit skipped it.

Modes (``edge_refit_fused.REFIT_MODE`` / ``REFIT_MODE_CUDA``, ``RAYD_EDGE_REFIT``; ``EdgeBvh(refit=...)``):

* ``"wide"``: the slots launch (``tree_refit._tree_slots_kernel``), then this climb (two launches);
* ``"wide1"``: one launch, the leaf threads gather their segments from the live endpoints; a ``+qs``
  tree refits as ``"wide"`` (its segment boxes need every slot of a node final, as ``"fused1"``);
* ``"wide3"``: the slots launch, the climb writing only the float boxes, then a thread per wide node
  quantises it from its children's float boxes (one 128-byte line; three launches, the quantisation
  off the climb's critical path, as in ``"split"``).
* ``"wide3l"``: ``"wide3"`` with a climb kernel compiled without the quantisation and slab code it skips
  (fewer registers: more climbing threads in flight).
* ``"wideg"``: as ``"wide3l"`` without the slots launch (two launches): each leaf thread gathers its up to 8
  slots itself, every load of a round in flight together (:func:`leaf_gather_box8`: the slots' edges, then
  their vertex ids and masks, then the endpoints), writes them to ``seg`` / ``slot_id`` and climbs. ``"wide1"``
  gathered slot after slot (three dependent loads each), which the H100 measured slower than ``"wide3"``.

References:
    Karras 2012, "Maximizing Parallelism in the Construction of BVHs, Octrees,
    and k-d Trees", HPG 2012 (the arrival counters).
    Ylitie, Karras, Laine 2017, "Efficient Incoherent Ray Traversal on GPUs Through
    Compressed Wide BVHs", HPG 2017 (the compressed nodes).
"""

from __future__ import annotations

import warp as wp

from rayd.engine.edge_leaf_slab import slab_record
from rayd.engine.edge_wide_q import compress_boxes, mat43
from rayd.engine.refit import _fence, _load_l2
from rayd.engine.tree_refit import _INF, _tree_slots_kernel, leaf_segment_box

wp.set_module_options({"enable_backward": False})

#: The refit modes of this module (``edge_refit_fused.REFIT_MODES`` lists them with the others).
WIDE_MODES = ("wide", "wide1", "wide3", "wide3l", "wideg")
#: ``cuda_max_registers`` of the lean climb (``"wide3l"``; read at import; 0: the compiler's choice). ptxas 13.0 for
#: sm_90: the full climb kernel takes 100 registers, the lean one 64, and fits 48 without spilling (40: spills);
#: the gathering one (``"wideg"``) takes 86 and spills when capped at 64, so it is left uncapped.
LEAN_MAX_REGISTERS = 48


@wp.kernel
def _up_kernel(wlinks: wp.array(dtype=wp.vec4i), up: wp.array(dtype=wp.int32)):
    """``up[r] = 4 w + j`` for wide node ``r``, child ``j`` of wide node ``w`` (the root keeps -1)."""
    w = wp.tid()
    refs = wlinks[8 * w + 6]
    codes = wlinks[8 * w + 7]
    for j in range(4):
        if codes[j] >= 0 and refs[j] >= 0:
            up[refs[j]] = 4 * w + j


@wp.kernel
def _meta_kernel(wlinks: wp.array(dtype=wp.vec4i), up: wp.array(dtype=wp.int32), meta: wp.array(dtype=wp.int32)):
    """``meta[w] = up[w] << 2 | (children - 1)``: where the node's box goes (negative: the root) and how
    many non-empty children arrive."""
    w = wp.tid()
    codes = wlinks[8 * w + 7]
    n = int(0)
    for j in range(4):
        if codes[j] >= 0:
            n += 1
    meta[w] = (up[w] << 2) | (n - 1)


@wp.kernel
def _first_kernel(leaves: wp.array(dtype=wp.vec4i), leaf_at: wp.array(dtype=wp.int32)):
    """``leaf_at[first] = t`` for the binary tree's leaf ``t`` (in slot order)."""
    t = wp.tid()
    leaf_at[leaves[t][1]] = t


@wp.kernel
def _leaves_kernel(wlinks: wp.array(dtype=wp.vec4i), leaf_at: wp.array(dtype=wp.int32),
                   wleaf: wp.array(dtype=wp.vec4i)):
    """``wleaf[t] = (4 w + j, first, count, 0)`` for the leaf child ``j`` of wide node ``w`` holding
    slots ``first .. first + count - 1``, at the rank ``t`` of its first slot (slot order)."""
    w = wp.tid()
    refs = wlinks[8 * w + 6]
    codes = wlinks[8 * w + 7]
    for j in range(4):
        if codes[j] >= 0 and refs[j] < 0:
            code = -1 - refs[j]
            first = code >> 3
            wleaf[leaf_at[first]] = wp.vec4i(4 * w + j, first, (code & 7) + 1, 0)


_vec8i = wp.types.vector(length=8, dtype=wp.int32)
_mat83 = wp.types.matrix(shape=(8, 3), dtype=wp.float32)


@wp.func
def leaf_gather_box8(first: int, count: int, points: wp.array(dtype=wp.vec3), edge_v: wp.array(dtype=wp.vec2i),
                     mask: wp.array(dtype=wp.uint8), order: wp.array(dtype=wp.int32), seg: wp.array(dtype=wp.vec3),
                     slot_id: wp.array(dtype=wp.int32)):
    """``(lo, hi)``: the box of the unmasked segments of slots ``first .. first + count - 1`` (``count <= 8``),
    gathered from the live endpoints and written to ``seg`` / ``slot_id`` as ``tree_refit.leaf_segment_box``
    does (the same values), in three rounds of independent loads (unrolled loops of 8, predicated on
    ``count``): edges, then vertex ids and masks, then endpoints; the stores come after every load."""
    inf = _INF
    e = _vec8i()
    v0 = _vec8i()
    v1 = _vec8i()
    on = _vec8i()
    for j in range(8):
        if j < count:
            e[j] = order[first + j]
    for j in range(8):
        if j < count:
            ev = edge_v[e[j]]
            v0[j] = ev[0]
            v1[j] = ev[1]
            on[j] = int(mask[e[j]])
    pa = _mat83()
    pb = _mat83()
    for j in range(8):
        if j < count:
            pa[j] = points[v0[j]]
            pb[j] = points[v1[j]]
    lo = wp.vec3(inf, inf, inf)
    hi = wp.vec3(-inf, -inf, -inf)
    for j in range(8):
        if j < count:
            s = first + j
            a = pa[j]
            b = pb[j]
            seg[2 * s] = a
            seg[2 * s + 1] = b
            if on[j] != 0:
                slot_id[s] = e[j]
                lo = wp.min(lo, wp.min(a, b))
                hi = wp.max(hi, wp.max(a, b))
            else:
                slot_id[s] = wp.int32(-1)
    return lo, hi


def _make_wide_refit_kernel(gather8: bool, lean: bool):
    """The wide climb kernel; ``gather8``: its leaf threads gather their slots by :func:`leaf_gather_box8`
    (``"wideg"``), else as ``tree_refit.leaf_segment_box`` (from the slots launch, or one by one); ``lean``: the
    climb of float boxes only, no quantisation and no slabs compiled in (its ``quantise`` and ``with_slab``
    arguments are ignored; ``"wide3l"``, ``"wideg"``: fewer registers, so more climbing threads per SM)."""

    def kernel(
        points: wp.array(dtype=wp.vec3),
        edge_v: wp.array(dtype=wp.vec2i),
        mask: wp.array(dtype=wp.uint8),
        order: wp.array(dtype=wp.int32),
        wleaf: wp.array(dtype=wp.vec4i),
        meta: wp.array(dtype=wp.int32),
        wlinks: wp.array(dtype=wp.vec4i),
        seg_boxes: int,
        counters: wp.array(dtype=wp.int32),
        cbox: wp.array(dtype=wp.vec4),
        seg: wp.array(dtype=wp.vec3),
        slot_id: wp.array(dtype=wp.int32),
        root_box: wp.array(dtype=wp.vec3),
        q: wp.array(dtype=wp.vec4i),
        segq: wp.array(dtype=wp.vec2i),
        gathered: int,
        quantise: int,
        direction: wp.array(dtype=wp.int32),
        slab: wp.array(dtype=wp.vec4i),
        with_slab: int,
    ):
        """Leaf ``wp.tid()`` climbs (:func:`_wide_climb`)."""
        if wp.static(lean):
            _wide_climb(wp.tid(), points, edge_v, mask, order, wleaf, meta, wlinks, seg_boxes, counters, cbox, seg,
                        slot_id, root_box, q, segq, gathered, 0, direction, slab, 0, wp.static(int(gather8)))
        else:
            _wide_climb(wp.tid(), points, edge_v, mask, order, wleaf, meta, wlinks, seg_boxes, counters, cbox, seg,
                        slot_id, root_box, q, segq, gathered, quantise, direction, slab, with_slab,
                        wp.static(int(gather8)))

    options = {"cuda_max_registers": LEAN_MAX_REGISTERS} if lean and not gather8 and LEAN_MAX_REGISTERS else {}
    return wp.kernel(kernel, name=f"edge_wide_refit{'_g8' if gather8 else ''}{'_lean' if lean else ''}",
                     module="unique", enable_backward=False, **options)


@wp.func
def _wide_climb(
    t: int,
    points: wp.array(dtype=wp.vec3),
    edge_v: wp.array(dtype=wp.vec2i),
    mask: wp.array(dtype=wp.uint8),
    order: wp.array(dtype=wp.int32),
    wleaf: wp.array(dtype=wp.vec4i),
    meta: wp.array(dtype=wp.int32),
    wlinks: wp.array(dtype=wp.vec4i),
    seg_boxes: int,
    counters: wp.array(dtype=wp.int32),
    cbox: wp.array(dtype=wp.vec4),
    seg: wp.array(dtype=wp.vec3),
    slot_id: wp.array(dtype=wp.int32),
    root_box: wp.array(dtype=wp.vec3),
    q: wp.array(dtype=wp.vec4i),
    segq: wp.array(dtype=wp.vec2i),
    gathered: int,
    quantise: int,
    direction: wp.array(dtype=wp.int32),
    slab: wp.array(dtype=wp.vec4i),
    with_slab: int,
    gather8: int,
):
    """Leaf ``t``: its box, then the climb of the wide tree (see the module docstring); ``quantise`` 0:
    the nodes are quantised afterwards (``_compress_cbox_kernel``); ``with_slab``: also the leaf's oriented
    slab (``edge_leaf_slab.slab_record``; ``wleaf`` is in the order of the tree's leaves, as ``direction``);
    ``gather8``: the slots gathered by :func:`leaf_gather_box8` (``gathered`` is then ignored)."""
    leaf = wleaf[t]
    at = int(leaf[0])
    lo = wp.vec3(0.0)
    hi = wp.vec3(0.0)
    if gather8 != 0:
        lo, hi = leaf_gather_box8(int(leaf[1]), int(leaf[2]), points, edge_v, mask, order, seg, slot_id)
    else:
        lo, hi = leaf_segment_box(int(leaf[1]), int(leaf[2]), 1 - gathered, points, edge_v, mask, order, seg,
                                  slot_id)
    if with_slab != 0:
        slab[leaf[1]] = slab_record(int(leaf[1]), int(leaf[2]), int(direction[t]), seg, slot_id)
    while True:
        w = at >> 2
        m = int(meta[w])
        codes = wlinks[8 * w + 7]
        refs = wlinks[8 * w + 6]
        cbox[2 * at] = wp.vec4(lo[0], lo[1], lo[2], 0.0)
        cbox[2 * at + 1] = wp.vec4(hi[0], hi[1], hi[2], 0.0)
        _fence()
        if wp.atomic_add(counters, w, 1) != (m & 3):
            return  # a sibling's thread finishes the node
        counters[w] = 0  # every child has arrived: ready for the next refit
        _fence()  # and read what the siblings wrote before their fence and increment
        lo_m = mat43()
        hi_m = mat43()
        for j in range(4):
            if codes[j] >= 0:
                a = _load_l2(cbox, 8 * w + 2 * j)
                b = _load_l2(cbox, 8 * w + 2 * j + 1)
                lo_m[j] = wp.vec3(a[0], a[1], a[2])
                hi_m[j] = wp.vec3(b[0], b[1], b[2])
                lo = wp.min(lo, lo_m[j])
                hi = wp.max(hi, hi_m[j])
        if quantise != 0:
            compress_boxes(lo_m, hi_m, codes, refs, seg, slot_id, seg_boxes, q, segq, w)
        at = m >> 2
        if at < 0:
            root_box[0] = lo
            root_box[1] = hi
            return


# (gather8, lean) -> the climb kernel (each compiled when first launched)
_CLIMB_KERNELS = {(g, lean): _make_wide_refit_kernel(g, lean) for g in (False, True) for lean in (False, True)}
_wide_refit_kernel = _CLIMB_KERNELS[(False, False)]


@wp.kernel
def _compress_cbox_kernel(cbox: wp.array(dtype=wp.vec4), wlinks: wp.array(dtype=wp.vec4i),
                          seg: wp.array(dtype=wp.vec3), slot_id: wp.array(dtype=wp.int32), seg_boxes: int,
                          q: wp.array(dtype=wp.vec4i), segq: wp.array(dtype=wp.vec2i)):
    """Wide node ``w`` quantised from its children's float boxes (``"wide3"``: after the climb)."""
    w = wp.tid()
    codes = wlinks[8 * w + 7]
    lo_m = mat43()
    hi_m = mat43()
    for j in range(4):
        if codes[j] >= 0:
            a = cbox[8 * w + 2 * j]
            b = cbox[8 * w + 2 * j + 1]
            lo_m[j] = wp.vec3(a[0], a[1], a[2])
            hi_m[j] = wp.vec3(b[0], b[1], b[2])
    compress_boxes(lo_m, hi_m, codes, wlinks[8 * w + 6], seg, slot_id, seg_boxes, q, segq, w)


class WideRefit:
    """The wide-tree refit of one ``EdgeBvh`` whose wide copy is compressed (see the module docstring).

    Args:
        tree: the edge tree's :class:`~rayd.engine.tree_refit.TreeRefit` (its leaves, in slot order).
        compressed: the :class:`~rayd.engine.edge_wide_q.CompressedWide` rows (``wlinks``, ``q``, ``segq``).
        num_slots: the tree's segment slots.
        mode: one of :data:`WIDE_MODES`.
        stream: the stream to build on (``None`` on the CPU).

    Attributes:
        gathered: the leaf threads gather their segments (``"wide1"`` without segment boxes: one launch;
            ``"wideg"``: two, the climb and the quantisation).
        writes_binary: False: the binary tree's packed boxes are left as they were.
        slabs: the tree's :class:`~rayd.engine.edge_leaf_slab.LeafSlabs` (set by the caller), whose bounds the
            leaf threads then write (no launch of their own), or None.
    """

    writes_binary = False
    slabs = None

    def __init__(self, tree, compressed, num_slots: int, mode: str, stream: wp.Stream | None = None) -> None:
        if mode not in WIDE_MODES:
            raise ValueError(f"rayd.engine.WideRefit(): 'mode' must be one of {WIDE_MODES}, got {mode!r}")
        self.compressed = c = compressed
        self.gather8 = mode == "wideg"  # the quantising launch comes after the climb: segment boxes too
        self.lean = mode in ("wide3l", "wideg")
        self.gathered = (mode == "wide1" and not c.seg_boxes) or self.gather8
        self.quantise = mode not in ("wide3", "wide3l", "wideg")
        dev = c.q.device
        self.num_leaves = tree.num_leaves
        self._no_slab = (wp.zeros(1, dtype=wp.int32, device=dev), wp.zeros(1, dtype=wp.vec4i, device=dev))
        up = wp.full(c.count, -1, dtype=wp.int32, device=dev)
        self.meta = wp.empty(c.count, dtype=wp.int32, device=dev)
        self.counters = wp.zeros(c.count, dtype=wp.int32, device=dev)
        self.cbox = wp.zeros(8 * c.count, dtype=wp.vec4, device=dev)
        self.wleaf = wp.empty(self.num_leaves, dtype=wp.vec4i, device=dev)
        leaf_at = wp.empty(num_slots, dtype=wp.int32, device=dev)
        wp.launch(_up_kernel, c.count, [c.wlinks], [up], device=dev, stream=stream)
        wp.launch(_meta_kernel, c.count, [c.wlinks, up], [self.meta], device=dev, stream=stream)
        wp.launch(_first_kernel, self.num_leaves, [tree.leaves], [leaf_at], device=dev, stream=stream)
        wp.launch(_leaves_kernel, c.count, [c.wlinks, leaf_at], [self.wleaf], device=dev, stream=stream)
        if stream is not None:
            wp.synchronize_stream(stream)  # before the temporaries are released

    def refit(self, points: wp.array, edge_v: wp.array, mask: wp.array, order: wp.array, seg: wp.array,
              slot_id: wp.array, node_box: wp.array, root_box: wp.array) -> None:
        """Segments, slot ids, the compressed rows (and segment boxes) and the root box from the live
        ``points`` and ``mask``, on the current stream, in one or two launches (no host synchronisation);
        ``node_box`` is not written (``EdgeBvh.binary_boxes``)."""
        c = self.compressed
        slab = self._no_slab if self.slabs is None else (self.slabs.direction, self.slabs.slab)
        if not self.gathered:
            wp.launch(_tree_slots_kernel, dim=order.shape[0], inputs=[points, edge_v, mask, order],
                      outputs=[seg, slot_id], device=points.device)
        kernel = _CLIMB_KERNELS[(self.gather8, self.lean and self.slabs is None)]  # slabs: the kernel writing them
        wp.launch(kernel, dim=self.num_leaves,
                  inputs=[points, edge_v, mask, order, self.wleaf, self.meta, c.wlinks, int(c.seg_boxes)],
                  outputs=[self.counters, self.cbox, seg, slot_id, root_box, c.q, c.segq, int(self.gathered),
                           int(self.quantise), *slab, int(self.slabs is not None)],
                  device=points.device)
        if not self.quantise:
            wp.launch(_compress_cbox_kernel, c.count, [self.cbox, c.wlinks, seg, slot_id, int(c.seg_boxes)],
                      [c.q, c.segq], device=points.device)
