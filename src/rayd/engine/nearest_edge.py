"""Nearest-edge search: which edge is closest to each point or ray segment (no derivatives).

The frontends recompute the continuous outputs (distance, closest points) from the
winner's live geometry; this module only picks the winners (DESIGN.md,
"Differentiation contract"). Each query walks an :class:`~rayd.engine.edges.EdgeBvh`
depth first, nearer child first, with a search radius that shrinks to the best
candidate found so far (to the k-th best for top-k), so far subtrees are skipped.

Ties are broken by the smaller ``global_edge_id``, so results do not depend on the
traversal order. Distances in the search are float32.

References:
    Ericson 2004, "Real-Time Collision Detection", Morgan Kaufmann, sec. 5.1.2
    (closest point on a segment) and 5.1.9 (closest points of two segments).
"""

import math

import warp as wp

from rayd.engine import edge_leaf_slab, edge_segment, edge_wide_walk
from rayd.engine.edge_wide_walk import wide_kernel
from rayd.engine.edges import EdgeBvh
from rayd.engine.nearest_edge_kernels import (  # noqa: F401 - MAX_K is part of this module's API
    MAX_K,
    POINT,
    RAY,
    TOPK,
    _KERNELS,
    _make_search_kernel,
    _nearest_edge_order_kernel,
)
from rayd.engine.runtime import launch_offset_rows, launch_stream
from rayd.engine import nearest_edge_kernels as kernels_module

# Host functions only; the kernels live in nearest_edge_kernels.py.
wp.set_module_options({"enable_backward": False})


def _kernel(kind: int, counting: bool = False, seg: tuple[str, str] = ("exact", "plain")):
    key = (kind, counting, kind == RAY and bool(kernels_module.RAY_BOUND), seg)
    if key not in _KERNELS:
        _KERNELS[key] = _make_search_kernel(kind, counting, *seg)
    return _KERNELS[key]


def _stride(a: wp.array, n: int) -> int:
    return 0 if a.shape[0] == 1 and n != 1 else 1


#: Queries sorted along a Morton curve before the search when ``sort_queries`` is left
#: ``None``: from this batch size up. Neighbouring queries then walk the same subtrees:
#: coherent warps on CUDA, cache hits on the CPU (measured on the CPU: 4.4x faster for
#: 65 k random points on a 131 k-triangle terrain, benchmarks/results/edges_cpu.jsonl).
AUTO_SORT_MIN_QUERIES = 1 << 12
#: The same threshold on CUDA. On the H200 (benchmarks/results/h200-session9/edges_h200.txt)
#: the sort does not pay at 65 k queries (terrain 73 k: search 0.77 ms unsorted, 1.12 ms
#: with the sort) and pays well at 1 M (terrain 2 M: 39.9 -> 23.9 ms; sphere 1 M: 71.4 ->
#: 45.8 ms); 256 k is between the two measured sizes.
AUTO_SORT_MIN_QUERIES_CUDA = 1 << 18
#: Threads per block of the search launches. On the H200 128 ran 1-7 % faster than Warp's
#: default of 256 (``benchmarks/edge_search_ab.py``; benchmarks/README.md, "Edges").
SEARCH_BLOCK_DIM = 128


def _query_order(
    edges: EdgeBvh, points: wp.array, n: int, sort_queries: bool | None, stream: wp.Stream | None
) -> tuple[wp.array, int]:
    """``(order, use_order)``: a Morton order of the queries' ``points`` (stride 1) or a dummy."""
    if sort_queries is None:
        sort_queries = n >= (AUTO_SORT_MIN_QUERIES_CUDA if edges.device.is_cuda else AUTO_SORT_MIN_QUERIES)
    if not sort_queries or points.shape[0] != n or n < 2:
        return edges.slot_id, 0
    dev = edges.device
    with launch_stream(dev, stream):
        keys = wp.empty(2 * n, dtype=wp.int32, device=dev)
        order = wp.empty(2 * n, dtype=wp.int32, device=dev)
        wp.launch(_nearest_edge_order_kernel, dim=n, inputs=[points, edges.root_box, keys, order], device=dev)
        wp.utils.radix_sort_pairs(keys, order, n, end_bit=30)
    return order, 1


def _launch(edges: EdgeBvh, kind: int, n: int, q0, q1, tmin, tmax, active, max_distance, k, out, stream,
            sort_queries, counts=None) -> None:
    """Run the search of ``kind`` for ``n`` queries (``q0``: points or ray origins)."""
    order, use_order = _query_order(edges, q0, n, sort_queries, stream)
    dummy3 = q0 if q1 is None else q1
    if tmin is None:
        tmin = tmax = _dummy_float(edges.device)
    counting = counts is not None
    if counts is None:
        counts = _dummy_counts(edges.device)
    if getattr(edges, "wide", None) is not None and (kind != RAY or edge_wide_walk.WIDE_RAYS):  # the 4-wide copy
        wide = edges.wide
        nodes, packed = wide.nodes, wide.compressed
        data, links = (nodes.data, nodes.links) if packed is None else (packed.qf, packed.q)
        seg_boxes = packed is not None and packed.seg_boxes and kind != RAY
        segq = packed.segq if seg_boxes else _dummy_seg(edges.device)
        stride = edge_wide_walk.SEED_STRIDE
        seeded = kind == POINT and use_order != 0 and stride > 1 and n > stride
        slabs = getattr(edges, "leaf_slabs", None) if kind != RAY else None
        slab = slabs.slab if slabs is not None else _dummy_slab(edges.device)
        args = [data, links, nodes.count, edges.seg, edges.slot_id, segq, slab, q0, _stride(q0, n), active,
                _stride(active, n), dummy3, _stride(dummy3, n), tmin, _stride(tmin, n), tmax, _stride(tmax, n),
                edges.root_box, _max_distance_sq(max_distance), k, out, order, use_order, counts]
        maxreg = wide.max_registers
        if kind == RAY and edge_wide_walk.RAY_MAX_REGISTERS is not None:
            maxreg = edge_wide_walk.RAY_MAX_REGISTERS
        kernel = wide_kernel(kind, counting, maxreg, packed is not None, seg_boxes, seeded,
                             0 if slabs is None else 1 + int(edge_leaf_slab.AHEAD),
                             seg=edge_segment.seg_modes(edges.device))
        if not seeded:
            launch_offset_rows(kernel, n, args + [_dummy_seg_slots(edges.device), 1, 0], edges.device, stream,
                               block_dim=SEARCH_BLOCK_DIM)
            return
        edge_slot = _edge_slots(edges, stream)
        launch_offset_rows(kernel, (n + stride - 1) // stride, args + [edge_slot, stride, 1], edges.device, stream,
                           block_dim=SEARCH_BLOCK_DIM)
        launch_offset_rows(kernel, n, args + [edge_slot, stride, 2], edges.device, stream, block_dim=SEARCH_BLOCK_DIM)
        return
    launch_offset_rows(
        _kernel(kind, counting, edge_segment.seg_modes(edges.device)),
        n,
        [
            edges.binary_boxes(stream), edges.node_link, edges.seg, edges.slot_id,
            q0, _stride(q0, n), dummy3, _stride(dummy3, n), tmin, _stride(tmin, n), tmax, _stride(tmax, n),
            active, _stride(active, n), _max_distance_sq(max_distance), k, out, order, use_order, counts,
        ],
        edges.device,
        stream,
        block_dim=SEARCH_BLOCK_DIM,
    )


_DUMMIES: dict = {}


def _dummy_seg_slots(device) -> wp.array:
    key = ("slots", str(device))
    if key not in _DUMMIES:
        _DUMMIES[key] = wp.zeros(1, dtype=wp.int32, device=device)
    return _DUMMIES[key]


def _edge_slots(edges: EdgeBvh, stream) -> wp.array:
    """The slot of each edge (inverse of ``edges.slot_edge``; made once per tree, the topology is fixed)."""
    slots = getattr(edges, "_edge_slot", None)
    if slots is None:
        with launch_stream(edges.device, stream):
            slots = wp.empty(edges.num_edges, dtype=wp.int32, device=edges.device)
            wp.launch(edge_wide_walk._edge_slot_kernel, dim=edges.num_edges, inputs=[edges.slot_edge],
                      outputs=[slots], device=edges.device)
        edges._edge_slot = slots
    return slots


def _dummy_slab(device) -> wp.array:
    key = ("slab", str(device))
    if key not in _DUMMIES:
        _DUMMIES[key] = wp.zeros(1, dtype=wp.vec4i, device=device)
    return _DUMMIES[key]


def _dummy_float(device) -> wp.array:
    key = ("f", str(device))
    if key not in _DUMMIES:
        _DUMMIES[key] = wp.zeros(1, dtype=float, device=device)
    return _DUMMIES[key]


def _dummy_seg(device) -> wp.array:
    key = ("s", str(device))
    if key not in _DUMMIES:
        _DUMMIES[key] = wp.zeros(1, dtype=wp.vec2i, device=device)
    return _DUMMIES[key]


def _dummy_counts(device) -> wp.array:
    key = ("c", str(device))
    if key not in _DUMMIES:
        _DUMMIES[key] = wp.zeros(1, dtype=wp.vec2i, device=device)
    return _DUMMIES[key]


def _max_distance_sq(max_distance: float) -> float:
    if math.isinf(max_distance):
        return math.inf
    return min(float(max_distance) ** 2, 3.0e38)


def nearest_edge_point(
    edges: EdgeBvh,
    points: wp.array,
    active: wp.array,
    max_distance: float,
    global_edge_id: wp.array,
    stream: wp.Stream | None = None,
    sort_queries: bool | None = None,
    counts: wp.array | None = None,
) -> None:
    """Write the id of the edge nearest to each point into ``global_edge_id``.

    Args:
        edges: the scene's :class:`EdgeBvh`.
        points: ``wp.array(dtype=wp.vec3)`` of shape (N,) or (1,) (broadcast).
        active: uint8 array of shape (N,) or (1,); 0 marks an inactive query.
        max_distance: only edges within this Euclidean distance count (``inf``: all).
        global_edge_id: int32 output of shape (N,); -1 where no unmasked edge lies
            within ``max_distance``, for inactive queries and non-finite points.
        stream: the CUDA stream to launch on (``None`` on the CPU).
        sort_queries: run the queries in Morton order of their positions (ray queries:
            origins) for coherent traversal; ``None`` sorts batches of at least
            ``AUTO_SORT_MIN_QUERIES`` (``AUTO_SORT_MIN_QUERIES_CUDA`` on CUDA). Results do not depend on it.
        counts: optional ``wp.array(dtype=wp.vec2i)`` of shape (N,): receives, per
            query, the internal nodes visited and the segments tested (a separate,
            counting build of the kernel; for measurements).

    Concretely, the winner minimises ``|p - (a + t (b - a))|``, ``t in [0, 1]``, over
    the unmasked edges ``[a, b]`` (float32), ties to the smaller id.
    """
    n = global_edge_id.shape[0]
    if n == 0:
        return
    _launch(edges, POINT, n, points, None, None, None, active, max_distance, 1, global_edge_id, stream, sort_queries,
            counts)


def nearest_edge_ray(
    edges: EdgeBvh,
    o: wp.array,
    d: wp.array,
    tmin: wp.array,
    tmax: wp.array,
    active: wp.array,
    max_distance: float,
    global_edge_id: wp.array,
    stream: wp.Stream | None = None,
    sort_queries: bool | None = None,
    counts: wp.array | None = None,
) -> None:
    """Write the id of the edge nearest to each ray segment into ``global_edge_id``.

    Args:
        edges: the scene's :class:`EdgeBvh`.
        o: ray origins, ``wp.array(dtype=wp.vec3)`` of shape (N,) or (1,) (broadcast).
        d: ray directions, same rule; need not be unit length.
        tmin: float32 array of shape (N,) or (1,); ``-inf`` for a half-line backwards.
        tmax: float32 array of shape (N,) or (1,); ``inf`` for a half-line (both: the line).
        active: uint8 array of shape (N,) or (1,); 0 marks an inactive query.
        max_distance: only edges within this distance of the segment count.
        global_edge_id: int32 output of shape (N,); -1 for none, for inactive and for
            malformed rays (NaN/inf in ``o``/``d``, zero direction, NaN bounds, ``tmax < tmin``,
            ``tmin = tmax = +-inf``).
        stream: the CUDA stream to launch on (``None`` on the CPU).
        sort_queries: run the queries in Morton order of their positions (ray queries:
            origins) for coherent traversal; ``None`` sorts batches of at least
            ``AUTO_SORT_MIN_QUERIES`` (``AUTO_SORT_MIN_QUERIES_CUDA`` on CUDA). Results do not depend on it.
        counts: optional ``wp.array(dtype=wp.vec2i)`` of shape (N,): receives, per
            query, the internal nodes visited and the segments tested (a separate,
            counting build of the kernel; for measurements).

    Concretely, the winner minimises ``|o + s d - (a + t (b - a))|`` over
    ``s in [tmin, tmax]``, ``t in [0, 1]`` and the unmasked edges (Ericson 2004, 5.1.9).
    """
    n = global_edge_id.shape[0]
    if n == 0:
        return
    _launch(edges, RAY, n, o, d, tmin, tmax, active, max_distance, 1, global_edge_id, stream, sort_queries, counts)


def nearest_edges_point(
    edges: EdgeBvh,
    points: wp.array,
    active: wp.array,
    max_distance: float,
    global_edge_id: wp.array,
    stream: wp.Stream | None = None,
    sort_queries: bool | None = None,
    counts: wp.array | None = None,
) -> None:
    """Write the ids of the ``k`` edges nearest to each point into ``global_edge_id``.

    Args:
        edges: the scene's :class:`EdgeBvh`.
        points: ``wp.array(dtype=wp.vec3)`` of shape (N,) or (1,) (broadcast).
        active: uint8 array of shape (N,) or (1,).
        max_distance: only edges within this distance count.
        global_edge_id: int32 ``wp.array2d`` of shape (N, k), ``1 <= k <= MAX_K``; row
            ``i`` sorted by distance, ties by id; -1 in slots left unfilled.
        stream: the CUDA stream to launch on (``None`` on the CPU).
        sort_queries: run the queries in Morton order of their positions (ray queries:
            origins) for coherent traversal; ``None`` sorts batches of at least
            ``AUTO_SORT_MIN_QUERIES`` (``AUTO_SORT_MIN_QUERIES_CUDA`` on CUDA). Results do not depend on it.
        counts: optional ``wp.array(dtype=wp.vec2i)`` of shape (N,): receives, per
            query, the internal nodes visited and the segments tested (a separate,
            counting build of the kernel; for measurements).

    Raises:
        ValueError: ``k`` outside ``[1, MAX_K]``.
    """
    n, k = global_edge_id.shape
    if not 1 <= k <= MAX_K:
        raise ValueError(f"rayd.engine.nearest_edges_point(): k must be in [1, {MAX_K}], got {k}")
    if n == 0:
        return
    _launch(edges, TOPK, n, points, None, None, None, active, max_distance, k, global_edge_id, stream, sort_queries,
            counts)
