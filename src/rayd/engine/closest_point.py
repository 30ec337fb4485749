"""Surface queries: the closest triangle to each point (no derivatives; winding numbers: :mod:`rayd.engine.winding`).

The frontends recompute the continuous outputs (closest point, distance) from the
winner's live geometry; :func:`closest_point_search` only picks the winner per
point (DESIGN.md, "Differentiation contract"). It walks the scene's flat triangle
BVH (the node arrays :mod:`rayd.engine.traversal` reads, see
:mod:`rayd.engine.bvh_nodes`) depth first, nearer child first, with a search radius
that shrinks to the best squared distance found so far, so far subtrees are
skipped. Query points are given relative to the search centre, like ray origins
(:mod:`rayd.engine.frame`). Distances in the search are float32; ties (within
float32 rounding) go to the smaller ``global_prim_id``.

Instances: the closest-point search walks the top level over instance boxes and
each instance's object-space BVH (the two levels of :mod:`rayd.engine.traversal`),
measuring faces in world space.

References:
    Ericson 2004, "Real-Time Collision Detection", Morgan Kaufmann, sec. 5.1.5
    (closest point on a triangle to a point).
"""

from __future__ import annotations

import functools
import math
import os

import warp as wp

from rayd.engine.accel import SceneAccel
from rayd.engine.closest_walk import SLIVER, closest_on_triangle, make_walks  # noqa: F401 (re-exported)
from rayd.engine.radius import magnitude, widened_radius_sq
from rayd.engine.runtime import PerRow, launch_rows, launch_stream, per_row
from rayd.engine.traversal import SceneView

wp.set_module_options({"enable_backward": False})

_NO_ID = wp.constant(2147483647)

#: Query order of the search: ``"morton"`` walks the points sorted by the Morton code of
#: their position in the scene's root box (neighbouring threads walk neighbouring
#: subtrees: cache and SIMT coherence), writing each result back to its own row;
#: ``"input"`` walks them as given. ``RAYD_CLOSEST_ORDER`` sets the default. The winner
#: per point does not depend on it.
ORDERS = ("morton", "input")
_order = os.environ.get("RAYD_CLOSEST_ORDER", "morton").strip().lower()
if _order not in ORDERS:
    raise ValueError(f"rayd.engine: RAYD_CLOSEST_ORDER must be one of {ORDERS}, got {_order!r}")

#: Fewer points than this are walked in input order (sorting would cost more than it saves).
SORT_MIN = 4096


def set_query_order(name: str) -> None:
    """Choose the query order of :func:`closest_point_search` for this process.

    Args:
        name: ``"morton"`` (batches of 4,096+ points walked in Morton order, the default;
            ``RAYD_CLOSEST_ORDER`` sets it at import) or ``"input"`` (the given order).
            Results do not depend on it.

    Raises:
        ValueError: ``name`` is neither.
    """
    global _order
    if name not in ORDERS:
        raise ValueError(f"rayd.engine.set_query_order(): 'name' must be one of {ORDERS}, got {name!r}")
    _order = name


def query_order() -> str:
    """The query order :func:`closest_point_search` uses now."""
    return _order


@wp.func
def _spread(x: int) -> int:
    """The low 10 bits of ``x`` spread to every third bit (Morton code of one axis)."""
    x = x & 0x3FF
    x = (x | (x << 16)) & 0x030000FF
    x = (x | (x << 8)) & 0x0300F00F
    x = (x | (x << 4)) & 0x030C30C3
    x = (x | (x << 2)) & 0x09249249
    return x


@wp.func
def _cell(v: float, lo: float, hi: float) -> int:
    t = float(0.0)
    if hi > lo:
        t = (v - lo) / (hi - lo)
    t = wp.clamp(t, 0.0, 1.0)  # also maps NaN to a bound: any order is right
    return int(t * 1023.0)


@wp.kernel
def _morton_kernel(scene: SceneView, points: wp.array(dtype=wp.vec3), points_stride: int,
                   keys: wp.array(dtype=wp.int32), order: wp.array(dtype=wp.int32)):
    """30-bit Morton code of each point in the root box of the flat BVH (else the top level)."""
    i = wp.tid()
    lo = wp.vec4()
    hi = wp.vec4()
    if scene.has_flat != 0:
        lo = scene.flat_lowers[scene.flat_root]
        hi = scene.flat_uppers[scene.flat_root]
    else:
        lo = scene.tlas_lowers[scene.tlas_root]
        hi = scene.tlas_uppers[scene.tlas_root]
    p = points[i * points_stride]
    keys[i] = (_spread(_cell(p[0], lo[0], hi[0])) << 2) | (_spread(_cell(p[1], lo[1], hi[1])) << 1) \
        | _spread(_cell(p[2], lo[2], hi[2]))
    order[i] = i


def sorts(n: int, order: str | None = None) -> bool:
    """Whether a search over ``n`` points walks them in Morton order (``order``: default :func:`query_order`)."""
    return (order or _order) == "morton" and n >= SORT_MIN


def morton_order(accel: SceneAccel, points: wp.array, n: int, stream: wp.Stream | None = None) -> wp.array:
    """int32 (2 N,): the first ``n`` entries are the query rows sorted by Morton code (the rest is scratch).

    Points of shape (1,) are broadcast (every row gets the same key). Launched on
    ``stream`` (the radix sort runs on the current stream: call inside ``launch_stream``).
    """
    device = accel.device
    keys = wp.empty(2 * n, dtype=wp.int32, device=device)
    rows = wp.empty(2 * n, dtype=wp.int32, device=device)
    wp.launch(_morton_kernel, n, [accel.view_for(stream), points, 0 if points.shape[0] == 1 else 1], [keys, rows],
              device=device, stream=stream)
    wp.utils.radix_sort_pairs(keys, rows, n)
    return rows


@functools.lru_cache(maxsize=None)
def _kernel(walk: str, pair: bool, ordered: bool, counting: bool):
    """The search kernel for the parts a scene has (``walk``: flat, instances, both), its layout and options.

    ``ordered``: row ``i`` handles point ``order[i]`` (and writes its result there).
    ``counting``: per-query work counters into ``stats`` (see :mod:`rayd.engine.closest_walk`).
    One kernel per combination, as for intersect (fewer registers for the flat walk).
    """
    walks = make_walks(counting)
    flat_walk = walks.flat_pair if pair else walks.flat
    top_walk = walks.top_level_pair if pair else walks.top_level
    with_flat, with_instances = walk in ("flat", "both"), walk in ("instances", "both")

    def closest_point_kernel(
        scene: SceneView,
        order: wp.array(dtype=wp.int32),
        points: wp.array(dtype=wp.vec3),
        points_stride: int,
        active: wp.array(dtype=wp.uint8),
        active_stride: int,
        max_distance_sq: float,
        stats: wp.array(dtype=wp.int32),
        global_prim_id: wp.array(dtype=wp.int32),
    ):
        i = wp.tid()
        if wp.static(ordered):
            i = order[i]
        winner = int(-1)
        p = points[i * points_stride]
        if active[i * active_stride] != wp.uint8(0) and wp.isfinite(p):
            best = widened_radius_sq(max_distance_sq, magnitude(p))  # frontends re-check the reported distance
            best_id = int(_NO_ID)
            if wp.static(with_flat):
                if scene.has_flat != 0:
                    best, best_id = wp.static(flat_walk)(scene, p, best, best_id, stats, i)
            if wp.static(with_instances):
                best, best_id = wp.static(top_walk)(scene, p, best, best_id, stats, i)
            if best_id != _NO_ID:
                winner = best_id
        global_prim_id[i] = wp.int32(winner)

    name = f"closest_point_{walk}{'_pair' if pair else ''}{'_ordered' if ordered else ''}{'_count' if counting else ''}"
    closest_point_kernel.__name__ = closest_point_kernel.__qualname__ = name
    return wp.kernel(closest_point_kernel, enable_backward=False, module="unique")


def _search(accel: SceneAccel, points: wp.array, active: wp.array, max_distance: float, global_prim_id: wp.array,
            stream, stats: wp.array | None, order: str | None = None, layout: str | None = None) -> None:
    n = global_prim_id.shape[0]
    if n == 0:
        return
    bound = math.inf if math.isinf(max_distance) else min(float(max_distance) ** 2, 3.0e38)
    if not accel.flat_enabled and accel.instances is None:
        with launch_stream(accel.device, stream):  # on the caller's stream
            global_prim_id.fill_(-1)
            if stats is not None:
                stats.zero_()
        return
    device = accel.device
    counting = stats is not None
    ordered = sorts(n, order)
    pair = accel.layout == "pair" and layout in (None, "pair")
    kernel = _kernel(accel.walks, pair, ordered, counting)
    stride_p = 0 if points.shape[0] == 1 else 1
    stride_a = 0 if active.shape[0] == 1 else 1
    view = accel.view_for(stream)
    with launch_stream(device, stream):
        order_rows = morton_order(accel, points, n, stream) if ordered else wp.empty(1, dtype=wp.int32, device=device)
        if counting:  # one launch: the counters are indexed by query
            stats.zero_()
            wp.launch(kernel, n, [view, order_rows, points, stride_p, active, stride_a, bound, stats,
                                  global_prim_id], device=device, stream=stream)
            return
        stats = wp.empty(1, dtype=wp.int32, device=device)
        if ordered:  # the rows of `order_rows` are split across CPU cores; the rest is read/written by index
            launch_rows(kernel, n, [view, PerRow(order_rows), points, stride_p, active, stride_a, bound, stats,
                                    global_prim_id], [], device, stream)
        else:
            launch_rows(kernel, n, [view, order_rows, *per_row(points, n), *per_row(active, n), bound, stats],
                        [global_prim_id], device, stream)


def closest_point_search(
    accel: SceneAccel,
    points: wp.array,
    active: wp.array,
    max_distance: float,
    global_prim_id: wp.array,
    stream: wp.Stream | None = None,
) -> None:
    """Write the ``global_prim_id`` of the enabled triangle closest to each point (-1: none).

    Args:
        accel: the scene's acceleration structures (meshes and instances).
        points: ``wp.array(dtype=wp.vec3)`` (N,) or (1,) (broadcast), relative to the
            scene's search centre (:mod:`rayd.engine.frame`).
        active: uint8 (N,) or (1,); 0 marks an inactive query (-1 out).
        max_distance: only triangles within this Euclidean distance count (``inf``: all).
        global_prim_id: int32 output (N,); -1 where no enabled triangle lies within
            ``max_distance``, for inactive queries and non-finite points.
        stream: the CUDA stream to launch on (``None`` on the CPU).

    Concretely, the winner minimises the float32 ``|p - q|^2`` over the closest points
    ``q`` of the enabled triangles (Ericson 2004, 5.1.5), ties to the smaller id;
    an instance's faces are placed in world space (float64 placement, rounded to
    float32) before they are measured.
    """
    _search(accel, points, active, max_distance, global_prim_id, stream, None)


def closest_point_work(accel: SceneAccel, points: wp.array, active: wp.array, max_distance: float,
                       global_prim_id: wp.array, stats: wp.array, order: str | None = None,
                       layout: str | None = None) -> None:
    """:func:`closest_point_search` with work counters (for benchmarks; one unsplit launch, no stream).

    ``stats``: int32 (3 N,); per query ``3 i + k``: k = 0 inner nodes expanded, 1
    point-box tests, 2 point-triangle tests. ``order``: ``"morton"``/``"input"``
    (default: :func:`query_order`); ``layout="warp"`` walks Warp's nodes even where the
    scene has pair nodes. The winners equal :func:`closest_point_search`'s.
    """
    _search(accel, points, active, max_distance, global_prim_id, None, stats, order, layout)
