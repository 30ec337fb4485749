"""The scene's live geometry as differentiable tensors, gathered per hit.

Meshes are kept in object space (the tensors the user registered); each shape
(mesh or instance) has a world transform, ``M_mesh`` for a mesh and
``M_instance @ M_mesh`` for an instance. A hit's ``global_prim_id`` maps to its
shape (by the shapes' ``global_prim_id`` offsets), the face of the shape's mesh, its
three vertices, and the shape's transform, all with torch ops so that gradients
reach vertices, normals, uv and transforms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayd.torch import _interval


@dataclass
class ShapeTable:
    """Index tensors fixed at ``build()`` (all on the scene's device).

    global_offset: (S,) int64 first ``global_prim_id`` of each shape (ascending).
    face_row: (S,) int64 row in ``faces`` of the first face of the shape's mesh.
    faces: (F_m, 3) int64 rows into the concatenated mesh vertices.
    face_has_normals / face_has_uv: (F_m,) bool, or ``None`` if no mesh has any.
    shape_mesh: (S,) int64 index (among meshes) of each shape's mesh.
    instance_rows: (I,) int64 shape ids of the instances.
    """

    global_offset: torch.Tensor
    face_row: torch.Tensor
    faces: torch.Tensor
    face_has_normals: torch.Tensor | None
    face_has_uv: torch.Tensor | None
    shape_mesh: torch.Tensor
    instance_rows: torch.Tensor


@dataclass
class LiveTensors:
    """What the user registered now, cast to one dtype (differentiable).

    vertices: (V_m, 3) object-space vertices of all meshes, concatenated.
    normals, uv: (V_m, 3) / (V_m, 2), or ``None``.
    to_world: (S, 4, 4) float64 world transform per shape, or ``None`` if every one is identity.
    normal_matrix: (S, 3, 3) inverse of each transform's linear part (for normals), or ``None``.
    """

    vertices: torch.Tensor
    normals: torch.Tensor | None
    uv: torch.Tensor | None
    to_world: torch.Tensor | None
    normal_matrix: torch.Tensor | None = None


@dataclass
class HitGeometry:
    """Per ray (N rays): the winner's world-space data; stand-ins where ``hit`` is False."""

    hit: torch.Tensor  # (N,) bool
    corners: torch.Tensor  # (N, 3, 3) world-space v0, v1, v2
    normals: torch.Tensor | None  # (N, 3, 3) world-space vertex normals
    has_normals: torch.Tensor | None  # (N,) bool
    uv: torch.Tensor | None  # (N, 3, 2)
    has_uv: torch.Tensor | None  # (N,) bool
    shape_id: torch.Tensor  # (N,) int32, -1 on a miss
    prim_id: torch.Tensor  # (N,) int32, -1 on a miss


def ids(table: ShapeTable, global_prim_id: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(shape_id, prim_id), int32 (N,), of (N,) int32 ``global_prim_id``; -1 on a miss."""
    if table.global_offset.numel() == 1 and global_prim_id.numel() > 0 and _interval.host_ok(global_prim_id):
        # One shape on the CPU: in NumPy (one thread; torch's OpenMP regions wait for a busy core).
        g = global_prim_id.numpy()
        return torch.from_numpy(g >> 31), torch.from_numpy(g.copy())  # -1 >> 31 = -1, g >= 0: 0
    hit = global_prim_id >= 0
    if table.global_offset.numel() == 1:  # one shape: prim_id is global_prim_id (two ops, not eight)
        zero = torch.zeros((), dtype=torch.int32, device=global_prim_id.device)
        return torch.where(hit, zero, -1), global_prim_id.clone()
    g = torch.where(hit, global_prim_id, 0).long()
    shape = torch.searchsorted(table.global_offset, g, right=True) - 1
    prim = g - table.global_offset[shape]
    return torch.where(hit, shape, -1).to(torch.int32), torch.where(hit, prim, -1).to(torch.int32)


def gather(table: ShapeTable, live: LiveTensors, global_prim_id: torch.Tensor) -> HitGeometry:
    """Gather the winning triangles of (N,) int32 ``global_prim_id`` (-1 = miss)."""
    hit = global_prim_id >= 0
    g = torch.where(hit, global_prim_id, 0).long()
    shape = torch.searchsorted(table.global_offset, g, right=True) - 1
    prim = g - table.global_offset[shape]
    row = table.face_row[shape] + prim
    tri = table.faces[row]
    corners = live.vertices[tri]
    normals = uv = has_normals = has_uv = None
    if live.normals is not None:
        normals = live.normals[tri]
        has_normals = table.face_has_normals[row]
    if live.uv is not None:
        uv = live.uv[tri]
        has_uv = table.face_has_uv[row]
    if live.to_world is not None:
        m = live.to_world[shape]  # (N, 4, 4) float64
        linear = m[:, :3, :3]
        # Placed in float64 (the solve is float64 too): float32 corners far from the
        # origin would lose the precision the evaluation keeps everywhere else.
        corners = corners.to(m.dtype) @ linear.transpose(1, 2) + m[:, None, :3, 3]
        if normals is not None:
            # Normals transform by the inverse transpose: n_world^T = n^T inv(A).
            normal_matrix = live.normal_matrix[shape]
            normals = (normals.to(normal_matrix.dtype) @ normal_matrix).to(normals.dtype)
    return HitGeometry(
        hit=hit,
        corners=corners,
        normals=normals,
        has_normals=has_normals,
        uv=uv,
        has_uv=has_uv,
        shape_id=torch.where(hit, shape, -1).to(torch.int32),
        prim_id=torch.where(hit, prim, -1).to(torch.int32),
    )
