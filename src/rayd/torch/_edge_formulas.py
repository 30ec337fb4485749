"""rayd.torch's evaluation of winning edges: gather the winners, apply :mod:`rayd.core.segments`.

The point/ray-to-segment formulas themselves are written once, in
:mod:`rayd.core.segments`, over :mod:`rayd.torch._vector` (plain torch ops, so
reverse mode, double backward, ``torch.func.jvp`` and float64 ``gradcheck`` work).
Queries without an edge are evaluated on a fixed stand-in edge and masked out: zero
gradient, never NaN. Used by :mod:`rayd.torch._nearest_edge` (first order) and by the
fused kernels' twice-differentiable backward (:mod:`rayd.torch._nearest_edge_fused`).
"""

from __future__ import annotations

import torch

from rayd.core import segments
from rayd.torch import _vector


def _winner_segments(
    global_edge_id: torch.Tensor, edge_v: torch.Tensor, vertices: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(found, a, b)`` of the winners, the stand-in edge where ``global_edge_id < 0``."""
    found = global_edge_id >= 0
    ends = edge_v[torch.where(found, global_edge_id, 0).long()].long()
    a, b = segments.stand_in_edge(_vector, found, vertices[ends[:, 0]], vertices[ends[:, 1]])
    return found, a, b


def _ids(fields: dict, global_edge_id: torch.Tensor, topology) -> None:
    found = global_edge_id >= 0
    row = torch.where(found, global_edge_id, 0).long()
    fields["edge_id"] = torch.where(found, topology.edge_id[row], -1).to(torch.int32)
    fields["shape_id"] = torch.where(found, topology.shape_id[row], -1).to(torch.int32)
    fields["global_edge_id"] = global_edge_id.to(torch.int32)


def evaluate_points(
    p: torch.Tensor, global_edge_id: torch.Tensor, edge_v: torch.Tensor, vertices: torch.Tensor, topology
) -> dict[str, torch.Tensor]:
    """Fields of :class:`NearestEdge` for points (N, 3) and their winners (N,) (-1 = none)."""
    fields = point_fields(p, global_edge_id, edge_v, vertices)
    _ids(fields, global_edge_id, topology)
    return fields


def point_fields(
    p: torch.Tensor, global_edge_id: torch.Tensor, edge_v: torch.Tensor, vertices: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``distance``, ``edge_t``, ``edge_point`` for points (N, 3) and winners (N,) (torch ops)."""
    found, a, b = _winner_segments(global_edge_id, edge_v, vertices)
    return segments.point_fields(_vector, found, p, a, b)


def evaluate_rays(
    o: torch.Tensor,
    d: torch.Tensor,
    s0: torch.Tensor,
    s1: torch.Tensor,
    global_edge_id: torch.Tensor,
    edge_v: torch.Tensor,
    vertices: torch.Tensor,
    topology,
) -> dict[str, torch.Tensor]:
    """Fields of :class:`NearestEdge` (with ``ray_t``, ``ray_point``) for rays (N, 3) and winners (N,)."""
    found, a, b = _winner_segments(global_edge_id, edge_v, vertices)
    fields = segments.ray_fields(_vector, found, o, d, s0, s1, a, b)
    _ids(fields, global_edge_id, topology)
    return fields

