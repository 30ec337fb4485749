"""`Scene`: meshes and instances, their acceleration structures, lifecycle and queries."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import torch

from rayd import engine
from rayd.flags import FIELD_FLAGS, RayFlags
from rayd.torch import _check, _convert, _intersect_fused
from rayd.torch._geometry import LiveTensors, ShapeTable, gather, ids
from rayd.torch._intersect import evaluate
from rayd.torch._scene_edges import EdgeQueries
from rayd.torch._transforms import TransformTable
from rayd.torch.edges import SceneEdges
from rayd.torch.intersection import Intersection
from rayd.torch.mesh import Mesh, check_transform, check_transforms
from rayd.torch.ray import Ray

_VERSION = attrgetter("_version")

#: ``visible()`` tests the open segment interior ``s in (EPSILON, 1 - EPSILON)``, with
#: ``s`` the parameter along ``start -> end``: relative to the segment length.
VISIBILITY_EPSILON = 1e-4


@dataclass
class _Shape:
    """A mesh or an instance as the scene holds it: what is registered now and what was snapshotted.

    For a mesh, ``base`` is its own id; for an instance, the id of its mesh, and
    ``to_world`` is the instance's own matrix (its placement is ``to_world @ M_mesh``).
    """

    mesh: Mesh
    base: int
    dynamic: bool
    vertices: torch.Tensor
    to_world: torch.Tensor | None
    is_instance: bool = False
    enabled: bool = True
    vertex_offset: int = 0  # first row in the flat world-space buffer (meshes)
    face_offset: int = 0  # first global_prim_id
    vertex_version: int | None = None
    transform_version: int | None = None
    faces_version: int | None = None  # of mesh.faces at build() (its snapshot)
    source: torch.Tensor | None = None  # a batched set_mesh_transform's (K, 4, 4) tensor; to_world = source[k]
    source_index: int = 0


def _plain_state(method):
    """Run a method that makes scene state outside ``torch.func`` transforms.

    Tensors a scene keeps (tables, buffers, caches) must be plain: made inside a
    transform they would be wrapper tensors that outlive it and break later calls.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with _convert.outside_transforms():
            return method(self, *args, **kwargs)

    return wrapper


def _type_name(value: object) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__.startswith("rayd") else cls.__name__


def _apply(m: torch.Tensor | None, points: torch.Tensor) -> torch.Tensor:
    """``m @ [p, 1]`` for rows ``p`` of ``points`` (identity if ``m`` is ``None``)."""
    if m is None:
        return points
    m = m.to(points.dtype)
    return points @ m[:3, :3].transpose(0, 1) + m[:3, 3]


class Scene(EdgeQueries):
    """A set of triangle meshes and instances with BVHs over them, queried by rays.

    Lifecycle: ``Scene()`` -> ``add_mesh(...)`` / ``add_instance(...)`` ... ->
    ``build()`` -> queries. A mesh added with ``dynamic=True`` may move:
    ``update_mesh_vertices(mesh_id, v)`` (or an in-place change of its registered
    vertex tensor) marks the scene pending, and ``sync()`` refits. Transforms
    (``set_mesh_transform``) and ``set_shape_enabled`` also take effect at ``sync()``.
    Queries before ``build()``, after adding shapes without a new ``build()``, or
    while updates are pending raise ``RuntimeError`` instead of answering from a
    stale BVH.

    Acceleration: one BVH (SAH) over the world-space triangles of all meshes; when
    instances exist, a top-level BVH over instance boxes whose leaves share one
    object-space BVH per instanced mesh. Updating an instance transform refits only
    the top level.

    A scene lives on the device of its meshes; work is launched on that device's
    current torch stream, without host synchronisation in queries.
    """

    def __init__(self) -> None:
        self._shapes: list[_Shape] = []
        self._device: torch.device | None = None
        self._accel: engine.SceneAccel | None = None
        self._structure_changed = False
        self._pending: set[int] = set()
        self._enabled_dirty = False
        self._edges: SceneEdges | None = None
        self._transforms_pending = False  # set_mesh_transform since the last sync()
        self._vertices_replaced = False  # update_mesh_vertices since the last sync()

    # ------------------------------------------------------------------ contents
    def add_mesh(self, mesh: Mesh, dynamic: bool = False) -> int:
        """Add a mesh; returns its shape id (meshes and instances count 0, 1, 2, ... together).

        Args:
            mesh: a :class:`rayd.torch.Mesh`.
            dynamic: ``True`` if its vertices will change (``update_mesh_vertices``).

        Returns:
            The shape id, which hits report as ``shape_id``.

        Raises:
            TypeError: ``mesh`` is not a ``rayd.torch.Mesh`` (e.g. a rayd.drjit one).
            ValueError: ``mesh`` is on another device than the scene's shapes.
        """
        call = "rayd.torch.Scene.add_mesh()"
        if not isinstance(mesh, Mesh):
            raise TypeError(f"{call}: 'mesh' must be a rayd.torch.Mesh, got {_type_name(mesh)}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"{call}: 'dynamic' must be a bool, got {type(dynamic).__name__}")
        if self._device is None:
            self._device = torch.device(_convert.device_name(mesh.device))
        _check.same_device(call, "mesh", mesh.vertices, self._device, "the scene")
        shape_id = len(self._shapes)
        self._shapes.append(_Shape(mesh, shape_id, dynamic, mesh.vertices, mesh.to_world))
        self._structure_changed = self._accel is not None
        return shape_id

    def add_instance(self, mesh_id: int, to_world: torch.Tensor) -> int:
        """Place another copy of a mesh, sharing its bottom-level BVH; returns its shape id.

        Args:
            mesh_id: the id ``add_mesh`` returned (the mesh stays present itself).
            to_world: (4, 4) float32/float64, column-vector convention; the instance's
                placement is ``to_world @ M_mesh``. Gradients flow into it.

        Returns:
            The shape id; hits on the instance report it as ``shape_id`` and faces of
            the mesh as ``prim_id``.

        Raises:
            TypeError, ValueError: wrong id type/range (or an instance id), or a bad matrix.
        """
        call = "rayd.torch.Scene.add_instance()"
        base = self._shape(call, "mesh_id", mesh_id)
        if base.is_instance:
            raise ValueError(f"{call}: 'mesh_id' {mesh_id} is an instance; pass the id add_mesh returned")
        to_world = check_transform(call, "to_world", to_world, self._device)
        shape_id = len(self._shapes)
        self._shapes.append(_Shape(base.mesh, mesh_id, base.dynamic, base.vertices, to_world, is_instance=True))
        self._structure_changed = self._accel is not None
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
    def device(self) -> torch.device | None:
        """The scene's device (that of its meshes), ``None`` while it is empty."""
        return self._device

    # ------------------------------------------------------------------ lifecycle
    @_plain_state
    def build(self) -> None:
        """Snapshot every shape and build the acceleration structures.

        Raises:
            ValueError: the scene has no triangles, or a mesh has non-finite vertices.
        """
        call = "rayd.torch.Scene.build()"
        meshes = [s for s in self._shapes if not s.is_instance]
        if not meshes or sum(s.mesh.num_faces for s in meshes) == 0:
            raise ValueError(f"{call}: the scene is empty; add a mesh with at least one face first")
        for shape_id, shape in enumerate(self._shapes):
            if not shape.is_instance:
                _check.finite(call, f"vertices of mesh {shape_id}", _convert.primal(shape.vertices))
                # Faces may have been changed in place since Mesh() checked them: the
                # snapshot taken here is what the engine indexes with, so check it again.
                _check.face_indices(call, f"faces of mesh {shape_id}", _convert.primal(shape.mesh.faces),
                                    shape.mesh.num_vertices)
        device = self._device
        stream = _convert.current_stream(device)

        # Numbering: global_prim_id ranges in shape order; meshes also own rows of the
        # flat world-space vertex buffer and of the concatenated face table.
        mesh_index: dict[int, int] = {}
        vertex_offset = face_row = global_offset = 0
        faces, flat_global, flat_shape, has_normals, has_uv, face_rows = [], [], [], [], [], {}
        for shape_id, shape in enumerate(self._shapes):
            shape.face_offset = global_offset
            global_offset += shape.mesh.num_faces
            if shape.is_instance:
                continue
            mesh = shape.mesh
            mesh_index[shape_id] = len(mesh_index)
            shape.vertex_offset = vertex_offset
            face_rows[shape_id] = face_row
            faces.append(_convert.primal(mesh.faces).long() + vertex_offset)
            flat_global.append(torch.arange(mesh.num_faces, device=device) + shape.face_offset)
            flat_shape.append(torch.full((mesh.num_faces,), shape_id, dtype=torch.int32, device=device))
            has_normals.append(torch.full((mesh.num_faces,), mesh.normals is not None, device=device))
            has_uv.append(torch.full((mesh.num_faces,), mesh.uv is not None, device=device))
            vertex_offset += mesh.num_vertices
            face_row += mesh.num_faces
        faces = torch.cat(faces).contiguous()
        any_normals = any(s.mesh.normals is not None for s in meshes)
        any_uv = any(s.mesh.uv is not None for s in meshes)
        self._table = ShapeTable(
            global_offset=torch.tensor([s.face_offset for s in self._shapes], dtype=torch.int64, device=device),
            face_row=torch.tensor([face_rows[s.base] for s in self._shapes], dtype=torch.int64, device=device),
            faces=faces,
            face_has_normals=torch.cat(has_normals) if any_normals else None,
            face_has_uv=torch.cat(has_uv) if any_uv else None,
            shape_mesh=torch.tensor([mesh_index[s.base] for s in self._shapes], dtype=torch.int64, device=device),
            instance_rows=torch.tensor(
                [i for i, s in enumerate(self._shapes) if s.is_instance], dtype=torch.int64, device=device
            ),
        )
        self._mesh_index = mesh_index
        self._mesh_shapes = meshes
        self._transforms = TransformTable(self._shapes, device)

        # Engine side: the flat world-space BVH over all meshes.
        self._indices = faces.to(torch.int32).reshape(-1).contiguous()
        self._points = torch.empty((vertex_offset, 3), dtype=torch.float32, device=device)
        for shape in meshes:
            self._snapshot_flat(shape)
        self._flat_global = torch.cat(flat_global).to(torch.int32).contiguous()
        self._flat_shape = torch.cat(flat_shape).contiguous()
        self._shape_enabled = torch.tensor(
            [1 if s.enabled else 0 for s in self._shapes], dtype=torch.uint8, device=device
        )
        flat = engine.TriangleScene(_convert.vec3_view(self._points), _convert.scalar_view(self._indices), stream)

        # Instances: one object-space BVH per instanced mesh, a top level over instances.
        # Instances of a mesh without faces have nothing to hit: they get no BLAS.
        instances = [i for i, s in enumerate(self._shapes) if s.is_instance and s.mesh.num_faces]
        self._instance_ids = instances
        level = inst_shape = inst_global = None
        self._blas: dict[int, tuple[int, engine.TriangleScene]] = {}
        if instances:
            # Object-space copies of every instanced mesh, in one buffer the BLASes share.
            bases = sorted({self._shapes[i].base for i in instances})
            points, indices, vertex_base, face_base = [], [], 0, 0
            offsets = {}
            for base in bases:
                mesh_shape = self._shapes[base]
                offsets[base] = (vertex_base, face_base)
                points.append(_convert.primal(mesh_shape.vertices).to(torch.float32))
                indices.append(_convert.primal(mesh_shape.mesh.faces).to(torch.int32) + vertex_base)
                vertex_base += mesh_shape.mesh.num_vertices
                face_base += mesh_shape.mesh.num_faces
            self._blas_points = torch.cat(points).contiguous()
            self._blas_indices = torch.cat(indices).reshape(-1).contiguous()
            points_view = _convert.vec3_view(self._blas_points)
            indices_view = _convert.scalar_view(self._blas_indices)
            slots: dict[int, int] = {}
            blas = []
            for base in bases:
                slots[base] = len(blas)
                tri = engine.TriangleScene(
                    points_view,
                    indices_view,
                    stream,
                    num_triangles=self._shapes[base].mesh.num_faces,
                    face_base=offsets[base][1],
                )
                self._blas[base] = (offsets[base][0], tri)
                blas.append(tri)
            self._instance_to_world = torch.empty((len(instances), 4, 4), dtype=torch.float32, device=device)
            self._instance_shape = torch.tensor(instances, dtype=torch.int32, device=device)
            self._write_instance_transforms()
            self._instance_global = torch.tensor(
                [self._shapes[i].face_offset for i in instances], dtype=torch.int32, device=device
            )
            level = engine.InstanceLevel(
                blas,
                [slots[self._shapes[i].base] for i in instances],
                wp_mat44_view(_convert.primal(self._instance_to_world)),
                stream,
            )
            inst_shape = _convert.scalar_view(self._instance_shape)
            inst_global = _convert.scalar_view(self._instance_global)
        self._accel = engine.SceneAccel(
            flat.device,
            flat,
            _convert.scalar_view(self._flat_global),
            _convert.scalar_view(self._flat_shape),
            _convert.scalar_view(self._shape_enabled),
            level,
            inst_shape,
            inst_global,
        )
        self._accel.set_all_enabled(all(s.enabled for s in self._shapes))
        self._accel.set_flat_enabled(any(s.enabled for s in self._shapes if not s.is_instance))
        for shape in self._shapes:
            self._record_versions(shape)
            shape.faces_version = _convert.version(shape.mesh.faces)
        self._watch_versions(rebuild=True)
        self._transforms_pending = self._vertices_replaced = False
        self._no_ignore = torch.full((1,), -1, dtype=torch.int32, device=device)
        # Plain meshes (no instances, normals or uv) may use the fused evaluation kernels.
        self._plain = not instances and not any_normals and not any_uv
        self._faces = faces  # flat rows: mesh faces offset into the flat vertex buffer
        self._edges = SceneEdges(self._shapes, device)
        self._structure_changed = False
        self._pending.clear()
        self._enabled_dirty = False

    def update_mesh_vertices(self, mesh_id: int, vertices: torch.Tensor) -> None:
        """Register new vertex positions for a dynamic mesh; ``sync()`` refits.

        Args:
            mesh_id: the id ``add_mesh`` returned.
            vertices: (V, 3) float32/float64 with the mesh's V, on the scene's device.
                This tensor (not a copy) becomes the one gradients flow into; it may
                be the same tensor as before, e.g. a parameter just stepped in place.

        Raises:
            TypeError: ``mesh_id`` is not an int, or ``vertices`` not a float tensor.
            ValueError: ``mesh_id`` out of range or an instance, or a wrong shape or device.
            RuntimeError: the mesh was added with ``dynamic=False``.
        """
        call = "rayd.torch.Scene.update_mesh_vertices()"
        shape = self._shape(call, "mesh_id", mesh_id)
        if shape.is_instance:
            raise ValueError(f"{call}: 'mesh_id' {mesh_id} is an instance; update the mesh it instances")
        if not shape.dynamic:
            raise RuntimeError(
                f"{call}: mesh {mesh_id} was added with dynamic=False; add it with dynamic=True to move it, "
                f"or call build() after changing it"
            )
        vertices = _check.float_tensor(call, "vertices", vertices, last=3, ndim=2)
        if vertices.shape[0] != shape.mesh.num_vertices:
            raise ValueError(
                f"{call}: 'vertices' must have shape ({shape.mesh.num_vertices}, 3) like mesh {mesh_id}, "
                f"got {tuple(vertices.shape)}"
            )
        _check.same_device(call, "vertices", vertices, self._device, "the scene")
        for other in self._shapes:
            if other.base == mesh_id:
                other.vertices = vertices
        self._pending.add(mesh_id)
        self._vertices_replaced = True

    def set_mesh_transform(
        self, shape_id: int | Sequence[int] | torch.Tensor, to_world: torch.Tensor
    ) -> None:
        """Set the object-to-world matrix of a mesh or an instance; takes effect at ``sync()``.

        Args:
            shape_id: a mesh or instance id. For a mesh this is ``M_mesh`` (its
                instances follow, as ``M_instance @ M_mesh``); for an instance its own
                matrix. Any shape may move, dynamic or not. Also a sequence (or 1-D
                int tensor) of K distinct ids, to set K matrices in one call; K = 0
                (``[]`` with a (0, 4, 4) tensor) is a no-op.
            to_world: (4, 4) float32/float64 acting on column vectors; (K, 4, 4) with
                K ids (shape ``shape_id[k]`` gets ``to_world[k]``, a view). Gradients
                flow into this tensor. Each call reads the matrices once to check them
                (one host synchronisation), so on CUDA prefer one call with K ids over
                K calls — or write new values in place into the tensor the shapes
                hold and call ``sync()``.

        Raises:
            TypeError, ValueError: wrong id type/range, repeated ids, dtype, shape or
                device; non-finite or singular matrices.
        """
        call = "rayd.torch.Scene.set_mesh_transform()"
        if isinstance(shape_id, int) and not isinstance(shape_id, bool):
            shape = self._shape(call, "shape_id", shape_id)
            shape.to_world = check_transform(call, "to_world", to_world, self._device)
            shape.source = None
            self._pending.add(shape_id)
            self._transforms_pending = True
            return
        id_list = self._id_list(call, "shape_id", shape_id)
        matrices = check_transforms(call, "to_world", to_world, len(id_list), self._device)
        for k, one in enumerate(id_list):
            shape = self._shapes[one]
            shape.to_world, shape.source, shape.source_index = matrices[k], matrices, k
        self._pending.update(id_list)
        self._transforms_pending |= bool(id_list)

    def _id_list(self, call: str, name: str, value: object) -> list[int]:
        """Distinct, valid shape ids from a sequence or a 1-D integer tensor."""
        if isinstance(value, torch.Tensor):
            if value.dim() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
                raise TypeError(f"{call}: '{name}' must be an int, a sequence of ints or a 1-D integer tensor, got "
                                f"a {value.dtype} tensor of shape {tuple(value.shape)}")
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{call}: '{name}' must be an int or a sequence of ints, got {type(value).__name__}")
        for one in value:
            self._shape(call, name, one)
        if len(set(value)) != len(value):
            raise ValueError(f"{call}: '{name}' repeats an id")
        return list(value)

    def set_shape_enabled(self, shape_id: int, flag: bool) -> None:
        """Enable or disable a mesh or instance for all queries; takes effect at ``sync()`` (no rebuild).

        Raises:
            TypeError, ValueError: wrong id type/range, or ``flag`` not a bool.
        """
        call = "rayd.torch.Scene.set_shape_enabled()"
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
        if self._accel is not None and self._versions_unchanged():
            return False
        # What sync() applies: in-place changes of any shape's registered transform, and of
        # a dynamic mesh's vertices (a static mesh's vertices changed in place need build()).
        return any(self._transform_changed(s) or (s.dynamic and self._vertices_changed(s)) for s in self._shapes)

    def is_ready(self) -> bool:
        """True if queries can run now: built, nothing added since, nothing pending or stale."""
        if self._accel is None or self._structure_changed or self._pending or self._enabled_dirty:
            return False
        if any(_convert.version(s.mesh.faces) != s.faces_version for s in self._mesh_shapes):
            return False
        return self._versions_unchanged() or not any(self._changed(s) for s in self._shapes)

    @_plain_state
    def sync(self) -> None:
        """Apply pending updates: refit moved meshes, refit the top level, apply enable flags.

        Raises:
            RuntimeError: before ``build()``, after shapes were added without a new
                ``build()``, or if a static mesh changed in place (needs ``build()``).
            ValueError: an updated mesh has non-finite vertices.
        """
        call = "rayd.torch.Scene.sync()"
        self._require_built(call)
        for shape_id, shape in enumerate(self._shapes):
            if not shape.dynamic and not shape.is_instance and shape_id not in self._pending:
                if _convert.version(shape.vertices) != shape.vertex_version:
                    raise _check.lifecycle(
                        call, f"the vertices of static mesh {shape_id} changed in place; call build() to rebuild"
                    )
        todo = set(self._pending)
        if not self._versions_unchanged():
            todo |= {i for i, s in enumerate(self._shapes) if self._changed(s)}
        if self._transforms_pending or any(self._transform_changed(self._shapes[i]) for i in todo):
            self._transforms.refresh()  # the composed table (O(S) here, so that queries are not)
        moved_meshes = {i for i in todo if not self._shapes[i].is_instance}
        for shape_id in moved_meshes:
            _check.finite(call, f"vertices of mesh {shape_id}", _convert.primal(self._shapes[shape_id].vertices))
        stream = _convert.current_stream(self._device)
        for shape_id in moved_meshes:
            self._snapshot_flat(self._shapes[shape_id])
        if moved_meshes:
            self._accel.flat.refit(stream)
        if self._accel.instances is not None:
            blas_moved = False
            for base in moved_meshes & set(self._blas):
                vertex_base, tri = self._blas[base]
                count = self._shapes[base].mesh.num_vertices
                self._blas_points[vertex_base : vertex_base + count].copy_(_convert.primal(self._shapes[base].vertices))
                tri.refit(stream)
                blas_moved = True
            instance_moved = any(i in todo or self._shapes[i].base in todo for i in self._instance_ids)
            if blas_moved or instance_moved:
                self._write_instance_transforms()
                self._accel.instances.update(blas_moved, stream)
        if self._enabled_dirty:
            self._shape_enabled.copy_(
                torch.tensor([1 if s.enabled else 0 for s in self._shapes], dtype=torch.uint8)
            )
            self._accel.set_all_enabled(all(s.enabled for s in self._shapes))
            self._accel.set_flat_enabled(any(s.enabled for s in self._shapes if not s.is_instance))
            self._enabled_dirty = False
        self._edges.sync(stream, moved=bool(todo))
        for shape_id in todo:
            self._record_versions(self._shapes[shape_id])
        for shape in self._shapes:
            if shape.is_instance and shape.base in todo:
                self._record_versions(shape)
        self._watch_versions(rebuild=self._transforms_pending or self._vertices_replaced)
        self._transforms_pending = self._vertices_replaced = False
        self._pending.clear()

    # ------------------------------------------------------------------ queries
    def intersect(
        self,
        ray: Ray,
        active: torch.Tensor | None = None,
        flags: RayFlags = RayFlags.All,
        *,
        ignore: torch.Tensor | int | None = None,
    ) -> Intersection:
        """Closest hit of each ray, differentiable for the fixed winning triangle.

        Args:
            ray: :class:`Ray` with ``o``, ``d`` of shape (..., 3), float32 or float64,
                on the scene's device.
            active: optional bool tensor broadcastable to ``...``; inactive rays miss.
            flags: :class:`RayFlags` selecting the fields to compute.
            ignore: optional ``global_prim_id`` per ray (int tensor broadcastable to
                ``...``, or an int; -1 for none) whose face the ray skips, e.g. the
                face a reflected ray leaves.

        Returns:
            :class:`Intersection` with fields of shape ``...``. Concretely, for the
            first triangle hit with ``tmin < t < tmax``, ``t, u, v`` solve
            ``o + t d = (1 - u - v) v0 + u v1 + v v2``, ``p = o + t d``,
            ``barycentric = (1 - u - v, u, v)``. Misses: ``t = inf``, ids -1, zeros.

        Units:
            ``t`` in multiples of ``|d|``; ``p`` in world units.

        Gradients:
            ``t, p, n, geo_n, barycentric, uv`` are differentiable (reverse and forward
            mode) with respect to the meshes' vertex tensors, normals, uv and
            transforms (mesh and instance), and to ``ray.o`` and ``ray.d``. The choice
            of triangle is held fixed; misses get exactly zero gradient. Gradients are
            accumulated with ``index_put_(accumulate=True)``, which is bitwise
            deterministic under ``torch.use_deterministic_algorithms(True)`` (on CUDA
            otherwise atomic: faster, run-to-run differences in the last bits).

        Raises:
            TypeError: ``ray`` is not a ``rayd.torch.Ray``, ``active`` is not bool,
                ``ignore`` is not an integer, ``flags`` is not a ``RayFlags``.
            ValueError: inputs on another device, or batch shapes that do not broadcast.
            RuntimeError: the scene is not built, or has pending/unsynced changes.

        References:
            Woop, Benthin, Wald 2013, "Watertight Ray/Triangle Intersection", JCGT 2(1)
            (the search); Moeller, Trumbore 1997, JGT 2(1) (the evaluation).
        """
        call = "rayd.torch.Scene.intersect()"
        flags = _check_flags(call, flags)
        batch, n, global_prim_id = self._trace(call, ray, active, ignore, any_hit=False)
        meshes = [s.vertices for s in self._mesh_shapes]
        if self._plain and not self._transforms.any and _intersect_fused.usable([ray.o, ray.d, *meshes]):
            vertices = meshes[0] if len(meshes) == 1 else torch.cat(meshes)
            fields = _intersect_fused.evaluate_fused(ray.o, ray.d, batch, global_prim_id, vertices, self._indices)
            fields["shape_id"], fields["prim_id"] = ids(self._table, global_prim_id)
            fields["global_prim_id"] = global_prim_id
            fields = {k: v for k, v in fields.items() if k not in _unrequested(flags)}
        else:
            dtype = self._output_dtype(ray)
            o = ray.o.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
            d = ray.d.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
            geometry = gather(self._table, self._live(dtype), global_prim_id)
            fields = evaluate(o, d, global_prim_id, geometry, flags)
        fields = {k: v.reshape(tuple(batch) + v.shape[1:]) for k, v in fields.items()}
        return Intersection(flags, **fields)

    def shadow_test(
        self, ray: Ray, active: torch.Tensor | None = None, *, ignore: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        """Any-hit occlusion test: is anything hit with ``tmin < t < tmax``?

        Args:
            ray: :class:`Ray` with ``o``, ``d`` of shape (..., 3) on the scene's device.
            active: optional bool tensor broadcastable to ``...``; inactive rays report False.
            ignore: optional ``global_prim_id`` per ray to skip (-1 for none).

        Returns:
            (...) bool, True where the ray is occluded. Not differentiable. The
            traversal stops at the first blocker found (any hit).

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`intersect`.
        """
        call = "rayd.torch.Scene.shadow_test()"
        batch, _, blocker = self._trace(call, ray, active, ignore, any_hit=True)
        return (blocker >= 0).reshape(batch)

    def visible(
        self,
        start: torch.Tensor,
        end: torch.Tensor,
        active: torch.Tensor | None = None,
        *,
        ignore: torch.Tensor | int | None = None,
    ) -> torch.Tensor:
        """Line of sight: is the open segment between ``start`` and ``end`` unblocked?

        Args:
            start: (..., 3) float32/float64 points on the scene's device.
            end: (..., 3) float32/float64, broadcastable against ``start``.
            active: optional bool tensor broadcastable to ``...``; inactive pairs report False.
            ignore: optional ``global_prim_id`` per pair to skip (-1 for none).

        Returns:
            (...) bool, True where no triangle crosses ``start + s (end - start)`` for
            ``s in (VISIBILITY_EPSILON, 1 - VISIBILITY_EPSILON)`` (``1e-4``, relative
            to the segment length, so endpoints lying on surfaces do not block
            themselves). Symmetric in its endpoints. Not differentiable. Degenerate
            (zero-length or non-finite) segments report False.

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`intersect`.
        """
        call = "rayd.torch.Scene.visible()"
        start = _check.float_tensor(call, "start", start, last=3)
        end = _check.float_tensor(call, "end", end, last=3)
        _check.same_device(call, "start", start, self._device or start.device, "the scene")
        _check.same_device(call, "end", end, start.device, "'start'")
        _check.broadcast(call, [("start", start.shape[:-1]), ("end", end.shape[:-1])])
        ray = Ray(start, end - start, 1.0 - VISIBILITY_EPSILON, tmin=VISIBILITY_EPSILON)
        batch, n, blocker = self._trace(call, ray, active, ignore, any_hit=True)
        result = (blocker < 0).reshape(batch) & _wellformed(ray, batch)
        if active is not None:
            result = result & _convert.primal(active).expand(batch)
        return result

    # ------------------------------------------------------------------ internals
    def _trace(
        self, call: str, ray: object, active: object, ignore: object, any_hit: bool
    ) -> tuple[torch.Size, int, torch.Tensor]:
        """Validate, then run the engine search; returns (batch shape, N, (N,) int32 winners)."""
        self._require_ready(call)
        ray = self._check_ray(call, ray)
        batch, active = self._check_active(call, ray, active)
        batch, ignore = self._check_ignore(call, batch, ignore)
        n = batch.numel()
        out = torch.empty(n, dtype=torch.int32, device=self._device)
        if n == 0:
            return batch, n, out
        device = self._device
        if active is None:
            flag = torch.ones(1, dtype=torch.uint8, device=device)
        else:
            flag = _convert.primal(active)
            flag = (flag.reshape(1) if flag.numel() == 1 else flag.expand(batch).reshape(-1)).to(torch.uint8)
            flag = flag.contiguous()
        if ignore is None:
            skip = self._no_ignore
        else:
            skip = ignore.reshape(1) if ignore.numel() == 1 else ignore.expand(batch).reshape(-1)
            skip = skip.to(torch.int32).contiguous()
        rays = engine.RayBatch(
            _convert.vec3_view(_convert.flat_float32(ray.o, batch, 3)),
            _convert.vec3_view(_convert.flat_float32(ray.d, batch, 3)),
            _convert.scalar_view(_bound(ray.tmin, batch, device)),
            _convert.scalar_view(_bound(ray.tmax, batch, device)),
            _convert.scalar_view(flag),
            _convert.scalar_view(skip),
        )
        engine.search(self._accel, rays, _convert.scalar_view(out), any_hit, _convert.current_stream(device))
        return batch, n, out

    def _output_dtype(self, ray: Ray) -> torch.dtype:
        dtype = torch.promote_types(ray.o.dtype, ray.d.dtype)
        for shape in self._mesh_shapes:  # instances share their mesh's vertices
            dtype = torch.promote_types(dtype, shape.vertices.dtype)
        return dtype

    def _live(self, dtype: torch.dtype) -> LiveTensors:
        """The registered tensors (differentiable), cast to ``dtype``."""
        device = self._device
        meshes = self._mesh_shapes
        vertices = [s.vertices.to(dtype) for s in meshes]
        normals = uv = None
        if self._table.face_has_normals is not None:
            normals = torch.cat(
                [
                    s.mesh.normals.to(dtype)
                    if s.mesh.normals is not None
                    else torch.zeros((s.mesh.num_vertices, 3), dtype=dtype, device=device)
                    for s in meshes
                ]
            )
        if self._table.face_has_uv is not None:
            uv = torch.cat(
                [
                    s.mesh.uv.to(dtype)
                    if s.mesh.uv is not None
                    else torch.zeros((s.mesh.num_vertices, 2), dtype=dtype, device=device)
                    for s in meshes
                ]
            )
        # float64: corners are placed in float64 (_geometry.gather); composed at sync().
        to_world, normal_matrix = self._transforms.live(normals=normals is not None)
        return LiveTensors(
            vertices=vertices[0] if len(vertices) == 1 else torch.cat(vertices),
            normals=normals,
            uv=uv,
            to_world=to_world,
            normal_matrix=normal_matrix,
        )

    def _write_instance_transforms(self) -> None:
        """Refresh the engine's float32 ``M_instance @ M_mesh`` rows from the composed table."""
        self._instance_to_world.copy_(self._transforms.plain[self._instance_shape.long()])

    def _snapshot_flat(self, shape: _Shape) -> None:
        """Copy a mesh's world-space vertices (float32) into the flat buffer."""
        vertices = _convert.primal(shape.vertices)
        to_world = None if shape.to_world is None else _convert.primal(shape.to_world)
        world = _apply(to_world, vertices.to(torch.promote_types(vertices.dtype, torch.float32)))
        self._points[shape.vertex_offset : shape.vertex_offset + shape.mesh.num_vertices].copy_(world)

    def _record_versions(self, shape: _Shape) -> None:
        shape.vertex_version = _convert.version(shape.vertices)
        shape.transform_version = None if shape.to_world is None else _convert.version(shape.to_world)

    def _watch_versions(self, rebuild: bool) -> None:
        """Record the registered tensors (unique, unwrapped) whose version counters queries check.

        ``rebuild``: the set of registered tensors may have changed (else only the sum is re-read).
        """
        if not rebuild:
            self._watched_sum = sum(map(_VERSION, self._watched))
            return
        seen: dict[int, torch.Tensor] = {}
        for shape in self._shapes:
            for tensor in (shape.vertices, shape.source if shape.source is not None else shape.to_world):
                if tensor is not None:
                    plain = _convert.unwrapped(tensor)
                    if _convert.version(plain) is not None:
                        seen.setdefault(id(plain), plain)
        self._watched = list(seen.values())
        self._watched_sum = sum(map(_VERSION, self._watched))

    def _versions_unchanged(self) -> bool:
        """True if no watched tensor was written in place since the last snapshot.

        One pass at C speed over the unique tensors (version counters only grow, so
        their sum is unchanged exactly when each one is): no per-shape Python work.
        """
        return sum(map(_VERSION, self._watched)) == self._watched_sum

    def _changed(self, shape: _Shape) -> bool:
        """True if the registered tensors changed in place since the last snapshot."""
        return self._vertices_changed(shape) or self._transform_changed(shape)

    def _vertices_changed(self, shape: _Shape) -> bool:
        return _convert.version(shape.vertices) != shape.vertex_version

    def _transform_changed(self, shape: _Shape) -> bool:
        """True if the shape's registered ``to_world`` was written in place since the last snapshot."""
        return shape.to_world is not None and _convert.version(shape.to_world) != shape.transform_version

    def _require_same_faces(self, call: str) -> None:
        """``RuntimeError`` if a mesh's faces changed in place since ``build()`` (only a build re-reads them)."""
        for shape in self._mesh_shapes:  # a mesh's base is its own shape id
            if _convert.version(shape.mesh.faces) != shape.faces_version:
                raise _check.lifecycle(
                    call, f"the faces of mesh {shape.base} changed in place since build(); call build() to rebuild"
                )

    def _shape(self, call: str, name: str, shape_id: object) -> _Shape:
        if isinstance(shape_id, bool) or not isinstance(shape_id, int):
            raise TypeError(f"{call}: '{name}' must be an int, got {type(shape_id).__name__}")
        if not 0 <= shape_id < len(self._shapes):
            raise ValueError(f"{call}: '{name}' must be in [0, {len(self._shapes)}), got {shape_id}")
        return self._shapes[shape_id]

    def _require_built(self, call: str) -> None:
        if self._accel is None:
            raise _check.lifecycle(call, "the scene is not built; call build() first")
        if self._structure_changed:
            raise _check.lifecycle(call, "shapes were added after build(); call build() again")
        self._require_same_faces(call)

    def _require_ready(self, call: str) -> None:
        self._require_built(call)
        if not self._pending and not self._enabled_dirty and self._versions_unchanged():
            return
        if self._enabled_dirty:
            raise _check.lifecycle(call, "shape enable flags changed; call sync() first")
        for shape_id, shape in enumerate(self._shapes):
            kind = "instance" if shape.is_instance else "mesh"
            if shape_id in self._pending:
                raise _check.lifecycle(call, f"{kind} {shape_id} has pending updates; call sync() first")
            if self._vertices_changed(shape) and not shape.dynamic and not shape.is_instance:
                raise _check.lifecycle(
                    call, f"the vertices of static mesh {shape_id} changed in place; call build() to rebuild"
                )
            # The rest is what has_pending_updates() reports and sync() applies.
            if self._vertices_changed(shape):
                raise _check.lifecycle(
                    call, f"the vertices of {kind} {shape_id} changed in place since the last sync(); call sync() first"
                )
            if self._transform_changed(shape):
                raise _check.lifecycle(
                    call, f"the transform of {kind} {shape_id} changed in place since the last sync(); call sync() first"
                )

    def _check_ray(self, call: str, ray: object) -> Ray:
        if not isinstance(ray, Ray):
            raise TypeError(f"{call}: 'ray' must be a rayd.torch.Ray, got {_type_name(ray)}")
        _check.same_device(call, "ray.o", ray.o, self._device, "the scene")
        return ray

    def _check_active(self, call: str, ray: Ray, active: object) -> tuple[torch.Size, torch.Tensor | None]:
        if active is None:
            return ray.shape, None
        active = _check.tensor(call, "active", active)
        if active.dtype != torch.bool:
            raise TypeError(f"{call}: 'active' must have dtype bool, got {active.dtype}")
        _check.same_device(call, "active", active, self._device, "the scene")
        batch = _check.broadcast(call, [("ray", ray.shape), ("active", active.shape)])
        return batch, active

    def _check_ignore(self, call: str, batch: torch.Size, ignore: object) -> tuple[torch.Size, torch.Tensor | None]:
        if ignore is None:
            return batch, None
        if isinstance(ignore, bool):
            raise TypeError(f"{call}: 'ignore' must be an int or an integer tensor, got bool")
        if isinstance(ignore, int):
            if not -(2**31) <= ignore < 2**31:
                raise ValueError(f"{call}: 'ignore' must be a global_prim_id (or -1), got {ignore}")
            return batch, torch.full((1,), ignore, dtype=torch.int32, device=self._device)
        ignore = _check.index_tensor(call, "ignore", ignore)
        _check.same_device(call, "ignore", ignore, self._device, "the scene")
        batch = _check.broadcast(call, [("ray", batch), ("ignore", ignore.shape)])
        ignore = _convert.primal(ignore)
        if ignore.dtype == torch.int64:  # ids beyond int32 match no face: -1, not a wrapped id (no host sync)
            ignore = torch.where((ignore >= 2**31) | (ignore < -1), -1, ignore)
        return batch, ignore

    def __repr__(self) -> str:
        state = "ready" if self.is_ready() else ("built" if self._accel is not None else "not built")
        return f"rayd.torch.Scene(shapes={self.num_shapes}, device={self._device}, {state})"


def _unrequested(flags: RayFlags) -> set[str]:
    """Names of the optional fields that ``flags`` does not ask for."""
    return {name for name, flag in FIELD_FLAGS.items() if not flags & flag}


def _check_flags(call: str, flags: object) -> RayFlags:
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise TypeError(f"{call}: 'flags' must be a rayd.RayFlags, got {type(flags).__name__}")
    if flags & ~int(RayFlags.All):
        raise ValueError(f"{call}: 'flags' has unknown bits {int(flags) & ~int(RayFlags.All):#x}")
    return RayFlags(flags)


def _bound(value: float | torch.Tensor, batch: torch.Size, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return _convert.flat_float32(value, batch, None)
    return torch.full((1,), value, dtype=torch.float32, device=device)


def _wellformed(ray: Ray, batch: torch.Size) -> torch.Tensor:
    """(batch) bool: finite endpoints and a non-zero direction (for ``visible``)."""
    o = _convert.primal(ray.o)
    d = _convert.primal(ray.d)
    ok = torch.isfinite(o).all(-1) & torch.isfinite(d).all(-1) & (d != 0).any(-1)
    return ok.expand(batch)


def wp_mat44_view(tensor: torch.Tensor):
    """Zero-copy ``wp.array(dtype=wp.mat44)`` of a contiguous float32 (I, 4, 4) tensor."""
    import warp as wp  # noqa: PLC0415

    return wp.from_torch(tensor, dtype=wp.mat44)
