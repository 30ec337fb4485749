"""`EdgeBvh`: the engine's copy of a scene's edges as segments, with a BVH over them.

Warp's ``wp.Bvh`` answers box, sphere and ray-overlap queries, but its traversal
cannot shrink a search radius as candidates are found, order children by distance,
or keep a per-query top-k bound, and it exposes no nodes to write such a traversal
ourselves. Nearest-edge search needs all three, so this module builds its own
linear BVH (Karras 2012) over segment bounds, entirely in Warp kernels (CPU and CUDA):

1. Morton codes (30 bits) of the segment midpoints, normalised to their bounds;
2. a stable radix sort of the codes (``wp.utils.radix_sort_pairs``);
3. one kernel that emits every internal node from the sorted codes, ties between
   equal codes broken by sorted position (Karras 2012);
4. refit: leaf boxes from the live segment endpoints (masked-out edges get an empty
   box), then internal boxes level by level from the deepest level up (one launch
   per level, no atomics or fences needed).

Node layout: internal nodes ``0 .. n-2`` (root 0), leaves ``n-1 .. 2n-2``; leaf
``n-1+i`` holds the ``i``-th segment in Morton order. With one segment, node 0 is
that leaf. The leaves store their segment endpoints (copied at refit) so queries
read contiguous memory.

References:
    Karras 2012, "Maximizing Parallelism in the Construction of BVHs, Octrees,
    and k-d Trees", HPG 2012.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.runtime import launch_stream

_INF = wp.constant(float("inf"))

# Build and search kernels have no derivatives: skip generating adjoint code (faster first compile).
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
def _delta(codes: wp.array(dtype=wp.int32), n: int, i: int, j: int) -> int:
    """Length of the common prefix of keys ``i`` and ``j`` (-1 outside ``[0, n)``)."""
    if j < 0 or j >= n:
        return -1
    ci = codes[i]
    cj = codes[j]
    if ci == cj:
        return 32 + 31 - _msb(i ^ j)
    return 31 - _msb(ci ^ cj)


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
    codes: wp.array(dtype=wp.int32),
    order: wp.array(dtype=wp.int32),
):
    e = wp.tid()
    c = centroid[e]
    code = int(0)
    for k in range(3):
        lo = bounds[k]
        extent = bounds[3 + k] - lo
        x = float(0.0)
        if extent > 0.0:
            x = wp.clamp((c[k] - lo) / extent, 0.0, 1.0)
        if not wp.isfinite(x):
            x = 0.0
        q = wp.min(int(x * 1024.0), 1023)
        for b in range(10):
            code = code | (((q >> b) & 1) << (3 * b + 2 - k))
    codes[e] = wp.int32(code)
    order[e] = wp.int32(e)


@wp.kernel
def _edges_hierarchy_kernel(
    codes: wp.array(dtype=wp.int32),
    n: int,
    left: wp.array(dtype=wp.int32),
    right: wp.array(dtype=wp.int32),
    parent: wp.array(dtype=wp.int32),
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
def _edges_leaf_kernel(
    points: wp.array(dtype=wp.vec3),
    edge_v: wp.array(dtype=wp.vec2i),
    mask: wp.array(dtype=wp.uint8),
    leaf_edge: wp.array(dtype=wp.int32),
    n: int,
    seg_a: wp.array(dtype=wp.vec3),
    seg_b: wp.array(dtype=wp.vec3),
    lower: wp.array(dtype=wp.vec3),
    upper: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    e = int(leaf_edge[i])
    ev = edge_v[e]
    a = points[ev[0]]
    b = points[ev[1]]
    seg_a[i] = a
    seg_b[i] = b
    if mask[e] != wp.uint8(0):
        lower[n - 1 + i] = wp.min(a, b)
        upper[n - 1 + i] = wp.max(a, b)
    else:
        lower[n - 1 + i] = wp.vec3(_INF, _INF, _INF)
        upper[n - 1 + i] = wp.vec3(-_INF, -_INF, -_INF)


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


class EdgeBvh:
    """The scene's edges as world-space segments, with a linear BVH over their bounds.

    The frontend owns ``points`` (the scene's float32 world-space vertex buffer) and
    the topology; this object reads them at construction and at every ``refit()``.

    Args:
        points: ``wp.array(dtype=wp.vec3)`` of shape (V,), the scene's world-space vertices.
        edge_v: ``wp.array(dtype=wp.vec2i)`` of shape (E,), scene-wide vertex ids of each
            edge's endpoints (row = ``global_edge_id``).
        mask: ``wp.array(dtype=wp.uint8)`` of shape (E,); 0 hides an edge from queries.
        stream: the stream to build on (``None`` on the CPU).

    Building synchronises with the device once (it reads the node depths back to
    schedule the level-by-level refit).

    Raises:
        ValueError: if there are no edges.
    """

    def __init__(self, points: wp.array, edge_v: wp.array, mask: wp.array, stream: wp.Stream | None = None) -> None:
        n = edge_v.shape[0]
        if n == 0:
            raise ValueError("rayd.engine.EdgeBvh(): 'edge_v' must hold at least one edge")
        self.device = points.device
        self.points = points
        self.edge_v = edge_v
        self.mask = mask
        self.num_edges = n
        dev = self.device
        with launch_stream(dev, stream):
            centroid = wp.empty(n, dtype=wp.vec3, device=dev)
            bounds = wp.array([np.inf] * 3 + [-np.inf] * 3, dtype=float, device=dev)
            wp.launch(_edges_gather_kernel, dim=n, inputs=[points, edge_v], outputs=[centroid, bounds], device=dev)
            codes = wp.empty(2 * n, dtype=wp.int32, device=dev)
            order = wp.empty(2 * n, dtype=wp.int32, device=dev)
            wp.launch(_edges_morton_kernel, dim=n, inputs=[centroid, bounds], outputs=[codes, order], device=dev)
            wp.utils.radix_sort_pairs(codes, order, n, end_bit=30)
            self.leaf_edge = order[:n]
            inner = max(n - 1, 1)
            self.left = wp.zeros(inner, dtype=wp.int32, device=dev)
            self.right = wp.zeros(inner, dtype=wp.int32, device=dev)
            parent = wp.full(2 * n - 1, -1, dtype=wp.int32, device=dev)
            depth = wp.zeros(inner, dtype=wp.int32, device=dev)
            if n > 1:
                wp.launch(
                    _edges_hierarchy_kernel,
                    dim=n - 1,
                    inputs=[codes, n],
                    outputs=[self.left, self.right, parent],
                    device=dev,
                )
                wp.launch(_edges_depth_kernel, dim=n - 1, inputs=[parent], outputs=[depth], device=dev)
            self.seg_a = wp.empty(n, dtype=wp.vec3, device=dev)
            self.seg_b = wp.empty(n, dtype=wp.vec3, device=dev)
            self.lower = wp.empty(2 * n - 1, dtype=wp.vec3, device=dev)
            self.upper = wp.empty(2 * n - 1, dtype=wp.vec3, device=dev)
            # Level schedule for refit: internal nodes sorted deepest first. Reading the
            # depths back is the one host synchronisation of a build (on ``stream``).
            self._levels: list[tuple[int, int]] = []
            if n > 1:
                if stream is not None:
                    wp.synchronize_stream(stream)
                host_depth = depth.numpy()
                by_depth = np.argsort(-host_depth, kind="stable").astype(np.int32)
                start = 0
                for count in np.bincount(host_depth)[::-1]:
                    if count:
                        self._levels.append((start, int(count)))
                        start += int(count)
                self.depth = int(host_depth.max()) + 1
                self._level_nodes = wp.array(by_depth, dtype=wp.int32, device=dev)
            else:
                self.depth = 1
                self._level_nodes = wp.zeros(1, dtype=wp.int32, device=dev)
        self.refit(stream)

    @property
    def num_nodes(self) -> int:
        """Internal nodes plus leaves: ``2 E - 1``."""
        return 2 * self.num_edges - 1

    def refit(self, stream: wp.Stream | None = None) -> None:
        """Refit the node boxes to the current ``points`` and ``mask`` (topology unchanged)."""
        n = self.num_edges
        dev = self.device
        with launch_stream(dev, stream):
            wp.launch(
                _edges_leaf_kernel,
                dim=n,
                inputs=[self.points, self.edge_v, self.mask, self.leaf_edge, n],
                outputs=[self.seg_a, self.seg_b, self.lower, self.upper],
                device=dev,
            )
            for start, count in self._levels:
                wp.launch(
                    _edges_union_kernel,
                    dim=count,
                    inputs=[self._level_nodes, start, self.left, self.right],
                    outputs=[self.lower, self.upper],
                    device=dev,
                )
