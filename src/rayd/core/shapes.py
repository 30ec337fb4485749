"""The shape table: meshes and instances, their ids, their numbering, what changed.

Shape ids number meshes and instances together, 0, 1, 2, ... in insertion order
(DESIGN.md, "API contract"). At ``build()`` every shape gets its numbering:

- ``face_offset``: its first ``global_prim_id`` (each shape, instances included, owns
  ``num_faces`` consecutive ids, in shape order);
- ``vertex_offset`` / ``face_row`` (meshes): its first row in the scene's flat
  world-space vertex buffer and in the concatenated face table; an instance reuses its
  mesh's ``face_row``.

Change tracking compares the :meth:`ArrayProtocol.version` stamps of the registered
arrays with those recorded at the last ``build()``/``sync()``, and the arrays whose stamp
did not move with copies taken then (:mod:`rayd.core.contents`: writes no stamp sees,
e.g. through torch's ``.data`` or a NumPy view). The rules (one place, both frontends):

- a dynamic mesh's vertices changed in place: pending (``sync()`` refits);
- a static mesh's vertices changed in place: stale (queries and ``sync()`` raise until
  ``build()``);
- any shape's matrix changed in place (a matrix given to ``add_instance`` /
  ``set_mesh_transform``, or the batch it was taken from): pending (``sync()`` re-reads);
- any mesh's faces changed in place after ``build()``: stale (``build()`` again).

``has_pending_updates()`` reports exactly what ``sync()`` applies; the stale cases make
queries and ``sync()`` raise until ``build()``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayd.core.contents import Contents
from rayd.core.protocol import ArrayProtocol


@dataclass
class Shape:
    """A mesh or an instance as the scene holds it.

    For a mesh, ``base`` is its own id; for an instance, the id of its mesh, and
    ``to_world`` is the instance's own matrix (its placement is ``to_world @ M_mesh``).
    A matrix taken from a batch given to ``set_mesh_transform`` keeps ``source`` (the
    batch) and ``source_index``: the batch's version is what is tracked.
    """

    mesh: Any
    base: int
    dynamic: bool
    vertices: Any
    to_world: Any | None
    is_instance: bool = False
    enabled: bool = True
    source: Any | None = None
    source_index: int = 0
    source_count: int = 1  # matrices in ``source``
    vertex_offset: int = 0
    face_offset: int = 0
    face_row: int = 0
    vertex_version: Hashable | None = None
    transform_version: Hashable | None = None
    face_version: Hashable | None = None
    built_vertices: int = 0  # V at build()
    holds: dict = field(default_factory=dict)  # what the protocol's track() returned, per array: keeps writes visible

    @property
    def num_vertices(self) -> int:
        return self.mesh.num_vertices

    @property
    def num_faces(self) -> int:
        return self.mesh.num_faces

    @property
    def matrix(self) -> Any | None:
        """The array the shape's matrix is read from (``source`` if batched, else ``to_world``)."""
        return self.source if self.source is not None else self.to_world

    @property
    def kind(self) -> str:
        return "instance" if self.is_instance else "mesh"


def face_flags(meshes: list[Shape], attribute: str) -> np.ndarray | None:
    """Per face of ``meshes`` (in their order), whether its mesh has ``attribute`` (``"normals"``, ``"uv"``).

    ``None`` when none of ``meshes`` has it (the evaluation then needs no such array).
    """
    has = [getattr(s.mesh, attribute) is not None for s in meshes]
    if not any(has):
        return None
    return np.repeat(has, np.array([s.num_faces for s in meshes], dtype=np.int64))


class ShapeTable:
    """The shapes of one scene, their numbering and their change state.

    Args:
        arrays: the frontend's :class:`ArrayProtocol` (for version stamps).
    """

    def __init__(self, arrays: ArrayProtocol) -> None:
        self.arrays = arrays
        self.shapes: list[Shape] = []
        self._meshes: list[Shape] = []
        self.pending: set[int] = set()
        self.enabled_dirty = False
        self.structure_changed = False
        self.built = False
        self._watched: tuple[list, list] = ([], [])
        self.contents = Contents(arrays)
        self._differing: set[int] = set()  # ids of watched arrays whose values moved (the last unchanged())

    # ------------------------------------------------------------------ contents
    def add(self, shape: Shape) -> int:
        """Append a shape; returns its id. Marks the structure changed if the scene was built."""
        self.shapes.append(shape)
        if not shape.is_instance:
            self._meshes.append(shape)
        self.structure_changed = self.built
        return len(self.shapes) - 1

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, shape_id: int) -> Shape:
        return self.shapes[shape_id]

    def __iter__(self):
        return iter(self.shapes)

    @property
    def meshes(self) -> list[Shape]:
        """The mesh shapes (not instances), in shape order."""
        return self._meshes

    @property
    def num_meshes(self) -> int:
        return len(self._meshes)

    def get(self, call: str, name: str, shape_id: object) -> Shape:
        """The shape with id ``shape_id``, validated (``TypeError``/``ValueError`` naming ``call``)."""
        if isinstance(shape_id, bool) or not isinstance(shape_id, (int, np.integer)):
            raise TypeError(f"{call}: '{name}' must be an int, got {type(shape_id).__name__}")
        if not 0 <= shape_id < len(self.shapes):
            raise ValueError(f"{call}: '{name}' must be in [0, {len(self.shapes)}), got {shape_id}")
        return self.shapes[int(shape_id)]

    def get_mesh(self, call: str, name: str, shape_id: object) -> Shape:
        """As :meth:`get`, but an instance id is a ``ValueError`` (a mesh id is needed)."""
        shape = self.get(call, name, shape_id)
        if shape.is_instance:
            raise ValueError(f"{call}: '{name}' {shape_id} is an instance; pass the id add_mesh returned")
        return shape

    def id_list(self, call: str, name: str, values: Iterable[object]) -> list[int]:
        """Distinct, valid shape ids (a list or tuple of ints; an empty one is allowed)."""
        if isinstance(values, np.ndarray) and values.ndim == 1 and (values.dtype.kind in "iu" or values.size == 0):
            values = values.tolist()
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"{call}: '{name}' must be an int or a sequence of ints, got {type(values).__name__}")
        for one in values:
            self.get(call, name, one)
        ids = [int(v) for v in values]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{call}: '{name}' repeats an id")
        return ids

    def set_enabled(self, shape: Shape, flag: bool) -> None:
        if shape.enabled != flag:
            shape.enabled = flag
            self.enabled_dirty = True

    # ------------------------------------------------------------------ numbering
    def number(self) -> None:
        """Give every shape its ``face_offset``, ``vertex_offset`` and ``face_row`` (at ``build()``)."""
        vertex_offset = face_row = global_offset = 0
        for shape in self.shapes:
            shape.face_offset = global_offset
            global_offset += shape.num_faces
            if shape.is_instance:
                shape.face_row = self.shapes[shape.base].face_row
                shape.vertex_offset = self.shapes[shape.base].vertex_offset
                continue
            shape.vertex_offset, shape.face_row = vertex_offset, face_row
            vertex_offset += shape.num_vertices
            face_row += shape.num_faces
        self.num_flat_vertices = vertex_offset
        self.num_flat_faces = face_row
        self.num_global_faces = global_offset

    def tables(self) -> dict[str, np.ndarray]:
        """Host index tables of the numbering (int64), for the frontends' differentiable gathers.

        ``global_offset`` (S,), ``face_row`` (S,), ``vertex_offset`` (S,), ``base`` (S,),
        ``is_instance`` (S,) bool, ``instance_rows`` (I,), ``mesh_rows`` (M,): shape ids.
        """
        s = self.shapes
        return {
            "global_offset": np.array([x.face_offset for x in s], dtype=np.int64),
            "face_row": np.array([x.face_row for x in s], dtype=np.int64),
            "vertex_offset": np.array([x.vertex_offset for x in s], dtype=np.int64),
            "base": np.array([x.base for x in s], dtype=np.int64),
            "is_instance": np.array([x.is_instance for x in s], dtype=bool),
            "instance_rows": np.array([i for i, x in enumerate(s) if x.is_instance], dtype=np.int64),
            "mesh_rows": np.array([i for i, x in enumerate(s) if not x.is_instance], dtype=np.int64),
        }

    # ------------------------------------------------------------------ change tracking
    def _matrix_version(self, shape: Shape, memo: dict[int, Any]) -> Hashable | None:
        src = shape.matrix
        if src is None:
            return None
        key = id(src)
        if key not in memo:
            memo[key] = self.arrays.version(src)
        return memo[key]

    def _track(self, array: Any) -> tuple[Hashable | None, Any]:
        track = getattr(self.arrays, "track", None)
        return track(array) if track is not None else (self.arrays.version(array), None)

    def record(self, shape: Shape, memo: dict[int, Any] | None = None) -> None:
        """Remember the versions of a shape's arrays just snapshotted (vertices and faces of a mesh, its matrix)."""
        memo = {} if memo is None else memo
        shape.vertex_version = shape.face_version = shape.transform_version = None
        shape.holds = {}
        if not shape.is_instance:
            shape.vertex_version, shape.holds["vertices"] = self._track(shape.vertices)
            if shape.num_faces:
                shape.face_version, shape.holds["faces"] = self._track(shape.mesh.faces)
        src = shape.matrix
        if src is not None:
            key = id(src)
            if key not in memo:
                memo[key] = self._track(src)
            shape.transform_version, shape.holds["matrix"] = memo[key]

    def _adopt(self, kept: set[int]) -> None:
        """Take the current stamps of the watched arrays ``kept`` (stamp moved, values not: no change).

        Each is tracked again (the frontend's ``track``: a new stamp and hold), in the shapes
        and in the watched list; its copy stays (it holds the same values).
        """
        memo: dict[int, Any] = {}

        def again(array: Any) -> tuple[Hashable | None, Any]:
            if id(array) not in memo:
                memo[id(array)] = self._track(array)
            return memo[id(array)]

        for s in self.shapes:
            if not s.is_instance:
                if id(s.vertices) in kept:
                    s.vertex_version, s.holds["vertices"] = again(s.vertices)
                if s.num_faces and id(s.mesh.faces) in kept:
                    s.face_version, s.holds["faces"] = again(s.mesh.faces)
            if s.matrix is not None and id(s.matrix) in kept:
                s.transform_version, s.holds["matrix"] = again(s.matrix)
        arrays, versions = self._watched
        self._watched = (arrays, [memo[id(a)][0] if id(a) in memo else v for a, v in zip(arrays, versions)])

    def _watch(self, keep: bool = False) -> None:
        """The unique registered arrays, their recorded versions and copies, for :meth:`unchanged` (after a snapshot).

        ``keep`` (at ``sync()``): an array watched before whose stamp did not move and whose values
        did not either (the last :meth:`unchanged`) keeps its copy; every other one is copied
        (at ``build()``: all). So a ``sync()`` copies only what changed, e.g. not the faces.
        """
        arrays, versions, seen = [], [], set()
        for s in self.shapes:
            items = [(s.matrix, s.transform_version)]
            if not s.is_instance:
                items += [(s.vertices, s.vertex_version), (s.mesh.faces if s.num_faces else None, s.face_version)]
            for array, stamp in items:
                if array is not None and id(array) not in seen:
                    seen.add(id(array))
                    arrays.append(array)
                    versions.append(stamp)
        renewed = None
        if keep:
            before = {id(a): v for a, v in zip(*self._watched)}
            renewed = {id(a) for a, v in zip(arrays, versions)
                       if id(a) not in before or before[id(a)] != v or id(a) in self._differing}
        self._watched = (arrays, versions)
        self.contents.take(arrays, renewed)
        self._differing = set()

    def unchanged(self) -> bool:
        """True if no registered array changed in place since the last snapshot (one pass, no per-shape logic).

        Also refreshes what :meth:`vertices_changed`, :meth:`matrix_changed` and
        :meth:`faces_changed` read: the arrays whose stamp stayed but whose values moved. Faces
        or a static mesh's vertices whose stamp moved but whose values equal their copy (a write
        elsewhere in their storage, or of the same values) are no change: the new stamp is
        adopted (:meth:`_adopt`).
        """
        arrays, versions = self._watched
        many = getattr(self.arrays, "versions", None)
        now = many(arrays) if many is not None else [self.arrays.version(a) for a in arrays]
        if now == versions:
            self._differing = self.contents.differing(arrays, [True] * len(arrays))
            return not self._differing
        moved = [a != b for a, b in zip(now, versions)]
        self._differing = self.contents.differing(arrays, [not m for m in moved])
        fixed = self._fixed_arrays()  # a stamp moved by a write elsewhere in its storage: compare
        kept = self.contents.kept(arrays, [m and id(a) in fixed for a, m in zip(arrays, moved)])
        if kept:
            self._adopt(kept)
        return len(kept) == sum(moved) and not self._differing

    def _fixed_arrays(self) -> set[int]:
        """The ``id`` of every registered array that only ``build()`` reads: faces, a static mesh's vertices.

        A moved stamp of such an array makes the scene stale (queries raise until ``build()``), so
        :meth:`unchanged` compares its values first. A moved stamp of a dynamic mesh's vertices or
        of a matrix stays a change (pending: ``sync()`` re-reads it), even for the same values.
        """
        fixed, moving = set(), set()
        for s in self.shapes:
            if s.matrix is not None:
                moving.add(id(s.matrix))
            if not s.is_instance:
                (moving if s.dynamic else fixed).add(id(s.vertices))
                if s.num_faces:
                    fixed.add(id(s.mesh.faces))
        return fixed - moving

    def record_all(self, shape_ids: Iterable[int] | None = None) -> None:
        memo: dict[int, Any] = {}
        ids = range(len(self.shapes)) if shape_ids is None else shape_ids
        for i in ids:
            self.record(self.shapes[i], memo)

    def vertices_changed(self, shape: Shape) -> bool:
        if shape.is_instance:
            return False
        return self.arrays.version(shape.vertices) != shape.vertex_version or id(shape.vertices) in self._differing

    def matrix_changed(self, shape: Shape, memo: dict[int, Any]) -> bool:
        if shape.matrix is None:
            return False
        return self._matrix_version(shape, memo) != shape.transform_version or id(shape.matrix) in self._differing

    def faces_changed(self, shape: Shape) -> bool:
        """True if a mesh's faces were written in place since ``build()`` (an instance: its mesh's)."""
        base = self.shapes[shape.base]
        if base.num_faces == 0:
            return False
        return self.arrays.version(base.mesh.faces) != base.face_version or id(base.mesh.faces) in self._differing

    def needs_sync(self, shape: Shape, memo: dict[int, Any]) -> bool:
        """An in-place change that ``sync()`` applies: a dynamic mesh's vertices or any shape's matrix."""
        return (shape.dynamic and self.vertices_changed(shape)) or self.matrix_changed(shape, memo)

    def changed(self, shape: Shape, memo: dict[int, Any]) -> bool:
        """True if the shape's registered arrays changed in place since the last snapshot."""
        return self.vertices_changed(shape) or self.matrix_changed(shape, memo) or self.faces_changed(shape)

    def stale(self) -> tuple[int, str] | None:
        """``(shape id, message)`` of the first in-place change only ``build()`` can apply, else ``None``."""
        for i, s in enumerate(self.shapes):
            if s.is_instance:
                continue
            if self.faces_changed(s):
                return i, f"the faces of mesh {i} changed in place since build(); call build() to rebuild"
            if not s.dynamic and self.vertices_changed(s):
                return i, f"the vertices of static mesh {i} changed in place; call build() to rebuild"
        return None

    def has_pending(self) -> bool:
        """Registered updates, enable flags, or in-place changes that ``sync()`` will apply (after ``build()``)."""
        if not self.built:
            return bool(self.pending or self.enabled_dirty)
        if self.unchanged() and not self.pending and not self.enabled_dirty:
            return False
        if self.pending or self.enabled_dirty:
            return True
        memo: dict[int, Any] = {}
        return any(self.needs_sync(s, memo) for s in self.shapes)

    def is_ready(self) -> bool:
        if not self.built or self.structure_changed or self.pending or self.enabled_dirty:
            return False
        if self.unchanged():
            return True
        memo: dict[int, Any] = {}
        return not any(self.changed(s, memo) for s in self.shapes)

    def require_built(self, call: str) -> None:
        if not self.built:
            raise RuntimeError(f"{call}: the scene is not built; call build() first")
        if self.structure_changed:
            raise RuntimeError(f"{call}: shapes were added after build(); call build() again")

    def require_current(self, call: str) -> None:
        """Built, and no in-place change that only ``build()`` can apply (faces, static vertices)."""
        self.require_built(call)
        if self.unchanged():
            return
        stale = self.stale()
        if stale is not None:
            raise RuntimeError(f"{call}: {stale[1]}")

    def require_ready(self, call: str) -> None:
        """Raise the contract's ``RuntimeError`` unless queries may run now."""
        self.require_built(call)
        if self.enabled_dirty:
            raise RuntimeError(f"{call}: shape enable flags changed; call sync() first")
        if self.unchanged() and not self.pending:
            return
        stale = self.stale()
        if stale is not None:
            raise RuntimeError(f"{call}: {stale[1]}")
        memo: dict[int, Any] = {}
        for shape_id, shape in enumerate(self.shapes):
            if shape_id in self.pending:
                raise RuntimeError(f"{call}: {shape.kind} {shape_id} has pending updates; call sync() first")
            if self.needs_sync(shape, memo):
                raise RuntimeError(
                    f"{call}: the vertices or transform of {shape.kind} {shape_id} changed in place since the last "
                    f"sync(); call sync() first"
                )

    def sync_plan(self, call: str) -> tuple[set[int], list[int]]:
        """``(todo, moved)`` for ``sync()``: every shape to refresh, and the meshes among them (their world vertices move).

        Raises:
            RuntimeError: before ``build()``, or a static mesh changed in place.
        """
        self.require_built(call)
        self.unchanged()  # (refreshes what the per-shape checks read)
        stale = self.stale()
        if stale is not None:
            raise RuntimeError(f"{call}: {stale[1]}")
        memo: dict[int, Any] = {}
        todo = {i for i, s in enumerate(self.shapes) if i in self.pending or self.changed(s, memo)}
        moved = sorted(i for i in todo if not self.shapes[i].is_instance)
        return todo, moved

    def finish_sync(self, todo: set[int]) -> None:
        """Record versions of everything refreshed and clear the pending state."""
        memo: dict[int, Any] = {}
        for shape_id, shape in enumerate(self.shapes):
            if shape_id in todo or (shape.is_instance and shape.base in todo):
                self.record(shape, memo)
        self.pending.clear()
        self.enabled_dirty = False
        self._watch(keep=True)

    def finish_build(self) -> None:
        self.record_all()
        self._watch()
        self.pending.clear()
        self.enabled_dirty = False
        self.structure_changed = False
        self.built = True


def matrix_groups(shapes: list[Shape], keep: Callable[[Any], bool] | None = None) -> tuple[dict, dict]:
    """The shapes' registered matrices, grouped by the array they are read from.

    Args:
        shapes: the scene's shape records, in shape order.
        keep: optional filter on a registered array (asked once per distinct array),
            e.g. "requires gradients".

    Returns:
        ``(batches, singles)``: ``batches`` maps ``id(src)`` of a batch given to
        ``set_mesh_transform`` to ``(src, shape_ids, batch_rows)``; ``singles`` maps
        ``id(src)`` of a single matrix to ``(src, shape_ids)``. Shape ids ascend.
    """
    batches: dict[int, tuple[Any, list[int], list[int]]] = {}
    singles: dict[int, tuple[Any, list[int]]] = {}
    kept: dict[int, bool] = {}
    for shape_id, shape in enumerate(shapes):
        src = shape.matrix
        if src is None:
            continue
        key = id(src)
        if keep is not None:
            if key not in kept:
                kept[key] = keep(src)
            if not kept[key]:
                continue
        if shape.source is not None:
            group = batches.setdefault(key, (src, [], []))
            group[1].append(shape_id)
            group[2].append(shape.source_index)
        else:
            singles.setdefault(key, (src, []))[1].append(shape_id)
    return batches, singles
