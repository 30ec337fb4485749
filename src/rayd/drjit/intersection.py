"""`Intersection`: the closest-hit record returned by ``Scene.intersect``."""

from __future__ import annotations

import drjit as dr
import numpy as np

from rayd.core.edges import document
from rayd.core.frontend import PublicName
from rayd.records import FieldRecord, HitRecord


class DrjitRecord(PublicName, FieldRecord):
    """The Dr.Jit parts of a record: ``detach()`` and selecting queries (``record[mask]``).

    Mixed into :class:`Intersection` and :class:`~rayd.drjit.NearestEdge` ahead of their
    backend-neutral base (``rayd.records``). Fields are flat arrays of width N (``N k``
    for top-k records, slot ``j`` of query ``i`` at lane ``i k + j``); an index selects
    queries, so a top-k record keeps all k slots of each selected query.
    """

    def _detach_field(self, value: dr.ArrayBase) -> dr.ArrayBase:
        return dr.detach(value)

    def _query_lanes(self, index: object) -> tuple[dr.ArrayBase, int]:
        """The lanes (``UInt32``) of the queries ``index`` selects, and how many queries."""
        n = int(self.shape[0])
        k = 1
        for extent in self.shape[1:]:
            k *= int(extent)
        uint = dr.uint32_array_t(dr.leaf_t(type(self._fields[self._width_field])))
        if isinstance(index, dr.ArrayBase) and dr.is_mask_v(index):
            if dr.width(index) != n:
                raise IndexError(f"{self._name}[mask]: a mask must have the record's width {n}, "
                                 f"got {dr.width(index)}")
            picked = uint(dr.compress(index))
        elif isinstance(index, dr.ArrayBase) and dr.is_integral_v(index):
            picked = uint(index)
            if dr.width(picked) and int(dr.max(picked)[0]) >= n:  # one host read
                raise IndexError(f"{self._name}[index]: an index is out of range for {n} queries")
        elif isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            index = int(index)  # (a NumPy integer as a Python int, as rayd.torch's records take it)
            if not -n <= index < n:
                raise IndexError(f"{self._name}[{index}]: index out of range for {n} queries")
            picked = uint([index % n])
        elif isinstance(index, slice):
            picked = uint(list(range(n))[index])
        else:
            raise TypeError(f"{self._name}[...]: the index must be a Dr.Jit Bool mask, a Dr.Jit integer "
                            f"array, an int or a slice, got {type(index).__name__}")
        count = dr.width(picked)
        if k > 1:
            picked = dr.repeat(picked, k) * k + dr.tile(dr.arange(uint, k), count)
        return picked, count

    def __getitem__(self, index: object) -> "DrjitRecord":
        """The record of the selected queries, by ``dr.gather``.

        Args:
            index: a Dr.Jit ``Bool`` mask of width N, a Dr.Jit integer array of query
                indices, a Python (or NumPy) int or a slice.

        Returns:
            A record of the same type, fields and flags (width 1 for an int; for
            top-k records every slot of each selected query). Gathered fields stay
            differentiable.

        Raises:
            TypeError: another index type.
            IndexError: a mask of another width, or an index (int or array) out of range.
        """
        lanes, count = self._query_lanes(index)
        new = self._map(lambda name, value: dr.gather(type(value), value, lanes))
        new._resize(count)
        return new

    def _resize(self, count: int) -> None:
        """Record a new number of queries (records whose shape is not their fields' width)."""


class Intersection(DrjitRecord, HitRecord):
    """Closest hit per ray, with miss values encoded in the data.

    Attributes (N rays; Dr.Jit types of the ray's backend, ``.ad`` when any input was):
        t: (N,) ``Float``/``Float64``, hit distance in multiples of ``|d|``; ``+inf``
            on a miss.
        p: (N, 3) ``Array3f``/``Array3f64`` hit point ``o + t d``; 0 on a miss.
            Needs ``RayFlags.Geometric``.
        geo_n: (N, 3) unit geometric normal ``normalize((v1 - v0) x (v2 - v0))`` in
            world space; 0 on a miss. Needs ``RayFlags.Geometric``.
        barycentric: (N, 3) weights ``(w0, w1, w2)`` of the face's vertices,
            ``p = w0 v0 + w1 v1 + w2 v2``; 0 on a miss. Needs ``RayFlags.Geometric``.
        n: (N, 3) unit shading normal ``normalize(w0 n0 + w1 n1 + w2 n2)`` of the
            vertex normals (``geo_n`` when the mesh has none; never flipped); 0 on a
            miss. Needs ``RayFlags.ShadingN``.
        uv: (N, 2) ``Array2f``/``Array2f64`` interpolated texture coordinates, or
            ``(w1, w2)`` when the mesh has none; 0 on a miss. Needs ``RayFlags.UV``.
        prim_id: (N,) ``Int`` (int32) face index within the hit mesh; -1 on a miss.
        shape_id: (N,) ``Int`` id of the hit mesh (or instance); -1 on a miss.
        global_prim_id: (N,) ``Int`` scene-wide face id (``prim_id`` + the shape's
            face offset); -1 on a miss.

    Float fields have the promoted dtype of the rays and the scene's vertices and are
    differentiable (fixed winner, DESIGN.md). Reading a field that was not requested
    raises ``AttributeError`` naming the flag to pass. Never NaN.

    ``hit.detach()`` detaches every field; ``hit[mask]`` (a ``Bool`` of width N),
    ``hit[idx]`` (integer array), ``hit[i]`` or ``hit[a:b]`` gather the selected rays
    into a record of the same fields and flags.
    """

    _width_field = "t"

    @property
    def shape(self) -> tuple[int]:
        """The batch shape ``(N,)``."""
        return (dr.width(self._fields["t"]),)


document(Intersection, {"is_valid": """(N,) ``Bool``: True where the ray hit something."""},
         {"is_valid": {"return": dr.ArrayBase}})
