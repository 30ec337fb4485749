"""All hits along a ray for :class:`rayd.torch.Scene`: ``intersect_all`` and ``count_intersections``.

The engine (:mod:`rayd.engine.all_hits`) lists each ray's first ``K`` crossings, sorted,
with hits of a shared edge or vertex merged into one; every listed hit is then evaluated
for its fixed face exactly as ``intersect`` evaluates its winner (the fused Warp kernel or
``_geometry.gather`` + ``_intersect.evaluate`` on the flattened ``N K`` hits), so the fields
and their gradients are those of ``intersect``.
"""

from __future__ import annotations

import torch

from rayd.core import hits
from rayd.core.docs import scene_annotations
from rayd.torch._scene_docs import TYPES
from rayd.engine import all_hits as engine_all_hits
from rayd.flags import RayFlags, unrequested
from rayd.torch import _interval, _intersect_fused, _ops, _trace, _walk_on
from rayd.torch._geometry import gather, ids
from rayd.torch._intersect import evaluate
from rayd.torch.intersection import Intersection



def _bound_rows(bound: float | torch.Tensor) -> float | torch.Tensor:
    """A per-ray bound made to broadcast against ``[..., K]`` (a trailing axis of 1)."""
    if isinstance(bound, torch.Tensor) and bound.numel() != 1:
        return bound.unsqueeze(-1)
    return bound


# The hooks of rayd.core.queries.AllHitsQueries (bound through rayd.torch._parts.all_hits): it checks
# ``max_hits`` and ``flags``; these check the rays, search and evaluate.
def intersect_all(scene, call: str, ray, k: int, active, flags: RayFlags, ignore) -> Intersection:
    """``Scene.intersect_all`` after its checks of ``max_hits`` and ``flags``."""
    # float64 queries: the float32 search's interval widened, the float64 t decides (enforce)
    batch, n, rows, ray = _trace.prepare(scene, call, ray, active, ignore, widen=True)
    if n:
        gid = _ops.all_hits(scene, call, rows, n, k).reshape(n * k)
    else:
        gid = torch.full((0,), -1, dtype=torch.int32, device=scene._device)
    shape = torch.Size(tuple(batch) + (k,))
    fields = _evaluate_hits(scene, ray, shape, gid, flags)
    fields = _interval.enforce(fields, _bound_rows(ray.tmin), _bound_rows(ray.tmax), shape)
    fields = _compact(fields, n, k)
    fields = {name: v.reshape(tuple(shape) + v.shape[2:]) for name, v in fields.items()}
    return Intersection(flags, **fields)


def count_intersections(scene, call: str, ray, active, ignore) -> torch.Tensor:
    """``Scene.count_intersections``: the engine's exact count of each ray's crossings.

    A float64 query is searched as :func:`intersect_all`'s, below the widened ``tmin`` (the search
    starts a ray with ``tmin < 0`` at ``o + tmin d``, and a ray grazing an edge may hit or miss by
    its origin's rounding), up to the float32 ``tmax``; crossings whose float64 ``t`` is ``<= tmin``
    are taken off (:func:`rayd.torch._walk_on.behind`)."""
    batch, n, rows, ray = _trace.prepare(scene, call, ray, active, ignore, widen=True)
    if n == 0:
        return torch.zeros(batch, dtype=torch.int32, device=scene._device)
    if scene._output_dtype(ray.o, ray.d) != torch.float64 or _walk_on.traced():  # not widened
        return _ops.count_hits(scene, call, rows, n).reshape(batch)
    rows = rows[:3] + _trace.prepare(scene, call, ray, active, ignore)[2][3:4] + rows[4:]
    first = _ops.all_hits(scene, call, rows, n, 1).reshape(n)
    count = _ops.count_hits(scene, call, rows, n) - _walk_on.behind(scene, ray, ignore, batch, rows, first)
    return count.reshape(batch)


def _evaluate_hits(scene, ray, shape: torch.Size, gid: torch.Tensor, flags: RayFlags) -> dict[str, torch.Tensor]:
    """``intersect``'s evaluation of the fixed faces ``gid`` (N K,) for rays broadcast to ``shape`` (..., K)."""
    state = scene._state
    rows = shape.numel()
    meshes = [s.vertices for s in scene._core.table.meshes]
    o = ray.o.unsqueeze(-2) if ray.o.dim() > 1 else ray.o
    d = ray.d.unsqueeze(-2) if ray.d.dim() > 1 else ray.d
    if state.plain and not state.has_matrix() and _intersect_fused.usable([ray.o, ray.d, *meshes]):
        vertices = meshes[0] if len(meshes) == 1 else torch.cat(meshes)
        fields = _intersect_fused.evaluate_fused(o, d, shape, gid, vertices, state.indices)
        fields["shape_id"], fields["prim_id"] = ids(state.table, gid)
        fields["global_prim_id"] = gid
        return {name: v for name, v in fields.items() if name not in unrequested(flags)}
    dtype = scene._output_dtype(ray.o, ray.d)
    o = o.to(dtype).expand(tuple(shape) + (3,)).reshape(rows, 3)
    d = d.to(dtype).expand(tuple(shape) + (3,)).reshape(rows, 3)
    face = hits.face_frame(scene._core, dtype == torch.float64)
    return evaluate(o, d, gid, gather(state.table, state.live(dtype), gid), flags, face)  # float64: off-face: misses

def _compact(fields: dict[str, torch.Tensor], n: int, k: int) -> dict[str, torch.Tensor]:
    """Fields as (N, K, ...) with each ray's valid slots first, in their order (a hit the
    evaluation put outside ``(tmin, tmax)`` became a miss and moves behind the hits)."""
    out = {name: v.reshape((n, k) + v.shape[1:]) for name, v in fields.items()}
    if n == 0 or k == 1:
        return out
    invalid = (out["global_prim_id"] < 0).to(torch.int8)
    order = torch.sort(invalid, dim=1, stable=True).indices
    return {name: torch.gather(v, 1, order.reshape((n, k) + (1,) * (v.dim() - 2)).expand(v.shape))
            for name, v in out.items()}


#: The docstrings of :class:`rayd.core.queries.AllHitsQueries`' methods on :class:`rayd.torch.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "intersect_all": """The first ``max_hits`` hits of each ray in increasing ``t``, differentiable for the fixed faces.

    A ray through a shared edge or vertex of a mesh hits every face around it at the
    same ``t``; those hits are one crossing, reported once (on the face with the
    smaller ``global_prim_id``). Concretely, two hits are one crossing when their
    faces belong to the same shape and share a vertex index, and
    ``|t_a - t_b| <= 1e-5 (|t| + M / |d|)`` with ``M`` the scene's largest absolute
    coordinate in the search frame, relative to its centre (docs/precision.md;
    ``rayd.engine.all_hits.MERGE_TOLERANCE``). A ray that only touches
    the surface (tangent at a vertex, or over an edge with both faces on one side) is
    listed too, as one hit (the point ``intersect`` finds), though
    :meth:`count_intersections` counts it 0. Faces that share no vertex index (an
    unwelded soup, separate meshes, coincident duplicates) count separately.

    Args:
        ray: :class:`rayd.torch.Ray`, ``o``, ``d`` of shape (..., 3), float32 or float64,
            on the scene's device; hits count for ``tmin < t < tmax``.
        max_hits: ``K``, an int in ``[1, 64]``.
        active: optional bool tensor broadcastable to ``...``; inactive rays have no hits.
        flags: :class:`rayd.RayFlags` selecting the fields to compute (as ``intersect``).
        ignore: optional ``global_prim_id`` per ray (int tensor broadcastable to ``...``,
            or an int; -1 for none) whose face the ray skips.

    Returns:
        :class:`rayd.torch.Intersection` whose fields have shape ``(..., K)``
        (``(..., K, 3)`` / ``(..., K, 2)``): slot ``k`` holds the ``k``-th crossing in
        increasing ``t`` (ties by ``global_prim_id``), with the fields and meaning of
        ``intersect``'s. Unused slots come last and hold misses (``t = inf``, ids -1,
        zeros). ``is_valid()`` is ``(..., K)``.

    Units:
        ``t`` in multiples of ``|d|``; ``p`` in world units.

    Gradients:
        As :meth:`intersect`, per slot, for the fixed faces.

    Raises:
        TypeError: ``max_hits`` is not an int; and as :meth:`intersect`.
        ValueError: ``max_hits`` outside ``[1, 64]``; and as :meth:`intersect`.
        RuntimeError: as :meth:`intersect`.
    """,
    "count_intersections": """The number of crossings of each ray with ``tmin < t < tmax``, exact (no cap).

    ``count`` is the number of times the ray passes from one side of a surface to the
    other. Hits of a shared edge or vertex are one hit, by the rule of
    :meth:`intersect_all`; that hit counts 1 where the ray crosses the surface there and
    0 where it only touches it (tangent at a vertex, as at the apex of an octahedron
    passed from the side, or over an edge with both faces on one side of the ray).
    Concretely, a merged hit counts the signed number of its faces that contain the
    ray displaced by an infinitesimal in a fixed direction (exact signs of the
    watertight test's edge functions; simulation of simplicity), in absolute value. So
    a ray from ``o`` to ``+inf`` crosses a closed, consistently oriented mesh an odd
    number of times exactly where ``o`` lies inside it, whatever vertices and edges it
    passes through. Open meshes: a ray through an interior vertex or edge of a surface
    counts 1; through a boundary edge (a face's edge that no other face listed there
    shares), 1, as listed; exactly through a boundary vertex shared by two or more
    faces, as the displaced ray (0 or 1). Hits merged by ``t`` alone (a face crossed
    away from its edges within the tolerance of another that shares a vertex index)
    count once, as listed.

    So ``count == intersect_all(ray, K).is_valid().sum(-1)`` (any ``K`` at least the
    number of hits) except on rays that touch a surface: a touch is listed, not counted.

    Args:
        ray: :class:`rayd.torch.Ray`, ``o``, ``d`` of shape (..., 3) on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive rays count 0.
        ignore: optional ``global_prim_id`` per ray to skip (-1 for none).

    Returns:
        (...) int32 tensor. Not differentiable.

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`intersect`.
    """,
}

ANNOTATIONS = scene_annotations(TYPES, DOCS)
