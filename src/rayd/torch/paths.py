"""``find_specular_paths``: specular paths between sources and targets, by shoot-and-bounce
candidates refined with the image method (the approach of Sionna RT and RayD's EPC)."""

from __future__ import annotations

import torch

from rayd.core import paths as core_paths
from rayd.core.edges import document
from rayd.records import PathRecord
from rayd.torch import _check, _convert
from rayd.torch.intersection import TorchRecord
from rayd.torch.ray import Ray


class SpecularPathSet(TorchRecord, PathRecord):
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

    @property
    def shape(self) -> torch.Size:
        """``(S, T, P)``."""
        return self._fields["valid"].shape


document(SpecularPathSet, {"is_valid": """(S, T, P) bool, the ``valid`` field."""},
         {"is_valid": {"return": torch.Tensor}})


DOCS = {"find_specular_paths": """Every specular path of order ``0..max_bounces`` from each source to each target that rays find.

    Candidates: ``num_rays`` rays per source on a Fibonacci sphere are traced with
    :meth:`~rayd.torch.Scene.trace_reflections`; every distinct prefix of their face
    chains (orders ``1..max_bounces``) is a candidate sequence, plus the line of sight.
    Each candidate is refined against every target with the image method, whose
    validity rules (those of :meth:`~rayd.torch.Scene.specular_paths`) decide exactly;
    the valid ones are kept, sorted by length and padded to the largest count of any
    pair, then evaluated differentiably by :meth:`~rayd.torch.Scene.specular_paths`.
    The candidate logic is :func:`rayd.core.paths.find_sequences`, shared with rayd.drjit.

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
        :class:`SpecularPathSet` with fields ``[S, T, P, ...]``. Concretely, slot ``p`` of
        pair ``(s, t)`` holds the ``p``-th shortest valid path found.

    Gradients:
        ``points`` and ``length`` with respect to ``sources``, ``targets``, vertices and
        transforms (reverse and forward mode), for the fixed face sequences.

    Raises:
        TypeError, ValueError: bad arguments (as the queries); RuntimeError: the scene is not ready.

    References:
        Borish 1984, "Extension of the image model to arbitrary polyhedra", JASA 75(6).
    """}


def _find(scene, sources, targets, bounces: int, num_rays: int, line_of_sight: bool) -> SpecularPathSet:
    """:func:`find_specular_paths` after its checks (:func:`rayd.core.paths.path_finder`)."""
    device = scene.device
    dtype = scene._output_dtype(sources, targets)

    def trace(origin, directions, b):
        o = torch.from_numpy(origin).to(device)
        with torch.no_grad():
            chain = scene.trace_reflections(Ray(o, torch.from_numpy(directions).to(device)), b)
        return _convert.host_array(chain.global_prim_id), _convert.host_array(chain.num_bounces)

    host = [_convert.host_array(x, torch.float64) for x in (sources, targets)]
    seqs, used = core_paths.find_sequences(*host, bounces, num_rays, line_of_sight, trace,
                                            core_paths.length_check(scene._host_validity, dtype))
    seqs = torch.from_numpy(seqs).to(device)
    used = torch.from_numpy(used).to(device)
    paths = scene.specular_paths(sources[:, None, None, :], targets[None, :, None, :], seqs, active=used)
    order = torch.from_numpy(core_paths.by_length(_convert.host_array(paths.length))).to(device)

    def sort(x):
        index = order.reshape(order.shape + (1,) * (x.dim() - 3)).expand(x.shape)
        return torch.gather(x, 2, index)

    valid = sort(paths.valid)
    return SpecularPathSet(prim_sequence=torch.where(valid[..., None], sort(seqs), -1), points=sort(paths.points),
                           num_bounces=torch.where(valid, sort(paths.num_bounces), 0), length=sort(paths.length),
                           valid=valid)


#: The public function: signature and argument checks are core's, the search and evaluation ``_find``.
find_specular_paths = core_paths.path_finder(
    "torch", _find, lambda call, name, value: _check.float_tensor(call, name, value, last=3, ndim=2),
    _check.same_device, DOCS["find_specular_paths"], torch.Tensor, SpecularPathSet)
