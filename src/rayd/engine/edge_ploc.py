"""rayd's PLOC builder over segment boxes as the packed edge tree (the ``"ploc"`` builder of :class:`EdgeBvh`).

The tree is built on the segments' device by :class:`rayd.engine.ploc.PlocBvh` (the same
passes as the triangle builder: Morton-sorted box centres, nearest-neighbour merges by the
surface area of the merged box, SAH-decided leaf collapse, pre-order layout), over the
segment boxes padded by ``pad`` on every side (a segment along an axis has a flat box of
zero area, so without padding the merge and collapse costs cannot tell a long thin cluster
from a compact one; a point query reaches a box from about a search radius away, so the
padded area is closer to the chance that a query enters it). The padding only steers the
build: the refit (:mod:`rayd.engine.tree_refit`) writes the exact boxes.

One kernel then converts the PLOC nodes (Warp's layout, pre-order, parents) into the
generic arrays of :mod:`rayd.engine.tree_refit` and the packed links of
:mod:`rayd.engine.edges`: internal node ``j`` = rank of the PLOC node among the internal
nodes in pre-order (root 0), leaf ``t`` (slot order = pre-order, since PLOC assigns slots
depth first) gets node id ``num_inner + t``. No host copy of the tree.

References:
    Meister & Bittner 2018, "Parallel Locally-Ordered Clustering for Bounding Volume
    Hierarchy Construction", IEEE TVCG 24(3).
"""

from __future__ import annotations

import warp as wp

from rayd.engine.native import mul_rn
from rayd.engine.ploc import PlocBvh
from rayd.engine.tree_refit import TreeRefit

wp.set_module_options({"enable_backward": False})

_LOW31 = wp.constant(0x7FFFFFFF)


@wp.kernel
def _padded_boxes_kernel(points: wp.array(dtype=wp.vec3), edge_v: wp.array(dtype=wp.vec2i), pad: float,
                         lower: wp.array(dtype=wp.vec3), upper: wp.array(dtype=wp.vec3)):
    e = wp.tid()
    ev = edge_v[e]
    a = points[ev[0]]
    b = points[ev[1]]
    r = wp.vec3(pad, pad, pad)
    lower[e] = wp.min(a, b) - r
    upper[e] = wp.max(a, b) + r


@wp.kernel
def _lengths_kernel(points: wp.array(dtype=wp.vec3), edge_v: wp.array(dtype=wp.vec2i),
                    length: wp.array(dtype=wp.float64)):
    """Segment lengths, float32 rounded alike on CPU and CUDA (no FMA), summed in float64: the mean
    (hence the padding, hence the tree) does not depend on the device's summation order."""
    e = wp.tid()
    ev = edge_v[e]
    ab = points[ev[1]] - points[ev[0]]
    d = wp.sqrt(mul_rn(ab[0], ab[0]) + mul_rn(ab[1], ab[1]) + mul_rn(ab[2], ab[2]))
    length[e] = wp.float64(wp.where(wp.isfinite(d), d, 0.0))


@wp.kernel
def _is_inner_kernel(lower_i: wp.array(dtype=wp.vec4i), inner: wp.array(dtype=wp.int32)):
    k = wp.tid()
    inner[k] = wp.where(lower_i[k][3] < 0, 0, 1)


@wp.func
def _child(lower_i: wp.array(dtype=wp.vec4i), upper_i: wp.array(dtype=wp.vec4i), rank: wp.array(dtype=wp.int32),
           num_inner: int, c: int) -> wp.vec3i:
    """(node id, link code, link count) of PLOC node ``c`` as a child."""
    lo = int(lower_i[c][3])
    if lo < 0:
        first = lo & _LOW31
        return wp.vec3i(num_inner + c - int(rank[c]), first, (int(upper_i[c][3]) & _LOW31) - first)
    j = int(rank[c])
    return wp.vec3i(j, j, 0)


@wp.kernel
def _convert_kernel(lower_i: wp.array(dtype=wp.vec4i), upper_i: wp.array(dtype=wp.vec4i),
                    parents: wp.array(dtype=wp.int32), rank: wp.array(dtype=wp.int32), num_inner: int,
                    children: wp.array(dtype=wp.vec2i), parent: wp.array(dtype=wp.int32),
                    leaves: wp.array(dtype=wp.vec4i), links: wp.array(dtype=wp.vec4i)):
    """PLOC node ``k`` into the :mod:`rayd.engine.tree_refit` arrays and the packed links."""
    k = wp.tid()
    p = int(parents[k])
    above = int(-1)
    if p >= 0:
        above = int(rank[p])
    me = _child(lower_i, upper_i, rank, num_inner, k)
    parent[me[0]] = above
    if me[2] > 0:
        leaves[me[0] - num_inner] = wp.vec4i(me[0], me[1], me[2], above)
    else:
        a = _child(lower_i, upper_i, rank, num_inner, int(lower_i[k][3]))
        b = _child(lower_i, upper_i, rank, num_inner, int(upper_i[k][3]))
        children[me[0]] = wp.vec2i(a[0], b[0])
        links[me[0]] = wp.vec4i(a[1], b[1], a[2], b[2])


class PlocEdgeTree:
    """A PLOC tree over ``n >= 2`` segments in the edge layout (see the module docstring).

    Args:
        points: ``wp.array(dtype=wp.vec3)`` (V,), the vertices.
        edge_v: ``wp.array(dtype=wp.vec2i)`` (n,), the segments' vertex ids (all of them, masked or not).
        leaf_size: most segments per leaf, 1 to 8 (leaves are collapsed by SAH, so many hold fewer).
        pad: box padding as a fraction of the mean segment length (0: exact boxes).
        stream: the stream to build on (``None`` on the CPU).
        radius, costs: PLOC's neighbour radius and ``(C_T, C_I)`` (``None``: ``ploc.py``'s defaults).

    Attributes:
        order: int32 (n,), the edge of each slot. links: vec4i (num_inner,), the packed links
        ``(code_a, code_b, count_a, count_b)``; ``links is None`` when the whole tree is one leaf.
        num_inner, depth (levels, root = 1, leaves included), refit (:class:`TreeRefit`), ploc.

    Building reads back the mean segment length and PLOC's sizes (a few host synchronisations).

    Raises:
        ValueError: if ``leaf_size`` is not in 1..8.
    """

    def __init__(self, points: wp.array, edge_v: wp.array, leaf_size: int, pad: float, stream=None, *,
                 radius: int | None = None, costs: tuple[float, float] | None = None) -> None:
        n = edge_v.shape[0]
        dev = points.device
        if not 1 <= leaf_size <= 8:
            raise ValueError(f"rayd.engine.EdgeBvh(): the 'ploc' builder needs 'leaf_size' in 1..8, got {leaf_size}")
        r = 0.0
        if pad > 0.0:
            length = wp.empty(n, dtype=wp.float64, device=dev)
            wp.launch(_lengths_kernel, dim=n, inputs=[points, edge_v], outputs=[length], device=dev)
            r = float(pad) * float(wp.utils.array_sum(length)) / n
        lower = wp.empty(n, dtype=wp.vec3, device=dev)
        upper = wp.empty(n, dtype=wp.vec3, device=dev)
        wp.launch(_padded_boxes_kernel, dim=n, inputs=[points, edge_v, r], outputs=[lower, upper], device=dev)
        self.pad_distance = r
        self.ploc = tree = PlocBvh(lower, upper, stream, max_leaf=leaf_size, radius=radius, costs=costs)
        self.order = tree.primitives
        m = tree.num_nodes
        self.depth = tree.nodes.depth
        if m == 1:  # PLOC collapsed everything into one leaf
            self.num_inner = 1
            self.links = None
            self.refit = None
            return
        num_inner = (m - 1) // 2
        inner = wp.empty(m, dtype=wp.int32, device=dev)
        wp.launch(_is_inner_kernel, dim=m, inputs=[tree.nodes.lower_index], outputs=[inner], device=dev)
        rank = wp.empty(m, dtype=wp.int32, device=dev)
        wp.utils.array_scan(inner, rank, inclusive=False)
        children = wp.empty(num_inner, dtype=wp.vec2i, device=dev)
        parent = wp.empty(m, dtype=wp.int32, device=dev)
        leaves = wp.empty(m - num_inner, dtype=wp.vec4i, device=dev)
        self.links = wp.empty(num_inner, dtype=wp.vec4i, device=dev)
        wp.launch(_convert_kernel, dim=m,
                  inputs=[tree.nodes.lower_index, tree.nodes.upper_index, tree.parents, rank, num_inner],
                  outputs=[children, parent, leaves, self.links], device=dev)
        self.num_inner = num_inner
        self.refit = TreeRefit(children, parent, leaves, m)
