"""Records of rayd.drjit's reflection queries: ``ReflectionChain``, ``SpecularPaths``, ``SpecularPathSet``.

Their fields are flat Dr.Jit arrays with slots interleaved, like the top-k records:
slot ``b`` of item ``i`` at lane ``i B + b`` (``B`` the last entry of ``shape``); the
per-item fields (one value per ray or path) have one lane per item.
"""

from __future__ import annotations

import drjit as dr

from rayd.drjit.intersection import DrjitRecord
from rayd.core.edges import document
from rayd.records import ChainRecord, FieldRecord, PathRecord


class _SlotRecord(DrjitRecord, FieldRecord):
    """A record of ``shape = (N, ..., B)``: per-item fields of width ``N ...``, slot fields ``N ... B``."""

    __slots__ = ("_shape",)
    _width_field = "valid"
    _PER_ITEM: tuple[str, ...] = ()

    def __init__(self, shape: tuple[int, ...], **fields: dr.ArrayBase) -> None:
        super().__init__(**fields)
        self._shape = tuple(int(x) for x in shape)

    @property
    def shape(self) -> tuple[int, ...]:
        """The record's shape, its last entry the number of slots ``B``."""
        return self._shape

    def __getitem__(self, index: object) -> "_SlotRecord":
        """The record of the selected items along the first dimension.

        Args:
            index: a Dr.Jit ``Bool`` mask of width N, a Dr.Jit integer array of item
                indices, a Python int or a slice.

        Returns:
            A record of the same type, every slot of each selected item kept; gathered
            fields stay differentiable.

        Raises:
            TypeError: another index type.
            IndexError: a mask of another width, or an index (int or array) out of range.
        """
        full = self._shape
        slots, count = self._query_lanes(index)
        if full[-1] == 0:
            slots = dr.zeros(type(slots), 0)
        self._shape = full[:-1]
        try:
            items, _ = self._query_lanes(index)
        finally:
            self._shape = full

        def pick(name, value):
            return dr.gather(type(value), value, items if name in self._PER_ITEM else slots)

        new = self._map(pick)
        new._shape = (count,) + full[1:]
        return new


class ReflectionChain(_SlotRecord, ChainRecord):
    """The specular chain of each ray (see ``rayd.torch.ReflectionChain``), shape ``(N, B)``.

    Slot fields (width ``N B``, slot ``b`` of ray ``i`` at lane ``i B + b``): ``t``
    (``inf`` empty), ``p``, ``geo_n``, ``d_out``, ``image_source`` (0 empty), ``prim_id``,
    ``shape_id``, ``global_prim_id`` (-1 empty). Per-ray fields (width ``N``):
    ``num_bounces`` (``Int``), ``path_length`` (world units, 0 with no hit).
    Float fields are differentiable (Dr.Jit AD, reverse and forward) for the fixed chain.
    Selecting rays (``chain[mask]``, mask of width N) keeps every slot of each.
    """

    _width_field = "t"
    _PER_ITEM = ("num_bounces", "path_length")


class SpecularPaths(_SlotRecord, PathRecord):
    """Exact specular paths for given face sequences (see ``rayd.torch.SpecularPaths``), shape ``(N, B)``.

    Fields: ``points`` (width ``N B``, slot ``b`` of path ``i`` at lane ``i B + b``;
    reflection points in order from the source, 0 in padding slots and for invalid
    paths); per path (width ``N``): ``num_bounces`` (``Int``), ``length`` (world units,
    ``inf`` if invalid), ``valid`` (``Bool``). ``points`` and ``length`` are
    differentiable (reverse and forward mode) with respect to the source, the target,
    vertices and transforms, for the fixed sequence; invalid paths carry zero gradient.
    """

    _PER_ITEM = ("num_bounces", "length", "valid")


class SpecularPathSet(_SlotRecord, PathRecord):
    """The valid specular paths of each (source, target) pair (see ``rayd.torch.SpecularPathSet``).

    Shape ``(S, T, P, B)``; path ``p`` of pair ``(s, t)`` is item ``(s T + t) P + p``.
    Slot fields (width ``S T P B``): ``prim_sequence`` (``Int`` ``global_prim_id`` s,
    ``-1`` padding; all ``-1`` in a valid item is the line of sight), ``points``. Per path
    (width ``S T P``): ``num_bounces`` (0 empty), ``length`` (``inf`` empty), ``valid``.
    Paths of a pair are sorted by length. Indexing selects sources.
    """

    _PER_ITEM = ("num_bounces", "length", "valid")


document(ReflectionChain, {"is_valid": """``Bool`` of width ``N B``: True in the slots that hold a hit."""},
         {"is_valid": {"return": dr.ArrayBase}})
document(SpecularPaths, {"is_valid": """``Bool`` of width ``N``, the ``valid`` field."""},
         {"is_valid": {"return": dr.ArrayBase}})
document(SpecularPathSet, {"is_valid": """``Bool`` of width ``S T P``, the ``valid`` field."""},
         {"is_valid": {"return": dr.ArrayBase}})
