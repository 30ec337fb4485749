"""``copy.deepcopy`` of a :class:`rayd.torch.Scene`: a new scene rebuilt from deep copies of what it holds.

A scene's engine state (BVHs, Warp arrays, ctypes handles) cannot be copied byte for
byte; what defines a scene is its shapes, in order, and the tensors registered with
them. The copy re-adds deep copies of those (through ``memo``, so tensors copied in the
same ``deepcopy`` call stay shared) and, if the original was built, builds. See
:meth:`rayd.torch.Scene.__deepcopy__` for the semantics.
"""

from __future__ import annotations

import copy

import torch


def _tensor(value: torch.Tensor | None, memo: dict) -> torch.Tensor | None:
    """A deep copy of ``value``: ``copy.deepcopy`` for leaves, the detached value for non-leaf tensors."""
    if value is None:
        return None
    if id(value) in memo:
        return memo[id(value)]
    if value.is_leaf:
        return copy.deepcopy(value, memo)
    out = value.detach().clone()  # a non-leaf's graph cannot be copied: its value is
    memo[id(value)] = out
    return out


def deepcopy_scene(scene, memo: dict):
    """The copy of ``scene`` (see ``Scene.__deepcopy__``)."""
    from rayd.torch.mesh import Mesh  # noqa: PLC0415 - import cycle

    new = type(scene)()
    memo[id(scene)] = new
    shapes = scene._core.table.shapes
    batches: dict[int, tuple[torch.Tensor, list[int], list[int]]] = {}
    for shape_id, shape in enumerate(shapes):
        to_world = None
        if shape.source is not None:  # set_mesh_transform with K ids: one batch, set again below
            group = batches.setdefault(id(shape.source), (shape.source, [], []))
            group[1].append(shape_id)
            group[2].append(shape.source_index)
        else:
            to_world = _tensor(shape.to_world, memo)
        if shape.is_instance:  # (no matrix yet: a placeholder until its batch is set below)
            new.add_instance(shape.base, to_world if to_world is not None
                             else torch.eye(4, dtype=torch.float64, device=scene._device))
            continue
        mesh = shape.mesh
        copied = Mesh(_tensor(shape.vertices, memo), _tensor(mesh.faces, memo), normals=_tensor(mesh.normals, memo),
                      uv=_tensor(mesh.uv, memo), to_world=to_world)
        memo.setdefault(id(mesh), copied)
        new.add_mesh(copied, dynamic=shape.dynamic)
    for source, ids, index in batches.values():
        batch = _tensor(source, memo)
        new.set_mesh_transform(ids, batch if index == list(range(batch.shape[0])) else batch[index])
    for shape_id, shape in enumerate(shapes):
        if not shape.enabled:
            new.set_shape_enabled(shape_id, False)
    table = scene._core.table
    if table.built and not table.structure_changed:
        new.build()
        mask = getattr(scene._edges, "_mask", None)  # (no edge state: None)
        if mask is not None and not bool(mask.all()):
            new.set_edge_mask(mask.clone())
        if new.has_pending_updates():
            new.sync()
    return new
