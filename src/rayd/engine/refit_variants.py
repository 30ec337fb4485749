"""Variants of the fused refit that move fewer bytes per node (issue 18, "update").

``RAYD_REFIT_VARIANT`` (or ``refit.set_refit_variant``) names a comma-separated set of flags;
the empty set (the default) keeps ``refit._fused_refit_kernel`` as it is. Any flag selects
:func:`_variant_refit_kernel` instead, which climbs like the ``"climb1"`` order (one fence
before each counter, the finishing thread reads from L2 without a second fence) and:

- ``"sibling"``: the finishing thread keeps its own child's box in registers and reads
  only the sibling's box (two 16-byte L2 loads, not four);
- ``"pairslot"`` (implies ``"sibling"``; trees with pair nodes): each node's box is written,
  by the thread that finishes it, into its half of the parent's pair node (6 floats at
  ``16 k + 6 side``), and the finishing thread reads the sibling's half from there (two
  16-byte L2 loads of the same 48-byte node); the parent no longer writes its pair node
  whole. A per-node ``slot`` (``2 k + side``, ``-1`` at the root), made once, replaces the
  reads of the parent's child indices and pair number;
- ``"acqrel"``: each arrival is one ``atom.add.acq_rel.gpu`` (release of this thread's box
  writes, acquire of the sibling's) instead of ``__threadfence()`` then a relaxed add (the
  CPU build: a plain atomic add, its threads see each other's writes);
- ``"late"``: the leaf's corners (48 bytes per triangle) and triangle boxes are written when
  its thread stops climbing, not before its first fence (no fence waits for them; the
  corners are read again, from L1/L2);
- ``"wide"``: a node's box is written as two 16-byte stores (xyz and its index word, read
  again and written back unchanged) instead of six 4-byte stores;
- ``"noitems"``: the per-triangle boxes ``TriangleScene.lowers``/``uppers`` (24 bytes per
  triangle) are not rewritten where the scene says nothing reads them after the build
  (``TriangleScene.keep_item_boxes = False``, set by the scene core for its flat scene;
  instanced meshes keep them, their object bounds are read from them).

Every variant leaves its arrival counters zero (the second arrival clears the parent's), so a
variant refit is one launch with no memset before it.

Every variant computes the same boxes as the default (unions by min/max are exact), so
the refit's result is bit-identical; ``tests/engine/test_refit_variants.py`` checks it.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.refit import BOX_PADDING, VARIANT_FLAGS, FusedRefit, _fence, _load_l2, _write_box

wp.set_module_options({"enable_backward": False})

FLAGS = VARIANT_FLAGS  # (chosen by refit.set_refit_variant / RAYD_REFIT_VARIANT)


@wp.func_native("""
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    int old;
    asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], 1;" : "=r"(old) : "l"(wp::address(arr, i)) : "memory");
    return old;
#else
    return wp::atomic_add(arr, i, 1);
#endif
""")
def _arrive(arr: wp.array(dtype=wp.int32), i: int) -> int:
    """``atomic_add(arr, i, 1)`` with release and acquire semantics at device scope (PTX
    ``atom.add.acq_rel.gpu``): it publishes this thread's earlier writes and, for the second arrival,
    makes the sibling's visible, with no separate ``__threadfence`` (a sequentially consistent fence)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    return __int_as_float(x);
#else
    union { int i; float f; } u;
    u.i = x;
    return u.f;
#endif
""")
def _bits_as_float(x: int) -> float:
    """The float whose bits are ``x`` (no conversion), to store an index word with its box's xyz."""
    ...


@wp.func
def _write_node(lowers: wp.array(dtype=wp.vec4), uppers: wp.array(dtype=wp.vec4), lower_f: wp.array(dtype=float),
                upper_f: wp.array(dtype=float), lower_index: wp.array(dtype=wp.vec4i),
                upper_index: wp.array(dtype=wp.vec4i), n: int, lo: wp.vec3, hi: wp.vec3, wide: int):
    """Node ``n``'s box into Warp's halves: 6 scalar stores (``wide`` 0), or two 16-byte stores that
    write the index words back unchanged (``wide`` 1; they are read again, 8 bytes)."""
    if wide != 0:
        lowers[n] = wp.vec4(lo[0], lo[1], lo[2], _bits_as_float(lower_index[n][3]))
        uppers[n] = wp.vec4(hi[0], hi[1], hi[2], _bits_as_float(upper_index[n][3]))
    else:
        _write_box(lower_f, n, lo, hi, 0)
        _write_box(upper_f, n, lo, hi, 1)


@wp.func
def _write_half(boxes_f: wp.array(dtype=float), s: int, lo: wp.vec3, hi: wp.vec3):
    """Store a child's box as its half ``s & 1`` of pair node ``s >> 1`` (6 floats)."""
    base = 16 * (s >> 1) + 6 * (s & 1)
    boxes_f[base] = lo[0]
    boxes_f[base + 1] = lo[1]
    boxes_f[base + 2] = lo[2]
    boxes_f[base + 3] = hi[0]
    boxes_f[base + 4] = hi[1]
    boxes_f[base + 5] = hi[2]


@wp.func
def _leaf_writes(points: wp.array(dtype=wp.vec3), indices: wp.array(dtype=wp.int32), face_base: int, pad: float,
                 primitives: wp.array(dtype=wp.int32), first: int, end: int, item_lowers: wp.array(dtype=wp.vec3),
                 item_uppers: wp.array(dtype=wp.vec3), has_pairs: int, tris: wp.array(dtype=wp.vec4), items: int):
    """The leaf's triangle corners (slot order) and, with ``items``, its triangles' boxes (the corners are
    read again: L1/L2 hits, they were read by this thread's leaf pass)."""
    grow = wp.vec3(pad, pad, pad)
    for slot in range(first, end):
        f = primitives[slot]
        row = 3 * (face_base + f)
        a = points[indices[row]]
        b = points[indices[row + 1]]
        c = points[indices[row + 2]]
        if has_pairs != 0:
            tris[3 * slot] = wp.vec4(a[0], a[1], a[2], 0.0)
            tris[3 * slot + 1] = wp.vec4(b[0], b[1], b[2], 0.0)
            tris[3 * slot + 2] = wp.vec4(c[0], c[1], c[2], 0.0)
        if items != 0:
            item_lowers[f] = wp.min(wp.min(a, b), c) - grow
            item_uppers[f] = wp.max(wp.max(a, b), c) + grow


@wp.kernel
def _slots_kernel(lower_index: wp.array(dtype=wp.vec4i), upper_index: wp.array(dtype=wp.vec4i),
                  number: wp.array(dtype=wp.int32), slots: wp.array(dtype=wp.int32)):
    n = wp.tid()
    low = lower_index[n][3]
    if low < 0:
        return
    right = upper_index[n][3] & 0x7FFFFFFF
    count = lower_index.shape[0]
    if low >= count or right >= count:
        return  # an unused slot of Warp's node array
    slots[low] = 2 * number[n]
    slots[right] = 2 * number[n] + 1


@wp.kernel
def _variant_refit_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    magnitude: wp.array(dtype=float),
    lowers: wp.array(dtype=wp.vec4),
    uppers: wp.array(dtype=wp.vec4),
    lower_f: wp.array(dtype=float),
    upper_f: wp.array(dtype=float),
    lower_index: wp.array(dtype=wp.vec4i),
    upper_index: wp.array(dtype=wp.vec4i),
    parents: wp.array(dtype=wp.int32),
    leaf_nodes: wp.array(dtype=wp.int32),
    primitives: wp.array(dtype=wp.int32),
    counters: wp.array(dtype=wp.int32),
    number: wp.array(dtype=wp.int32),
    slots: wp.array(dtype=wp.int32),
    item_lowers: wp.array(dtype=wp.vec3),
    item_uppers: wp.array(dtype=wp.vec3),
    has_pairs: int,
    tris: wp.array(dtype=wp.vec4),
    boxes: wp.array(dtype=wp.vec4),
    boxes_f: wp.array(dtype=float),
    items: int,
    pairslot: int,
    acqrel: int,
    late: int,
    wide: int,
):
    n = leaf_nodes[wp.tid()]
    if n < 0:
        return
    first = lower_index[n][3] & 0x7FFFFFFF
    end = upper_index[n][3] & 0x7FFFFFFF
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    grow = wp.vec3(pad, pad, pad)
    inf = float(1.0e30)
    lo = wp.vec3(inf, inf, inf)
    hi = wp.vec3(-inf, -inf, -inf)
    for slot in range(first, end):
        f = primitives[slot]
        row = 3 * (face_base + f)
        a = points[indices[row]]
        b = points[indices[row + 1]]
        c = points[indices[row + 2]]
        if has_pairs != 0 and late == 0:
            tris[3 * slot] = wp.vec4(a[0], a[1], a[2], 0.0)
            tris[3 * slot + 1] = wp.vec4(b[0], b[1], b[2], 0.0)
            tris[3 * slot + 2] = wp.vec4(c[0], c[1], c[2], 0.0)
        tlo = wp.min(wp.min(a, b), c) - grow
        thi = wp.max(wp.max(a, b), c) + grow
        if items != 0 and late == 0:
            item_lowers[f] = tlo
            item_uppers[f] = thi
        lo = wp.min(lo, tlo)
        hi = wp.max(hi, thi)
    _write_node(lowers, uppers, lower_f, upper_f, lower_index, upper_index, n, lo, hi, wide)
    s = int(-1)
    if pairslot != 0:
        s = slots[n]
        if s >= 0:
            _write_half(boxes_f, s, lo, hi)
    node = n
    parent = parents[n]
    while parent >= 0:
        arrived = int(0)
        if acqrel != 0:
            arrived = _arrive(counters, parent)
        else:
            _fence()
            arrived = wp.atomic_add(counters, parent, 1)
        if arrived == 0:
            break  # the sibling's thread finishes the parent
        counters[parent] = 0  # (the counter's last use in this launch: zero for the next, no memset)
        slo = wp.vec3()
        shi = wp.vec3()
        if pairslot != 0:
            k = s >> 1
            if (s & 1) == 0:  # this node is the left child: the sibling's half is floats 6..11
                q = _load_l2(boxes, 4 * k + 1)
                r = _load_l2(boxes, 4 * k + 2)
                slo = wp.vec3(q[2], q[3], r[0])
                shi = wp.vec3(r[1], r[2], r[3])
            else:
                q = _load_l2(boxes, 4 * k)
                r = _load_l2(boxes, 4 * k + 1)
                slo = wp.vec3(q[0], q[1], q[2])
                shi = wp.vec3(q[3], r[0], r[1])
        else:
            left = lower_index[parent][3]
            right = upper_index[parent][3] & 0x7FFFFFFF
            is_left = left == node
            sib = wp.where(is_left, right, left)
            sa = _load_l2(lowers, sib)
            sb = _load_l2(uppers, sib)
            slo = wp.vec3(sa[0], sa[1], sa[2])
            shi = wp.vec3(sb[0], sb[1], sb[2])
            if has_pairs != 0:
                k = number[parent]
                llo = wp.where(is_left, lo, slo)
                lhi = wp.where(is_left, hi, shi)
                rlo = wp.where(is_left, slo, lo)
                rhi = wp.where(is_left, shi, hi)
                boxes[4 * k] = wp.vec4(llo[0], llo[1], llo[2], lhi[0])
                boxes[4 * k + 1] = wp.vec4(lhi[1], lhi[2], rlo[0], rlo[1])
                boxes[4 * k + 2] = wp.vec4(rlo[2], rhi[0], rhi[1], rhi[2])
        lo = wp.min(lo, slo)
        hi = wp.max(hi, shi)
        _write_node(lowers, uppers, lower_f, upper_f, lower_index, upper_index, parent, lo, hi, wide)
        node = parent
        parent = parents[node]
        if pairslot != 0:
            s = slots[node]
            if s >= 0:
                _write_half(boxes_f, s, lo, hi)
    if late != 0:  # after the climb: no fence of it waited for these writes
        _leaf_writes(points, indices, face_base, pad, primitives, first, end, item_lowers, item_uppers, has_pairs,
                     tris, items)


def make_slots(nodes, number: wp.array, stream: wp.Stream | None) -> wp.array:
    """int32 (num_nodes,): ``2 k + side`` of each node in its parent's pair node ``k`` (``-1`` at the root
    and at unused node slots)."""
    device = nodes.lowers.device
    count = nodes.lowers.shape[0]
    slots = wp.full(count, -1, dtype=wp.int32, device=device)
    wp.launch(_slots_kernel, count, [nodes.lower_index, nodes.upper_index, number], [slots], device=device,
              stream=stream)
    return slots


def run_variant(fused: FusedRefit, tri, stream: wp.Stream | None) -> None:
    """Refit ``tri`` (its magnitude already measured) by one launch of :func:`_variant_refit_kernel` with
    ``fused.variant``'s flags (``fused``: ``tri``'s :class:`~rayd.engine.refit.FusedRefit`)."""
    n, p = tri.nodes, tri.pairs
    if p is None:  # no pair nodes to write: placeholders
        if getattr(fused, "_no_pairs", None) is None:
            fused._no_pairs = wp.empty(1, dtype=wp.vec4, device=tri.device)
        number, tris, boxes = fused.counters, fused._no_pairs, fused._no_pairs
    else:
        number, tris, boxes = p.number, p.tris, p.boxes
    has_pairs = int(p is not None)
    pairslot = int("pairslot" in fused.variant and has_pairs != 0)
    if pairslot and fused.slots is None:
        fused.slots = make_slots(n, number, stream)
        fused.boxes_f = wp.array(ptr=boxes.ptr, dtype=float, shape=(4 * boxes.shape[0],), device=tri.device)
    slots = fused.slots if pairslot else fused.counters
    boxes_f = fused.boxes_f if pairslot else fused.lower_f
    items = int(not ("noitems" in fused.variant and not tri.keep_item_boxes))
    # (no counters.zero_(): the kernel leaves every counter zero; they start as wp.zeros)
    fused._launches.launch(
        _variant_refit_kernel,
        fused.leaf_nodes.shape[0],  # one thread per leaf (a builder may list only its leaves: ploc_emit.py)
        [tri.points, tri.indices, tri.face_base, tri.magnitude, n.lowers, n.uppers, fused.lower_f, fused.upper_f,
         n.lower_index, n.upper_index, fused.parents, fused.leaf_nodes, n.primitives, fused.counters, number, slots,
         tri.lowers, tri.uppers, has_pairs, tris, boxes, boxes_f, items, pairslot, int("acqrel" in fused.variant),
         int("late" in fused.variant), int("wide" in fused.variant)],
        tri.device,
        stream,
    )
