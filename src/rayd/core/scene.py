"""`SceneCore`: the backend-neutral half of a scene — shapes, lifecycle, build and sync.

A frontend's ``Scene`` holds one ``SceneCore`` and gives it its array protocol
(:mod:`rayd.core.protocol`). The core decides what ``build()`` and ``sync()`` must do
and does it over the engine's structures:

- ``build()``: checks every mesh (faces within range, vertices finite — the snapshot
  the contract asks to check), numbers the shapes, reads the transform table, places
  every mesh into the engine's flat world-space buffers (float32, rounded once after a
  float64 placement), builds the flat BVH, the bottom-level BVHs of instanced meshes,
  the top level over instances, and the per-face/per-shape tables the search reads;
- ``sync()``: refits what moved (flat BVH, the BLAS of a moved instanced mesh, the top
  level when an instance or its mesh moved) and applies enable flags.

Queries only read :attr:`accel`; the frontends evaluate the winners themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp

from rayd.core.protocol import ArrayProtocol
from rayd.core.shapes import Shape, ShapeTable
from rayd.core.transforms import TransformTable
from rayd.engine.accel import SceneAccel
from rayd.engine.assemble import (
    NO_ROW,
    DeferredChecks,
    bounds,
    bounds_launch,
    face_range_launch,
    nonfinite_found,
    nonfinite_launch,
    place_face_ids,
    place_faces,
    place_points,
)
from rayd.engine.frame import search_centre
from rayd.engine.instances import InstanceLevel
from rayd.engine.reflect import shape_lookup
from rayd.engine.runtime import LaunchCache, launch_stream, read_back, warp_device
from rayd.engine.triangles import TriangleScene


#: Scenes of at most this many meshes get their per-face ids written by a kernel per mesh.
_DEVICE_IDS_MAX_MESHES = 16

#: Most faces a scene may number: ``global_prim_id`` is int32 (ids ``0 .. 2^31 - 2``; -1 is a miss).
MAX_GLOBAL_FACES = 2**31 - 1


class SceneCore:
    """Shapes, change tracking, transforms and the engine structures of one scene.

    Args:
        arrays: the frontend's :class:`~rayd.core.protocol.ArrayProtocol`.
        prefix: the frontend's public name for messages, e.g. ``"rayd.torch.Scene"``.
    """

    def __init__(self, arrays: ArrayProtocol, prefix: str) -> None:
        self.arrays = arrays
        self.prefix = prefix
        self.table = ShapeTable(arrays)
        self.transforms = TransformTable(arrays)
        self.device: str | None = None
        self.accel: SceneAccel | None = None
        self.instance_ids: list[int] = []
        self.blas: dict[int, tuple[int, TriangleScene]] = {}
        self.generation = 0  # counts builds (frontends key their per-build tables on it)
        self.centre: np.ndarray | None = None  # the search centre (engine/frame.py), chosen at build()
        self.shape_lookup = None  # engine.reflect.ShapeLookup, made at build()
        self.launches = LaunchCache()  # sync()'s recorded launches (checks, placement)
        self.checks = DeferredChecks()  # sync()'s finite checks, read after its launches
        self._mesh_boxes: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # object-space boxes (search_box)
        self._search_box: tuple | None | bool = False  # False: not made since build/sync

    # ------------------------------------------------------------------ contents
    def add_mesh(self, mesh: Any, vertices: Any, to_world: Any | None, dynamic: bool, device: str) -> int:
        """Register a (checked) mesh; returns its shape id."""
        if self.device is None:
            self.device = device
        shape_id = len(self.table)
        return self.table.add(Shape(mesh, shape_id, dynamic, vertices, to_world))

    def add_instance(self, base: Shape, mesh_id: int, to_world: Any) -> int:
        """Register an instance of mesh ``mesh_id`` with its (checked) own matrix; returns its shape id."""
        return self.table.add(Shape(base.mesh, mesh_id, base.dynamic, base.vertices, to_world, is_instance=True))

    def update_vertices(self, mesh_id: int, vertices: Any) -> None:
        """The mesh (and its instances) now read ``vertices``; pending until ``sync()``."""
        for shape in self.table:
            if shape.base == mesh_id:
                shape.vertices = vertices
        self.table.pending.add(mesh_id)

    def set_transform(self, shape_id: int, to_world: Any, source: Any | None = None, index: int = 0,
                      count: int = 1) -> None:
        """The shape now reads ``to_world`` (entry ``index`` of batch ``source`` of ``count``, if given); pending."""
        shape = self.table[shape_id]
        shape.to_world, shape.source, shape.source_index, shape.source_count = to_world, source, index, count
        self.table.pending.add(shape_id)

    # ------------------------------------------------------------------ lifecycle
    def build(self, call: str) -> None:
        """Check and snapshot every shape, then build the acceleration structures.

        Raises:
            ValueError: the scene has no triangles, more faces than int32 ``global_prim_id``
                can number (each instance counts its mesh's faces again), a mesh's faces
                index outside its vertices, or a mesh has non-finite vertices.
        """
        table = self.table
        meshes = table.meshes
        if not meshes or sum(s.num_faces for s in meshes) == 0:
            raise ValueError(f"{call}: the scene is empty; add a mesh with at least one face first")
        total = sum(s.num_faces for s in table.shapes)
        if total > MAX_GLOBAL_FACES:
            raise ValueError(
                f"{call}: the scene has {total:,} faces counting each instance's own, more than the "
                f"{MAX_GLOBAL_FACES:,} that int32 global_prim_id can number; use fewer instances or "
                f"smaller meshes (or several scenes)")
        device = warp_device(self.device)
        stream = self.arrays.stream(self.device)
        # Every Warp operation of the build (fills, uploads, copies) on the frontend's stream,
        # ordered with its launches: Warp's own current stream is not (see engine.runtime.read_back).
        with launch_stream(device, stream):
            self._mesh_boxes, self._search_box = {}, False
            self._check_meshes(call, [i for i, s in enumerate(table) if not s.is_instance])
            table.number()
            self.transforms.reset(table, call)
            self.centre = self._search_centre(stream)
            self._build_flat(device, stream)
            self._build_instances(device, stream)
            self.accel = SceneAccel(device, self.flat, self.flat_global, self.flat_shape, self.shape_enabled,
                                    self.level, self.inst_shape, self.inst_global)
            self.shape_lookup = self._shape_lookup(device)
            self._apply_enabled(stream)
        self.arrays.fence(self.device)
        table.finish_build()
        self.generation += 1

    def sync(self, call: str) -> set[int]:
        """Apply pending updates; returns the ids of the shapes refreshed.

        Raises:
            RuntimeError: before ``build()``, after shapes were added, or a static mesh
                changed in place.
            ValueError: a moved mesh has non-finite vertices.
        """
        table = self.table
        todo, moved = table.sync_plan(call)
        self._check_widths(call, moved)
        for shape_id in moved:  # (their vertices may have moved; read again by search_box)
            self._mesh_boxes.pop(shape_id, None)
        self._search_box = False
        stream = self.arrays.stream(self.device)
        device = self.accel.device
        with launch_stream(device, stream):  # as in build()
            if todo:
                self.transforms.read(table, sorted(todo), call)
            if moved:
                # Each moved mesh placed and checked in one kernel; the flags are read once, below,
                # after the refit is enqueued (a failed check leaves the scene pending, so nothing
                # placed or refitted here is ever queried before a sync() that succeeds).
                flags = self.checks.begin(len(moved), device)
                # Where this sync places every flat point, the placements also fold the scene magnitude
                # (the refit's first pass over the points, one launch and one read of them fewer).
                partials = self.flat.magnitude_partials if self._places_all(moved) else None
                for k, shape_id in enumerate(moved):
                    fold = None if partials is None else (*partials, k == 0)
                    self._place_flat(shape_id, stream, (flags, k), fold)
                self.checks.copy(stream)
                self.flat.refit(stream, partials_ready=partials is not None)
            if self.level is not None:
                blas_moved = False
                for base in sorted(set(moved) & set(self.blas)):
                    self._place_blas(base, stream)
                    self.blas[base][1].refit(stream)
                    blas_moved = True
                if blas_moved or any(i in todo or table[i].base in todo for i in self.instance_ids):
                    self._write_instance_transforms()
                    self.level.update(blas_moved, stream)
            found = None
            if moved:  # the one host read of sync(): waits for the placements, not for the refit
                found = next(((i, bad) for i, bad in zip(moved, self.checks.results()) if bad is not None), None)
            if found is None and table.enabled_dirty:
                self._apply_enabled(stream)
        self.arrays.fence(self.device)
        if found is not None:
            self._raise_nonfinite(call, *found)  # (the scene stays pending)
        table.finish_sync(todo)
        return todo

    # ------------------------------------------------------------------ internals
    def _check_meshes(self, call: str, shape_ids: list[int]) -> None:
        """At ``build()``: faces within ``[0, V)`` and finite vertices, and each mesh's object box kept in
        ``_mesh_boxes`` (the search centre's, :meth:`_world_box`).

        Every mesh's checks, then every mesh's box, are launched in mesh order (the launches of the
        checks and of :meth:`_world_box`'s boxes before), then read in one host read (one wait on CUDA,
        where each check and box was one); the errors are raised mesh by mesh, a mesh's non-finite
        vertices before its faces, as before.
        """
        stream = self.arrays.stream(self.device)
        rows = getattr(self.arrays, "rows", None)
        table = self.table
        counts = []
        for shape_id in shape_ids:  # (the frontend's shape checks first: they raise without a launch)
            shape = table[shape_id]
            count = rows(call, f"vertices of mesh {shape_id}", shape.vertices) if rows else shape.num_vertices
            shape.built_vertices = count
            if shape.num_faces and rows:
                rows(call, f"faces of mesh {shape_id}", shape.mesh.faces)
            counts.append(count)
        keep, views, checks, boxes, read = [], [], [], [], []
        flags = None
        for k, shape_id in enumerate(shape_ids):
            shape = table[shape_id]
            view, keep_v = self.arrays.vec3_view(shape.vertices)
            keep.append(keep_v)
            views.append(view)
            bad = low_high = None
            if view.size:
                if flags is None:  # one flag pair per mesh, filled once
                    flags = wp.empty(2 * len(shape_ids), dtype=wp.int32, device=view.device)
                    flags.fill_(NO_ROW)
                bad = flags[2 * k:2 * k + 2] if len(shape_ids) > 1 else flags
                nonfinite_launch(view, bad, stream)
                read.append(bad)
            if shape.num_faces:
                fview, keep_f = self.arrays.index_view(shape.mesh.faces)
                keep.append(keep_f)
                if fview.size:
                    low_high = face_range_launch(fview, stream)
                    read.extend(low_high)
            checks.append((bad, low_high))
        for shape_id, view in zip(shape_ids, views):  # (_world_box's boxes, as it launched them)
            if table[shape_id].num_vertices and view.size:
                boxes.append((shape_id, bounds_launch(view, stream)))
                read.extend(boxes[-1][1])
        got = dict(zip((id(a) for a in read), read_back(stream, *read))) if read else {}
        del keep
        for shape_id, count, (bad, low_high) in zip(shape_ids, counts, checks):
            found = None if bad is None else nonfinite_found(got[id(bad)])
            if found is not None:
                self._raise_nonfinite(call, shape_id, found)
            if low_high is not None:
                low, high = int(got[id(low_high[0])][0]), int(got[id(low_high[1])][0])
                if low < 0 or high >= count:
                    raise ValueError(
                        f"{call}: 'faces of mesh {shape_id}' must index vertices in [0, {count}), got values in "
                        f"[{low}, {high}] (changed in place after Mesh()?)"
                    )
        for shape_id, (low, high) in boxes:
            self._mesh_boxes[shape_id] = (got[id(low)], got[id(high)])

    def _check_widths(self, call: str, shape_ids: list[int]) -> None:
        """At ``sync()``: each mesh's vertex count unchanged since build (its values are checked as it is placed)."""
        rows = getattr(self.arrays, "rows", None)
        if rows is None:
            return
        for shape_id in shape_ids:
            shape = self.table[shape_id]
            count = rows(call, f"vertices of mesh {shape_id}", shape.vertices)
            if count != shape.built_vertices:
                raise ValueError(
                    f"{call}: 'vertices' of mesh {shape_id} must keep the width {shape.built_vertices} it had at "
                    f"build(), got {count}; call build() to change the mesh"
                )

    @staticmethod
    def _raise_nonfinite(call: str, shape_id: int, bad: tuple[str, int]) -> None:
        what = "non-finite values" if bad[0] == "non-finite" else "values beyond the float32 range"
        raise ValueError(f"{call}: 'vertices of mesh {shape_id}' holds {what} (first at row {bad[1]})")

    def _places_all(self, moved: list[int]) -> bool:
        """Whether placing the meshes ``moved`` (distinct flat meshes, each with vertices) writes every flat point."""
        table = self.table
        counts = [table[i].num_vertices for i in moved]
        return all(counts) and sum(counts) == table.num_flat_vertices

    def _place_flat(self, shape_id: int, stream: wp.Stream | None, checks: tuple | None = None,
                    magnitude: tuple | None = None) -> None:
        shape = self.table[shape_id]
        view, keep = self.arrays.vec3_view(shape.vertices)
        m = self.transforms.world[shape_id] if shape.matrix is not None else None
        place_points(view, m, shape.vertex_offset, self.points, stream, self.centre, self.launches, checks,
                     magnitude)
        self.arrays.fence(self.device)
        del keep

    def _place_blas(self, base: int, stream: wp.Stream | None) -> None:
        view, keep = self.arrays.vec3_view(self.table[base].vertices)
        place_points(view, None, self.blas[base][0], self.blas_points, stream, launches=self.launches)
        self.arrays.fence(self.device)
        del keep

    def _build_flat(self, device: wp.context.Device, stream: wp.Stream | None) -> None:
        table = self.table
        self.points = wp.empty(max(1, table.num_flat_vertices), dtype=wp.vec3, device=device)
        self.indices = wp.empty(max(3, 3 * table.num_flat_faces), dtype=wp.int32, device=device)
        flat_global, flat_shape = [], []
        meshes = [i for i, s in enumerate(table) if not s.is_instance]
        # Per-face ids written on the device for scenes of a few meshes (no host arrays of F entries
        # nor their host-to-device copies); many small meshes keep one host-built copy (one launch per
        # mesh would cost more).
        on_device = len(meshes) <= _DEVICE_IDS_MAX_MESHES
        if on_device:
            self.flat_global = wp.empty(table.num_flat_faces, dtype=wp.int32, device=device)
            self.flat_shape = wp.empty(table.num_flat_faces, dtype=wp.int32, device=device)
        for shape_id in meshes:
            shape = table[shape_id]
            self._place_flat(shape_id, stream)
            if shape.num_faces:
                fview, keep = self.arrays.index_view(shape.mesh.faces)
                place_faces(fview, shape.vertex_offset, shape.face_row, self.indices, stream)
                self.arrays.fence(self.device)
                del keep
            if on_device:
                place_face_ids(shape.num_faces, shape.face_row, shape.face_offset, shape_id, self.flat_global,
                               self.flat_shape, stream)
            else:
                flat_global.append(np.arange(shape.num_faces, dtype=np.int32) + shape.face_offset)
                flat_shape.append(np.full(shape.num_faces, shape_id, dtype=np.int32))
        if not on_device:
            self.flat_global = wp.array(np.concatenate(flat_global), dtype=wp.int32, device=device)
            self.flat_shape = wp.array(np.concatenate(flat_shape), dtype=wp.int32, device=device)
        # (every flag is written by _apply_enabled() at the end of build(); no kernel of the build reads them)
        self.shape_enabled = wp.empty(len(table), dtype=wp.uint8, device=device)
        self.flat = TriangleScene(self.points, self.indices, stream, num_triangles=table.num_flat_faces)

    def _build_instances(self, device: wp.context.Device, stream: wp.Stream | None) -> None:
        table = self.table
        self.instance_ids = [i for i, s in enumerate(table) if s.is_instance and s.num_faces]
        self.blas = {}
        self.level = self.inst_shape = self.inst_global = None
        if not self.instance_ids:
            return
        bases = sorted({table[i].base for i in self.instance_ids})
        offsets, vertex_base, face_base = {}, 0, 0
        for base in bases:
            offsets[base] = (vertex_base, face_base)
            vertex_base += table[base].num_vertices
            face_base += table[base].num_faces
        self.blas_points = wp.empty(vertex_base, dtype=wp.vec3, device=device)
        self.blas_indices = wp.empty(3 * face_base, dtype=wp.int32, device=device)
        slots, blas = {}, []
        for base in bases:
            self.blas[base] = (offsets[base][0], None)
            self._place_blas(base, stream)
            fview, keep = self.arrays.index_view(table[base].mesh.faces)
            place_faces(fview, offsets[base][0], offsets[base][1], self.blas_indices, stream)
            self.arrays.fence(self.device)
            del keep
        for base in bases:
            tri = TriangleScene(self.blas_points, self.blas_indices, stream, num_triangles=table[base].num_faces,
                                face_base=offsets[base][1], instanced=True)
            slots[base] = len(blas)
            self.blas[base] = (offsets[base][0], tri)
            blas.append(tri)
        self.instance_to_world = wp.empty(len(self.instance_ids), dtype=wp.mat44, device=device)
        self._write_instance_transforms()
        self.inst_shape = wp.array(np.array(self.instance_ids, dtype=np.int32), dtype=wp.int32, device=device)
        self.inst_global = wp.array(np.array([table[i].face_offset for i in self.instance_ids], dtype=np.int32),
                                    dtype=wp.int32, device=device)
        self.level = InstanceLevel(blas, [slots[table[i].base] for i in self.instance_ids], self.instance_to_world,
                                   stream)

    def _shape_lookup(self, device: wp.context.Device):
        """Per shape: first ``global_prim_id``, first flat face row (meshes), instance index (instances)."""
        table = self.table
        slot = {shape_id: k for k, shape_id in enumerate(self.instance_ids)}
        first = [s.face_offset for s in table]
        row = [-1 if s.is_instance else s.face_row for s in table]
        inst = [slot.get(i, -1) if s.is_instance else -1 for i, s in enumerate(table)]
        return shape_lookup(device, np.array(first), np.array(row), np.array(inst))

    def _search_centre(self, stream: wp.Stream | None) -> np.ndarray | None:
        """The search centre of the world boxes of the shapes enabled at ``build()`` (all if none).

        Mesh boxes are read in float64 on the device; an instance's is its mesh's object
        box, its 8 corners placed by the host transform table. Kept until the next
        ``build()`` (refits stay bitwise reproducible).
        """
        enabled = any(s.enabled for s in self.table)  # shapes disabled at build() do not move the centre
        box = self._world_box(stream, lambda s: s.enabled or not enabled)
        return None if box is None else search_centre(*box)

    def _world_box(self, stream: wp.Stream | None, keep) -> tuple[np.ndarray, np.ndarray] | None:
        """float64 ``(lower, upper)`` world box of the shapes ``keep(shape)`` selects (``None``: none with vertices).

        Each mesh's object box is read once (:func:`~rayd.engine.assemble.bounds`, one host
        read) and kept in ``_mesh_boxes`` until its vertices move (``sync()``) or ``build()``;
        an instance's is its mesh's, and every shape's 8 corners are placed by the host
        transform table (``M_instance @ M_mesh`` for instances).
        """
        table = self.table
        boxes = self._mesh_boxes
        for shape_id, shape in enumerate(table):
            if not shape.is_instance and shape.num_vertices and shape_id not in boxes:
                view, keep_alive = self.arrays.vec3_view(shape.vertices)
                boxes[shape_id] = bounds(view, stream)
                del keep_alive
        lows, highs = [], []
        bits = np.array([[k >> j & 1 for j in range(3)] for k in range(8)], dtype=bool)
        for shape_id, shape in enumerate(table):
            if shape.num_vertices and keep(shape) and shape.base in boxes:
                lo, hi = boxes[shape.base]
                corners = np.where(bits, hi, lo)
                m = self.transforms.world[shape_id]
                placed = corners @ m[:3, :3].T + m[:3, 3]
                lows.append(placed.min(0))
                highs.append(placed.max(0))
        if not lows:
            return None
        return np.min(lows, 0), np.max(highs, 0)

    @property
    def has_search_box(self) -> bool:
        """True if :meth:`search_box` is made for the current ``build()``/``sync()`` (no read to make it)."""
        return self._search_box is not False

    def search_box(self) -> tuple[tuple[float, float, float], tuple[float, float, float]] | None:
        """The float64 box ``(lower, upper)`` (3 floats each) of every shape in the search frame (world minus
        :attr:`centre`), or ``None`` if no shape has vertices. Disabled shapes are included (a larger
        box is as good, and it does not depend on the enable flags).

        What a query with ``tmin = -inf`` starts its search before (:func:`rayd.core.rays.search_start`).
        Made at its first use after each ``build()``/``sync()`` from the placed corners of the
        mesh boxes (:meth:`_world_box`): a mesh whose box is not known yet (a dynamic mesh moved by
        the last ``sync()``) costs one host read (a synchronisation of the scene's stream).
        """
        if self._search_box is False:
            stream = self.arrays.stream(self.device)
            with launch_stream(warp_device(self.device), stream):
                box = self._world_box(stream, lambda s: True)
            if box is not None and self.centre is not None:
                box = (box[0] - self.centre, box[1] - self.centre)
            self._search_box = None if box is None else tuple(tuple(float(x) for x in b) for b in box)
        return self._search_box

    def _write_instance_transforms(self) -> None:
        rows = self.transforms.world[self.instance_ids].copy()
        if self.centre is not None:
            rows[:, :3, 3] -= self.centre
        rows = rows.astype(np.float32)
        self.instance_to_world.assign(wp.array(rows, dtype=wp.mat44, device=self.instance_to_world.device))

    def _apply_enabled(self, stream: wp.Stream | None) -> None:
        table = self.table
        flags = np.array([1 if s.enabled else 0 for s in table], dtype=np.uint8)
        wp.copy(self.shape_enabled, wp.array(flags, dtype=wp.uint8, device=self.shape_enabled.device), stream=stream)
        self.accel.set_all_enabled(bool(flags.all()))
        self.accel.set_flat_enabled(any(s.enabled for s in table if not s.is_instance))
        table.enabled_dirty = False
