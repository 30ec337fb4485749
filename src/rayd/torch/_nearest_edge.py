"""Nearest-edge queries of rayd.torch: checks, engine search, differentiable evaluation.

The engine's search kernels pick the winning edge per query (float32, BVH); this
module recomputes the continuous outputs for that edge from the live (differentiable)
vertex tensors with torch ops:

- point ``p`` and segment ``[a, b]``:
  ``edge_t = clamp(dot(p - a, b - a) / |b - a|^2, 0, 1)``,
  ``edge_point = a + edge_t (b - a)``, ``distance = |p - edge_point|``;
- ray segment ``o + s d, s in [tmin, tmax]`` and segment ``a + t e, t in [0, 1]``:
  the minimiser of ``|o + s d - a - t e|^2`` over the box, by clamping the
  unconstrained solution and re-solving on the clamped side (Ericson 2004,
  "Real-Time Collision Detection", sec. 5.1.9).

Both are plain torch expressions, so reverse mode, ``torch.func.jvp`` and float64
``gradcheck`` work. Queries without an edge are evaluated on a fixed stand-in edge
and masked out: zero gradient, never NaN.
"""

from __future__ import annotations

import torch

from rayd.core.checks import max_distance as check_max_distance  # noqa: F401 - re-exported
from rayd.core.closest import within_max_distance
from rayd.torch import _check, _convert, _ops
from rayd.torch import _nearest_edge_fused as _fused
from rayd.torch._edge_formulas import _ids, evaluate_points, evaluate_rays
from rayd.torch._ops import ready_edges as _ready_edges
from rayd.torch.edges import NearestEdge, placed_vertices
from rayd.torch.ray import Ray


def _check_points(call: str, points: object, device: torch.device) -> torch.Tensor:
    points = _check.float_tensor(call, "points", points, last=3)
    _check.same_device(call, "points", points, device, "the scene")
    return points


def _check_active(
    call: str, batch: torch.Size, name: str, active: object, device: torch.device
) -> tuple[torch.Size, torch.Tensor]:
    """The batch shape with ``active`` broadcast in, and the uint8 flag buffer for the engine."""
    if active is None:
        return batch, torch.ones(1, dtype=torch.uint8, device=device)
    active = _check.tensor(call, "active", active)
    if active.dtype != torch.bool:
        raise TypeError(f"{call}: 'active' must have dtype bool, got {active.dtype}")
    _check.same_device(call, "active", active, device, "the scene")
    batch = _check.broadcast(call, [(name, batch), ("active", active.shape)])
    flag = _convert.primal(active)
    flag = flag.reshape(1) if flag.numel() == 1 else flag.expand(batch).reshape(-1)
    return batch, flag.to(torch.uint8).contiguous()


def _dtype(query: torch.dtype, scene) -> torch.dtype:
    """``query`` promoted with the scene's vertex dtype (its meshes', promoted at ``sync()``)."""
    return torch.promote_types(query, scene._state.vertex_dtype)


def _bound(value: float | torch.Tensor, batch: torch.Size, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return _convert.flat_float32(value, batch, None)
    return torch.full((1,), value, dtype=torch.float32, device=device)


def _search_rows(x: torch.Tensor, batch: torch.Size, centre: torch.Tensor | None) -> torch.Tensor:
    """Query points (or ray origins) as the engine's float32 rows, relative to the search centre."""
    if centre is None:
        return _convert.flat_float32(x, batch, 3)
    return _convert.flat_float32(_convert.primal(x).to(torch.float64) - centre, batch, 3)


# ---------------------------------------------------------------------- queries
# The hooks of rayd.core.edges.EdgeQueries: it checks the lifecycle, ``k`` and
# ``max_distance`` and tells points from rays; these check the arrays, search and evaluate.
def ready(scene, call: str):
    """The scene's edges, synced, their lazily built state made (:func:`rayd.torch._ops.ready_edges`)."""
    return _ready_edges(call, scene)


def nearest_edge_ray(scene, call: str, edges, ray: Ray, active: object, max_distance: float) -> NearestEdge:
    """``Scene.nearest_edge(ray)`` after the shared checks: engine search, evaluation, record."""
    device = scene._device
    batch, flag = _check_active(call, ray.shape, "ray", active, device)
    n = batch.numel()
    winner = _ops.edge_ray_search(scene, call, _search_rows(ray.o, batch, edges.centre),
                                  _convert.flat_float32(ray.d, batch, 3), _bound(ray.tmin, batch, device),
                                  _bound(ray.tmax, batch, device), flag, max_distance, n)
    dtype = _dtype(torch.promote_types(ray.o.dtype, ray.d.dtype), scene)
    # Evaluated in float64 and rounded once (as rayd.drjit does): the formulas square d, which
    # float32 cannot for |d| beyond about 1e19 or below 1e-19.
    work = torch.float64
    vertices = placed_vertices(scene._state, work)
    o = ray.o.to(work).expand(tuple(batch) + (3,)).reshape(n, 3)
    d = ray.d.to(work).expand(tuple(batch) + (3,)).reshape(n, 3)
    s0 = _interval(ray.tmin, batch, dtype, device).to(work)  # the bounds as given, in the output dtype
    s1 = _interval(ray.tmax, batch, dtype, device).to(work)
    fields = evaluate_rays(o, d, s0, s1, winner, edges.edge_rows, vertices, edges.topology)
    fields = within({k: v.to(dtype) if v.is_floating_point() else v for k, v in fields.items()}, max_distance)
    return NearestEdge(**{k: v.reshape(tuple(batch) + v.shape[1:]) for k, v in fields.items()})


def nearest_edge_points(scene, call: str, edges, points: object, active: object, max_distance: float) -> NearestEdge:
    """``Scene.nearest_edge(points)`` after the shared checks."""
    return _points_query(scene, call, edges, points, None, active, max_distance)


def nearest_edges(scene, call: str, edges, points: object, k: int, active: object, max_distance: float) -> NearestEdge:
    """``Scene.nearest_edges`` after the shared checks (``k`` checked)."""
    return _points_query(scene, call, edges, points, k, active, max_distance)


def _points_query(scene, call, edges, points, k, active, max_distance) -> NearestEdge:
    """The nearest edge (``k`` None) or the ``k`` nearest of each point."""
    device = scene._device
    points = _check_points(call, points, device)
    batch, flag = _check_active(call, points.shape[:-1], "points", active, device)
    n = batch.numel()
    rows = _search_rows(points, batch, edges.centre)
    if k is None:
        winner = _ops.edge_point_search(scene, call, rows, flag, max_distance, n)
        fields = within(_evaluate_points(scene, edges, points, batch, 1, winner), max_distance)
        return NearestEdge(**{name: v.reshape(tuple(batch) + v.shape[1:]) for name, v in fields.items()})
    winner = _ops.edge_point_search(scene, call, rows, flag, max_distance, n, k)
    fields = within(_evaluate_points(scene, edges, points, batch, k, winner.reshape(-1)), max_distance)
    fields = _sorted_slots(fields, n, k)
    return NearestEdge(**{name: v.reshape(tuple(batch) + (k,) + v.shape[1:]) for name, v in fields.items()})


def within(fields: dict[str, torch.Tensor], max_distance: float) -> dict[str, torch.Tensor]:
    """``fields`` ((N, ...) tensors) with results farther than ``max_distance`` made misses
    (:func:`rayd.core.closest.within_max_distance`: the search radius is widened by rounding)."""
    return within_max_distance(fields, max_distance, _select_rows)


def _select_rows(ok: torch.Tensor, value: torch.Tensor, fill: float) -> torch.Tensor:
    """``value`` where ``ok`` (broadcast over ``value``'s trailing component dims), else ``fill``."""
    return torch.where(ok.reshape(ok.shape + (1,) * (value.dim() - ok.dim())), value, fill)


def _sorted_slots(fields: dict[str, torch.Tensor], n: int, k: int) -> dict[str, torch.Tensor]:
    """``fields`` ((n k, ...) per slot) with each point's k slots in the contract's order: by the
    reported ``distance``, ties by ``global_edge_id``, unfilled slots last. The search ranks float32
    squared distances; the reported distances are re-evaluated (float64 inside), so two slots may
    swap or tie differently there. A permutation (a gather): gradients follow their slot."""
    if n == 0:
        return fields
    gid = fields["global_edge_id"].reshape(n, k)
    key = torch.where(gid < 0, torch.iinfo(torch.int32).max, gid)
    by_id = torch.argsort(key, dim=1, stable=True)
    distance = torch.gather(fields["distance"].detach().reshape(n, k), 1, by_id)
    order = torch.gather(by_id, 1, torch.argsort(distance, dim=1, stable=True))
    out = {}
    for name, v in fields.items():
        rows = v.reshape(n, k, -1)
        out[name] = torch.gather(rows, 1, order[:, :, None].expand(rows.shape)).reshape(v.shape)
    return out


def _evaluate_points(scene, edges, points, batch, repeat, winner) -> dict[str, torch.Tensor]:
    """Fields for ``batch`` points with ``repeat`` winners each (fused kernel when usable)."""
    if _fused.usable(scene._shapes, points):
        fields = _fused.evaluate_points_fused(points, batch, repeat, winner, scene._shapes, edges.edge_rows)
        _ids(fields, winner, edges.topology)
        return fields
    n = batch.numel()
    dtype = _dtype(points.dtype, scene)
    # Evaluated in float64 and rounded once, as the ray queries (``nearest_edge_ray``), ``intersect``
    # and ``closest_point`` are: the placement of a transformed or instanced float32 mesh far from the
    # origin, rounded to float32 first, was off by half a float32 ulp of the world coordinates
    # (5e-4 at 3e4), and with it distance, edge_t, edge_point and their gradients.
    work = torch.float64
    vertices = placed_vertices(scene._state, work)
    p = points.to(work).expand(tuple(batch) + (3,)).reshape(n, 1, 3).expand(n, repeat, 3).reshape(n * repeat, 3)
    fields = evaluate_points(p, winner, edges.edge_rows, vertices, edges.topology)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in fields.items()}


def silhouette_edges(scene, call: str, viewpoint: object, oriented: bool = False) -> torch.Tensor:
    """``Scene.silhouette_edges`` after the lifecycle check (``oriented``: ``sample_edges``' rule,
    :meth:`rayd.torch.edges.SceneEdges.silhouette`)."""
    viewpoint = _check.float_tensor(call, "viewpoint", viewpoint, last=3, ndim=1)
    _check.same_device(call, "viewpoint", viewpoint, scene._device, "the scene")
    dtype = _dtype(viewpoint.dtype, scene)
    vertices = placed_vertices(scene._state, dtype, detach=True)
    with _convert.outside_transforms():
        scene._edges.topology  # noqa: B018 - lazily built state, kept beyond this call
    return scene._edges.silhouette(vertices, _convert.primal(viewpoint).to(dtype), oriented=oriented)


def _interval(value: float | torch.Tensor, batch: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(dtype).expand(batch).reshape(-1)
    return torch.full((batch.numel(),), value, dtype=dtype, device=device)
