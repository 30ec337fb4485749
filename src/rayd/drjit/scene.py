"""`Scene`: meshes, their acceleration structure, its lifecycle, and queries."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import drjit as dr
import warp as wp

from rayd.engine.accel import SceneAccel
from rayd.engine.intersect import search
from rayd.engine.rays import RayBatch
from rayd.engine.runtime import launch_stream
from rayd.engine.triangles import TriangleScene
from rayd.drjit import _check, _convert
from rayd.drjit._geometry import concat, world, world_normals
from rayd.drjit._intersect import LiveGeometry, empty, evaluate
from rayd.drjit.intersection import Intersection
from rayd.drjit.mesh import Mesh, check_transform
from rayd.drjit.ray import Ray
from rayd.flags import RayFlags

#: ``visible()`` tests the open segment interior ``s in (EPSILON, 1 - EPSILON)``, with
#: ``s`` the parameter along ``start -> end``: relative to the segment length (as rayd.torch).
VISIBILITY_EPSILON = 1e-4


@dataclass
class _Shape:
    """A mesh as the scene holds it: what is registered now and what was snapshotted."""

    mesh: Mesh
    dynamic: bool
    vertices: dr.ArrayBase
    to_world: dr.ArrayBase | None
    vertex_offset: int = 0
    face_offset: int = 0
    vertex_version: tuple[int, ...] | None = None
    transform_version: tuple[int, ...] | None = None
    enabled: bool = True


def _not_ours(value: object) -> str:
    name = _convert.type_name(value)
    return f"{name} (rayd.torch and rayd.drjit objects do not mix)" if name.startswith("rayd.torch") else name


class Scene:
    """A set of triangle meshes with a BVH over them, queried by rays.

    Lifecycle: ``Scene()`` -> ``add_mesh(...)`` ... -> ``build()`` -> queries. A mesh
    added with ``dynamic=True`` may move: ``update_mesh_vertices(mesh_id, v)`` (or an
    in-place change of its registered vertex array, e.g. ``v.x += 1``) marks the scene
    pending, and ``sync()`` refits the BVH. Queries before ``build()``, after adding
    meshes without a new ``build()``, or while updates are pending raise
    ``RuntimeError`` instead of answering from a stale BVH.

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
        self._shapes.append(_Shape(mesh, dynamic, mesh.vertices, mesh.to_world))
        if self._engine is not None:
            self._structure_changed = True
        return len(self._shapes) - 1

    @property
    def num_meshes(self) -> int:
        """Number of meshes added (instances not counted)."""
        return len(self._shapes)

    @property
    def num_shapes(self) -> int:
        """Number of shapes (meshes; rayd.drjit has no instances yet)."""
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
        """Snapshot every mesh and build the BVH (SAH) over all triangles.

        Raises:
            ValueError: the scene has no triangles, or a mesh has non-finite vertices.
        """
        call = "rayd.drjit.Scene.build()"
        if not self._shapes or sum(s.mesh.num_faces for s in self._shapes) == 0:
            raise ValueError(f"{call}: the scene is empty; add a mesh with at least one face first")
        plain = _convert.module(self._backend, False)
        vertex_offset = face_offset = 0
        faces, face_shape, has_normals, has_uv = [], [], [], []
        for shape_id, shape in enumerate(self._shapes):
            _check.finite(call, f"vertices of mesh {shape_id}", shape.vertices)
            shape.vertex_offset, shape.face_offset = vertex_offset, face_offset
            mesh = shape.mesh
            if mesh.num_faces:  # Dr.Jit cannot mix width 0 with literals
                faces.append(plain.Array3u(dr.detach(mesh.faces)) + vertex_offset)
                face_shape.append(dr.full(plain.Int, shape_id, mesh.num_faces))
                has_normals.append(dr.full(plain.Bool, mesh.normals is not None, mesh.num_faces))
                has_uv.append(dr.full(plain.Bool, mesh.uv is not None, mesh.num_faces))
            vertex_offset += mesh.num_vertices
            face_offset += mesh.num_faces
        self._faces = concat(faces)
        self._face_shape = concat(face_shape)
        dr.make_opaque(self._face_shape)
        self._shape_face_offset = plain.Int([s.face_offset for s in self._shapes])
        self._face_has_normals = concat(has_normals) if any(s.mesh.normals is not None for s in self._shapes) else None
        self._face_has_uv = concat(has_uv) if any(s.mesh.uv is not None for s in self._shapes) else None
        dr.eval(self._faces, self._face_shape, self._face_has_normals, self._face_has_uv)
        # Engine storage, owned by Dr.Jit and viewed by Warp: flat int32 indices and
        # an interleaved float32 point buffer that sync() refreshes in place.
        self._indices = dr.ravel(plain.Array3i(self._faces), order="F")
        self._points = plain.TensorXf(dr.empty(plain.Float, 3 * vertex_offset), shape=(vertex_offset, 3))
        dr.make_opaque(self._points)
        stream = _convert.current_stream(self._device)
        self._points_view = wp.from_dlpack(_convert._capsule(self._points, self._device), dtype=wp.vec3)
        indices_view = _convert.scalar_view(self._indices, self._device)
        for shape in self._shapes:
            self._snapshot(shape, stream)
        self._engine = TriangleScene(self._points_view, indices_view, stream)
        # Face numbering for the engine: flat face f is global_prim_id f of shape
        # face_shape[f]; shape_enabled is rewritten in place by sync().
        self._flat_global = dr.arange(plain.Int, face_offset)
        self._shape_enabled = plain.UInt8([1 if s.enabled else 0 for s in self._shapes])
        dr.make_opaque(self._flat_global, self._shape_enabled)
        with launch_stream(self._engine.device, stream):  # its small allocations go on Dr.Jit's stream too
            self._accel = SceneAccel(
                self._engine.device,
                self._engine,
                _convert.scalar_view(self._flat_global, self._device),
                _convert.scalar_view(self._face_shape, self._device),
                _convert.scalar_view(self._shape_enabled, self._device),
            )
        self._shape_enabled_view = _convert.scalar_view(self._shape_enabled, self._device)
        self._accel.set_all_enabled(all(s.enabled for s in self._shapes))
        self._enabled_dirty = False
        self._structure_changed = False
        self._pending.clear()

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
            ValueError: ``mesh_id`` out of range, or a wrong shape, width or device.
            RuntimeError: the mesh was added with ``dynamic=False``.
        """
        call = "rayd.drjit.Scene.update_mesh_vertices()"
        shape = self._shape(call, "mesh_id", mesh_id)
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

    def set_mesh_transform(self, shape_id: int, to_world: dr.ArrayBase) -> None:
        """Set a mesh's object-to-world matrix; takes effect at ``sync()``.

        Args:
            shape_id: the id ``add_mesh`` returned.
            to_world: ``Matrix4f``/``Matrix4f64`` acting on column vectors. Gradients
                flow into this array when it is an ``.ad`` array with gradients enabled.

        Raises:
            TypeError, ValueError: wrong id type/range, dtype, shape or device.
        """
        call = "rayd.drjit.Scene.set_mesh_transform()"
        shape = self._shape(call, "shape_id", shape_id)
        shape.to_world = check_transform(call, "to_world", to_world, shape.mesh.vertices)
        self._pending.add(shape_id)

    def set_shape_enabled(self, shape_id: int, flag: bool) -> None:
        """Enable or disable a mesh for all queries; takes effect at ``sync()`` (no rebuild).

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
        if self._pending or self._enabled_dirty:
            return True
        return any(self._changed(s) for s in self._shapes if s.dynamic or s.to_world is not None)

    def is_ready(self) -> bool:
        """True if queries can run now: built, nothing added since, nothing pending or stale."""
        if self._engine is None or self._structure_changed or self._pending or self._enabled_dirty:
            return False
        return not any(self._changed(s) for s in self._shapes)

    def sync(self) -> None:
        """Apply pending updates: refit the BVH to moved meshes (no rebuild).

        Raises:
            RuntimeError: before ``build()``, after meshes were added without a new
                ``build()``, or if a static mesh changed in place (needs ``build()``).
            ValueError: an updated mesh has non-finite vertices.
        """
        call = "rayd.drjit.Scene.sync()"
        self._require_built(call)
        for shape_id, shape in enumerate(self._shapes):
            if not shape.dynamic and shape_id not in self._pending and self._vertices_changed(shape):
                raise _check.lifecycle(
                    call, f"the vertices of static mesh {shape_id} changed in place; call build() to rebuild"
                )
        todo = [i for i, s in enumerate(self._shapes) if i in self._pending or self._changed(s)]
        for shape_id in todo:
            _check.finite(call, f"vertices of mesh {shape_id}", self._shapes[shape_id].vertices)
        stream = _convert.current_stream(self._device)
        for shape_id in todo:
            self._snapshot(self._shapes[shape_id], stream)
        if todo:
            self._engine.refit(stream)
        if self._enabled_dirty:
            flags = _convert.module(self._backend, False).UInt8([1 if s.enabled else 0 for s in self._shapes])
            wp.copy(self._shape_enabled_view, _convert.scalar_view(flags, self._device), stream=stream)
            self._accel.set_all_enabled(all(s.enabled for s in self._shapes))
            self._enabled_dirty = False
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
        double = double or any(_convert.is_double(s.vertices) for s in self._shapes)
        ad = _convert.is_ad(ray.o) or _convert.is_ad(ray.d) or any(self._shape_is_ad(s) for s in self._shapes)
        m = _convert.module(self._backend, ad)
        if n == 0:
            return Intersection(flags, **empty(m, double, flags))
        fields = evaluate(m, double, ray.o, ray.d, global_prim_id, self._live_geometry(m, double), flags)
        return Intersection(flags, **fields)

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
        o, o_buffer = _convert.vec3_view(ray.o, device)
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
        search(self._accel, rays, _convert.scalar_view(out, device), any_hit, stream)
        # The buffers above stay referenced until here; on CUDA, Dr.Jit frees and
        # reuses memory in stream order, after the engine's launch.
        del o_buffer, d_buffer, rays
        return n, out

    @staticmethod
    def _shape_is_ad(shape: _Shape) -> bool:
        arrays = (shape.vertices, shape.mesh.normals, shape.mesh.uv, shape.to_world)
        return any(a is not None and _convert.is_ad(a) for a in arrays)

    def _live_geometry(self, m: ModuleType, double: bool) -> LiveGeometry:
        """The registered arrays (differentiable) concatenated in world space."""
        Array3 = m.Array3f64 if double else m.Array3f
        Array2 = m.Array2f64 if double else m.Array2f
        shapes = [s for s in self._shapes if s.mesh.num_vertices]  # width-0 meshes add no rows
        vertices = concat([world(Array3(s.vertices), s.to_world) for s in shapes])
        normals = uv = None
        if self._face_has_normals is not None:
            normals = concat(
                [
                    world_normals(Array3(s.mesh.normals), s.to_world)
                    if s.mesh.normals is not None
                    else dr.zeros(Array3, s.mesh.num_vertices)
                    for s in shapes
                ]
            )
        if self._face_has_uv is not None:
            uv = concat(
                [Array2(s.mesh.uv) if s.mesh.uv is not None else dr.zeros(Array2, s.mesh.num_vertices) for s in shapes]
            )
        return LiveGeometry(
            vertices=vertices,
            faces=self._faces,
            normals=normals,
            face_has_normals=self._face_has_normals,
            uv=uv,
            face_has_uv=self._face_has_uv,
            face_shape=self._face_shape,
            shape_face_offset=self._shape_face_offset,
        )

    def _snapshot(self, shape: _Shape, stream: wp.Stream | None) -> None:
        """Copy a shape's world-space vertices (float32) into the engine's point buffer."""
        count = shape.mesh.num_vertices
        if count:
            vertices = dr.detach(shape.vertices)
            to_world = None if shape.to_world is None else dr.detach(shape.to_world)
            points, buffer = _convert.vec3_view(world(vertices, to_world), self._device)
            wp.copy(self._points_view, points, dest_offset=shape.vertex_offset, count=count, stream=stream)
            del buffer
        shape.vertex_version = _convert.version(shape.vertices)
        shape.transform_version = None if shape.to_world is None else _convert.version(shape.to_world)

    def _vertices_changed(self, shape: _Shape) -> bool:
        return _convert.version(shape.vertices) != shape.vertex_version

    def _changed(self, shape: _Shape) -> bool:
        """True if the registered arrays changed in place since the last snapshot."""
        if self._vertices_changed(shape):
            return True
        if shape.to_world is not None and _convert.version(shape.to_world) != shape.transform_version:
            return True
        return False

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
        for shape_id, shape in enumerate(self._shapes):
            if shape_id in self._pending:
                raise _check.lifecycle(call, f"mesh {shape_id} has pending updates; call sync() first")
            if not self._changed(shape):
                continue
            if shape.dynamic or not self._vertices_changed(shape):
                raise _check.lifecycle(
                    call,
                    f"the vertices or transform of mesh {shape_id} changed in place since the last sync(); "
                    f"call update_mesh_vertices({shape_id}, vertices) or set_mesh_transform({shape_id}, m), "
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
            return n, ignore
        ignore = _check.index_flat(call, "ignore", ignore)
        _check.same_backend(call, "ignore", ignore, self._device, "the scene")
        n = _check.broadcast(call, [("ray", n), ("ignore", dr.width(ignore))])
        return n, ignore

    def __repr__(self) -> str:
        state = "ready" if self.is_ready() else ("built" if self._engine is not None else "not built")
        return f"rayd.drjit.Scene(meshes={self.num_meshes}, device={self._device}, {state})"


def _check_flags(call: str, flags: object) -> RayFlags:
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise TypeError(f"{call}: 'flags' must be a rayd.RayFlags, got {type(flags).__name__}")
    if flags & ~int(RayFlags.All):
        raise ValueError(f"{call}: 'flags' has unknown bits {int(flags) & ~int(RayFlags.All):#x}")
    return RayFlags(flags)
