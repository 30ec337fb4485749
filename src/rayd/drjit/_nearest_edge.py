"""Nearest-edge queries of rayd.drjit: checks, engine search, differentiable evaluation.

The engine's search kernels pick the winning edge per query (float32, BVH); this
module recomputes the continuous outputs for that edge from the live
(differentiable) vertex and transform arrays with Dr.Jit ops, in float64 inside
(cast back to the output type), as rayd.torch does:

- point ``p`` and segment ``[a, b]``:
  ``edge_t = clamp(dot(p - a, b - a) / |b - a|^2, 0, 1)``,
  ``edge_point = a + edge_t (b - a)``, ``distance = |p - edge_point|``;
- ray segment ``o + s d, s in [tmin, tmax]`` and segment ``a + t e, t in [0, 1]``:
  the minimiser of ``|o + s d - a - t e|^2`` over the box, by clamping the
  unconstrained solution and re-solving on the clamped side (Ericson 2004,
  "Real-Time Collision Detection", sec. 5.1.9), with the engine's branch logic.

Queries without an edge are evaluated on a fixed stand-in edge and masked out with
``dr.select``: zero gradient, never NaN.
"""

from __future__ import annotations

import math
from types import ModuleType

import drjit as dr

from rayd.drjit import _check, _convert
from rayd.drjit._geometry import apply
from rayd.drjit.edges import NearestEdge, SceneEdges
from rayd.drjit.ray import Ray
from rayd.engine import nearest_edge as _search


# ---------------------------------------------------------------------- formulas
def _safe_div(num: dr.ArrayBase, den: dr.ArrayBase) -> dr.ArrayBase:
    ok = den != 0
    return dr.select(ok, num / dr.select(ok, den, 1), 0)


def _clamp(x: dr.ArrayBase, lo, hi) -> dr.ArrayBase:
    """``min(max(x, lo), hi)`` by selects (LLVM's float64 min/max intrinsics fail to compile on some CPUs)."""
    return dr.select(x < lo, lo, dr.select(x > hi, hi, x))


def _norm(x: dr.ArrayBase) -> dr.ArrayBase:
    """``|x|`` with gradient 0 (not NaN) at ``x = 0``."""
    sq = dr.squared_norm(x)
    ok = sq > 0
    return dr.select(ok, dr.sqrt(dr.select(ok, sq, 1)), 0)


def point_segment(p: dr.ArrayBase, a: dr.ArrayBase, b: dr.ArrayBase) -> tuple[dr.ArrayBase, dr.ArrayBase]:
    """``(edge_t, edge_point)`` of the point of ``[a, b]`` closest to ``p``."""
    ab = b - a
    t = _clamp(_safe_div(dr.dot(p - a, ab), dr.dot(ab, ab)), 0, 1)
    return t, a + t * ab


def ray_segment(o, d, s0, s1, a, b) -> tuple[dr.ArrayBase, dr.ArrayBase]:
    """``(s, t)`` minimising ``|o + s d - a - t (b - a)|`` for ``s in [s0, s1]``, ``t in [0, 1]``.

    ``d`` must be non-zero; ``s1`` may be ``inf``. Same branch logic as the engine.
    """
    e = b - a
    r = o - a
    dd = dr.dot(d, d)
    ee = dr.dot(e, e)
    de = dr.dot(d, e)
    c = dr.dot(d, r)
    f = dr.dot(e, r)
    den = dd * ee - de * de
    free = den > 1.0e-12 * dd * ee
    s_line = _safe_div(de * f - c * ee, den)
    s_proj = _clamp(_safe_div(-c, dd), s0, s1)  # closest s to the edge start a
    s = dr.select(free, _clamp(s_line, s0, s1), s_proj)
    t = _safe_div(de * s + f, ee)
    below = t < 0
    above = t > 1
    s = dr.select(below, s_proj, dr.select(above, _clamp(_safe_div(de - c, dd), s0, s1), s))
    t = dr.select(ee > 0, _clamp(t, 0, 1), 0)
    return s, t


def _winner_segments(m: ModuleType, double: bool, gid: dr.ArrayBase, edges: SceneEdges, geometry):
    """``(found, a, b)`` world endpoints of the winners (float64), stand-ins where ``gid < 0``."""
    Array3 = m.Array3f64 if double else m.Array3f
    found = gid >= 0
    g = m.UInt(dr.select(found, gid, 0))
    rows = dr.gather(m.Array2u, m.Array2u(edges.rows), g)
    a = dr.gather(Array3, geometry.vertices, rows.x)
    b = dr.gather(Array3, geometry.vertices, rows.y)
    if geometry.transform is not None:
        shape = m.UInt(dr.gather(m.Int, m.Int(edges.topology.shape_id), g))
        cols = tuple(dr.gather(Array3, c, shape) for c in geometry.transform)
        a, b = apply(cols, a), apply(cols, b)
    Work = m.Array3f64
    a = dr.select(found, Work(a), Work(0, 0, 0))
    b = dr.select(found, Work(b), Work(1, 0, 0))
    return found, a, b


def _ids(m: ModuleType, fields: dict, gid: dr.ArrayBase, edges: SceneEdges) -> None:
    top = edges.topology
    found = gid >= 0
    g = m.UInt(dr.select(found, gid, 0))
    fields["edge_id"] = dr.select(found, dr.gather(m.Int, m.Int(top.edge_id), g), -1)
    fields["shape_id"] = dr.select(found, dr.gather(m.Int, m.Int(top.shape_id), g), -1)
    fields["global_edge_id"] = m.Int(gid)


def evaluate_points(m: ModuleType, double: bool, p, gid, edges: SceneEdges, geometry) -> dict[str, dr.ArrayBase]:
    """Fields of :class:`NearestEdge` for points and their winners ``gid`` (``Int``, -1 = none)."""
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    found, a, b = _winner_segments(m, double, gid, edges, geometry)
    p = dr.select(found, m.Array3f64(p), m.Array3f64(0.5, 1, 0))  # off the stand-in edge
    t, q = point_segment(p, a, b)
    fields = {
        "distance": dr.select(found, Float(_norm(p - q)), math.inf),
        "edge_t": dr.select(found, Float(t), 0),
        "edge_point": dr.select(found, Array3(q), 0),
    }
    _ids(m, fields, gid, edges)
    return fields


def evaluate_rays(m: ModuleType, double: bool, ray: Ray, gid, edges: SceneEdges, geometry) -> dict[str, dr.ArrayBase]:
    """Fields of :class:`NearestEdge` (with ``ray_t``, ``ray_point``) for rays and winners ``gid``."""
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    Work, Work1 = m.Array3f64, m.Float64
    found, a, b = _winner_segments(m, double, gid, edges, geometry)
    o = dr.select(found, Work(ray.o), Work(0.5, 1, -1))
    d = dr.select(found, Work(ray.d), Work(0, 0, 1))
    s0 = dr.select(found, Work1(ray.tmin), 0)
    s1 = dr.select(found, Work1(ray.tmax), math.inf)
    s, t = ray_segment(o, d, s0, s1, a, b)
    ray_point = o + s * d
    edge_point = a + t * (b - a)
    fields = {
        "distance": dr.select(found, Float(_norm(ray_point - edge_point)), math.inf),
        "edge_t": dr.select(found, Float(t), 0),
        "edge_point": dr.select(found, Array3(edge_point), 0),
        "ray_t": dr.select(found, Float(s), 0),
        "ray_point": dr.select(found, Array3(ray_point), 0),
    }
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
def _setup(scene, call: str) -> SceneEdges:
    scene._require_ready(call)
    edges = scene._edges
    edges.require_synced(call)
    return edges


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
    double = any(_convert.is_double(q) for q in arrays) or any(_convert.is_double(s.vertices) for s in scene._shapes)
    ad = any(_convert.is_ad(q) for q in arrays) or any(scene._shape_is_ad(s) for s in scene._shapes)
    return _convert.module(scene._backend, ad), double


def nearest_edge(scene, query: object, active: object, max_distance: object) -> NearestEdge:
    """``Scene.nearest_edge``: see its docstring."""
    call = "rayd.drjit.Scene.nearest_edge()"
    edges = _setup(scene, call)
    max_distance = _check.max_distance(call, max_distance)
    backend, device = scene._backend, scene._device
    is_ray = isinstance(query, Ray)
    if is_ray:
        ray = scene._check_ray(call, query)
        n, active = scene._check_active(call, ray, active)
        m, double = _kind(scene, ray.o, ray.d, ray.tmin, ray.tmax)
    else:
        if not _convert.is_jit_array(query):
            name = _convert.type_name(query)
            hint = " (rayd.torch and rayd.drjit objects do not mix)" if name.startswith(("rayd.torch", "torch")) else ""
            raise TypeError(
                f"{call}: 'points_or_ray' must be a Dr.Jit 3-vector array (Array3f, Array3f64) or a rayd.drjit.Ray, "
                f"got {name}{hint}"
            )
        points, n, active = _check_points(scene, call, query, active)
        m, double = _kind(scene, points)
    if n == 0:
        return NearestEdge((0,), **_empty(m, double, is_ray))
    stream = _convert.current_stream(device)
    winner = _convert.empty_int32(n, backend)
    flag = _convert.uint8(active, backend)
    bvh = edges.bvh(stream)
    if is_ray:
        o, o_buffer = _convert.vec3_view(_relative(scene, ray.o), device)
        d, d_buffer = _convert.vec3_view(ray.d, device)
        tmin = _convert.float32(ray.tmin, backend)
        tmax = _convert.float32(ray.tmax, backend)
        views = [o, d, _convert.scalar_view(tmin, device), _convert.scalar_view(tmax, device)]
        buffers = (o_buffer, d_buffer, tmin, tmax)
        search = _search.nearest_edge_ray
    else:
        p, p_buffer = _convert.vec3_view(_relative(scene, points), device)
        views, buffers, search = [p], (p_buffer,), _search.nearest_edge_point
    views += [_convert.scalar_view(flag, device), max_distance, _convert.scalar_view(winner, device), stream]
    _convert.query_fence(device, after=False)
    search(bvh, *views)
    _convert.query_fence(device, after=True)
    del buffers, views  # kept alive until the engine's launch is done
    geometry = scene._live_geometry(m, double)
    if is_ray:
        fields = evaluate_rays(m, double, ray, winner, edges, geometry)
    else:
        fields = evaluate_points(m, double, points, winner, edges, geometry)
    return NearestEdge((n,), **fields)


def nearest_edges(scene, points: object, k: object, active: object, max_distance: object) -> NearestEdge:
    """``Scene.nearest_edges``: see its docstring."""
    call = "rayd.drjit.Scene.nearest_edges()"
    edges = _setup(scene, call)
    k = _check.top_k(call, k, _search.MAX_K)
    max_distance = _check.max_distance(call, max_distance)
    backend, device = scene._backend, scene._device
    points, n, active = _check_points(scene, call, points, active)
    m, double = _kind(scene, points)
    if n == 0:
        return NearestEdge((0, k), **_empty(m, double, False))
    stream = _convert.current_stream(device)
    winners, winners_view = _convert.int32_rows_buffer(n, k, backend, device)
    flag = _convert.uint8(active, backend)
    bvh = edges.bvh(stream)
    p, p_buffer = _convert.vec3_view(_relative(scene, points), device)
    _convert.query_fence(device, after=False)
    _search.nearest_edges_point(bvh, p, _convert.scalar_view(flag, device), max_distance, winners_view, stream)
    _convert.query_fence(device, after=True)
    del p_buffer
    lane = dr.arange(m.UInt, n * k)
    query = lane // k if dr.width(points) != 1 else dr.zeros(m.UInt, n * k)
    repeated = dr.gather(type(points), points, query)
    geometry = scene._live_geometry(m, double)
    fields = evaluate_points(m, double, repeated, m.Int(winners.array), edges, geometry)
    return NearestEdge((n, k), **fields)


def silhouette_edges(scene, viewpoint: object) -> dr.ArrayBase:
    """``Scene.silhouette_edges``: see its docstring."""
    call = "rayd.drjit.Scene.silhouette_edges()"
    scene._require_ready(call)
    viewpoint = _check.float_array(call, "viewpoint", viewpoint, 3)
    _check.same_backend(call, "viewpoint", viewpoint, scene._device, "the scene")
    if dr.width(viewpoint) != 1:
        raise ValueError(f"{call}: 'viewpoint' must have shape (3,): one point (width 1), got width {dr.width(viewpoint)}")
    m, double = _kind(scene, viewpoint)
    with dr.suspend_grad():
        geometry = scene._live_geometry(m, double)
        Array3 = m.Array3f64 if double else m.Array3f
        return scene._edges.silhouette(m, geometry, Array3(dr.detach(viewpoint)))


def _relative(scene, x: dr.ArrayBase) -> dr.ArrayBase:
    """Query points (or ray origins) relative to the scene's search centre, in float64 (engine/frame.py)."""
    centre = scene._core.centre
    if centre is None:
        return x
    Array3 = _convert.module(scene._backend, False).Array3f64
    return Array3(dr.detach(x)) - Array3(*(float(c) for c in centre))
