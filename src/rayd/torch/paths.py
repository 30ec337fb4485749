"""``find_specular_paths``: specular paths between sources and targets, by shoot-and-bounce
candidates refined with the image method (the approach of Sionna RT and RayD's EPC)."""

from __future__ import annotations

import math

import torch

from rayd.records import FieldRecord
from rayd.torch import _check
from rayd.torch._scene_reflect import MAX_BOUNCES
from rayd.torch.intersection import TorchRecord
from rayd.torch.ray import Ray

#: Default number of rays launched per source.
NUM_RAYS = 100_000


class SpecularPathSet(TorchRecord, FieldRecord):
    """The valid specular paths of each (source, target) pair, padded to ``P`` slots.

    Attributes (``S`` sources, ``T`` targets, ``P`` paths, ``B`` = ``max_bounces``):
        prim_sequence: (S, T, P, B) int64 faces (``global_prim_id``) of each path, ``-1``
            padding; an all ``-1`` row of a valid slot is the line-of-sight path.
        points: (S, T, P, B, 3) reflection points; 0 in padding and empty slots.
        num_bounces: (S, T, P) int32 order of each path; 0 in empty slots.
        length: (S, T, P) total length in world units; ``+inf`` in empty slots.
        valid: (S, T, P) bool, True for the slots that hold a path.

    Paths of a pair are sorted by length. ``points`` and ``length`` are differentiable
    (reverse and forward mode) with respect to sources, targets, vertices and transforms.
    """

    __slots__ = ()
    _name = "rayd.torch.SpecularPathSet"

    def is_valid(self) -> torch.Tensor:
        """(S, T, P) bool, the ``valid`` field."""
        return self._fields["valid"]

    @property
    def shape(self) -> torch.Size:
        """``(S, T, P)``."""
        return self._fields["valid"].shape


def sphere_directions(count: int, dtype: torch.dtype, device) -> torch.Tensor:
    """(count, 3) unit directions on a Fibonacci sphere (nearly uniform, deterministic)."""
    i = torch.arange(count, dtype=torch.float64) + 0.5
    z = 1.0 - 2.0 * i / count
    r = torch.sqrt(torch.clamp(1.0 - z * z, min=0.0))
    phi = i * (math.pi * (3.0 - math.sqrt(5.0)))
    return torch.stack((r * torch.cos(phi), r * torch.sin(phi), z), dim=-1).to(dtype=dtype, device=device)


def find_specular_paths(scene, sources: torch.Tensor, targets: torch.Tensor, max_bounces: int, *,
                        num_rays: int = NUM_RAYS, line_of_sight: bool = True) -> SpecularPathSet:
    """Every specular path of order ``0..max_bounces`` from each source to each target that rays find.

    Candidates: ``num_rays`` rays per source on a Fibonacci sphere are traced with
    :meth:`~rayd.torch.Scene.trace_reflections`; every distinct prefix of their face
    chains (orders ``1..max_bounces``) is a candidate sequence, plus the line of sight.
    Each candidate is refined against every target with
    :meth:`~rayd.torch.Scene.specular_paths`, which decides validity exactly; the valid
    ones are kept, sorted by length and padded to the largest count of any pair.

    A path is found if at least one launched ray follows its face sequence, so recall
    grows with ``num_rays`` (faces subtending small solid angles need more rays).
    Unlike the queries, this reads results on the host (to deduplicate and pad).

    Args:
        scene: a built :class:`rayd.torch.Scene`.
        sources: (S, 3) float32/float64 points.
        targets: (T, 3) float32/float64 points.
        max_bounces: int in ``[1, 16]``.
        num_rays: rays launched per source (``>= 1``).
        line_of_sight: include the order-0 path when it is unblocked.

    Returns:
        :class:`SpecularPathSet` with fields ``[S, T, P, ...]``.

    Raises:
        TypeError, ValueError: bad arguments (as the queries); RuntimeError: the scene is not ready.
    """
    call = "rayd.torch.find_specular_paths()"
    scene._require_ready(call)
    sources = _check.float_tensor(call, "sources", sources, last=3, ndim=2)
    targets = _check.float_tensor(call, "targets", targets, last=3, ndim=2)
    if isinstance(max_bounces, bool) or not isinstance(max_bounces, int) or not 1 <= max_bounces <= MAX_BOUNCES:
        raise ValueError(f"{call}: 'max_bounces' must be an int in [1, {MAX_BOUNCES}], got {max_bounces!r}")
    if isinstance(num_rays, bool) or not isinstance(num_rays, int) or num_rays < 1:
        raise ValueError(f"{call}: 'num_rays' must be a positive int, got {num_rays!r}")
    device = scene.device
    bounces = max_bounces
    num_s, num_t = sources.shape[0], targets.shape[0]
    directions = sphere_directions(num_rays, torch.float64, device)
    per_pair: list[list[list[torch.Tensor]]] = [[[] for _ in range(num_t)] for _ in range(num_s)]
    with torch.no_grad():
        for s in range(num_s):
            origin = sources[s].detach()
            chain = scene.trace_reflections(Ray(origin.to(torch.float64), directions), bounces)
            seq = chain.global_prim_id.long()
            cands = [torch.full((1, bounces), -1, dtype=torch.long, device=device)] if line_of_sight else []
            for k in range(1, bounces + 1):
                rows = seq[chain.num_bounces >= k, :k]
                if rows.shape[0]:
                    rows = torch.unique(rows, dim=0)
                    pad = torch.full((rows.shape[0], bounces - k), -1, dtype=torch.long, device=device)
                    cands.append(torch.cat([rows, pad], dim=1))
            if not cands:
                continue
            cand = torch.cat(cands)
            paths = scene.specular_paths(origin, targets.detach()[:, None, :], cand[None])
            for t in range(num_t):
                keep = paths.valid[t]
                order = torch.argsort(paths.length[t][keep])
                per_pair[s][t] = cand[keep][order]
    count = max([len(x) for row in per_pair for x in row] + [0])
    seqs = torch.full((num_s, num_t, count, bounces), -1, dtype=torch.long, device=device)
    used = torch.zeros((num_s, num_t, count), dtype=torch.bool, device=device)
    for s in range(num_s):
        for t in range(num_t):
            found = per_pair[s][t]
            if len(found):
                seqs[s, t, : len(found)] = found
                used[s, t, : len(found)] = True
    paths = scene.specular_paths(sources[:, None, None, :], targets[None, :, None, :], seqs, active=used)
    valid = paths.valid
    num = torch.where(valid, paths.num_bounces, 0)
    return SpecularPathSet(prim_sequence=torch.where(valid[..., None], seqs, -1), points=paths.points,
                           num_bounces=num, length=paths.length, valid=valid)
