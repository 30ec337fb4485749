"""`Scene`: meshes, their acceleration structure, its lifecycle, and queries.

The scene logic (ids, numbering, change tracking, transforms, build/sync) is
:class:`rayd.core.SceneCore`'s; this class checks Dr.Jit arguments, hands arrays over,
evaluates the winners differentiably and wraps the results.
"""

from __future__ import annotations

from collections.abc import Sequence

import drjit as dr

from rayd.core import SceneCore
from rayd.drjit import _check, _convert, _trace
from rayd.drjit._intersect import empty, evaluate
from rayd.drjit._live import LiveState, gather_matrix
from rayd.drjit._scene_edges import EdgeQueries
from rayd.drjit.edges import SceneEdges
from rayd.drjit.intersection import Intersection
from rayd.drjit.mesh import Mesh, check_transform, check_transforms
from rayd.drjit.ray import Ray
from rayd.flags import RayFlags

#: ``visible()`` tests the open segment interior ``s in (EPSILON, 1 - EPSILON)``, with
#: ``s`` the parameter along ``start -> end``: relative to the segment length (as rayd.torch).
VISIBILITY_EPSILON = 1e-4


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
    stream.
    """

    def __init__(self) -> None:
        self._core: SceneCore | None = None
        self._device: str | None = None
        self._backend: str | None = None
        self._edges: SceneEdges | None = None
        self._state: LiveState | None = None

    @property
    def _shapes(self) -> list:
        return [] if self._core is None else self._core.table.shapes

    def _table(self):
        if self._core is None:
            self._core = SceneCore(_convert.DrjitArrays(self._device or "cpu"), "rayd.drjit.Scene")
        return self._core.table

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
            raise TypeError(f"{call}: 'mesh' must be a rayd.drjit.Mesh, got {_trace.not_ours(mesh)}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"{call}: 'dynamic' must be a bool, got {type(dynamic).__name__}")
        if self._device is None:
            self._device, self._backend = mesh.device, mesh.backend
        _check.same_backend(call, "mesh", mesh.vertices, self._device, "the scene")
        self._table().arrays.device = self._device
        return self._core.add_mesh(mesh, mesh.vertices, mesh.to_world, dynamic, self._device)

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
        base = self._table().get_mesh(call, "mesh_id", mesh_id)
        to_world = check_transform(call, "to_world", to_world, base.mesh.vertices)
        return self._core.add_instance(base, mesh_id, to_world)

    @property
    def num_meshes(self) -> int:
        """Number of meshes added (instances not counted)."""
        return self._table().num_meshes

    @property
    def num_shapes(self) -> int:
        """Number of shapes: meshes and instances."""
        return len(self._table())

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
            ValueError: the scene has no triangles, a mesh's faces index outside its
                vertices (e.g. changed in place after ``Mesh()``), or a mesh has
                non-finite vertices.
        """
        self._table()
        self._core.build("rayd.drjit.Scene.build()")
        self._state = LiveState(self._core, self._backend)
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
        shape = self._table().get(call, "mesh_id", mesh_id)
        if shape.is_instance:
            raise ValueError(f"{call}: 'mesh_id' {mesh_id} is an instance; update the mesh it instances")
        if not shape.dynamic:
            raise RuntimeError(
                f"{call}: mesh {mesh_id} was added with dynamic=False; add it with dynamic=True to move it, "
                f"or call build() after changing it"
            )
        vertices = _check.float_array(call, "vertices", vertices, 3)
        if dr.width(vertices) != shape.num_vertices:
            raise ValueError(
                f"{call}: 'vertices' must have shape ({shape.num_vertices}, 3) like mesh {mesh_id}, "
                f"got width {dr.width(vertices)}"
            )
        _check.same_backend(call, "vertices", vertices, self._device, "the scene")
        self._core.update_vertices(mesh_id, vertices)

    def set_mesh_transform(self, shape_id: int | Sequence[int], to_world: dr.ArrayBase) -> None:
        """Set the object-to-world matrix of a mesh or an instance; takes effect at ``sync()``.

        Args:
            shape_id: a mesh or instance id. For a mesh this is ``M_mesh`` (its
                instances follow, as ``M_instance @ M_mesh``); for an instance its own
                matrix. Also a sequence of K distinct ids, to set K matrices in one call
                (an empty sequence with a width-0 matrix is a no-op).
            to_world: ``Matrix4f``/``Matrix4f64`` acting on column vectors; of width K
                with K ids (shape ``shape_id[k]`` gets entry k). Gradients flow into
                this array when it is an ``.ad`` array with gradients enabled. Each
                call reads the matrices once to check them (one host synchronisation).
                The scene keeps this array: an in-place change of it (e.g.
                ``M[2][3] = Float(...)``) marks the shapes pending, and ``sync()``
                applies the new values.

        Raises:
            TypeError, ValueError: wrong id type/range, repeated ids, dtype, shape or
                device; non-finite or singular matrices.
        """
        call = "rayd.drjit.Scene.set_mesh_transform()"
        table = self._table()
        if isinstance(shape_id, int) and not isinstance(shape_id, bool):
            shape = table.get(call, "shape_id", shape_id)
            self._core.set_transform(shape_id, check_transform(call, "to_world", to_world, shape.mesh.vertices))
            return
        id_list = table.id_list(call, "shape_id", shape_id)
        to_world = check_transforms(call, "to_world", to_world, len(id_list), self._device)
        for k, one in enumerate(id_list):
            self._core.set_transform(one, gather_matrix(to_world, k, self._backend), source=to_world, index=k)

    def set_shape_enabled(self, shape_id: int, flag: bool) -> None:
        """Enable or disable a mesh or instance for all queries; takes effect at ``sync()`` (no rebuild).

        Raises:
            TypeError, ValueError: wrong id type/range, or ``flag`` not a bool.
        """
        call = "rayd.drjit.Scene.set_shape_enabled()"
        shape = self._table().get(call, "shape_id", shape_id)
        if not isinstance(flag, bool):
            raise TypeError(f"{call}: 'flag' must be a bool, got {type(flag).__name__}")
        self._core.table.set_enabled(shape, flag)

    def has_pending_updates(self) -> bool:
        """True if updates (vertices, transforms, enable flags, edge masks, in-place changes) await ``sync()``."""
        return self._table().has_pending() or (self._edges is not None and self._edges.pending)

    def is_ready(self) -> bool:
        """True if queries can run now: built, nothing added since, nothing pending or stale."""
        return self._table().is_ready()

    def sync(self) -> None:
        """Apply pending updates: refit moved meshes, refit the top level, apply enable flags.

        Raises:
            RuntimeError: before ``build()``, after shapes were added without a new
                ``build()``, or if a static mesh changed in place (needs ``build()``).
            ValueError: an updated mesh has non-finite vertices.
        """
        call = "rayd.drjit.Scene.sync()"
        table = self._table()
        table.require_built(call)
        memo: dict = {}
        for shape in table:  # a batch changed in place: take the new values (differentiably)
            if shape.source is not None and table.matrix_changed(shape, memo):
                shape.to_world = gather_matrix(shape.source, shape.source_index, self._backend)
        todo = self._core.sync(call)
        self._edges.sync(_convert.current_stream(self._device), moved=bool(todo))

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
        n, global_prim_id = _trace.trace(self, call, ray, active, ignore, any_hit=False)
        double = _convert.is_double(ray.o) or _convert.is_double(ray.d)
        double = double or any(_convert.is_double(s.vertices) for s in self._shapes if not s.is_instance)
        ad = _convert.is_ad(ray.o) or _convert.is_ad(ray.d) or any(LiveState.shape_is_ad(s) for s in self._shapes)
        m = _convert.module(self._backend, ad)
        if n == 0:
            return Intersection(flags, **empty(m, double, flags))
        fields = evaluate(m, double, ray.o, ray.d, global_prim_id, self._state.live_geometry(m, double), flags)
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
        _, blocker = _trace.trace(self, call, ray, active, ignore, any_hit=True)
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
        n, blocker = _trace.trace(self, call, ray, active, ignore, any_hit=True)
        if n == 0:
            return _convert.module(self._backend, False).Bool()
        d = ray.d
        wellformed = dr.all(dr.isfinite(ray.o)) & dr.all(dr.isfinite(d)) & dr.any(d != 0)
        result = (blocker < 0) & wellformed
        if active is not None:
            result = result & dr.detach(active)
        return result

    # ------------------------------------------------------------------ internals
    def _check_ray(self, call: str, ray: object) -> Ray:
        return _trace.check_ray(call, ray, self._device)

    def _check_active(self, call: str, ray: Ray, active: object):
        return _trace.check_active(call, ray, active, self._device)

    def _shape_is_ad(self, shape) -> bool:
        return LiveState.shape_is_ad(shape)

    def _live_geometry(self, m, double: bool):
        return self._state.live_geometry(m, double)

    def _world_columns(self, Array3: type) -> tuple:
        return self._state.world_columns(Array3)

    @property
    def _faces(self):
        return self._state._faces

    @property
    def _face_row(self):
        return self._state._face_row

    def _require_built(self, call: str) -> None:
        self._table().require_built(call)

    def _require_ready(self, call: str) -> None:
        self._table().require_ready(call)

    def __repr__(self) -> str:
        state = "ready" if self.is_ready() else ("built" if self._table().built else "not built")
        return f"rayd.drjit.Scene(shapes={self.num_shapes}, device={self._device}, {state})"


def _check_flags(call: str, flags: object) -> RayFlags:
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise TypeError(f"{call}: 'flags' must be a rayd.RayFlags, got {type(flags).__name__}")
    if flags & ~int(RayFlags.All):
        raise ValueError(f"{call}: 'flags' has unknown bits {int(flags) & ~int(RayFlags.All):#x}")
    return RayFlags(flags)
