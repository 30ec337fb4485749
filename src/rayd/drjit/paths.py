"""``rayd.drjit.find_specular_paths``: specular paths between sources and targets, by
shoot-and-bounce candidates refined with the image method (as rayd.torch's; the candidate
logic is :func:`rayd.core.paths.find_sequences`, shared by both frontends)."""

from __future__ import annotations

import drjit as dr
import numpy as np

from rayd.core import paths as core_paths
from rayd.drjit import _check, _convert
from rayd.drjit._scene_reflect import _rows
from rayd.drjit.ray import Ray
from rayd.drjit.reflections import SpecularPathSet


DOCS = {"find_specular_paths": """Every specular path of order ``0..max_bounces`` from each source to each target that rays find.

    As :func:`rayd.torch.find_specular_paths`: ``num_rays`` rays per source on a Fibonacci
    sphere are traced with :meth:`~rayd.drjit.Scene.trace_reflections`; every distinct
    prefix of their face chains is a candidate sequence (plus the line of sight), refined
    against every target with the validity rules of
    :meth:`~rayd.drjit.Scene.specular_paths`; the valid ones are sorted by length, padded
    to the largest count ``P`` of any pair and evaluated differentiably. Reads results on
    the host (to deduplicate and pad).

    Args:
        scene: a built :class:`rayd.drjit.Scene`.
        sources: (S, 3) ``Array3f``/``Array3f64`` of width S.
        targets: (T, 3) the same, width T.
        max_bounces: int in ``[1, 16]``.
        num_rays: rays launched per source (``>= 1``).
        line_of_sight: include the order-0 path when it is unblocked.

    Returns:
        :class:`rayd.drjit.SpecularPathSet` of shape ``(S, T, P, B)``; path ``p`` of pair
        ``(s, t)`` is item ``(s T + t) P + p``.

    Gradients:
        ``points`` and ``length`` with respect to ``sources``, ``targets``, vertices and
        transforms (Dr.Jit AD, reverse and forward mode), for the fixed face sequences.

    Raises:
        TypeError, ValueError: bad arguments (as the queries); RuntimeError: the scene is not ready.

    References:
        Borish 1984, "Extension of the image model to arbitrary polyhedra", JASA 75(6).
    """}


def _find(scene, sources, targets, bounces: int, num_rays: int, line_of_sight: bool) -> SpecularPathSet:
    """:func:`find_specular_paths` after its checks (:func:`rayd.core.paths.path_finder`)."""
    plain = _convert.module(scene.backend, False)
    num_s, num_t = dr.width(sources), dr.width(targets)
    _, double = scene._precision(sources, targets)

    def trace(origin, directions, b):
        with dr.suspend_grad():
            ray = Ray(plain.Array3f64(*(float(x) for x in origin)), plain.Array3f64(np.ascontiguousarray(directions.T)))
            chain = scene.trace_reflections(ray, b)
            gid = np.array(chain.global_prim_id, dtype=np.int64).reshape(-1, b)
            return gid, np.array(chain.num_bounces)

    host_s, host_t = _rows(sources, num_s), _rows(targets, num_t)
    seqs, used = core_paths.find_sequences(host_s, host_t, bounces, num_rays, line_of_sight, trace,
                                            core_paths.length_check(scene._host_validity, double))
    count = seqs.shape[2]
    shape = (num_s, num_t, count, bounces)
    items = num_s * num_t * count
    if items == 0:
        # Width-0 stand-ins: S or T may be 0 while the other is not (no common width).
        paths = scene.specular_paths(type(sources)(), type(targets)(), plain.TensorXi(np.zeros((0, bounces), dtype=np.int32)))
        return SpecularPathSet(shape, prim_sequence=plain.Int(), points=paths.points, num_bounces=plain.Int(),
                               length=paths.length, valid=paths.valid)
    UInt = dr.uint32_array_t(dr.leaf_t(type(sources)))
    lanes = np.arange(items)
    src = dr.gather(type(sources), sources, UInt((lanes // (num_t * count)).astype(np.uint32)))
    dst = dr.gather(type(targets), targets, UInt((lanes // count % num_t).astype(np.uint32)))
    flat = seqs.reshape(items, bounces).astype(np.int32)
    paths = scene.specular_paths(src, dst, plain.TensorXi(flat), active=plain.Bool(used.reshape(-1)))
    # Sorted by the lengths returned (core_paths.by_length), one gather per field.
    order = core_paths.by_length(np.array(paths.length, dtype=np.float64).reshape(num_s, num_t, count))
    item = (order + (np.arange(num_s * num_t) * count).reshape(num_s, num_t, 1)).reshape(-1)
    slot = (item[:, None] * bounces + np.arange(bounces)).reshape(-1)
    by_item, by_slot = UInt(item.astype(np.uint32)), UInt(slot.astype(np.uint32))
    valid = dr.gather(type(paths.valid), paths.valid, by_item)
    ordered = flat.reshape(-1)[slot]
    keep = np.repeat(np.array(valid, dtype=bool), bounces)
    Int = dr.int32_array_t(type(valid))
    return SpecularPathSet(shape, prim_sequence=Int(np.where(keep, ordered, -1).astype(np.int32)),
                           points=dr.gather(type(paths.points), paths.points, by_slot),
                           num_bounces=dr.select(valid, dr.gather(type(paths.num_bounces), paths.num_bounces, by_item), 0),
                           length=dr.gather(type(paths.length), paths.length, by_item), valid=valid)


#: The public function: signature and argument checks are core's, the search and evaluation ``_find``; run with
#: exact Dr.Jit arithmetic (:func:`rayd.drjit._check.exact_math`).
find_specular_paths = _check.exact_math(core_paths.path_finder(
    "drjit", _find, lambda call, name, value: _check.float_array(call, name, value, 3),
    _check.same_backend, DOCS["find_specular_paths"], dr.ArrayBase, SpecularPathSet))
