"""rayd.drjit's half of :mod:`rayd.core.contents`: copies of registered Dr.Jit arrays, compared per check.

Dr.Jit's variable ids (:func:`rayd.drjit._convert.version`) see every Dr.Jit write, but not
writes through zero-copy views of its memory (``.numpy()``, ``.torch()``, DLPack, Warp). At a
snapshot each component array of a registered array (3 of an ``Array3f``, 16 of a
``Matrix4f``) is viewed once through DLPack and copied by the engine; a check compares those
views with the copies (:func:`rayd.engine.contents.same_views`). The views stay valid while
the array's version is the one recorded: the scene holds a reference to those variables
(:func:`rayd.drjit._convert.track`) and the core compares only arrays whose version did not
move.
"""

from __future__ import annotations

import drjit as dr
import warp as wp

from rayd.drjit import _convert, _verdicts
from rayd.engine.contents import compare_views, copy_of, same_views

#: Defer the verdict to the query's end on the CPU too (tests of the CUDA path's deferral; on the CPU the
#: comparison is done at once either way).
DEFER_ON_CPU = False


def _leaves(value: dr.ArrayBase) -> list[dr.ArrayBase]:
    """The flat component arrays of ``value`` (no AD), in order."""
    value = dr.detach(value)
    if dr.is_tensor_v(value):
        return [value.array]
    if dr.depth_v(value) == 1:
        return [value]
    return [leaf for part in value for leaf in _leaves(part)]


def snapshot(array: dr.ArrayBase, device: str) -> tuple[list, list]:
    """``(leaves, entries)`` of a registered array: its components (evaluated) and the engine's
    copies of them (:func:`rayd.engine.contents.copy_of`)."""
    leaves = _leaves(array)
    dr.eval(*leaves)
    stream = _convert.current_stream(device)
    views = [wp.from_dlpack(_convert._capsule(leaf, device)) for leaf in leaves]
    entries = [copy_of(v, stream) for v in views]
    _convert.fence(device)
    return leaves, entries


def same(snapshots: list[tuple[list, list]], device: str) -> list[bool]:
    """Per snapshot, whether every component still holds its copy's bytes (one host read on CUDA)."""
    entries, owner = [], []
    for k, (_, parts) in enumerate(snapshots):
        entries += parts
        owner += [k] * len(parts)
    cuda = device.startswith("cuda")
    stream = _convert.current_stream(device) if cuda else None
    if entries and (cuda or DEFER_ON_CPU) and _verdicts.deferring():
        # Inside a query on CUDA: the flags are read after the query's own fence (no host sync here);
        # the query raises there if any array changed (rayd.drjit.scene.Scene._require_ready).
        if cuda:
            flags = compare_views(entries, stream)
            _verdicts.defer(lambda: bool(flags.numpy().any()))
        else:
            changed = not all(same_views(entries))
            _verdicts.defer(lambda: changed)
        return [True] * len(snapshots)
    same_pairs = same_views(entries, stream)
    out = [True] * len(snapshots)
    for k, ok in zip(owner, same_pairs):
        out[k] = out[k] and ok
    return out


class ContentArrays(_convert.DrjitArrays):
    """rayd.drjit's array protocol with the content copies of :mod:`rayd.core.contents`."""

    def snapshot(self, array: dr.ArrayBase) -> tuple:
        """Engine copies of ``array``'s components (:func:`snapshot`); none of a ``drjit.scalar`` matrix,
        whose version already is its values (:func:`rayd.drjit._convert.version`)."""
        if dr.backend_v(array) == dr.JitBackend.Invalid:
            return [], []
        return snapshot(array, self.device)

    def same(self, arrays: list, copies: list, memo: dict) -> list[bool]:
        """Per array (whose version did not move), whether it still holds its copy's values (:func:`same`)."""
        return same(copies, self.device)
