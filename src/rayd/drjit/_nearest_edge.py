"""Nearest-edge queries of rayd.drjit: checks, engine search, differentiable evaluation.

The engine's search kernels pick the winning edge per query (float32, BVH); this
module recomputes the continuous outputs for that edge from the live
(differentiable) vertex and transform arrays, in float64 inside (cast back to the
output type), with the point/ray-to-segment formulas of :mod:`rayd.core.segments`
(written once for both frontends) over :mod:`rayd.drjit._vector`. Queries without an
edge are evaluated on a fixed stand-in edge and masked out with ``dr.select``: zero
gradient, never NaN.
"""

from __future__ import annotations

from types import ModuleType

import drjit as dr

from rayd.core import segments
from rayd.core.closest import within_max_distance
from rayd.core.frontend import SceneBase
from rayd.drjit import _check, _convert, _vector
from rayd.drjit._geometry import place
from rayd.drjit.edges import NearestEdge, SceneEdges
from rayd.drjit.ray import Ray
from rayd.engine import nearest_edge as _search


# ---------------------------------------------------------------------- formulas
def _safe_div(num: dr.ArrayBase, den: dr.ArrayBase) -> dr.ArrayBase:
    """:func:`rayd.core.segments.safe_div` in Dr.Jit (also used by ``_closest_point``)."""
    return segments.safe_div(_vector, num, den)


def _norm(x: dr.ArrayBase) -> dr.ArrayBase:
    """:func:`rayd.core.segments.norm` in Dr.Jit (also used by ``_closest_point``)."""
    return segments.norm(_vector, x)


def _winner_segments(m: ModuleType, double: bool, gid: dr.ArrayBase, edges: SceneEdges, geometry):
    """``(found, a, b)`` world endpoints of the winners (float64), stand-ins where ``gid < 0``."""
    Array3 = m.Array3f64 if double else m.Array3f
    found = gid >= 0
    g = m.UInt(dr.select(found, gid, 0))
    rows = dr.gather(m.Array2u, m.Array2u(edges.edge_rows), g)
    shape = None if geometry.transform is None else m.UInt(dr.gather(m.Int, m.Int(edges.topology.shape_id), g))
    a, b = place(geometry.transform, shape, dr.gather(Array3, geometry.vertices, rows.x),
                 dr.gather(Array3, geometry.vertices, rows.y))  # float64 (rounded once by _cast)
    a, b = segments.stand_in_edge(_vector, found, a, b)
    return found, a, b


def _ids(m: ModuleType, fields: dict, gid: dr.ArrayBase, edges: SceneEdges) -> None:
    top = edges.topology
    found = gid >= 0
    g = m.UInt(dr.select(found, gid, 0))
    fields["edge_id"] = dr.select(found, dr.gather(m.Int, m.Int(top.edge_id), g), -1)
    fields["shape_id"] = dr.select(found, dr.gather(m.Int, m.Int(top.shape_id), g), -1)
    fields["global_edge_id"] = m.Int(gid)


def _cast(m: ModuleType, double: bool, fields: dict[str, dr.ArrayBase]) -> dict[str, dr.ArrayBase]:
    """The float64 working fields in the output type (``Float``/``Array3f`` unless ``double``)."""
    if double:
        return fields
    return {k: (m.Array3f if k.endswith("_point") else m.Float)(v) for k, v in fields.items()}


def evaluate_points(m: ModuleType, double: bool, p, gid, edges: SceneEdges, geometry) -> dict[str, dr.ArrayBase]:
    """Fields of :class:`NearestEdge` for points and their winners ``gid`` (``Int``, -1 = none)."""
    found, a, b = _winner_segments(m, double, gid, edges, geometry)
    fields = _cast(m, double, segments.point_fields(_vector, found, m.Array3f64(p), a, b))
    _ids(m, fields, gid, edges)
    return fields


def evaluate_rays(m: ModuleType, double: bool, ray: Ray, gid, edges: SceneEdges, geometry) -> dict[str, dr.ArrayBase]:
    """Fields of :class:`NearestEdge` (with ``ray_t``, ``ray_point``) for rays and winners ``gid``."""
    found, a, b = _winner_segments(m, double, gid, edges, geometry)
    Work, Work1 = m.Array3f64, m.Float64
    fields = segments.ray_fields(_vector, found, Work(ray.o), Work(ray.d), Work1(ray.tmin), Work1(ray.tmax), a, b)
    fields = _cast(m, double, fields)
    _ids(m, fields, gid, edges)
    return fields


def _empty(m: ModuleType, double: bool, ray: bool) -> dict[str, dr.ArrayBase]:
    """The fields of a zero-query batch (Dr.Jit cannot mix width 0 with literals)."""
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    out = {"distance": Float(), "edge_t": Float(), "edge_point": Array3()}
    if ray:
        out.update(ray_t=Float(), ray_point=Array3())
    out.update(edge_id=m.Int(), shape_id=m.Int(), global_edge_id=m.Int())
    return out


# ---------------------------------------------------------------------- queries
#: ``ready(scene, call)``, the hook of :class:`rayd.core.edges.EdgeQueries` (after ``_require_ready``) and of
#: ``sample_edges``: the scene's edges, synced (core's rule); nothing else is made ahead of a Dr.Jit query.
ready = SceneBase._synced_edges


def _check_points(scene, call: str, points: object, active: object) -> tuple[dr.ArrayBase, int, dr.ArrayBase | None]:
    points = _check.float_array(call, "points", points, 3)
    _check.same_backend(call, "points", points, scene._device, "the scene")
    n = dr.width(points)
    if active is not None:
        active = _check.bool_array(call, "active", active)
        _check.same_backend(call, "active", active, scene._device, "the scene")
        n = _check.broadcast(call, [("points", n), ("active", dr.width(active))])
    return points, n, active


def _kind(scene, *query: dr.ArrayBase) -> tuple[ModuleType, bool]:
    """The output namespace (``.ad`` if any input is) and whether outputs are float64."""
    arrays = [q for q in query if isinstance(q, dr.ArrayBase)]
    if scene._state is not None:  # the registered arrays' kinds, once per sync (no pass over every shape)
        meshes_double, shapes_ad = scene._state.precision()
    else:
        meshes_double = any(_convert.is_double(s.vertices) for s in scene._shapes)
        shapes_ad = any(scene._shape_is_ad(s) for s in scene._shapes)
    double = meshes_double or any(_convert.is_double(q) for q in arrays)
    ad = shapes_ad or any(_convert.is_ad(q) for q in arrays)
    return _convert.module(scene._backend, ad), double


def _launch(scene, search, views: list, active, max_distance: float, winners) -> None:
    """``search(bvh, *views, flag, max_distance, winners, stream)``: an engine search over the
    query's Warp ``views`` with the ``active`` flags, on the current stream."""
    device = scene._device
    stream = _convert.current_stream(device)
    flag = _convert.uint8(active, scene._backend)
    bvh = scene._edges.bvh(stream)
    _convert.query_fence(device, after=False)
    search(bvh, *views, _convert.scalar_view(flag, device), max_distance, winners, stream)
    _convert.query_fence(device, after=True)


def nearest_edge_ray(scene, call: str, edges: SceneEdges, ray: Ray, active: object, max_distance: float) -> NearestEdge:
    """``Scene.nearest_edge(ray)`` after the shared checks (rayd.core.edges.EdgeQueries)."""
    backend, device = scene._backend, scene._device
    n, active = scene._check_active(call, ray, active)
    m, double = _kind(scene, ray.o, ray.d, ray.tmin, ray.tmax)
    if n == 0:
        return NearestEdge((0,), **_empty(m, double, True))
    winner = _convert.empty_int32(n, backend)
    o, o_buffer = _convert.vec3_view(_relative(scene, ray.o), device)
    d, d_buffer = _convert.vec3_view(ray.d, device)
    tmin = _convert.float32(ray.tmin, backend)
    tmax = _convert.float32(ray.tmax, backend)
    views = [o, d, _convert.scalar_view(tmin, device), _convert.scalar_view(tmax, device)]
    _launch(scene, _search.nearest_edge_ray, views, active, max_distance, _convert.scalar_view(winner, device))
    del o_buffer, d_buffer, tmin, tmax, views  # kept alive until the engine's launch is done
    fields = evaluate_rays(m, double, ray, winner, edges, scene._live_geometry(m, double))
    return NearestEdge((n,), **within(fields, max_distance))


def nearest_edge_points(scene, call: str, edges: SceneEdges, points: object, active: object,
                        max_distance: float) -> NearestEdge:
    """``Scene.nearest_edge(points)`` after the shared checks."""
    if not _convert.is_jit_array(points):
        name = _convert.type_name(points)
        hint = " (rayd.torch and rayd.drjit objects do not mix)" if name.startswith(("rayd.torch", "torch")) else ""
        raise TypeError(
            f"{call}: 'points_or_ray' must be a Dr.Jit 3-vector array (Array3f, Array3f64) or a rayd.drjit.Ray, "
            f"got {name}{hint}"
        )
    points, n, active = _check_points(scene, call, points, active)
    m, double = _kind(scene, points)
    if n == 0:
        return NearestEdge((0,), **_empty(m, double, False))
    winner = _convert.empty_int32(n, scene._backend)
    p, p_buffer = _convert.vec3_view(_relative(scene, points), scene._device)
    _launch(scene, _search.nearest_edge_point, [p], active, max_distance, _convert.scalar_view(winner, scene._device))
    del p_buffer
    fields = evaluate_points(m, double, points, winner, edges, scene._live_geometry(m, double))
    return NearestEdge((n,), **within(fields, max_distance))


def nearest_edges(scene, call: str, edges: SceneEdges, points: object, k: int, active: object,
                  max_distance: float) -> NearestEdge:
    """``Scene.nearest_edges`` after the shared checks (``k`` checked)."""
    points, n, active = _check_points(scene, call, points, active)
    m, double = _kind(scene, points)
    if n == 0:
        return NearestEdge((0, k), **_empty(m, double, False))
    winners, winners_view = _convert.int32_rows_buffer(n, k, scene._backend, scene._device)
    p, p_buffer = _convert.vec3_view(_relative(scene, points), scene._device)
    _launch(scene, _search.nearest_edges_point, [p], active, max_distance, winners_view)
    del p_buffer
    lane = dr.arange(m.UInt, n * k)
    query = lane // k if dr.width(points) != 1 else dr.zeros(m.UInt, n * k)
    repeated = dr.gather(type(points), points, query)
    geometry = scene._live_geometry(m, double)
    fields = within(evaluate_points(m, double, repeated, m.Int(winners.array), edges, geometry), max_distance)
    return NearestEdge((n, k), **_sorted_slots(m, fields, n, k))


def within(fields: dict[str, dr.ArrayBase], max_distance: float) -> dict[str, dr.ArrayBase]:
    """``fields`` with results farther than ``max_distance`` made misses
    (:func:`rayd.core.closest.within_max_distance`: the search radius is widened by rounding)."""
    return within_max_distance(fields, max_distance, dr.select)


def _sorted_slots(m: ModuleType, fields: dict[str, dr.ArrayBase], n: int, k: int) -> dict[str, dr.ArrayBase]:
    """``fields`` (n k lanes, k per point) with each point's slots in the contract's order: by the
    reported ``distance``, ties by ``global_edge_id``, unfilled slots last (the search ranks float32
    squared distances; the reported ones are re-evaluated). Each lane's rank among its point's k
    lanes, then a gather of every field (gradients follow their slot)."""
    lane = dr.arange(m.UInt, n * k)
    slot = lane % k
    base = lane - slot
    distance = dr.detach(fields["distance"])
    gid = fields["global_edge_id"]
    key = dr.select(gid < 0, 2**31 - 1, gid)
    rank = dr.zeros(m.UInt, n * k)
    for i in range(k):
        d_i = dr.gather(type(distance), distance, base + i)
        g_i = dr.gather(m.Int, key, base + i)
        tie = d_i == distance
        before = (d_i < distance) | (tie & ((g_i < key) | ((g_i == key) & (m.UInt(i) < slot))))
        rank += dr.select(before, 1, 0)
    source = dr.zeros(m.UInt, n * k)
    dr.scatter(source, lane, base + rank)
    return {name: dr.gather(type(v), v, source) for name, v in fields.items()}


def silhouette_edges(scene, call: str, viewpoint: object, oriented: bool = False) -> dr.ArrayBase:
    """``Scene.silhouette_edges`` after the lifecycle check (``oriented``: ``sample_edges``' rule,
    :meth:`rayd.drjit.edges.SceneEdges.silhouette`)."""
    viewpoint = _check.float_array(call, "viewpoint", viewpoint, 3)
    _check.same_backend(call, "viewpoint", viewpoint, scene._device, "the scene")
    if dr.width(viewpoint) != 1:
        raise ValueError(f"{call}: 'viewpoint' must have shape (3,): one point (width 1), got width {dr.width(viewpoint)}")
    m, double = _kind(scene, viewpoint)
    with dr.suspend_grad():
        geometry = scene._live_geometry(m, double)
        Array3 = m.Array3f64 if double else m.Array3f
        return scene._edges.silhouette(m, geometry, Array3(dr.detach(viewpoint)), oriented=oriented)


def _relative(scene, x: dr.ArrayBase) -> dr.ArrayBase:
    """Query points (or ray origins) relative to the scene's search centre, in float64 (engine/frame.py)."""
    centre = scene._core.centre
    if centre is None:
        return x
    Array3 = _convert.module(scene._backend, False).Array3f64
    return Array3(dr.detach(x)) - Array3(*(float(c) for c in centre))
