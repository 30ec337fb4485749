"""`Scene`: meshes, their acceleration structure, its lifecycle, and queries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import drjit as dr
import numpy as np
import warp as wp

from rayd.drjit import _check, _convert
from rayd.drjit._geometry import StackMatrices, compose, concat, normal_columns, world
from rayd.drjit._intersect import LiveGeometry, empty, enforce, evaluate
from rayd.drjit._scene_edges import EdgeQueries
from rayd.drjit.edges import SceneEdges
from rayd.drjit.intersection import Intersection
from rayd.drjit.mesh import Mesh, check_transform, check_transforms, host_matrices
from rayd.drjit.ray import Ray
from rayd.engine.accel import SceneAccel
from rayd.engine.frame import search_centre
from rayd.engine.instances import InstanceLevel
from rayd.engine.intersect import search
from rayd.engine.rays import RayBatch
from rayd.engine.runtime import launch_stream
from rayd.engine.triangles import TriangleScene
from rayd.flags import RayFlags

#: ``visible()`` tests the open segment interior ``s in (EPSILON, 1 - EPSILON)``, with
#: ``s`` the parameter along ``start -> end``: relative to the segment length (as rayd.torch).
VISIBILITY_EPSILON = 1e-4


@dataclass
class _Shape:
    """A mesh or an instance as the scene holds it: what is registered now and what was snapshotted.

    For a mesh, ``base`` is its own id; for an instance, the id of its mesh, and
    ``to_world`` is the instance's own matrix (its placement is ``to_world @ M_mesh``).
    A shape whose matrix came from a batched ``set_mesh_transform([...], M)`` keeps
    ``source = M`` and ``source_index = k`` (``to_world`` is then ``M[k]``, gathered):
    an in-place change of ``M`` is detected by ``M``'s version and re-gathered at
    ``sync()``, and gradients are gathered from ``M`` for all such shapes at once.
    """

    mesh: Mesh
    base: int
    dynamic: bool
    vertices: dr.ArrayBase
    to_world: dr.ArrayBase | None
    is_instance: bool = False
    enabled: bool = True
    vertex_offset: int = 0  # first row in the flat world-space point buffer (meshes)
    face_offset: int = 0  # first global_prim_id
    face_row: int = 0  # first row of the shape's mesh in the face table
    vertex_version: tuple[int, ...] | None = None
    transform_version: tuple[int, ...] | None = None
    source: dr.ArrayBase | None = None
    source_index: int = 0

    @property
    def matrix(self) -> dr.ArrayBase | None:
        """The array the shape's matrix is read from (``source`` if batched, else ``to_world``)."""
        return self.source if self.source is not None else self.to_world


def _not_ours(value: object) -> str:
    name = _convert.type_name(value)
    return f"{name} (rayd.torch and rayd.drjit objects do not mix)" if name.startswith("rayd.torch") else name


class Scene(EdgeQueries):
    """A set of triangle meshes and instances with BVHs over them, queried by rays.

    Lifecycle: ``Scene()`` -> ``add_mesh(...)`` / ``add_instance(...)`` ... ->
    ``build()`` -> queries. A mesh added with ``dynamic=True`` may move:
    ``update_mesh_vertices(mesh_id, v)`` (or an in-place change of its registered
    vertex array, e.g. ``v.x += 1``) marks the scene pending, and ``sync()`` refits.
    Transforms (``set_mesh_transform``, or an in-place change of a registered matrix)
    and ``set_shape_enabled`` also take effect at ``sync()``. Queries before
    ``build()``, after adding shapes without a new ``build()``, or while updates are
    pending raise ``RuntimeError`` instead of answering from a stale BVH.

    Acceleration: one BVH (SAH) over the world-space triangles of all meshes; when
    instances exist, a top-level BVH over instance boxes whose leaves share one
    object-space BVH per instanced mesh (the engine's, as in rayd.torch).

    A scene lives on the backend and device of its meshes (``drjit.llvm`` on the CPU,
    ``drjit.cuda`` on Dr.Jit's current GPU); engine work is launched on Dr.Jit's CUDA
    stream, without host synchronisation in queries.
    """

    def __init__(self) -> None:
        self._shapes: list[_Shape] = []
        self._device: str | None = None
        self._backend: str | None = None
        self._engine: TriangleScene | None = None
        self._structure_changed = False
        self._pending: set[int] = set()
        self._enabled_dirty = False
        self._edges: SceneEdges | None = None
        # Host copy (float64 NumPy) of every shape's own matrix and of its placement
        # (M_mesh, or M_instance @ M_mesh) as of the last build()/sync(); identity
        # for shapes without one. Feeds the engine's instance matrices and the
        # evaluation's transform columns when no transform requires gradients.
        self._host_own = np.zeros((0, 4, 4))
        self._host_world = np.zeros((0, 4, 4))
        self._host_generation = 0
        self._columns_cache: dict[type, tuple] = {}

    # ------------------------------------------------------------------ contents
    def add_mesh(self, mesh: Mesh, dynamic: bool = False) -> int:
        """Add a mesh; returns its shape id (0, 1, 2, ... in insertion order).

        Args:
            mesh: a :class:`rayd.drjit.Mesh`.
            dynamic: ``True`` if its vertices will change (``update_mesh_vertices``).

        Returns:
            The shape id, which hits report as ``shape_id``.

        Raises:
            TypeError: ``mesh`` is not a ``rayd.drjit.Mesh`` (e.g. a rayd.torch one).
            ValueError: ``mesh`` is on another backend or device than the scene's meshes.
        """
        call = "rayd.drjit.Scene.add_mesh()"
        if not isinstance(mesh, Mesh):
            raise TypeError(f"{call}: 'mesh' must be a rayd.drjit.Mesh, got {_not_ours(mesh)}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"{call}: 'dynamic' must be a bool, got {type(dynamic).__name__}")
        if self._device is None:
            self._device, self._backend = mesh.device, mesh.backend
        _check.same_backend(call, "mesh", mesh.vertices, self._device, "the scene")
        shape_id = len(self._shapes)
        self._shapes.append(_Shape(mesh, shape_id, dynamic, mesh.vertices, mesh.to_world))
        self._structure_changed = self._engine is not None
        return shape_id

    def add_instance(self, mesh_id: int, to_world: dr.ArrayBase) -> int:
        """Place another copy of a mesh, sharing its bottom-level BVH; returns its shape id.

        Args:
            mesh_id: the id ``add_mesh`` returned (the mesh stays present itself).
            to_world: ``Matrix4f``/``Matrix4f64`` (width 1, or ``drjit.scalar``),
                column-vector convention; the instance's placement is
                ``to_world @ M_mesh``. Gradients flow into it (``.ad``, grad enabled).

        Returns:
            The shape id; hits on the instance report it as ``shape_id`` and faces of
            the mesh as ``prim_id``.

        Raises:
            TypeError, ValueError: wrong id type/range (or an instance id), or a bad matrix.
        """
        call = "rayd.drjit.Scene.add_instance()"
        base = self._shape(call, "mesh_id", mesh_id)
        if base.is_instance:
            raise ValueError(f"{call}: 'mesh_id' {mesh_id} is an instance; pass the id add_mesh returned")
        to_world = check_transform(call, "to_world", to_world, base.mesh.vertices)
        shape_id = len(self._shapes)
        self._shapes.append(_Shape(base.mesh, mesh_id, base.dynamic, base.vertices, to_world, is_instance=True))
        self._structure_changed = self._engine is not None
        return shape_id

    @property
    def num_meshes(self) -> int:
        """Number of meshes added (instances not counted)."""
        return sum(1 for s in self._shapes if not s.is_instance)

    @property
    def num_shapes(self) -> int:
        """Number of shapes: meshes and instances."""
        return len(self._shapes)

    @property
    def device(self) -> str | None:
        """The scene's device, ``'cpu'`` (LLVM) or ``'cuda:<ordinal>'``; ``None`` while empty."""
        return self._device

    @property
    def backend(self) -> str | None:
        """The scene's Dr.Jit backend, ``'llvm'`` or ``'cuda'``; ``None`` while empty."""
        return self._backend

    # ------------------------------------------------------------------ lifecycle
    def build(self) -> None:
        """Snapshot every shape and build the acceleration structures.

        One BVH (SAH) over the world-space triangles of all meshes; when instances
        exist, a top-level BVH over instance boxes whose leaves share one object-space
        BVH per instanced mesh.

        Raises:
            ValueError: the scene has no triangles, or a mesh has non-finite vertices.
        """
        call = "rayd.drjit.Scene.build()"
        meshes = [s for s in self._shapes if not s.is_instance]
        if not meshes or sum(s.mesh.num_faces for s in meshes) == 0:
            raise ValueError(f"{call}: the scene is empty; add a mesh with at least one face first")
        for shape_id, shape in enumerate(self._shapes):
            if not shape.is_instance:
                _check.finite(call, f"vertices of mesh {shape_id}", shape.vertices)
        plain = _convert.module(self._backend, False)
        device = self._device
        stream = _convert.current_stream(device)

        # Numbering: each shape owns a global_prim_id range, in shape order; meshes also
        # own rows of the flat point buffer and of the face table (instances reuse
        # their mesh's rows).
        vertex_offset = face_row = global_offset = 0
        faces, flat_global, flat_shape, has_normals, has_uv = [], [], [], [], []
        for shape_id, shape in enumerate(self._shapes):
            shape.face_offset = global_offset
            global_offset += shape.mesh.num_faces
            if shape.is_instance:
                shape.face_row = self._shapes[shape.base].face_row
                continue
            mesh = shape.mesh
            shape.vertex_offset, shape.face_row = vertex_offset, face_row
            if mesh.num_faces:  # Dr.Jit cannot mix width 0 with literals
                faces.append(plain.Array3u(dr.detach(mesh.faces)) + vertex_offset)
                flat_global.append(dr.arange(plain.Int, mesh.num_faces) + shape.face_offset)
                flat_shape.append(dr.full(plain.Int, shape_id, mesh.num_faces))
                has_normals.append(dr.full(plain.Bool, mesh.normals is not None, mesh.num_faces))
                has_uv.append(dr.full(plain.Bool, mesh.uv is not None, mesh.num_faces))
            vertex_offset += mesh.num_vertices
            face_row += mesh.num_faces
        self._faces = concat(faces)
        self._global_offset = plain.Int([s.face_offset for s in self._shapes])
        self._face_row = plain.Int([s.face_row for s in self._shapes])
        self._face_has_normals = concat(has_normals) if any(s.mesh.normals is not None for s in meshes) else None
        self._face_has_uv = concat(has_uv) if any(s.mesh.uv is not None for s in meshes) else None
        self._flat_global = concat(flat_global)
        self._flat_shape = concat(flat_shape)
        self._shape_enabled = plain.UInt8([1 if s.enabled else 0 for s in self._shapes])
        count = len(self._shapes)
        self._is_instance = np.array([s.is_instance for s in self._shapes], dtype=bool)
        self._base_of = np.array([s.base for s in self._shapes], dtype=np.int64)
        self._host_own = np.repeat(np.eye(4)[None], count, axis=0)
        self._read_transforms(range(count))
        dr.make_opaque(self._faces, self._flat_global, self._flat_shape, self._shape_enabled)
        dr.eval(self._face_has_normals, self._face_has_uv)

        # The search centre (engine/frame.py): the engine sees vertices, instance
        # placements and ray origins relative to it.
        self._centre = self._search_centre(meshes)

        # Flat level. Engine storage is owned by Dr.Jit and viewed by Warp: int32
        # indices and an interleaved float32 point buffer that sync() refreshes in place.
        self._indices = dr.ravel(plain.Array3i(self._faces), order="F")
        self._points, self._points_view = _convert.vec3_buffer(vertex_offset, self._backend, device)
        for shape in meshes:
            self._snapshot(shape, stream)
        indices_view = _convert.scalar_view(self._indices, device)
        _convert.fence(device)
        self._engine = TriangleScene(self._points_view, indices_view, stream)
        wp_device = self._engine.device

        # Instances: object-space copies of every instanced mesh in one buffer that
        # their bottom-level BVHs share, and a top level over the instances.
        self._instance_ids = [i for i, s in enumerate(self._shapes) if s.is_instance and s.mesh.num_faces]
        self._blas: dict[int, tuple[int, TriangleScene]] = {}
        level = inst_shape = inst_global = None
        if self._instance_ids:
            bases = sorted({self._shapes[i].base for i in self._instance_ids})
            offsets, indices, vertex_base, face_base = {}, [], 0, 0
            for base in bases:
                mesh = self._shapes[base].mesh
                offsets[base] = (vertex_base, face_base)
                indices.append(plain.Array3i(dr.detach(mesh.faces)) + vertex_base)
                vertex_base += mesh.num_vertices
                face_base += mesh.num_faces
            self._blas_indices = dr.ravel(concat(indices), order="F")
            self._blas_points, self._blas_points_view = _convert.vec3_buffer(vertex_base, self._backend, device)
            blas_indices_view = _convert.scalar_view(self._blas_indices, device)
            slots, blas = {}, []
            for base in bases:
                self._blas[base] = (offsets[base][0], None)
                self._snapshot_blas(base, stream)
                slots[base] = len(blas)
                _convert.fence(device)
                tri = TriangleScene(
                    self._blas_points_view,
                    blas_indices_view,
                    stream,
                    num_triangles=self._shapes[base].mesh.num_faces,
                    face_base=offsets[base][1],
                )
                self._blas[base] = (offsets[base][0], tri)
                blas.append(tri)
            count = len(self._instance_ids)
            self._instance_to_world = plain.TensorXf(dr.empty(plain.Float, 16 * count), shape=(count, 4, 4))
            dr.make_opaque(self._instance_to_world)
            self._instance_to_world_view = wp.from_dlpack(
                _convert._capsule(self._instance_to_world, device), dtype=wp.mat44
            )
            self._write_instance_transforms(stream)
            self._instance_shape = plain.Int(self._instance_ids)
            self._instance_global = plain.Int([self._shapes[i].face_offset for i in self._instance_ids])
            dr.make_opaque(self._instance_shape, self._instance_global)
            slot_of = [slots[self._shapes[i].base] for i in self._instance_ids]
            _convert.fence(device)
            with launch_stream(wp_device, stream):  # its allocations go on Dr.Jit's stream too
                level = InstanceLevel(blas, slot_of, self._instance_to_world_view, stream)
            inst_shape = _convert.scalar_view(self._instance_shape, device)
            inst_global = _convert.scalar_view(self._instance_global, device)

        self._shape_enabled_view = _convert.scalar_view(self._shape_enabled, device)
        with launch_stream(wp_device, stream):
            _convert.fence(device)
            self._accel = SceneAccel(
                wp_device,
                self._engine,
                _convert.scalar_view(self._flat_global, device),
                _convert.scalar_view(self._flat_shape, device),
                self._shape_enabled_view,
                level,
                inst_shape,
                inst_global,
            )
        self._accel.set_all_enabled(all(s.enabled for s in self._shapes))
        self._accel.set_flat_enabled(any(s.enabled for s in self._shapes if not s.is_instance))
        _convert.fence(device)
        memo: dict[int, tuple[int, ...]] = {}
        for shape in self._shapes:
            self._record_versions(shape, memo)
        self._enabled_dirty = False
        self._structure_changed = False
        self._pending.clear()
        self._edges = SceneEdges(self)

    def update_mesh_vertices(self, mesh_id: int, vertices: dr.ArrayBase) -> None:
        """Register new vertex positions for a dynamic mesh; ``sync()`` refits.

        Args:
            mesh_id: the id ``add_mesh`` returned.
            vertices: (V, 3) ``Array3f``/``Array3f64`` with the mesh's V, on the
                scene's backend and device. This array (not a copy) becomes the one
                gradients flow into; it may be the same array as before, e.g. a
                parameter just stepped by an optimizer.

        Raises:
            TypeError: ``mesh_id`` is not an int, or ``vertices`` not a Dr.Jit float array.
            ValueError: ``mesh_id`` out of range or an instance, or a wrong shape, width
                or device.
            RuntimeError: the mesh was added with ``dynamic=False``.
        """
        call = "rayd.drjit.Scene.update_mesh_vertices()"
        shape = self._shape(call, "mesh_id", mesh_id)
        if shape.is_instance:
            raise ValueError(f"{call}: 'mesh_id' {mesh_id} is an instance; update the mesh it instances")
        if not shape.dynamic:
            raise RuntimeError(
                f"{call}: mesh {mesh_id} was added with dynamic=False; add it with dynamic=True to move it, "
                f"or call build() after changing it"
            )
        vertices = _check.float_array(call, "vertices", vertices, 3)
        if dr.width(vertices) != shape.mesh.num_vertices:
            raise ValueError(
                f"{call}: 'vertices' must have shape ({shape.mesh.num_vertices}, 3) like mesh {mesh_id}, "
                f"got width {dr.width(vertices)}"
            )
        _check.same_backend(call, "vertices", vertices, self._device, "the scene")
        shape.vertices = vertices
        self._pending.add(mesh_id)

    def set_mesh_transform(self, shape_id: int | Sequence[int], to_world: dr.ArrayBase) -> None:
        """Set the object-to-world matrix of a mesh or an instance; takes effect at ``sync()``.

        Args:
            shape_id: a mesh or instance id. For a mesh this is ``M_mesh`` (its
                instances follow, as ``M_instance @ M_mesh``); for an instance its own
                matrix. Also a sequence of K distinct ids, to set K matrices in one call.
            to_world: ``Matrix4f``/``Matrix4f64`` acting on column vectors; of width K
                with K ids (shape ``shape_id[k]`` gets entry k; a width-0 matrix with
                no ids). Gradients flow into this array when it is an ``.ad`` array
                with gradients enabled. Each call reads the matrices once to check them
                (one host synchronisation). The scene keeps this array: an in-place
                change of it (e.g. ``M[2][3] = Float(...)``) marks the shapes pending,
                and ``sync()`` applies the new values.

        Raises:
            TypeError, ValueError: wrong id type/range, repeated ids, dtype, shape or
                device; non-finite or singular matrices.
        """
        call = "rayd.drjit.Scene.set_mesh_transform()"
        if isinstance(shape_id, int) and not isinstance(shape_id, bool):
            shape = self._shape(call, "shape_id", shape_id)
            shape.to_world = check_transform(call, "to_world", to_world, shape.mesh.vertices)
            shape.source = None
            self._pending.add(shape_id)
            return
        if not isinstance(shape_id, (list, tuple)):
            raise TypeError(f"{call}: 'shape_id' must be an int or a sequence of ints, got {type(shape_id).__name__}")
        for one in shape_id:
            self._shape(call, "shape_id", one)
        if len(set(shape_id)) != len(shape_id):
            raise ValueError(f"{call}: 'shape_id' repeats an id")
        to_world = check_transforms(call, "to_world", to_world, len(shape_id), self._device)
        for k, one in enumerate(shape_id):
            shape = self._shapes[one]
            shape.source, shape.source_index = to_world, k
            shape.to_world = self._gather_matrix(to_world, k)
        self._pending.update(shape_id)

    def set_shape_enabled(self, shape_id: int, flag: bool) -> None:
        """Enable or disable a mesh or instance for all queries; takes effect at ``sync()`` (no rebuild).

        Raises:
            TypeError, ValueError: wrong id type/range, or ``flag`` not a bool.
        """
        call = "rayd.drjit.Scene.set_shape_enabled()"
        shape = self._shape(call, "shape_id", shape_id)
        if not isinstance(flag, bool):
            raise TypeError(f"{call}: 'flag' must be a bool, got {type(flag).__name__}")
        if shape.enabled != flag:
            shape.enabled = flag
            self._enabled_dirty = True

    def has_pending_updates(self) -> bool:
        """True if updates (vertices, transforms, enable flags, in-place changes of dynamic meshes) await ``sync()``."""
        if self._pending or self._enabled_dirty or (self._edges is not None and self._edges.pending):
            return True
        memo: dict[int, tuple[int, ...]] = {}
        return any(self._changed(s, memo) for s in self._shapes if s.dynamic or s.to_world is not None)

    def is_ready(self) -> bool:
        """True if queries can run now: built, nothing added since, nothing pending or stale."""
        if self._engine is None or self._structure_changed or self._pending or self._enabled_dirty:
            return False
        memo: dict[int, tuple[int, ...]] = {}
        return not any(self._changed(s, memo) for s in self._shapes)

    def sync(self) -> None:
        """Apply pending updates: refit moved meshes, refit the top level, apply enable flags.

        Raises:
            RuntimeError: before ``build()``, after shapes were added without a new
                ``build()``, or if a static mesh changed in place (needs ``build()``).
            ValueError: an updated mesh has non-finite vertices.
        """
        call = "rayd.drjit.Scene.sync()"
        self._require_built(call)
        shapes = self._shapes
        for shape_id, shape in enumerate(shapes):
            if not shape.dynamic and not shape.is_instance and shape_id not in self._pending:
                if self._vertices_changed(shape):
                    raise _check.lifecycle(
                        call, f"the vertices of static mesh {shape_id} changed in place; call build() to rebuild"
                    )
        memo: dict[int, tuple[int, ...]] = {}
        todo = {i for i, s in enumerate(shapes) if i in self._pending or self._changed(s, memo)}
        for shape_id in todo:  # a batch changed in place: take the new values
            shape = shapes[shape_id]
            if shape.source is not None:
                shape.to_world = self._gather_matrix(shape.source, shape.source_index)
        self._read_transforms(sorted(i for i in todo if shapes[i].to_world is not None))
        moved = sorted(i for i in todo if not shapes[i].is_instance)
        for shape_id in moved:
            _check.finite(call, f"vertices of mesh {shape_id}", shapes[shape_id].vertices)
        stream = _convert.current_stream(self._device)
        for shape_id in moved:
            self._snapshot(shapes[shape_id], stream)
        _convert.fence(self._device)
        if moved:
            self._engine.refit(stream)
        if self._accel.instances is not None:
            blas_moved = False
            for base in sorted(set(moved) & set(self._blas)):
                self._snapshot_blas(base, stream)
                _convert.fence(self._device)
                self._blas[base][1].refit(stream)
                blas_moved = True
            instance_moved = any(i in todo or shapes[i].base in todo for i in self._instance_ids)
            if blas_moved or instance_moved:
                self._write_instance_transforms(stream)
                self._accel.instances.update(blas_moved, stream)
        if self._enabled_dirty:
            flags = _convert.module(self._backend, False).UInt8([1 if s.enabled else 0 for s in shapes])
            wp.copy(self._shape_enabled_view, _convert.scalar_view(flags, self._device), stream=stream)
            self._accel.set_all_enabled(all(s.enabled for s in shapes))
            self._accel.set_flat_enabled(any(s.enabled for s in shapes if not s.is_instance))
            self._enabled_dirty = False
        self._edges.sync(stream, moved=bool(todo))
        memo = {}
        for shape_id, shape in enumerate(shapes):
            if shape_id in todo or (shape.is_instance and shape.base in todo):
                self._record_versions(shape, memo)
        _convert.fence(self._device)
        self._pending.clear()

    # ------------------------------------------------------------------ queries
    def intersect(
        self,
        ray: Ray,
        active: dr.ArrayBase | None = None,
        flags: RayFlags = RayFlags.All,
        *,
        ignore: dr.ArrayBase | int | None = None,
    ) -> Intersection:
        """Closest hit of each ray, differentiable for the fixed winning triangle.

        Args:
            ray: :class:`Ray` with ``o``, ``d`` of shape (N, 3) (``Array3f`` or
                ``Array3f64``) on the scene's backend and device.
            active: optional ``Bool`` of width N or 1; inactive rays miss.
            flags: :class:`RayFlags` selecting the fields to compute.
            ignore: optional ``global_prim_id`` per ray (``Int``/``UInt`` of width N or
                1, or an int; -1 for none) whose face the ray skips, e.g. the face a
                reflected ray leaves.

        Returns:
            :class:`Intersection` with fields of width N. Concretely, for the first
            triangle hit with ``tmin < t < tmax``, ``t, u, v`` solve
            ``o + t d = (1 - u - v) v0 + u v1 + v v2``, ``p = o + t d``,
            ``barycentric = (1 - u - v, u, v)``. Misses: ``t = inf``, ids -1, zeros.
            Fields are ``.ad`` types when any input (a mesh's arrays, ``o``, ``d``) is.

        Units:
            ``t`` in multiples of ``|d|``; ``p`` in world units.

        Gradients:
            ``t, p, n, geo_n, barycentric, uv`` are differentiable through Dr.Jit's AD,
            in reverse (``dr.backward``) and forward (``dr.forward``) mode, with
            respect to the meshes' vertex arrays, normals, uv and transforms, and to
            ``ray.o`` and ``ray.d``, wherever those are ``.ad`` arrays with gradients
            enabled. The choice of triangle is held fixed; misses get exactly zero
            gradient.

        Raises:
            TypeError: ``ray`` is not a ``rayd.drjit.Ray`` (e.g. a rayd.torch one),
                ``active`` is not a ``Bool`` array, ``ignore`` is not an integer,
                ``flags`` is not a ``RayFlags``.
            ValueError: inputs on another backend or device, or widths that do not
                broadcast.
            RuntimeError: the scene is not built, or has pending/unsynced changes.

        References:
            Woop, Benthin, Wald 2013, "Watertight Ray/Triangle Intersection", JCGT 2(1)
            (the search); Moeller, Trumbore 1997, JGT 2(1) (the evaluation).
        """
        call = "rayd.drjit.Scene.intersect()"
        flags = _check_flags(call, flags)
        n, global_prim_id = self._trace(call, ray, active, ignore, any_hit=False)
        double = _convert.is_double(ray.o) or _convert.is_double(ray.d)
        double = double or any(_convert.is_double(s.vertices) for s in self._shapes if not s.is_instance)
        ad = _convert.is_ad(ray.o) or _convert.is_ad(ray.d) or any(self._shape_is_ad(s) for s in self._shapes)
        m = _convert.module(self._backend, ad)
        if n == 0:
            return Intersection(flags, **empty(m, double, flags))
        fields = evaluate(m, double, ray.o, ray.d, global_prim_id, self._live_geometry(m, double), flags)
        return Intersection(flags, **enforce(m, fields, ray.tmin, ray.tmax))

    def shadow_test(
        self, ray: Ray, active: dr.ArrayBase | None = None, *, ignore: dr.ArrayBase | int | None = None
    ) -> dr.ArrayBase:
        """Any-hit occlusion test: is anything hit with ``tmin < t < tmax``?

        Args:
            ray: :class:`Ray` with ``o``, ``d`` of shape (N, 3) on the scene's backend.
            active: optional ``Bool`` of width N or 1; inactive rays report False.
            ignore: optional ``global_prim_id`` per ray to skip (-1 for none).

        Returns:
            (N,) ``Bool``, True where the ray is occluded. Not differentiable. The
            traversal stops at the first blocker found (any hit).

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`intersect`.
        """
        call = "rayd.drjit.Scene.shadow_test()"
        _, blocker = self._trace(call, ray, active, ignore, any_hit=True)
        return blocker >= 0

    def visible(
        self,
        start: dr.ArrayBase,
        end: dr.ArrayBase,
        active: dr.ArrayBase | None = None,
        *,
        ignore: dr.ArrayBase | int | None = None,
    ) -> dr.ArrayBase:
        """Line of sight: is the open segment between ``start`` and ``end`` unblocked?

        Args:
            start: (N, 3) ``Array3f``/``Array3f64`` points on the scene's backend.
            end: (N, 3) same types, width N or 1.
            active: optional ``Bool`` of width N or 1; inactive pairs report False.
            ignore: optional ``global_prim_id`` per pair to skip (-1 for none).

        Returns:
            (N,) ``Bool``, True where no triangle crosses ``start + s (end - start)`` for
            ``s in (VISIBILITY_EPSILON, 1 - VISIBILITY_EPSILON)`` (``1e-4``, relative
            to the segment length, so endpoints lying on surfaces do not block
            themselves). Symmetric in its endpoints. Not differentiable. Degenerate
            (zero-length or non-finite) segments report False.

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`intersect`.
        """
        call = "rayd.drjit.Scene.visible()"
        start = _check.float_array(call, "start", start, 3)
        end = _check.float_array(call, "end", end, 3)
        _check.same_backend(call, "start", start, self._device or _convert.device_name(start), "the scene")
        _check.same_backend(call, "end", end, _convert.device_name(start), "'start'")
        _check.broadcast(call, [("start", dr.width(start)), ("end", dr.width(end))])
        start, end = dr.detach(start), dr.detach(end)
        ray = Ray(start, end - start, 1.0 - VISIBILITY_EPSILON, tmin=VISIBILITY_EPSILON)
        n, blocker = self._trace(call, ray, active, ignore, any_hit=True)
        if n == 0:
            return _convert.module(self._backend, False).Bool()
        d = ray.d
        wellformed = dr.all(dr.isfinite(ray.o)) & dr.all(dr.isfinite(d)) & dr.any(d != 0)
        result = (blocker < 0) & wellformed
        if active is not None:
            result = result & dr.detach(active)
        return result

    # ------------------------------------------------------------------ internals
    def _trace(
        self, call: str, ray: object, active: object, ignore: object, any_hit: bool
    ) -> tuple[int, dr.ArrayBase]:
        """Validate, then run the engine search; returns (N, width-N ``Int`` winners, -1 = none)."""
        self._require_ready(call)
        ray = self._check_ray(call, ray)
        n, active = self._check_active(call, ray, active)
        n, ignore = self._check_ignore(call, n, ignore)
        backend, device = self._backend, self._device
        out = _convert.empty_int32(n, backend)
        if n == 0:
            return n, out
        stream = _convert.current_stream(device)
        o = ray.o
        if self._centre is not None:  # (o - c) in float64, then rounded (engine/frame.py)
            Array3 = _convert.module(backend, False).Array3f64
            o = Array3(dr.detach(o)) - Array3(*self._centre)
        o, o_buffer = _convert.vec3_view(o, device)
        d, d_buffer = _convert.vec3_view(ray.d, device)
        tmin = _convert.float32(ray.tmin, backend)
        tmax = _convert.float32(ray.tmax, backend)
        flag = _convert.uint8(active, backend)
        skip = _convert.int32(-1 if ignore is None else ignore, backend)
        rays = RayBatch(
            o,
            d,
            _convert.scalar_view(tmin, device),
            _convert.scalar_view(tmax, device),
            _convert.scalar_view(flag, device),
            _convert.scalar_view(skip, device),
        )
        out_view = _convert.scalar_view(out, device)
        _convert.fence(device)
        search(self._accel, rays, out_view, any_hit, stream)
        _convert.fence(device)
        # The buffers above stay referenced until here; on CUDA, Dr.Jit frees and
        # reuses memory in stream order, after the engine's launch.
        del o_buffer, d_buffer, rays
        return n, out

    @staticmethod
    def _shape_is_ad(shape: _Shape) -> bool:
        arrays = (shape.vertices, shape.mesh.normals, shape.mesh.uv, shape.to_world)
        return any(a is not None and _convert.is_ad(a) for a in arrays)

    def _live_geometry(self, m: ModuleType, double: bool) -> LiveGeometry:
        """The registered arrays (differentiable): object-space meshes and per-shape transforms."""
        Array3 = m.Array3f64 if double else m.Array3f
        Array2 = m.Array2f64 if double else m.Array2f
        shapes = self._shapes
        rows = [s for s in shapes if not s.is_instance and s.mesh.num_vertices]  # width 0 adds no rows
        vertices = concat([Array3(s.vertices) for s in rows])
        normals = uv = None
        if self._face_has_normals is not None:
            normals = concat(
                [
                    Array3(s.mesh.normals) if s.mesh.normals is not None else dr.zeros(Array3, s.mesh.num_vertices)
                    for s in rows
                ]
            )
        if self._face_has_uv is not None:
            uv = concat(
                [Array2(s.mesh.uv) if s.mesh.uv is not None else dr.zeros(Array2, s.mesh.num_vertices) for s in rows]
            )
        transform = normal_transform = None
        if any(s.to_world is not None for s in shapes):
            transform, normal_transform = self._transform_columns(m, Array3, normals is not None)
        return LiveGeometry(
            vertices=vertices,
            faces=self._faces,
            normals=normals,
            face_has_normals=self._face_has_normals,
            uv=uv,
            face_has_uv=self._face_has_uv,
            global_offset=self._global_offset,
            face_row=self._face_row,
            transform=transform,
            normal_transform=normal_transform,
        )

    def _snapshot(self, shape: _Shape, stream: wp.Stream | None) -> None:
        """Copy a mesh's world-space vertices (float32) into the flat point buffer."""
        count = shape.mesh.num_vertices
        if count:
            vertices = dr.detach(shape.vertices)
            to_world = None if shape.to_world is None else dr.detach(shape.to_world)
            if self._centre is None:
                placed = world(vertices, to_world)
            else:  # in float64: only then is x - c as precise as the coordinates
                Array3 = _convert.module(self._backend, False).Array3f64
                placed = world(Array3(vertices), to_world) - Array3(*self._centre)
            points, buffer = _convert.vec3_view(placed, self._device)
            wp.copy(self._points_view, points, dest_offset=shape.vertex_offset, count=count, stream=stream)
            del buffer

    def _snapshot_blas(self, base: int, stream: wp.Stream | None) -> None:
        """Copy an instanced mesh's object-space vertices (float32) into the shared BLAS buffer."""
        shape = self._shapes[base]
        count = shape.mesh.num_vertices
        if count:
            points, buffer = _convert.vec3_view(dr.detach(shape.vertices), self._device)
            wp.copy(self._blas_points_view, points, dest_offset=self._blas[base][0], count=count, stream=stream)
            del buffer

    def _search_centre(self, meshes: list[_Shape]) -> tuple[float, float, float] | None:
        """The search centre (engine/frame.py) of the world boxes of the shapes enabled now (all if none), or ``None``.

        Computed in float64 on the host; kept until the next ``build()``.
        """
        lows, highs, boxes = [], [], {}
        for shape_id, shape in enumerate(self._shapes):
            if not shape.is_instance and shape.mesh.num_vertices:
                v = np.array(dr.detach(shape.vertices), dtype=np.float64).reshape(3, -1).T
                boxes[shape_id] = (v.min(0), v.max(0))
        enabled = any(s.enabled for s in self._shapes)  # shapes disabled at build() do not move the centre
        for shape_id, shape in enumerate(self._shapes):
            if shape.mesh.num_vertices and (shape.enabled or not enabled):
                lo, hi = boxes[shape.base]
                corners = np.array([[(hi if k >> j & 1 else lo)[j] for j in range(3)] for k in range(8)])
                m = self._host_world[shape_id]
                placed = corners @ m[:3, :3].T + m[:3, 3]
                lows.append(placed.min(0))
                highs.append(placed.max(0))
        centre = search_centre(np.min(lows, 0), np.max(highs, 0))
        return None if centre is None else tuple(float(x) for x in centre)

    def _gather_matrix(self, source: dr.ArrayBase, k: int) -> dr.ArrayBase:
        """Entry ``k`` of a batch of matrices, width 1 (differentiable: gradients flow back into ``source``).

        The index is opaque, so kernels that read one such matrix do not differ by ``k``.
        """
        index = dr.opaque(_convert.module(self._backend, False).UInt32, k)
        return dr.gather(type(source), source, index)

    def _read_transforms(self, shape_ids: Sequence[int]) -> None:
        """Read the listed shapes' matrices to the host (float64) and recompose every placement.

        A batch shared by several shapes is read once; width-1 matrices are evaluated
        together first, then read one by one (no kernel per matrix).
        """
        shapes = self._shapes
        ids = [i for i in shape_ids if shapes[i].to_world is not None]
        if ids:
            sources = {}
            for i in ids:
                src = shapes[i].matrix
                sources.setdefault(id(src), src)
            dr.eval(*[dr.detach(src) for src in sources.values()])
            read = {key: host_matrices(src) for key, src in sources.items()}
            for i in ids:
                shape = shapes[i]
                self._host_own[i] = read[id(shape.matrix)][shape.source_index if shape.source is not None else 0]
        world = self._host_own.copy()
        inst = np.flatnonzero(self._is_instance)
        if inst.size:
            world[inst] = self._host_own[inst] @ self._host_own[self._base_of[inst]]
        self._host_world = world
        self._host_generation += 1
        self._columns_cache.clear()

    def _write_instance_transforms(self, stream: wp.Stream | None) -> None:
        """Refresh the engine's float32 ``M_instance @ M_mesh`` (row-major, one per instance) from the host table."""
        plain = _convert.module(self._backend, False)
        rows = self._host_world[self._instance_ids].copy()
        if self._centre is not None:
            rows[:, :3, 3] -= self._centre
        rows = rows.astype(np.float32)
        rows[:, 3] = (0.0, 0.0, 0.0, 1.0)
        count = len(self._instance_ids)
        view, buffer = _convert.mat44_view(plain.Float(rows.reshape(-1)), count, self._device)
        wp.copy(self._instance_to_world_view, view, stream=stream)
        _convert.fence(self._device)
        del buffer

    def _world_columns(self, Array3: type) -> tuple:
        """Every shape's placement as width-S ``Array3`` columns (no gradients), from the host table; cached."""
        key = (Array3, "world")
        cached = self._columns_cache.get(key)
        if cached is None:
            dtype = np.float64 if dr.type_v(Array3) == dr.VarType.Float64 else np.float32
            world = self._host_world
            cached = tuple(
                Array3(*(np.ascontiguousarray(world[:, i, j], dtype=dtype) for i in range(3))) for j in range(4)
            )
            self._columns_cache[key] = cached
        return cached

    def _transform_columns(self, m: ModuleType, Array3: type, with_normals: bool) -> tuple[tuple, tuple | None]:
        """Width-S placement columns (and normal-transform columns) for the differentiable evaluation.

        When no registered matrix has gradients enabled, they come from the host table
        (plain arrays, cached until a transform changes). Otherwise every shape's own
        matrix starts from the host table and the matrices that require gradients are
        written over it: a batch given to ``set_mesh_transform`` with one ``dr.gather``
        for all its shapes, the width-1 matrices together through one
        :class:`StackMatrices` op; instances are then composed with their mesh's matrix
        in one vectorised step. The traced expression does not grow with the number
        of shapes.
        """
        batches: dict[int, tuple[dr.ArrayBase, list[int], list[int]]] = {}
        singles: dict[int, tuple[dr.ArrayBase, list[int]]] = {}
        grad: dict[int, bool] = {}
        for shape_id, shape in enumerate(self._shapes):
            src = shape.matrix
            if src is None:
                continue
            key = id(src)
            if key not in grad:
                grad[key] = _convert.is_ad(src) and dr.grad_enabled(src)
            if not grad[key]:
                continue
            if shape.source is not None:
                group = batches.setdefault(key, (src, [], []))
                group[1].append(shape_id)
                group[2].append(shape.source_index)
            else:
                singles.setdefault(key, (src, []))[1].append(shape_id)
        if not batches and not singles:
            transform = self._world_columns(Array3)
            if not with_normals:
                return transform, None
            key = (Array3, "normal")
            normal = self._columns_cache.get(key)
            if normal is None:
                normal = normal_columns(transform)
                dr.eval(normal)
                self._columns_cache[key] = normal
            return transform, normal

        Float = dr.value_t(Array3)
        dtype = np.float64 if dr.type_v(Array3) == dr.VarType.Float64 else np.float32
        own = self._host_own
        entries = [[Float(np.ascontiguousarray(own[:, i, j], dtype=dtype)) for j in range(4)] for i in range(3)]

        def overwrite(values, index, positions):  # entries[positions] = values[index]
            where = m.UInt(positions)
            index = m.UInt(index)
            for i in range(3):
                for j in range(4):
                    dr.scatter(entries[i][j], Float(dr.gather(type(values[i][j]), values[i][j], index)), where)

        for src, positions, indices in batches.values():
            overwrite(src, indices, positions)
        if singles:
            groups = list(singles.values())
            values = own[[ids[0] for _, ids in groups], :3]
            stacked = dr.custom(StackMatrices, [src for src, _ in groups], values, Float)
            rows = [stacked[4 * i : 4 * i + 4] for i in range(3)]
            slot = [k for k, (_, ids) in enumerate(groups) for _ in ids]
            overwrite(rows, slot, [i for _, ids in groups for i in ids])
        cols = tuple(Array3(entries[0][j], entries[1][j], entries[2][j]) for j in range(4))
        inst = self._is_instance
        if inst.any():
            base = m.UInt(np.where(inst, self._base_of, 0).astype(np.uint32))
            is_instance = m.Bool(inst)
            identity = (Array3(1, 0, 0), Array3(0, 1, 0), Array3(0, 0, 1), Array3(0, 0, 0))
            inner = tuple(dr.select(is_instance, dr.gather(Array3, c, base), e) for c, e in zip(cols, identity))
            cols = compose(cols, inner)
        return cols, (normal_columns(cols) if with_normals else None)

    def _version(self, shape: _Shape, memo: dict[int, tuple[int, ...]] | None) -> tuple[int, ...] | None:
        """The version of the array the shape's matrix is read from (a batch is versioned once per ``memo``)."""
        src = shape.matrix
        if src is None:
            return None
        if memo is None:
            return _convert.version(src)
        key = id(src)
        found = memo.get(key)
        if found is None:
            found = memo[key] = _convert.version(src)
        return found

    def _record_versions(self, shape: _Shape, memo: dict[int, tuple[int, ...]] | None = None) -> None:
        shape.vertex_version = None if shape.is_instance else _convert.version(shape.vertices)
        shape.transform_version = self._version(shape, memo)

    def _vertices_changed(self, shape: _Shape) -> bool:
        return not shape.is_instance and _convert.version(shape.vertices) != shape.vertex_version

    def _changed(self, shape: _Shape, memo: dict[int, tuple[int, ...]] | None = None) -> bool:
        """True if the registered arrays (a batch a matrix came from included) changed in place since the last snapshot."""
        if self._vertices_changed(shape):
            return True
        return shape.to_world is not None and self._version(shape, memo) != shape.transform_version

    def _shape(self, call: str, name: str, shape_id: object) -> _Shape:
        if isinstance(shape_id, bool) or not isinstance(shape_id, int):
            raise TypeError(f"{call}: '{name}' must be an int, got {type(shape_id).__name__}")
        if not 0 <= shape_id < len(self._shapes):
            raise ValueError(f"{call}: '{name}' must be in [0, {len(self._shapes)}), got {shape_id}")
        return self._shapes[shape_id]

    def _require_built(self, call: str) -> None:
        if self._engine is None:
            raise _check.lifecycle(call, "the scene is not built; call build() first")
        if self._structure_changed:
            raise _check.lifecycle(call, "shapes were added after build(); call build() again")

    def _require_ready(self, call: str) -> None:
        self._require_built(call)
        if self._enabled_dirty:
            raise _check.lifecycle(call, "shape enable flags changed; call sync() first")
        memo: dict[int, tuple[int, ...]] = {}
        for shape_id, shape in enumerate(self._shapes):
            if shape_id not in self._pending and not self._changed(shape, memo):
                continue
            kind = "instance" if shape.is_instance else "mesh"
            if shape_id in self._pending:
                raise _check.lifecycle(call, f"{kind} {shape_id} has pending updates; call sync() first")
            if shape.dynamic or shape.is_instance or not self._vertices_changed(shape):
                raise _check.lifecycle(
                    call,
                    f"the vertices or transform of {kind} {shape_id} changed in place since the last sync(); "
                    f"call update_mesh_vertices({shape.base}, vertices) or set_mesh_transform({shape_id}, m), "
                    f"then sync() first",
                )
            raise _check.lifecycle(
                call, f"the vertices of static mesh {shape_id} changed in place; call build() to rebuild"
            )

    def _check_ray(self, call: str, ray: object) -> Ray:
        if not isinstance(ray, Ray):
            raise TypeError(f"{call}: 'ray' must be a rayd.drjit.Ray, got {_not_ours(ray)}")
        _check.same_backend(call, "ray.o", ray.o, self._device, "the scene")
        return ray

    def _check_active(self, call: str, ray: Ray, active: object) -> tuple[int, dr.ArrayBase | None]:
        if active is None:
            return ray.width, None
        active = _check.bool_array(call, "active", active)
        _check.same_backend(call, "active", active, self._device, "the scene")
        n = _check.broadcast(call, [("ray", ray.width), ("active", dr.width(active))])
        return n, active

    def _check_ignore(self, call: str, n: int, ignore: object) -> tuple[int, dr.ArrayBase | int | None]:
        if ignore is None:
            return n, None
        if isinstance(ignore, bool):
            raise TypeError(f"{call}: 'ignore' must be an int or a Dr.Jit Int/UInt array, got bool")
        if isinstance(ignore, int):
            if not -(2**31) <= ignore < 2**31:
                raise ValueError(f"{call}: 'ignore' must be a global_prim_id (or -1), got {ignore}")
            return n, ignore
        ignore = _check.index_flat(call, "ignore", ignore)
        _check.same_backend(call, "ignore", ignore, self._device, "the scene")
        n = _check.broadcast(call, [("ray", n), ("ignore", dr.width(ignore))])
        ignore = dr.detach(ignore)
        # Ids beyond int32 match no face: -1, not a wrapped id (no host synchronisation).
        if dr.type_v(ignore) == dr.VarType.Int64:
            ignore = dr.select((ignore >= 2**31) | (ignore < -1), -1, ignore)
        elif dr.type_v(ignore) == dr.VarType.UInt64:
            ignore = dr.select(ignore >= 2**31, 2**32 - 1, ignore)  # as int32: -1
        return n, ignore

    def __repr__(self) -> str:
        state = "ready" if self.is_ready() else ("built" if self._engine is not None else "not built")
        return f"rayd.drjit.Scene(shapes={self.num_shapes}, device={self._device}, {state})"


def _check_flags(call: str, flags: object) -> RayFlags:
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise TypeError(f"{call}: 'flags' must be a rayd.RayFlags, got {type(flags).__name__}")
    if flags & ~int(RayFlags.All):
        raise ValueError(f"{call}: 'flags' has unknown bits {int(flags) & ~int(RayFlags.All):#x}")
    return RayFlags(flags)
