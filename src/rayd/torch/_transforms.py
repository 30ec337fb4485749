"""The scene's world transform per shape, composed once per ``build()`` / ``sync()``.

Each shape's placement is ``M_mesh`` (a mesh) or ``M_instance @ M_mesh`` (an
instance), affine: the last row is taken as (0, 0, 0, 1). A query needs the
placements of the shapes its rays hit, differentiably where the user's matrices
require gradients. Rebuilding all ``S`` matrices with a few torch ops per shape made
every query cost O(S) ops (0.9 s for one ray among 10,000 instances); here:

- at ``build()`` / ``sync()`` the plain (no autograd) float64 table of all ``S``
  placements is composed once, with batched ops;
- a query without gradients into any transform uses that table as is (no work);
- a query where some registered matrices require gradients (or forward-mode AD or a
  ``torch.func`` wrapper is in play) re-places, with a fixed number of batched ops,
  only those matrices on top of the plain table: the autograd graph is made anew in
  each query, so no graph outlives a ``backward()``.

Batched ``set_mesh_transform`` calls give K shapes views of one (K, 4, 4) tensor; it
is gathered as one tensor (one op), not as K views.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter

import torch
import torch.autograd.forward_ad as forward_ad

from rayd.torch import _convert

_REQUIRES_GRAD = attrgetter("requires_grad")


def affine(m: torch.Tensor) -> torch.Tensor:
    """``m`` (..., 4, 4) in float64 with its last row replaced by (0, 0, 0, 1) (differentiably)."""
    m = m.to(torch.float64)
    last = torch.zeros_like(m[..., 3:, :])
    last[..., 0, 3] = 1.0
    return torch.cat((m[..., :3, :], last), dim=-2)


@dataclass
class _Singles:
    """Shapes holding their own (4, 4) matrices of one dtype."""

    ids: list[int] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)
    _chosen: tuple[list[bool], torch.Tensor] | None = None

    def ids_for(self, flags: list[bool], device: torch.device) -> torch.Tensor:
        """The ids where ``flags`` is True, as a tensor; kept while the flags stay the same
        (no host-to-device copy in the queries of a training loop)."""
        if self._chosen is None or self._chosen[0] != flags:
            with _convert.outside_transforms():
                chosen = torch.tensor(list(compress(self.ids, flags)), dtype=torch.int64, device=device)
            self._chosen = (flags, chosen)
        return self._chosen[1]


@dataclass
class _Source:
    """Shapes holding views ``source[k]`` of one batched (K, 4, 4) tensor."""

    source: torch.Tensor
    ids: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    ids_t: torch.Tensor | None = None
    rows_t: torch.Tensor | None = None


class TransformTable:
    """World transforms of a scene's shapes (see the module docstring).

    Args:
        shapes: the scene's shape records (``to_world``, ``base``, ``is_instance``,
            ``source``, ``source_index``), read at each :meth:`refresh`.
        device: the scene's device.
    """

    def __init__(self, shapes: list, device: torch.device) -> None:
        self._shapes = shapes
        self._device = device
        self.refresh()

    def refresh(self) -> None:
        """Re-read the registered matrices and compose the plain table (``build()`` / ``sync()``)."""
        shapes, device = self._shapes, self._device
        self.any = any(s.to_world is not None for s in shapes)
        self._normal = None
        if not self.any:
            self.plain = None
            return
        singles: dict[torch.dtype, _Singles] = {}
        sources: dict[int, _Source] = {}
        self._always_live = False
        for shape_id, shape in enumerate(shapes):
            m = shape.to_world
            if m is None:
                continue
            self._always_live |= _convert.is_wrapped(m) or _has_tangent(m)
            source = getattr(shape, "source", None)
            if source is not None:
                group = sources.setdefault(id(source), _Source(source))
                group.ids.append(shape_id)
                group.rows.append(shape.source_index)
            else:
                group = singles.setdefault(m.dtype, _Singles())
                group.ids.append(shape_id)
                group.tensors.append(m)
        for group in sources.values():
            group.ids_t = torch.tensor(group.ids, dtype=torch.int64, device=device)
            group.rows_t = torch.tensor(group.rows, dtype=torch.int64, device=device)
            self._always_live |= _convert.is_wrapped(group.source) or _has_tangent(group.source)
        self._singles = list(singles.values())
        self._sources = list(sources.values())
        self._single_ids = [torch.tensor(g.ids, dtype=torch.int64, device=device) for g in self._singles]
        instances = [i for i, s in enumerate(shapes) if s.is_instance]
        self._instances = torch.tensor(instances, dtype=torch.int64, device=device)
        self._instance_bases = torch.tensor([shapes[i].base for i in instances], dtype=torch.int64, device=device)
        own = torch.eye(4, dtype=torch.float64, device=device).repeat(len(shapes), 1, 1)
        for ids, group in zip(self._single_ids, self._singles):
            own[ids] = affine(torch.stack([_convert.primal(t) for t in group.tensors]))
        for group in self._sources:
            own[group.ids_t] = affine(_convert.primal(group.source)[group.rows_t])
        self._own = own
        self.plain = self._compose(own)

    def _compose(self, own: torch.Tensor) -> torch.Tensor:
        if self._instances.numel() == 0:
            return own
        rows = self._instances
        return own.index_put((rows,), own[rows] @ own[self._instance_bases])

    def live(self, normals: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(to_world, normal_matrix)``: (S, 4, 4) float64 placements and, if ``normals``,
        (S, 3, 3) inverses of their linear parts; ``(None, None)`` if no shape has a transform.

        Differentiable in every registered matrix that requires gradients (or carries a
        forward-mode tangent, or is a ``torch.func`` wrapper); a fixed number of ops.
        """
        if not self.any:
            return None, None
        every = self._always_live or forward_ad._current_level >= 0
        own = None
        for ids, group in zip(self._single_ids, self._singles):
            if every:
                chosen_ids, chosen = ids, group.tensors
            else:
                flags = list(map(_REQUIRES_GRAD, group.tensors))
                if not any(flags):
                    continue
                chosen = list(compress(group.tensors, flags))
                chosen_ids = ids if all(flags) else group.ids_for(flags, ids.device)
            own = (self._own if own is None else own).index_put((chosen_ids,), affine(torch.stack(chosen)))
        for group in self._sources:
            if every or group.source.requires_grad:
                own = (self._own if own is None else own).index_put((group.ids_t,),
                                                                   affine(group.source[group.rows_t]))
        if own is None:  # nothing differentiable: the table composed at sync()
            if normals and self._normal is None:
                with _convert.outside_transforms():
                    self._normal = torch.linalg.inv(self.plain[:, :3, :3])
            return self.plain, self._normal if normals else None
        to_world = self._compose(own)
        return to_world, torch.linalg.inv(to_world[:, :3, :3]) if normals else None


def _has_tangent(tensor: torch.Tensor) -> bool:
    """True if ``tensor`` is a forward-mode dual tensor (at the current level)."""
    if forward_ad._current_level < 0:
        return False
    return forward_ad.unpack_dual(tensor).tangent is not None
