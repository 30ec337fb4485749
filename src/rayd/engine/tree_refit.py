"""Refit of a binary BVH given as plain arrays, in one launch climbing from its leaves.

The tree is described by arrays that any builder can produce (the edge LBVH of
:mod:`rayd.engine.edge_lbvh`, Warp's SAH tree converted in :mod:`rayd.engine.edge_sah`):

* ``children[j]`` (vec2i): node ids of both children of internal node ``j``; an internal
  node's id is its packed index (``j`` = row of the packed node, root 0);
* ``parent[c]`` (int32): internal node above node id ``c`` (``-1`` for the root);
* ``leaves[t]`` (vec4i): ``(node id, first slot, slot count, parent)`` of leaf ``t``, in
  slot order; a leaf holds the consecutive slots ``first .. first + count - 1``.

Node ids index the box arrays (``lower``/``upper``, one vec4 per id); leaves' ids only
need to differ from those of the internal nodes.

Refit (:meth:`TreeRefit.refit`), two launches: a thread per slot writes the segments and
their ids (coalesced, no dependent climb); then a thread per *leaf* (not per segment)
reads its slots' segments back (contiguous), forms the leaf box and climbs: one atomic
counter per internal node; the second child to arrive (counter odd) reads the other
child's box from L2, writes the packed node and goes on with the union in registers
(Karras 2012, sec. 4; as ``refit.py``). Per level a climbing thread waits for two
dependent loads (its parent's children and the sibling's box) and one atomic, between
two fences.

Why: the climb is latency bound. A warp lives until its longest climb ends (about the
tree's depth in levels), so fewer, higher-starting threads finish sooner; and a leaf
thread that gathered its own segments (slot -> edge -> vertices, three dependent loads
per segment, up to 8 in a row) held its warp longer still. On the H200
(``benchmarks/edge_refit_ab.py``, benchmarks/README.md "Edges"): 3.1 M terrain edges,
leaves of 8: 0.94 ms (thread per segment) -> 0.70-0.76 (thread per leaf) -> 0.43 ms (split);
1.6 M sphere edges: 0.58 -> 0.40 -> 0.25 ms. ``SPLIT = False`` gives the one-launch variant.

References:
    Karras 2012, "Maximizing Parallelism in the Construction of BVHs, Octrees,
    and k-d Trees", HPG 2012.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.refit import _fence, _load_l2

_INF = wp.constant(float("inf"))

wp.set_module_options({"enable_backward": False})

#: Refit in two launches (``TreeRefit.refit(split=...)``): first a thread per slot writes the
#: segments and ids (coalesced, no climb), then a thread per leaf reads its slots' segments back
#: (contiguous) and climbs; else one launch, a thread per leaf gathering its segments itself
#: (H200: 0.76 vs 0.43 ms for 3.1 M terrain edges in leaves of 8; see the module docstring).
SPLIT = True


@wp.kernel
def _tree_slots_kernel(
    points: wp.array(dtype=wp.vec3),
    edge_v: wp.array(dtype=wp.vec2i),
    mask: wp.array(dtype=wp.uint8),
    order: wp.array(dtype=wp.int32),
    seg: wp.array(dtype=wp.vec3),
    slot_id: wp.array(dtype=wp.int32),
):
    """Slot ``s``: the endpoints of edge ``order[s]`` and its id (``-1`` where masked out)."""
    s = wp.tid()
    e = int(order[s])
    ev = edge_v[e]
    seg[2 * s] = points[ev[0]]
    seg[2 * s + 1] = points[ev[1]]
    if mask[e] != wp.uint8(0):
        slot_id[s] = wp.int32(e)
    else:
        slot_id[s] = wp.int32(-1)


@wp.func
def _put_boxes(node_box: wp.array(dtype=wp.vec4), j: int, lo_a: wp.vec3, hi_a: wp.vec3, lo_b: wp.vec3,
               hi_b: wp.vec3):
    """Both children's boxes of packed node ``j`` (``rayd.engine.edges`` layout; links untouched)."""
    node_box[4 * j] = wp.vec4(lo_a[0], lo_a[1], lo_a[2], hi_a[0])
    node_box[4 * j + 1] = wp.vec4(hi_a[1], hi_a[2], lo_b[0], lo_b[1])
    node_box[4 * j + 2] = wp.vec4(lo_b[2], hi_b[0], hi_b[1], hi_b[2])


@wp.func
def _xyz(v: wp.vec4) -> wp.vec3:
    return wp.vec3(v[0], v[1], v[2])


@wp.kernel
def _empty_nodes_kernel(node_box: wp.array(dtype=wp.vec4)):
    """Every packed node's boxes empty (``lo = +inf, hi = -inf``): nodes no refit reaches stay so."""
    j = wp.tid()
    inf = _INF
    e = wp.vec3(inf, inf, inf)
    _put_boxes(node_box, j, e, -e, e, -e)


@wp.func
def leaf_segment_box(first: int, count: int, from_slots: int, points: wp.array(dtype=wp.vec3),
                     edge_v: wp.array(dtype=wp.vec2i), mask: wp.array(dtype=wp.uint8), order: wp.array(dtype=wp.int32),
                     seg: wp.array(dtype=wp.vec3), slot_id: wp.array(dtype=wp.int32)):
    """``(lo, hi)``: the box of the unmasked segments of slots ``first .. first + count - 1``. Read from
    ``seg``/``slot_id`` where ``from_slots`` is nonzero (a slots launch wrote them), else gathered from the
    live endpoints and written there (``slot_id`` -1 for a masked edge). Empty: ``(+inf, -inf)``."""
    inf = _INF
    lo = wp.vec3(inf, inf, inf)
    hi = wp.vec3(-inf, -inf, -inf)
    for s in range(first, first + count):
        if from_slots != 0:
            if slot_id[s] >= 0:
                a = seg[2 * s]
                b = seg[2 * s + 1]
                lo = wp.min(lo, wp.min(a, b))
                hi = wp.max(hi, wp.max(a, b))
        else:
            e = int(order[s])
            ev = edge_v[e]
            a = points[ev[0]]
            b = points[ev[1]]
            seg[2 * s] = a
            seg[2 * s + 1] = b
            if mask[e] != wp.uint8(0):
                slot_id[s] = wp.int32(e)
                lo = wp.min(lo, wp.min(a, b))
                hi = wp.max(hi, wp.max(a, b))
            else:
                slot_id[s] = wp.int32(-1)
    return lo, hi


@wp.kernel
def _tree_refit_kernel(
    points: wp.array(dtype=wp.vec3),
    edge_v: wp.array(dtype=wp.vec2i),
    mask: wp.array(dtype=wp.uint8),
    order: wp.array(dtype=wp.int32),
    leaves: wp.array(dtype=wp.vec4i),
    parent: wp.array(dtype=wp.int32),
    children: wp.array(dtype=wp.vec2i),
    counters: wp.array(dtype=wp.int32),
    lower: wp.array(dtype=wp.vec4),
    upper: wp.array(dtype=wp.vec4),
    seg: wp.array(dtype=wp.vec3),
    slot_id: wp.array(dtype=wp.int32),
    node_box: wp.array(dtype=wp.vec4),
    root_box: wp.array(dtype=wp.vec3),
    gathered: int,
):
    """Leaf ``t``: its segments, ids and box, then the climb (see the module docstring).

    Each refit adds 2 to every internal node's counter; the child that finds it even
    arrived first and stops (no reset launch between refits).
    """
    t = wp.tid()
    leaf = leaves[t]
    node = int(leaf[0])
    first = int(leaf[1])
    p = int(leaf[3])
    inf = _INF
    lo, hi = leaf_segment_box(first, int(leaf[2]), gathered, points, edge_v, mask, order, seg, slot_id)
    if p < 0:  # one leaf holds everything: packed root = (its box, an empty box)
        _put_boxes(node_box, 0, lo, hi, wp.vec3(inf, inf, inf), wp.vec3(-inf, -inf, -inf))
        root_box[0] = lo
        root_box[1] = hi
        return
    lower[node] = wp.vec4(lo[0], lo[1], lo[2], 0.0)
    upper[node] = wp.vec4(hi[0], hi[1], hi[2], 0.0)
    while p >= 0:
        ch = children[p]
        above = int(parent[p])
        _fence()
        if (wp.atomic_add(counters, p, 1) & 1) == 0:
            return  # the sibling's thread finishes the parent
        _fence()  # and reads what the sibling wrote before its own fence and increment
        sib = int(ch[0])
        if sib == node:
            sib = int(ch[1])
        lo_s = _xyz(_load_l2(lower, sib))
        hi_s = _xyz(_load_l2(upper, sib))
        if sib == int(ch[1]):
            _put_boxes(node_box, p, lo, hi, lo_s, hi_s)
        else:
            _put_boxes(node_box, p, lo_s, hi_s, lo, hi)
        lo = wp.min(lo, lo_s)
        hi = wp.max(hi, hi_s)
        if above >= 0:
            lower[p] = wp.vec4(lo[0], lo[1], lo[2], 0.0)
            upper[p] = wp.vec4(hi[0], hi[1], hi[2], 0.0)
        else:
            root_box[0] = lo
            root_box[1] = hi
        node = p
        p = above


class TreeRefit:
    """Leaf-climb refit of a packed binary tree (see the module docstring).

    Args:
        children: ``wp.array(dtype=wp.vec2i)`` (num_inner,), children's node ids per internal node.
        parent: ``wp.array(dtype=wp.int32)`` (num_ids,), parent per node id (``-1``: root).
        leaves: ``wp.array(dtype=wp.vec4i)`` (num_leaves,), ``(node id, first, count, parent)``.
        num_ids: number of node ids (length of the box arrays).

    The arrays are kept (not copied); the tree's topology must not change while this
    object is used.
    """

    def __init__(self, children: wp.array, parent: wp.array, leaves: wp.array, num_ids: int) -> None:
        dev = leaves.device
        self.children = children
        self.parent = parent
        self.leaves = leaves
        self.num_leaves = leaves.shape[0]
        self.counters = wp.zeros(max(children.shape[0], 1), dtype=wp.int32, device=dev)
        self.lower = wp.empty(num_ids, dtype=wp.vec4, device=dev)
        self.upper = wp.empty(num_ids, dtype=wp.vec4, device=dev)

    @staticmethod
    def clear_nodes(node_box: wp.array) -> None:
        """Empty boxes in every packed node (once, before the links are written)."""
        wp.launch(_empty_nodes_kernel, dim=node_box.shape[0] // 4, outputs=[node_box], device=node_box.device)

    def refit(self, points: wp.array, edge_v: wp.array, mask: wp.array, order: wp.array, seg: wp.array,
              slot_id: wp.array, node_box: wp.array, root_box: wp.array, split: bool | None = None) -> None:
        """Segments ``seg[2 s], seg[2 s + 1]`` and ``slot_id[s]`` of every slot ``s`` (edge ``order[s]``
        of ``edge_v`` over ``points``, ``-1`` where ``mask`` is 0), the packed node boxes and the
        root box, on the current stream (no host synchronisation): one launch, or two with
        ``split`` (``None``: ``SPLIT``)."""
        split = SPLIT if split is None else bool(split)
        if split:
            wp.launch(_tree_slots_kernel, dim=order.shape[0], inputs=[points, edge_v, mask, order],
                      outputs=[seg, slot_id], device=points.device)
        wp.launch(_tree_refit_kernel, dim=self.num_leaves,
                  inputs=[points, edge_v, mask, order, self.leaves, self.parent, self.children],
                  outputs=[self.counters, self.lower, self.upper, seg, slot_id, node_box, root_box,
                           int(split)],
                  device=points.device)

    def climb(self, seg: wp.array, slot_id: wp.array, node_box: wp.array, root_box: wp.array) -> None:
        """The packed node boxes and the root box from the segments and ids already in ``seg`` /
        ``slot_id`` (the climb of :meth:`refit` without its slots launch; one launch, current stream)."""
        if getattr(self, "_no_mask", None) is None:  # unread with slots given: a one-entry placeholder
            self._no_mask = wp.zeros(1, dtype=wp.uint8, device=seg.device)
        wp.launch(_tree_refit_kernel, dim=self.num_leaves,
                  inputs=[seg, self.children, self._no_mask, self.parent, self.leaves, self.parent, self.children],
                  outputs=[self.counters, self.lower, self.upper, seg, slot_id, node_box, root_box, 1],
                  device=seg.device)


def single_leaf_tree(num_slots: int, device) -> TreeRefit:
    """A tree that is one leaf of ``num_slots`` slots (packed root = that leaf, nothing)."""
    children = wp.zeros(1, dtype=wp.vec2i, device=device)
    parent = wp.full(2, -1, dtype=wp.int32, device=device)
    leaves = wp.array(np.array([[1, 0, num_slots, -1]], np.int32), dtype=wp.vec4i, device=device)
    return TreeRefit(children, parent, leaves, 2)
