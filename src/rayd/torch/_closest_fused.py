"""Fast path of ``Scene.closest_point``: one Warp kernel writes the record (forward only).

Used when the points and every mesh's vertices are float32 and nothing needs a
gradient (grad mode off, or no ``requires_grad`` points, vertices or transforms; no
forward-mode dual tensors, no ``torch.func`` transform, not under ``torch.compile``): plain meshes,
transformed meshes and instances alike (corners placed in float64 as
``_geometry.gather`` places them). :func:`rayd.engine.closest_point_fields.closest_point_fields`
evaluates the op-by-op path's float64 formulas (``_closest_point.closest_on_triangles``)
and writes ``distance, p, barycentric, geo_n`` and the ids in their final layout, so a
query makes no torch pass per field. Every other case takes the op-by-op path.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad

from rayd.engine.closest_point_fields import closest_point_fields
from rayd.torch import _convert


def usable(points: torch.Tensor, state) -> bool:
    """True if the fused kernel may produce ``Scene.closest_point``'s record for these inputs."""
    if torch.compiler.is_compiling() or forward_ad._current_level >= 0 or _convert.transforms_active():
        return False
    meshes = [s.vertices for s in state.core.table.meshes]
    tensors = [points, *meshes]
    if any(t.dtype != torch.float32 or _convert.is_wrapped(t) for t in tensors):
        return False
    if not torch.is_grad_enabled():  # (forward mode and torch.func were ruled out above)
        return True
    if any(t.requires_grad for t in tensors):
        return False
    return not (state.has_matrix() and state.world().requires_grad)


def closest_fused(points: torch.Tensor, batch: torch.Size, winner: torch.Tensor, state,
                  geometric: bool = True) -> dict[str, torch.Tensor]:
    """The (N, ...) fields of a :class:`ClosestPoint` for the search's ``winner`` (N,) int32 rows.

    ``points``: float32 (..., 3) broadcastable to ``batch``; ``state``: the scene's
    ``LiveState``. ``geometric=False`` writes ``distance`` and the ids only (the other
    fields are then absent from the result).
    """
    n = winner.shape[0]
    device = winner.device
    offsets, face_row = state.int32_tables
    rows = _convert.flat_float32(points.detach(), batch, 3)
    vertices = state.flat_vertices().contiguous()  # (one copy per sync, not per query)
    distance = torch.empty(n, dtype=torch.float32, device=device)
    vec = [torch.empty((n, 3), dtype=torch.float32, device=device) for _ in range(3)] if geometric else []
    shape_id = torch.empty(n, dtype=torch.int32, device=device)
    prim_id = torch.empty(n, dtype=torch.int32, device=device)
    placement = None
    if state.has_matrix():
        import warp as wp  # noqa: PLC0415

        placement = wp.from_torch(_convert.primal(state.world()).to(torch.float64).contiguous(), dtype=wp.mat44d)
    outputs = [_convert.scalar_view(distance), *([_convert.vec3_view(x) for x in vec] or [None] * 3),
               _convert.scalar_view(shape_id), _convert.scalar_view(prim_id)]
    closest_point_fields(_convert.vec3_view(rows), _convert.vec3_view(vertices), _convert.scalar_view(state.indices),
                         _convert.scalar_view(offsets), _convert.scalar_view(face_row), _convert.scalar_view(winner),
                         outputs, _convert.current_stream(device), world=placement)
    fields = {"distance": distance}
    if geometric:
        fields.update(p=vec[0], barycentric=vec[1], geo_n=vec[2])
    fields.update(prim_id=prim_id, shape_id=shape_id, global_prim_id=winner)
    return fields
