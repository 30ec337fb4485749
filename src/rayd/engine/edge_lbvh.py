"""Karras 2012 linear BVH over segment midpoints (the ``"lbvh"`` builder of :class:`EdgeBvh`).

1. Morton codes (30 bits) of the segment midpoints, normalised to their bounds;
2. a stable radix sort of the codes (``wp.utils.radix_sort_pairs``);
3. one kernel that emits every internal node from the sorted codes, ties between
   equal codes broken by sorted position (Karras 2012);
4. node depths, for a level-by-level refit (deepest level first, one launch per level):
   nodes sorted by depth on the device; only the per-level counts are read back.

Node layout: internal nodes ``0 .. n-2`` (root 0), leaves ``n-1 .. 2n-2``; leaf
``n-1+i`` holds the ``i``-th segment in Morton order.

References:
    Karras 2012, "Maximizing Parallelism in the Construction of BVHs, Octrees,
    and k-d Trees", HPG 2012.
"""

from __future__ import annotations

import numpy as np
import warp as wp

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
    """Morton code of ``bits`` bits per axis (10: 30-bit keys, 21: 63-bit keys).

    ``cubic``: one scale for all axes (the largest extent), so that a cell is a cube and
    a flat scene spends no key bits on splits across its thin axis early.
    """
    e = wp.tid()
    c = centroid[e]
    code = wp.int64(0)
    scale = float(1 << bits)
    top = (1 << bits) - 1
    big = wp.max(wp.max(bounds[3] - bounds[0], bounds[4] - bounds[1]), bounds[5] - bounds[2])
    for k in range(3):
        lo = bounds[k]
        extent = bounds[3 + k] - lo
        if cubic != 0:
            extent = big
        x = float(0.0)
        if extent > 0.0:
            x = wp.clamp((c[k] - lo) / extent, 0.0, 1.0)
        if not wp.isfinite(x):
            x = 0.0
        q = wp.int64(wp.min(int(x * scale), top))
        for b in range(bits):
            code = code | (((q >> wp.int64(b)) & wp.int64(1)) << wp.int64(3 * b + 2 - k))
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
    i = wp.tid()
    k = int(0)
    node = i
    while node > 0:
        node = int(parent[node])
        k += 1
    depth[i] = wp.int32(k)


@wp.kernel
def _edges_union_kernel(
    nodes: wp.array(dtype=wp.int32),
    start: int,
    left: wp.array(dtype=wp.int32),
    right: wp.array(dtype=wp.int32),
    lower: wp.array(dtype=wp.vec3),
    upper: wp.array(dtype=wp.vec3),
):
    node = int(nodes[start + wp.tid()])
    a = int(left[node])
    b = int(right[node])
    lower[node] = wp.min(lower[a], lower[b])
    upper[node] = wp.max(upper[a], upper[b])


_MAX_LEVELS = wp.constant(128)


@wp.kernel
def _edges_level_keys_kernel(
    depth: wp.array(dtype=wp.int32),
    keys: wp.array(dtype=wp.int32),
    nodes: wp.array(dtype=wp.int32),
    hist: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    d = wp.min(int(depth[i]), _MAX_LEVELS - 1)
    keys[i] = wp.int32(_MAX_LEVELS - 1 - d)
    nodes[i] = wp.int32(i)
    wp.atomic_add(hist, d, 1)


class Lbvh:
    """A Karras 2012 hierarchy over ``n >= 2`` segments (see the module docstring).

    Attributes:
        order: int32 (n,), the edge of each leaf (Morton order).
        left, right: int32 (n - 1,), children of each internal node (``>= n - 1``: leaf).
        lower, upper: vec3 (2 n - 1,), node boxes, filled by :meth:`refit_internal`.
        depth: levels of the tree (root = 1).

    Building reads the node depths back once (one host synchronisation on the stream).
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
        self.key_bits = 3 * bits
        self.order = order[:n]
        self.left = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        self.right = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        self.first = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        self.size = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        parent = wp.full(2 * n - 1, -1, dtype=wp.int32, device=dev)
        depth = wp.zeros(n - 1, dtype=wp.int32, device=dev)
        wp.launch(_edges_hierarchy_kernel, dim=n - 1, inputs=[codes, n],
                  outputs=[self.left, self.right, parent, self.first, self.size], device=dev)
        wp.launch(_edges_depth_kernel, dim=n - 1, inputs=[parent], outputs=[depth], device=dev)
        self.lower = wp.empty(2 * n - 1, dtype=wp.vec3, device=dev)
        self.upper = wp.empty(2 * n - 1, dtype=wp.vec3, device=dev)
        # Level schedule for the refit, on the device: internal nodes sorted deepest first
        # (radix sort by depth), and a histogram of the depths, the one small host read.
        keys = wp.empty(2 * (n - 1), dtype=wp.int32, device=dev)
        nodes = wp.empty(2 * (n - 1), dtype=wp.int32, device=dev)
        hist = wp.zeros(_MAX_LEVELS, dtype=wp.int32, device=dev)
        wp.launch(_edges_level_keys_kernel, dim=n - 1, inputs=[depth], outputs=[keys, nodes, hist], device=dev)
        wp.utils.radix_sort_pairs(keys, nodes, n - 1)
        if stream is not None:
            wp.synchronize_stream(stream)
        counts = hist.numpy()
        self.levels: list[tuple[int, int]] = []
        start = 0
        for count in counts[::-1]:
            if count:
                self.levels.append((start, int(count)))
                start += int(count)
        self.depth = int(np.nonzero(counts)[0].max()) + 2
        self.level_nodes = nodes

    def refit_internal(self) -> None:
        """Internal boxes from the leaf boxes ``lower/upper[n-1:]``, deepest level first."""
        for start, count in self.levels:
            wp.launch(_edges_union_kernel, dim=count, inputs=[self.level_nodes, start, self.left, self.right],
                      outputs=[self.lower, self.upper], device=self.lower.device)
