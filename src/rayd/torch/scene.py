"""`Scene`: meshes and instances, their acceleration structures, lifecycle and queries.

The scene logic (ids, numbering, change tracking, transforms, build/sync) is
:class:`rayd.core.SceneCore`'s; this class checks torch arguments, hands tensors over,
evaluates the winners differentiably and wraps the results.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rayd.core import SceneCore
from rayd.flags import FIELD_FLAGS, RayFlags
from rayd.torch import _check, _convert, _intersect_fused, _trace
from rayd.torch._geometry import gather, ids
from rayd.torch._intersect import evaluate
from rayd.torch._live import LiveState
from rayd.torch._scene_edges import EdgeQueries
from rayd.torch.edges import SceneEdges
from rayd.torch.intersection import Intersection
from rayd.torch.mesh import Mesh, check_transform, check_transforms
from rayd.torch.ray import Ray

#: ``visible()`` tests the open segment interior ``s in (EPSILON, 1 - EPSILON)``, with
#: ``s`` the parameter along ``start -> end``: relative to the segment length.
VISIBILITY_EPSILON = 1e-4


class Scene(EdgeQueries):
    """A set of triangle meshes and instances with BVHs over them, queried by rays.

    Lifecycle: ``Scene()`` -> ``add_mesh(...)`` / ``add_instance(...)`` ... ->
    ``build()`` -> queries. A mesh added with ``dynamic=True`` may move:
    ``update_mesh_vertices(mesh_id, v)`` (or an in-place change of its registered
    vertex tensor) marks the scene pending, and ``sync()`` refits. Transforms
    (``set_mesh_transform``, or an in-place change of a registered matrix) and
    ``set_shape_enabled`` also take effect at ``sync()``. Queries before ``build()``,
    after adding shapes without a new ``build()``, or while updates are pending raise
    ``RuntimeError`` instead of answering from a stale BVH.

    Acceleration: one BVH (SAH) over the world-space triangles of all meshes; when
    instances exist, a top-level BVH over instance boxes whose leaves share one
    object-space BVH per instanced mesh. Updating an instance transform refits only
    the top level.

    A scene lives on the device of its meshes; work is launched on that device's
    current torch stream, without host synchronisation in queries.
    """

    def __init__(self) -> None:
        self._core = SceneCore(_convert.TorchArrays(), "rayd.torch.Scene")
        self._device: torch.device | None = None
        self._edges: SceneEdges | None = None
        self._state: LiveState | None = None

    @property
    def _shapes(self) -> list:
        return self._core.table.shapes

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
            raise TypeError(f"{call}: 'mesh' must be a rayd.torch.Mesh, got {_trace.type_name(mesh)}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"{call}: 'dynamic' must be a bool, got {type(dynamic).__name__}")
        if self._device is None:
            self._device = torch.device(_convert.device_name(mesh.device))
        _check.same_device(call, "mesh", mesh.vertices, self._device, "the scene")
        return self._core.add_mesh(mesh, mesh.vertices, mesh.to_world, dynamic, str(self._device))

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
        base = self._core.table.get_mesh(call, "mesh_id", mesh_id)
        to_world = check_transform(call, "to_world", to_world, self._device)
        return self._core.add_instance(base, mesh_id, to_world)

    @property
    def num_meshes(self) -> int:
        """Number of meshes added (instances not counted)."""
        return self._core.table.num_meshes

    @property
    def num_shapes(self) -> int:
        """Number of shapes: meshes and instances."""
        return len(self._core.table)

    @property
    def device(self) -> torch.device | None:
        """The scene's device (that of its meshes), ``None`` while it is empty."""
        return self._device

    # ------------------------------------------------------------------ lifecycle
    def build(self) -> None:
        """Snapshot every shape and build the acceleration structures.

        Raises:
            ValueError: the scene has no triangles, a mesh's faces index outside its
                vertices (e.g. changed in place after ``Mesh()``), or a mesh has
                non-finite vertices.
        """
        self._core.build("rayd.torch.Scene.build()")
        self._state = LiveState(self._core, self._device)
        self._edges = SceneEdges(self._shapes, self._device, self._state.table.faces)  # the build snapshot

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
        shape = self._core.table.get(call, "mesh_id", mesh_id)
        if shape.is_instance:
            raise ValueError(f"{call}: 'mesh_id' {mesh_id} is an instance; update the mesh it instances")
        if not shape.dynamic:
            raise RuntimeError(
                f"{call}: mesh {mesh_id} was added with dynamic=False; add it with dynamic=True to move it, "
                f"or call build() after changing it"
            )
        vertices = _check.float_tensor(call, "vertices", vertices, last=3, ndim=2)
        if vertices.shape[0] != shape.num_vertices:
            raise ValueError(
                f"{call}: 'vertices' must have shape ({shape.num_vertices}, 3) like mesh {mesh_id}, "
                f"got {tuple(vertices.shape)}"
            )
        _check.same_device(call, "vertices", vertices, self._device, "the scene")
        self._core.update_vertices(mesh_id, vertices)

    def set_mesh_transform(self, shape_id: int | Sequence[int] | torch.Tensor, to_world: torch.Tensor) -> None:
        """Set the object-to-world matrix of a mesh or an instance; takes effect at ``sync()``.

        Args:
            shape_id: a mesh or instance id. For a mesh this is ``M_mesh`` (its
                instances follow, as ``M_instance @ M_mesh``); for an instance its own
                matrix. Any shape may move, dynamic or not. Also a sequence (or 1-D
                int tensor) of K distinct ids, to set K matrices in one call (K = 0
                with a (0, 4, 4) tensor is a no-op).
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
        table = self._core.table
        if isinstance(shape_id, int) and not isinstance(shape_id, bool):
            table.get(call, "shape_id", shape_id)
            self._core.set_transform(shape_id, check_transform(call, "to_world", to_world, self._device))
            return
        if isinstance(shape_id, torch.Tensor):
            if shape_id.dim() != 1 or shape_id.dtype.is_floating_point or shape_id.dtype == torch.bool:
                raise TypeError(f"{call}: 'shape_id' must be an int, a sequence of ints or a 1-D integer tensor, "
                                f"got a {shape_id.dtype} tensor of shape {tuple(shape_id.shape)}")
            shape_id = shape_id.tolist()
        id_list = table.id_list(call, "shape_id", shape_id)
        matrices = check_transforms(call, "to_world", to_world, len(id_list), self._device)
        for k, one in enumerate(id_list):
            self._core.set_transform(one, matrices[k], source=matrices, index=k)

    def set_shape_enabled(self, shape_id: int, flag: bool) -> None:
        """Enable or disable a mesh or instance for all queries; takes effect at ``sync()`` (no rebuild).

        Raises:
            TypeError, ValueError: wrong id type/range, or ``flag`` not a bool.
        """
        call = "rayd.torch.Scene.set_shape_enabled()"
        shape = self._core.table.get(call, "shape_id", shape_id)
        if not isinstance(flag, bool):
            raise TypeError(f"{call}: 'flag' must be a bool, got {type(flag).__name__}")
        self._core.table.set_enabled(shape, flag)

    def has_pending_updates(self) -> bool:
        """True if updates (vertices, transforms, enable flags, edge masks, in-place changes) await ``sync()``."""
        return self._core.table.has_pending() or (self._edges is not None and self._edges.pending)

    def is_ready(self) -> bool:
        """True if queries can run now: built, nothing added since, nothing pending or stale."""
        return self._core.table.is_ready()

    def sync(self) -> None:
        """Apply pending updates: refit moved meshes, refit the top level, apply enable flags.

        Raises:
            RuntimeError: before ``build()``, after shapes were added without a new
                ``build()``, or if a static mesh changed in place (needs ``build()``).
            ValueError: an updated mesh has non-finite vertices.
        """
        todo = self._core.sync("rayd.torch.Scene.sync()")
        self._edges.sync(_convert.current_stream(self._device), moved=bool(todo))

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
        batch, n, global_prim_id, ray = _trace.trace(self, call, ray, active, ignore, any_hit=False)
        state = self._state
        meshes = [s.vertices for s in self._shapes if not s.is_instance]
        if state.plain and _intersect_fused.usable([ray.o, ray.d, *meshes]) and all(
            s.to_world is None for s in self._shapes
        ):
            vertices = meshes[0] if len(meshes) == 1 else torch.cat(meshes)
            fields = _intersect_fused.evaluate_fused(ray.o, ray.d, batch, global_prim_id, vertices, state.indices)
            fields["shape_id"], fields["prim_id"] = ids(state.table, global_prim_id)
            fields["global_prim_id"] = global_prim_id
            fields = {k: v for k, v in fields.items() if k not in _unrequested(flags)}
        else:
            dtype = self._output_dtype(ray)
            o = ray.o.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
            d = ray.d.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
            geometry = gather(state.table, state.live(dtype), global_prim_id)
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
        batch, _, blocker, _ = _trace.trace(self, call, ray, active, ignore, any_hit=True)
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
        batch, n, blocker, _ = _trace.trace(self, call, ray, active, ignore, any_hit=True)
        result = (blocker < 0).reshape(batch) & _trace.wellformed(ray, batch)
        if active is not None:
            result = result & _convert.primal(active).expand(batch)
        return result

    # ------------------------------------------------------------------ internals
    def _output_dtype(self, ray: Ray) -> torch.dtype:
        dtype = torch.promote_types(ray.o.dtype, ray.d.dtype)
        for shape in self._shapes:
            dtype = torch.promote_types(dtype, shape.vertices.dtype)
        return dtype

    def _check_ray(self, call: str, ray: object) -> Ray:
        return _trace.check_ray(call, ray, self._device)

    def _require_built(self, call: str) -> None:
        self._core.table.require_built(call)

    def _require_ready(self, call: str) -> None:
        self._core.table.require_ready(call)

    def __repr__(self) -> str:
        state = "ready" if self.is_ready() else ("built" if self._core.table.built else "not built")
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
