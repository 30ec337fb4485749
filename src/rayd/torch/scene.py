"""`Scene`: meshes, their acceleration structure, its lifecycle, and queries."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayd import engine
from rayd.flags import RayFlags
from rayd.torch import _check, _convert
from rayd.torch._intersect import LiveGeometry, evaluate
from rayd.torch.intersection import Intersection
from rayd.torch.mesh import Mesh, check_transform
from rayd.torch.ray import Ray


@dataclass
class _Shape:
    """A mesh as the scene holds it: what is registered now and what was snapshotted."""

    mesh: Mesh
    dynamic: bool
    vertices: torch.Tensor
    to_world: torch.Tensor | None
    vertex_offset: int = 0
    face_offset: int = 0
    vertex_version: int | None = None
    transform_version: int | None = None


def _type_name(value: object) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__.startswith("rayd") else cls.__name__


def _world(points: torch.Tensor, to_world: torch.Tensor | None) -> torch.Tensor:
    """``to_world @ [p, 1]`` for rows ``p`` of ``points`` (identity if ``None``)."""
    if to_world is None:
        return points
    m = to_world.to(points.dtype)
    return points @ m[:3, :3].transpose(0, 1) + m[:3, 3]


def _world_normals(normals: torch.Tensor, to_world: torch.Tensor | None) -> torch.Tensor:
    """Normals transform by the inverse transpose of the linear part."""
    if to_world is None:
        return normals
    m = to_world.to(normals.dtype)
    return normals @ torch.linalg.inv(m[:3, :3])


class Scene:
    """A set of triangle meshes with a BVH over them, queried by rays.

    Lifecycle: ``Scene()`` -> ``add_mesh(...)`` ... -> ``build()`` -> queries. A mesh
    added with ``dynamic=True`` may move: ``update_mesh_vertices(mesh_id, v)`` (or an
    in-place change of its registered vertex tensor) marks the scene pending, and
    ``sync()`` refits the BVH. Queries before ``build()``, after adding meshes without
    a new ``build()``, or while updates are pending raise ``RuntimeError`` instead of
    answering from a stale BVH.

    A scene lives on the device of its meshes; work is launched on that device's
    current torch stream, without host synchronisation in queries.
    """

    def __init__(self) -> None:
        self._shapes: list[_Shape] = []
        self._device: torch.device | None = None
        self._engine: engine.TriangleScene | None = None
        self._structure_changed = False
        self._pending: set[int] = set()

    # ------------------------------------------------------------------ contents
    def add_mesh(self, mesh: Mesh, dynamic: bool = False) -> int:
        """Add a mesh; returns its shape id (0, 1, 2, ... in insertion order).

        Args:
            mesh: a :class:`rayd.torch.Mesh`.
            dynamic: ``True`` if its vertices will change (``update_mesh_vertices``).

        Returns:
            The shape id, which hits report as ``shape_id``.

        Raises:
            TypeError: ``mesh`` is not a ``rayd.torch.Mesh`` (e.g. a rayd.drjit one).
            ValueError: ``mesh`` is on another device than the scene's meshes.
        """
        call = "rayd.torch.Scene.add_mesh()"
        if not isinstance(mesh, Mesh):
            raise TypeError(f"{call}: 'mesh' must be a rayd.torch.Mesh, got {_type_name(mesh)}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"{call}: 'dynamic' must be a bool, got {type(dynamic).__name__}")
        if self._device is None:
            self._device = torch.device(_convert.device_name(mesh.device))
        _check.same_device(call, "mesh", mesh.vertices, self._device, "the scene")
        self._shapes.append(_Shape(mesh, dynamic, mesh.vertices, mesh.to_world))
        if self._engine is not None:
            self._structure_changed = True
        return len(self._shapes) - 1

    @property
    def num_meshes(self) -> int:
        """Number of meshes added (instances not counted)."""
        return len(self._shapes)

    @property
    def device(self) -> torch.device | None:
        """The scene's device (that of its meshes), ``None`` while it is empty."""
        return self._device

    # ------------------------------------------------------------------ lifecycle
    def build(self) -> None:
        """Snapshot every mesh and build the BVH (SAH) over all triangles.

        Raises:
            ValueError: the scene has no triangles, or a mesh has non-finite vertices.
        """
        call = "rayd.torch.Scene.build()"
        if not self._shapes or sum(s.mesh.num_faces for s in self._shapes) == 0:
            raise ValueError(f"{call}: the scene is empty; add a mesh with at least one face first")
        vertex_offset = face_offset = 0
        faces, face_shape, has_normals, has_uv = [], [], [], []
        for shape_id, shape in enumerate(self._shapes):
            _check.finite(call, f"vertices of mesh {shape_id}", _convert.primal(shape.vertices))
            shape.vertex_offset, shape.face_offset = vertex_offset, face_offset
            mesh = shape.mesh
            faces.append(_convert.primal(mesh.faces).long() + vertex_offset)
            face_shape.append(torch.full((mesh.num_faces,), shape_id, dtype=torch.int32, device=self._device))
            has_normals.append(torch.full((mesh.num_faces,), mesh.normals is not None, device=self._device))
            has_uv.append(torch.full((mesh.num_faces,), mesh.uv is not None, device=self._device))
            vertex_offset += mesh.num_vertices
            face_offset += mesh.num_faces
        self._faces = torch.cat(faces).contiguous()
        self._face_shape = torch.cat(face_shape)
        self._shape_face_offset = torch.tensor(
            [s.face_offset for s in self._shapes], dtype=torch.int32, device=self._device
        )
        any_normals = any(s.mesh.normals is not None for s in self._shapes)
        any_uv = any(s.mesh.uv is not None for s in self._shapes)
        self._face_has_normals = torch.cat(has_normals) if any_normals else None
        self._face_has_uv = torch.cat(has_uv) if any_uv else None
        self._indices = self._faces.to(torch.int32).reshape(-1).contiguous()
        self._points = torch.empty((vertex_offset, 3), dtype=torch.float32, device=self._device)
        for shape in self._shapes:
            self._snapshot(shape)
        stream = _convert.current_stream(self._device)
        self._engine = engine.TriangleScene(
            _convert.vec3_view(self._points), _convert.scalar_view(self._indices), stream
        )
        self._structure_changed = False
        self._pending.clear()

    def update_mesh_vertices(self, mesh_id: int, vertices: torch.Tensor) -> None:
        """Register new vertex positions for a dynamic mesh; ``sync()`` refits.

        Args:
            mesh_id: the id ``add_mesh`` returned.
            vertices: (V, 3) float32/float64 with the mesh's V, on the scene's device.
                This tensor (not a copy) becomes the one gradients flow into; it may
                be the same tensor as before, e.g. a parameter just stepped in place.

        Raises:
            TypeError: ``mesh_id`` is not an int, or ``vertices`` not a float tensor.
            ValueError: ``mesh_id`` out of range, or a wrong shape or device.
            RuntimeError: the mesh was added with ``dynamic=False``.
        """
        call = "rayd.torch.Scene.update_mesh_vertices()"
        shape = self._shape(call, "mesh_id", mesh_id)
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
        shape.vertices = vertices
        self._pending.add(mesh_id)

    def set_mesh_transform(self, shape_id: int, to_world: torch.Tensor) -> None:
        """Set a mesh's object-to-world matrix; takes effect at ``sync()``.

        Args:
            shape_id: the id ``add_mesh`` returned.
            to_world: (4, 4) float32/float64 acting on column vectors. Gradients flow
                into this tensor.

        Raises:
            TypeError, ValueError: wrong id type/range, dtype, shape or device.
        """
        call = "rayd.torch.Scene.set_mesh_transform()"
        shape = self._shape(call, "shape_id", shape_id)
        shape.to_world = check_transform(call, "to_world", to_world, self._device)
        self._pending.add(shape_id)

    def has_pending_updates(self) -> bool:
        """True if vertex/transform updates (or in-place changes of dynamic meshes) await ``sync()``."""
        if self._pending:
            return True
        return any(self._changed(s) for s in self._shapes if s.dynamic)

    def is_ready(self) -> bool:
        """True if queries can run now: built, nothing added since, nothing pending or stale."""
        if self._engine is None or self._structure_changed or self._pending:
            return False
        return not any(self._changed(s) for s in self._shapes)

    def sync(self) -> None:
        """Apply pending updates: refit the BVH to moved meshes (no rebuild).

        Raises:
            RuntimeError: before ``build()``, after meshes were added without a new
                ``build()``, or if a static mesh changed in place (needs ``build()``).
            ValueError: an updated mesh has non-finite vertices.
        """
        call = "rayd.torch.Scene.sync()"
        self._require_built(call)
        for shape_id, shape in enumerate(self._shapes):
            if not shape.dynamic and shape_id not in self._pending and self._changed(shape):
                raise _check.lifecycle(
                    call, f"the vertices of static mesh {shape_id} changed in place; call build() to rebuild"
                )
        todo = [i for i, s in enumerate(self._shapes) if i in self._pending or (s.dynamic and self._changed(s))]
        for shape_id in todo:
            _check.finite(call, f"vertices of mesh {shape_id}", _convert.primal(self._shapes[shape_id].vertices))
        for shape_id in todo:
            self._snapshot(self._shapes[shape_id])
        if todo:
            self._engine.refit(_convert.current_stream(self._device))
        self._pending.clear()

    # ------------------------------------------------------------------ queries
    def intersect(self, ray: Ray, active: torch.Tensor | None = None, flags: RayFlags = RayFlags.All) -> Intersection:
        """Closest hit of each ray, differentiable for the fixed winning triangle.

        Args:
            ray: :class:`Ray` with ``o``, ``d`` of shape (..., 3), float32 or float64,
                on the scene's device.
            active: optional bool tensor broadcastable to ``...``; inactive rays miss.
            flags: :class:`RayFlags` selecting the fields to compute.

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
            transforms, and to ``ray.o`` and ``ray.d``. The choice of triangle is
            held fixed; misses get exactly zero gradient. Gradients are accumulated
            with ``index_put_(accumulate=True)``, which is bitwise deterministic under
            ``torch.use_deterministic_algorithms(True)`` (atomic, faster, otherwise on CUDA).

        Raises:
            TypeError: ``ray`` is not a ``rayd.torch.Ray``, ``active`` is not bool,
                ``flags`` is not a ``RayFlags``.
            ValueError: inputs on another device, or batch shapes that do not broadcast.
            RuntimeError: the scene is not built, or has pending/unsynced changes.

        References:
            Woop, Benthin, Wald 2013, "Watertight Ray/Triangle Intersection", JCGT 2(1)
            (the search); Moeller, Trumbore 1997, JGT 2(1) (the evaluation).
        """
        call = "rayd.torch.Scene.intersect()"
        self._require_ready(call)
        ray = self._check_ray(call, ray)
        flags = _check_flags(call, flags)
        batch, active = self._check_active(call, ray, active)
        n = batch.numel()

        global_prim_id = torch.empty(n, dtype=torch.int32, device=self._device)
        if n:
            self._search(ray, batch, active, global_prim_id)

        dtype = self._output_dtype(ray)
        o = ray.o.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
        d = ray.d.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
        fields = evaluate(o, d, global_prim_id, self._live_geometry(dtype), flags)
        fields = {k: v.reshape(tuple(batch) + v.shape[1:]) for k, v in fields.items()}
        return Intersection(flags, **fields)

    # ------------------------------------------------------------------ internals
    def _search(self, ray: Ray, batch: torch.Size, active: torch.Tensor | None, out: torch.Tensor) -> None:
        device = self._device
        o = _convert.flat_float32(ray.o, batch, 3)
        d = _convert.flat_float32(ray.d, batch, 3)
        tmin = _bound(ray.tmin, batch, device)
        tmax = _bound(ray.tmax, batch, device)
        if active is None:
            flag = torch.ones(1, dtype=torch.uint8, device=device)
        else:
            flag = _convert.primal(active)
            flag = (flag.reshape(1) if flag.numel() == 1 else flag.expand(batch).reshape(-1)).to(torch.uint8)
            flag = flag.contiguous()
        engine.closest_hit(
            self._engine,
            _convert.vec3_view(o),
            _convert.vec3_view(d),
            _convert.scalar_view(tmin),
            _convert.scalar_view(tmax),
            _convert.scalar_view(flag),
            _convert.scalar_view(out),
            _convert.current_stream(device),
        )

    def _output_dtype(self, ray: Ray) -> torch.dtype:
        dtype = torch.promote_types(ray.o.dtype, ray.d.dtype)
        for shape in self._shapes:
            dtype = torch.promote_types(dtype, shape.vertices.dtype)
        return dtype

    def _live_geometry(self, dtype: torch.dtype) -> LiveGeometry:
        """The registered tensors (differentiable) concatenated in world space."""
        shapes = self._shapes
        vertices = [_world(s.vertices.to(dtype), s.to_world) for s in shapes]
        normals = uv = None
        if self._face_has_normals is not None:
            normals = [
                _world_normals(s.mesh.normals.to(dtype), s.to_world)
                if s.mesh.normals is not None
                else torch.zeros((s.mesh.num_vertices, 3), dtype=dtype, device=self._device)
                for s in shapes
            ]
            normals = normals[0] if len(normals) == 1 else torch.cat(normals)
        if self._face_has_uv is not None:
            uv = [
                s.mesh.uv.to(dtype)
                if s.mesh.uv is not None
                else torch.zeros((s.mesh.num_vertices, 2), dtype=dtype, device=self._device)
                for s in shapes
            ]
            uv = uv[0] if len(uv) == 1 else torch.cat(uv)
        return LiveGeometry(
            vertices=vertices[0] if len(vertices) == 1 else torch.cat(vertices),
            faces=self._faces,
            normals=normals,
            face_has_normals=self._face_has_normals,
            uv=uv,
            face_has_uv=self._face_has_uv,
            face_shape=self._face_shape,
            shape_face_offset=self._shape_face_offset,
        )

    def _snapshot(self, shape: _Shape) -> None:
        """Copy a shape's world-space vertices (float32) into the engine's buffer."""
        vertices = _convert.primal(shape.vertices)
        to_world = None if shape.to_world is None else _convert.primal(shape.to_world)
        world = _world(vertices.to(torch.promote_types(vertices.dtype, torch.float32)), to_world)
        end = shape.vertex_offset + shape.mesh.num_vertices
        self._points[shape.vertex_offset : end].copy_(world)
        shape.vertex_version = _convert.version(shape.vertices)
        shape.transform_version = None if shape.to_world is None else _convert.version(shape.to_world)

    def _changed(self, shape: _Shape) -> bool:
        """True if the registered tensors changed in place since the last snapshot."""
        if _convert.version(shape.vertices) != shape.vertex_version:
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
            raise _check.lifecycle(call, "meshes were added after build(); call build() again")

    def _require_ready(self, call: str) -> None:
        self._require_built(call)
        for shape_id, shape in enumerate(self._shapes):
            if shape_id in self._pending:
                raise _check.lifecycle(call, f"mesh {shape_id} has pending updates; call sync() first")
            if self._changed(shape):
                if shape.dynamic:
                    raise _check.lifecycle(
                        call,
                        f"the vertices of dynamic mesh {shape_id} changed since the last sync(); "
                        f"call update_mesh_vertices({shape_id}, vertices) and sync() first",
                    )
                raise _check.lifecycle(
                    call, f"the vertices of static mesh {shape_id} changed in place; call build() to rebuild"
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

    def __repr__(self) -> str:
        state = "ready" if self.is_ready() else ("built" if self._engine is not None else "not built")
        return f"rayd.torch.Scene(meshes={self.num_meshes}, device={self._device}, {state})"


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
