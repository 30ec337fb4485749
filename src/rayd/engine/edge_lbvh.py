"""Karras 2012 linear BVH over segment midpoints (the ``"lbvh"`` builder of :class:`EdgeBvh`).

1. Morton codes of the segment midpoints (63 bits, 21 per axis, in cubic cells: one
   scale for all axes; or 30 bits), a stable radix sort of them;
2. one kernel that emits every internal node from the sorted codes, ties between
   equal codes broken by sorted position (Karras 2012), with the sorted range of each;
3. the tree's depth (one small host read); the links of the packed nodes once, where a
   subtree of at most ``leaf_size`` segments becomes one leaf (its range of slots);
4. the packed leaves (subtrees of at most ``leaf_size`` segments, in slot order) for
   the refit of :mod:`rayd.engine.tree_refit` (:meth:`Lbvh.refit_tree`): one launch, a
   thread per leaf climbing with one atomic counter per node.

Node layout: internal nodes ``0 .. n-2`` (root 0), leaves ``n-1 .. 2n-2``; leaf
``n-1+i`` holds the ``i``-th segment in Morton order (slot ``i`` of the packed tree).

References:
    Karras 2012, "Maximizing Parallelism in the Construction of BVHs, Octrees,
    and k-d Trees", HPG 2012.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.morton import morton_code
from rayd.engine.tree_refit import TreeRefit

# Build kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})


@wp.func
def _msb(x: int) -> int:
    """Index of the highest set bit of ``x > 0``."""
    r = int(0)
    if x >= 65536:
        r += 16
        x = x >> 16
    if x >= 256:
        r += 8
        x = x >> 8
    if x >= 16:
        r += 4
        x = x >> 4
    if x >= 4:
        r += 2
        x = x >> 2
    if x >= 2:
        r += 1
    return r


@wp.func
def _msb64(x: wp.int64) -> int:
    """Index of the highest set bit of ``0 < x < 2^63``."""
    r = int(0)
    for step in range(5):
        w = 32 >> step  # 32, 16, 8, 4, 2
        if x >= (wp.int64(1) << wp.int64(w)):
            r += w
            x = x >> wp.int64(w)
    if x >= wp.int64(2):
        r += 1
    return r


@wp.func
def _delta(codes: wp.array(dtype=wp.int64), n: int, i: int, j: int) -> int:
    """Length of the common prefix of keys ``i`` and ``j`` (-1 outside ``[0, n)``).

    Keys are 63-bit (or shorter, zero-extended); equal keys continue with the 32-bit
    indices (Karras 2012, sec. 4).
    """
    if j < 0 or j >= n:
        return -1
    ci = codes[i]
    cj = codes[j]
    if ci == cj:
        return 64 + 31 - _msb(i ^ j)
    return 63 - _msb64(ci ^ cj)


@wp.kernel
def _edges_gather_kernel(
    points: wp.array(dtype=wp.vec3),
    edge_v: wp.array(dtype=wp.vec2i),
    centroid: wp.array(dtype=wp.vec3),
    bounds: wp.array(dtype=float),
):
    e = wp.tid()
    ev = edge_v[e]
    c = 0.5 * (points[ev[0]] + points[ev[1]])
    centroid[e] = c
    for k in range(3):
        wp.atomic_min(bounds, k, c[k])
        wp.atomic_max(bounds, 3 + k, c[k])


@wp.kernel
def _edges_morton_kernel(
    centroid: wp.array(dtype=wp.vec3),
    bounds: wp.array(dtype=float),
    bits: int,
    cubic: int,
    codes: wp.array(dtype=wp.int64),
    order: wp.array(dtype=wp.int32),
):
    """Morton code (``morton.morton_code``) of ``bits`` bits per axis (10: 30-bit keys, 21: 63-bit keys)."""
    e = wp.tid()
    code = morton_code(centroid[e], bounds, bits, cubic)
    codes[e] = code
    order[e] = wp.int32(e)


@wp.kernel
def _edges_hierarchy_kernel(
    codes: wp.array(dtype=wp.int64),
    n: int,
    left: wp.array(dtype=wp.int32),
    right: wp.array(dtype=wp.int32),
    parent: wp.array(dtype=wp.int32),
    first: wp.array(dtype=wp.int32),
    size: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    d = int(1)
    if _delta(codes, n, i, i + 1) < _delta(codes, n, i, i - 1):
        d = -1
    dmin = _delta(codes, n, i, i - d)
    lmax = int(2)
    while _delta(codes, n, i, i + lmax * d) > dmin:
        lmax = lmax * 2
    length = int(0)
    t = lmax // 2
    while t >= 1:
        if _delta(codes, n, i, i + (length + t) * d) > dmin:
            length = length + t
        t = t // 2
    j = i + length * d
    dnode = _delta(codes, n, i, j)
    s = int(0)
    divider = int(2)
    t = (length + divider - 1) // divider
    while t >= 1:
        if _delta(codes, n, i, i + (s + t) * d) > dnode:
            s = s + t
        if t == 1:
            break
        divider = divider * 2
        t = (length + divider - 1) // divider
    gamma = i + s * d + wp.min(d, 0)
    lo = wp.min(i, j)
    hi = wp.max(i, j)
    a = gamma
    if lo == gamma:
        a = n - 1 + gamma
    b = gamma + 1
    if hi == gamma + 1:
        b = n - 1 + gamma + 1
    first[i] = wp.int32(lo)
    size[i] = wp.int32(hi - lo + 1)
    left[i] = wp.int32(a)
    right[i] = wp.int32(b)
    parent[a] = wp.int32(i)
    parent[b] = wp.int32(i)


@wp.kernel
def _edges_depth_kernel(parent: wp.array(dtype=wp.int32), depth: wp.array(dtype=wp.int32)):
    """Deepest internal node's depth (root 0) into ``depth[0]``."""
    i = wp.tid()
    k = int(0)
    node = i
    while node > 0:
        node = int(parent[node])
        k += 1
    wp.atomic_max(depth, 0, k)


@wp.func
def _link_child(n: int, leaf_size: int, first: wp.array(dtype=wp.int32), size: wp.array(dtype=wp.int32),
                c: int) -> wp.vec2i:
    """(code, count) of Karras node ``c`` as a packed child: subtrees of at most ``leaf_size``
    segments become one leaf (their slots are contiguous: the sorted range of the node)."""
    if c >= n - 1:
        return wp.vec2i(c - (n - 1), 1)
    if int(size[c]) <= leaf_size:
        return wp.vec2i(int(first[c]), int(size[c]))
    return wp.vec2i(c, 0)


@wp.kernel
def _edges_links_kernel(
    n: int,
    leaf_size: int,
    left: wp.array(dtype=wp.int32),
    right: wp.array(dtype=wp.int32),
    first: wp.array(dtype=wp.int32),
    size: wp.array(dtype=wp.int32),
    node_link: wp.array(dtype=wp.vec4i),
):
    """Links of packed node ``j`` (Karras node ``j``; those inside a collapsed subtree are never reached)."""
    j = wp.tid()
    if j == 0 and n <= leaf_size:  # the whole tree is one leaf: packed root = (that leaf, nothing)
        node_link[3] = wp.vec4i(0, 0, n, 0)
        return
    ca = _link_child(n, leaf_size, first, size, int(left[j]))
    cb = _link_child(n, leaf_size, first, size, int(right[j]))
    node_link[4 * j + 3] = wp.vec4i(ca[0], cb[0], ca[1], cb[1])


@wp.kernel
def _edges_leaf_start_kernel(
    n: int,
    leaf_size: int,
    parent: wp.array(dtype=wp.int32),
    first: wp.array(dtype=wp.int32),
    size: wp.array(dtype=wp.int32),
    start: wp.array(dtype=wp.int32),
    info: wp.array(dtype=wp.vec4i),
):
    """Node ``c`` (internal or leaf) is a packed leaf if it holds at most ``leaf_size``
    segments and its parent more (or it is the root): flag its first slot."""
    c = wp.tid()
    count = int(1)
    lo = c - (n - 1)
    if c < n - 1:
        count = int(size[c])
        lo = int(first[c])
    par = int(parent[c])
    if count <= leaf_size:
        if par < 0 or int(size[par]) > leaf_size:
            start[lo] = wp.int32(1)
            info[lo] = wp.vec4i(c, lo, count, par)


@wp.kernel
def _edges_leaf_compact_kernel(
    start: wp.array(dtype=wp.int32),
    index: wp.array(dtype=wp.int32),
    info: wp.array(dtype=wp.vec4i),
    leaves: wp.array(dtype=wp.vec4i),
):
    s = wp.tid()
    if start[s] != 0:
        leaves[int(index[s])] = info[s]


@wp.kernel
def _edges_children_kernel(left: wp.array(dtype=wp.int32), right: wp.array(dtype=wp.int32),
                           children: wp.array(dtype=wp.vec2i)):
    j = wp.tid()
    children[j] = wp.vec2i(int(left[j]), int(right[j]))


@wp.kernel
def _edges_kept_kernel(leaf_size: int, size: wp.array(dtype=wp.int32), kept: wp.array(dtype=wp.int32)):
    """1 for a Karras internal node that stays a packed internal node (the root, or more than ``leaf_size`` segments)."""
    j = wp.tid()
    kept[j] = wp.where(j == 0 or int(size[j]) > leaf_size, 1, 0)


@wp.func
def _compact_id(n: int, leaf_size: int, size: wp.array(dtype=wp.int32), rank: wp.array(dtype=wp.int32), k: int,
                c: int) -> int:
    """Node id of Karras node ``c`` in the compact tree: its row if it stays internal, else ``k + c``."""
    if c < n - 1:
        if int(size[c]) > leaf_size:
            return int(rank[c])
    return k + c


@wp.kernel
def _edges_compact_kernel(
    n: int, leaf_size: int, k: int, left: wp.array(dtype=wp.int32), right: wp.array(dtype=wp.int32),
    parent: wp.array(dtype=wp.int32), first: wp.array(dtype=wp.int32), size: wp.array(dtype=wp.int32),
    kept: wp.array(dtype=wp.int32), rank: wp.array(dtype=wp.int32),
    children: wp.array(dtype=wp.vec2i), parent_c: wp.array(dtype=wp.int32), links: wp.array(dtype=wp.vec4i),
):
    """Kept Karras node ``j`` as row ``rank[j]``: children's ids, its parent's row, the packed links."""
    j = wp.tid()
    if kept[j] == 0:
        return
    row = int(rank[j])
    a = int(left[j])
    b = int(right[j])
    ca = _link_child(n, leaf_size, first, size, a)
    cb = _link_child(n, leaf_size, first, size, b)
    if ca[1] == 0:
        ca = wp.vec2i(int(rank[ca[0]]), 0)
    if cb[1] == 0:
        cb = wp.vec2i(int(rank[cb[0]]), 0)
    links[row] = wp.vec4i(ca[0], cb[0], ca[1], cb[1])
    ia = _compact_id(n, leaf_size, size, rank, k, a)
    ib = _compact_id(n, leaf_size, size, rank, k, b)
    children[row] = wp.vec2i(ia, ib)
    parent_c[ia] = row
    parent_c[ib] = row
    p = int(parent[j])
    if p >= 0:
        parent_c[row] = int(rank[p])
    else:
        parent_c[row] = -1


@wp.kernel
def _edges_compact_leaves_kernel(n: int, leaf_size: int, k: int, size: wp.array(dtype=wp.int32),
                                 rank: wp.array(dtype=wp.int32), leaves: wp.array(dtype=wp.vec4i)):
    """Packed leaf ``t``'s node id and parent in the compact numbering."""
    t = wp.tid()
    leaf = leaves[t]
    c = int(leaf[0])
    par = int(leaf[3])
    leaves[t] = wp.vec4i(_compact_id(n, leaf_size, size, rank, k, c), leaf[1], leaf[2], int(rank[par]))


class Lbvh:
    """A Karras 2012 hierarchy over ``n >= 2`` segments (see the module docstring).

    Attributes:
        order: int32 (n,), the edge of each leaf (Morton order) = of each packed slot.
        left, right: int32 (n - 1,), children of each internal node (``>= n - 1``: leaf).
        first, size: int32 (n - 1,), the sorted range of each internal node.
        depth: levels of the tree (root = 1, leaves included).
        key_bits: Morton key length used (63 or 30).

    Building reads the tree's depth back once (one host synchronisation on the stream).
    """

    def __init__(self, points: wp.array, edge_v: wp.array, stream, key_bits: int = 63, cubic: bool = True) -> None:
        n = edge_v.shape[0]
        dev = points.device
        centroid = wp.empty(n, dtype=wp.vec3, device=dev)
        bounds = wp.array([np.inf] * 3 + [-np.inf] * 3, dtype=float, device=dev)
        wp.launch(_edges_gather_kernel, dim=n, inputs=[points, edge_v], outputs=[centroid, bounds], device=dev)
        codes = wp.empty(2 * n, dtype=wp.int64, device=dev)
        order = wp.empty(2 * n, dtype=wp.int32, device=dev)
        bits = key_bits // 3
        wp.launch(_edges_morton_kernel, dim=n, inputs=[centroid, bounds, bits, int(cubic)], outputs=[codes, order],
                  device=dev)
        wp.utils.radix_sort_pairs(codes, order, n, end_bit=3 * bits)
        self.num_edges = n
        self.key_bits = 3 * bits
        self.order = order[:n]
        self.left = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        self.right = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        self.first = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        self.size = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        self.parent = wp.full(2 * n - 1, -1, dtype=wp.int32, device=dev)
        wp.launch(_edges_hierarchy_kernel, dim=n - 1, inputs=[codes, n],
                  outputs=[self.left, self.right, self.parent, self.first, self.size], device=dev)
        depth = wp.zeros(1, dtype=wp.int32, device=dev)
        wp.launch(_edges_depth_kernel, dim=n - 1, inputs=[self.parent], outputs=[depth], device=dev)
        if stream is not None:
            wp.synchronize_stream(stream)
        self.depth = int(depth.numpy()[0]) + 2

    def write_links(self, node_link: wp.array, leaf_size: int) -> None:
        """Links of the packed nodes (``node_link[4 j + 3]``), once: the topology does not change."""
        n = self.num_edges
        wp.launch(_edges_links_kernel, dim=n - 1, inputs=[n, leaf_size, self.left, self.right, self.first, self.size],
                  outputs=[node_link], device=node_link.device)

    def refit_tree(self, leaf_size: int, stream) -> TreeRefit:
        """The leaf-climb refit (:class:`rayd.engine.tree_refit.TreeRefit`) of this tree with
        subtrees of at most ``leaf_size`` segments as leaves (one small host read: their count)."""
        n = self.num_edges
        dev = self.order.device
        start = wp.zeros(n, dtype=wp.int32, device=dev)
        info = wp.empty(n, dtype=wp.vec4i, device=dev)
        wp.launch(_edges_leaf_start_kernel, dim=2 * n - 1, inputs=[n, leaf_size, self.parent, self.first, self.size],
                  outputs=[start, info], device=dev)
        index = wp.empty(n, dtype=wp.int32, device=dev)
        wp.utils.array_scan(start, index, inclusive=False)
        if stream is not None:
            wp.synchronize_stream(stream)
        count = int(index[n - 1:].numpy()[0]) + int(start[n - 1:].numpy()[0])
        leaves = wp.empty(count, dtype=wp.vec4i, device=dev)
        wp.launch(_edges_leaf_compact_kernel, dim=n, inputs=[start, index, info], outputs=[leaves], device=dev)
        children = wp.empty(n - 1, dtype=wp.vec2i, device=dev)
        wp.launch(_edges_children_kernel, dim=n - 1, inputs=[self.left, self.right], outputs=[children], device=dev)
        return TreeRefit(children, self.parent, leaves, 2 * n - 1)

    def compact(self, leaf_size: int, stream) -> tuple[TreeRefit, wp.array, int]:
        """The same tree with only the packed internal nodes stored (rows ``0 .. k-1`` by rank of
        their Karras index; the root stays 0): ``(refit, links, k)``, ``links`` vec4i (k,).

        The Karras nodes inside collapsed leaves are dropped, so a tree with leaves of ``L``
        segments stores about ``n / L`` internal nodes instead of ``n - 1``. Requires
        ``n > leaf_size`` (else the whole tree is one leaf). One host read (``k``) besides
        :meth:`refit_tree`'s.
        """
        n = self.num_edges
        dev = self.order.device
        tree = self.refit_tree(leaf_size, stream)
        kept = wp.empty(n - 1, dtype=wp.int32, device=dev)
        wp.launch(_edges_kept_kernel, dim=n - 1, inputs=[leaf_size, self.size], outputs=[kept], device=dev)
        rank = wp.empty(n - 1, dtype=wp.int32, device=dev)
        wp.utils.array_scan(kept, rank, inclusive=False)
        if stream is not None:
            wp.synchronize_stream(stream)
        k = int(rank[n - 2:].numpy()[0]) + int(kept[n - 2:].numpy()[0])
        children = wp.empty(k, dtype=wp.vec2i, device=dev)
        parent = wp.full(k + 2 * n - 1, -1, dtype=wp.int32, device=dev)
        links = wp.empty(k, dtype=wp.vec4i, device=dev)
        wp.launch(_edges_compact_kernel, dim=n - 1,
                  inputs=[n, leaf_size, k, self.left, self.right, self.parent, self.first, self.size, kept, rank],
                  outputs=[children, parent, links], device=dev)
        wp.launch(_edges_compact_leaves_kernel, dim=tree.num_leaves, inputs=[n, leaf_size, k, self.size, rank],
                  outputs=[tree.leaves], device=dev)
        return TreeRefit(children, parent, tree.leaves, k + 2 * n - 1), links, k
