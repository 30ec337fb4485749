"""Frozen copy of the edge BVH and point searches of commit b3e33b4 (before issue 11), for
before/after timing in ``benchmarks/edges.py --legacy`` on the same machine and run.

Karras 2012 LBVH over 30-bit Morton codes, one segment per leaf, level-by-level
refit; separate point and top-k search kernels. Not used by rayd itself.
"""

import math

import numpy as np
import warp as wp

from rayd.engine.runtime import launch_stream


_INF = wp.constant(float("inf"))

# Build and search kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})


@wp.func
def _msb(x: int) -> int:
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


class LegacyEdgeBvh:

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
        return 2 * self.num_edges - 1

    def refit(self, stream: wp.Stream | None = None) -> None:
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


MAX_K = 16
_STACK = 80  # > the deepest possible node (62 key bits) plus one

_INF = wp.constant(float("inf"))

# Build and search kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})
_NO_ID = wp.constant(2147483647)
_stack_i = wp.types.vector(length=_STACK, dtype=wp.int32)
_stack_f = wp.types.vector(length=_STACK, dtype=wp.float32)
_heap_i = wp.types.vector(length=MAX_K, dtype=wp.int32)
_heap_f = wp.types.vector(length=MAX_K, dtype=wp.float32)


@wp.func
def _box_dsq(p: wp.vec3, lo: wp.vec3, hi: wp.vec3) -> float:
    q = wp.max(wp.max(lo - p, wp.vec3(0.0)), p - hi)
    if lo[0] > hi[0]:
        return _INF
    return wp.dot(q, q)


@wp.func
def _point_segment_dsq(p: wp.vec3, a: wp.vec3, b: wp.vec3) -> float:
    ab = b - a
    pa = p - a
    den = wp.dot(ab, ab)
    t = float(0.0)
    if den > 0.0:
        t = wp.clamp(wp.dot(pa, ab) / den, 0.0, 1.0)
    q = pa - t * ab
    return wp.dot(q, q)


@wp.func
def _better(dsq: float, gid: int, best_dsq: float, best_id: int) -> bool:
    if dsq < best_dsq:
        return True
    return dsq == best_dsq and gid < best_id


@wp.func
def _point_is_wellformed(p: wp.vec3) -> bool:
    return wp.isfinite(p)


@wp.kernel
def _nearest_edge_order_kernel(
    points: wp.array(dtype=wp.vec3),
    lower: wp.array(dtype=wp.vec3),
    upper: wp.array(dtype=wp.vec3),
    keys: wp.array(dtype=wp.int32),
    order: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    p = points[i]
    lo = lower[0]
    hi = upper[0]
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


@wp.kernel
def _nearest_edge_point_search_kernel(
    num_edges: int,
    left: wp.array(dtype=wp.int32),
    right: wp.array(dtype=wp.int32),
    lower: wp.array(dtype=wp.vec3),
    upper: wp.array(dtype=wp.vec3),
    seg_a: wp.array(dtype=wp.vec3),
    seg_b: wp.array(dtype=wp.vec3),
    leaf_edge: wp.array(dtype=wp.int32),
    points: wp.array(dtype=wp.vec3),
    points_stride: int,
    active: wp.array(dtype=wp.uint8),
    active_stride: int,
    max_distance_sq: float,
    global_edge_id: wp.array(dtype=wp.int32),
    order: wp.array(dtype=wp.int32),
    use_order: int,
):
    i = wp.tid()
    if use_order != 0:
        i = int(order[i])
    best_id = int(_NO_ID)
    best_dsq = max_distance_sq
    p = points[i * points_stride]
    if active[i * active_stride] != wp.uint8(0) and _point_is_wellformed(p):
        first_leaf = num_edges - 1
        stack = _stack_i()
        stack_d = _stack_f()
        root_d = _box_dsq(p, lower[0], upper[0])
        sp = int(0)
        if root_d <= best_dsq and root_d < _INF:
            stack[0] = wp.int32(0)
            stack_d[0] = root_d
            sp = 1
        while sp > 0:
            sp -= 1
            if stack_d[sp] > best_dsq:
                continue
            node = int(stack[sp])
            if node >= first_leaf:
                leaf = node - first_leaf
                gid = int(leaf_edge[leaf])
                dsq = _point_segment_dsq(p, seg_a[leaf], seg_b[leaf])
                if dsq <= best_dsq and _better(dsq, gid, best_dsq, best_id):
                    best_dsq = dsq
                    best_id = gid
            else:
                a = int(left[node])
                b = int(right[node])
                da = _box_dsq(p, lower[a], upper[a])
                db = _box_dsq(p, lower[b], upper[b])
                if db < da:
                    a, b = b, a
                    da, db = db, da
                # push the farther child first so the nearer one is visited next
                if db <= best_dsq and db < _INF and sp < _STACK:
                    stack[sp] = wp.int32(b)
                    stack_d[sp] = db
                    sp += 1
                if da <= best_dsq and da < _INF and sp < _STACK:
                    stack[sp] = wp.int32(a)
                    stack_d[sp] = da
                    sp += 1
    if best_id == _NO_ID:
        best_id = -1
    global_edge_id[i] = wp.int32(best_id)


@wp.kernel
def _nearest_edges_point_search_kernel(
    num_edges: int,
    left: wp.array(dtype=wp.int32),
    right: wp.array(dtype=wp.int32),
    lower: wp.array(dtype=wp.vec3),
    upper: wp.array(dtype=wp.vec3),
    seg_a: wp.array(dtype=wp.vec3),
    seg_b: wp.array(dtype=wp.vec3),
    leaf_edge: wp.array(dtype=wp.int32),
    points: wp.array(dtype=wp.vec3),
    points_stride: int,
    active: wp.array(dtype=wp.uint8),
    active_stride: int,
    max_distance_sq: float,
    k: int,
    global_edge_id: wp.array2d(dtype=wp.int32),
    order: wp.array(dtype=wp.int32),
    use_order: int,
):
    i = wp.tid()
    if use_order != 0:
        i = int(order[i])
    heap_d = _heap_f()
    heap_id = _heap_i()
    for j in range(k):
        heap_d[j] = _INF
        heap_id[j] = wp.int32(_NO_ID)
    bound = max_distance_sq  # prune radius^2: max_distance, then the k-th best
    p = points[i * points_stride]
    if active[i * active_stride] != wp.uint8(0) and _point_is_wellformed(p):
        first_leaf = num_edges - 1
        stack = _stack_i()
        stack_d = _stack_f()
        root_d = _box_dsq(p, lower[0], upper[0])
        sp = int(0)
        if root_d <= bound and root_d < _INF:
            stack[0] = wp.int32(0)
            stack_d[0] = root_d
            sp = 1
        while sp > 0:
            sp -= 1
            if stack_d[sp] > bound:
                continue
            node = int(stack[sp])
            if node >= first_leaf:
                leaf = node - first_leaf
                gid = int(leaf_edge[leaf])
                dsq = _point_segment_dsq(p, seg_a[leaf], seg_b[leaf])
                if dsq <= bound and _better(dsq, gid, heap_d[k - 1], int(heap_id[k - 1])):
                    # sorted insertion into the fixed-size list
                    j = k - 1
                    while j > 0 and _better(dsq, gid, heap_d[j - 1], int(heap_id[j - 1])):
                        heap_d[j] = heap_d[j - 1]
                        heap_id[j] = heap_id[j - 1]
                        j -= 1
                    heap_d[j] = dsq
                    heap_id[j] = wp.int32(gid)
                    if heap_id[k - 1] != _NO_ID:
                        bound = wp.min(bound, heap_d[k - 1])
            else:
                a = int(left[node])
                b = int(right[node])
                da = _box_dsq(p, lower[a], upper[a])
                db = _box_dsq(p, lower[b], upper[b])
                if db < da:
                    a, b = b, a
                    da, db = db, da
                if db <= bound and db < _INF and sp < _STACK:
                    stack[sp] = wp.int32(b)
                    stack_d[sp] = db
                    sp += 1
                if da <= bound and da < _INF and sp < _STACK:
                    stack[sp] = wp.int32(a)
                    stack_d[sp] = da
                    sp += 1
    for j in range(k):
        gid = int(heap_id[j])
        if gid == _NO_ID:
            gid = -1
        global_edge_id[i, j] = wp.int32(gid)


def _stride(a: wp.array, n: int) -> int:
    return 0 if a.shape[0] == 1 and n != 1 else 1


AUTO_SORT_MIN_QUERIES = 1 << 12


def _query_order(
    edges: LegacyEdgeBvh, points: wp.array, n: int, sort_queries: bool | None, stream: wp.Stream | None
) -> tuple[wp.array, int]:
    if sort_queries is None:
        sort_queries = n >= AUTO_SORT_MIN_QUERIES
    if not sort_queries or points.shape[0] != n or n < 2:
        return edges.leaf_edge, 0
    dev = edges.device
    with launch_stream(dev, stream):
        keys = wp.empty(2 * n, dtype=wp.int32, device=dev)
        order = wp.empty(2 * n, dtype=wp.int32, device=dev)
        wp.launch(_nearest_edge_order_kernel, dim=n, inputs=[points, edges.lower, edges.upper, keys, order], device=dev)
        wp.utils.radix_sort_pairs(keys, order, n, end_bit=30)
    return order, 1


def _max_distance_sq(max_distance: float) -> float:
    if math.isinf(max_distance):
        return math.inf
    return min(float(max_distance) ** 2, 3.0e38)


def nearest_edge_point(
    edges: LegacyEdgeBvh,
    points: wp.array,
    active: wp.array,
    max_distance: float,
    global_edge_id: wp.array,
    stream: wp.Stream | None = None,
    sort_queries: bool | None = None,
) -> None:
    n = global_edge_id.shape[0]
    if n == 0:
        return
    order, use_order = _query_order(edges, points, n, sort_queries, stream)
    wp.launch(
        _nearest_edge_point_search_kernel,
        dim=n,
        inputs=[
            edges.num_edges, edges.left, edges.right, edges.lower, edges.upper, edges.seg_a, edges.seg_b,
            edges.leaf_edge, points, _stride(points, n), active, _stride(active, n), _max_distance_sq(max_distance),
            global_edge_id, order, use_order,
        ],
        device=edges.device,
        stream=stream,
    )


def nearest_edges_point(
    edges: LegacyEdgeBvh,
    points: wp.array,
    active: wp.array,
    max_distance: float,
    global_edge_id: wp.array,
    stream: wp.Stream | None = None,
    sort_queries: bool | None = None,
) -> None:
    n, k = global_edge_id.shape
    if not 1 <= k <= MAX_K:
        raise ValueError(f"rayd.engine.nearest_edges_point(): k must be in [1, {MAX_K}], got {k}")
    if n == 0:
        return
    order, use_order = _query_order(edges, points, n, sort_queries, stream)
    wp.launch(
        _nearest_edges_point_search_kernel,
        dim=n,
        inputs=[
            edges.num_edges, edges.left, edges.right, edges.lower, edges.upper, edges.seg_a, edges.seg_b,
            edges.leaf_edge, points, _stride(points, n), active, _stride(active, n), _max_distance_sq(max_distance), k,
            global_edge_id, order, use_order,
        ],
        device=edges.device,
        stream=stream,
    )
