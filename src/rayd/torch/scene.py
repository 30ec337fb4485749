"""`Scene`: meshes and instances, their acceleration structures, lifecycle and queries.

The scene logic (ids, numbering, change tracking, transforms, build/sync) is
:class:`rayd.core.SceneCore`'s and the lifecycle methods are
:class:`rayd.core.frontend.SceneBase`'s, the ray queries' shared steps
:class:`rayd.core.queries.RayQueries`'s; this class holds what is torch's: argument
checks, the hand-over of tensors, the differentiable evaluation and the records.
"""

from __future__ import annotations

import torch

from rayd.core import hits
from rayd.core.frontend import SceneBase, serialise_public
from rayd.core.queries import VISIBILITY_EPSILON, AllHitsQueries, RayQueries  # noqa: F401 - VISIBILITY_EPSILON: public here
from rayd.flags import RayFlags
from rayd.torch import _check, _convert, _copy, _interval, _intersect_fused, _ops, _trace, _walk_on
from rayd.torch._geometry import gather
from rayd.torch._intersect import _stand_in as stand_in, evaluate
from rayd.torch._scene_edges import EdgeQueries
from rayd.torch._scene_surface import SurfaceQueries
from rayd.core.specular import ReflectionQueries
from rayd.torch.intersection import Intersection
from rayd.torch.mesh import Mesh
from rayd.torch.ray import Ray

class Scene(AllHitsQueries, ReflectionQueries, EdgeQueries, SurfaceQueries, RayQueries, SceneBase):
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

    # ------------------------------------------------------------------ SceneBase hooks (and rayd.torch._parts)
    def _mesh_device(self, mesh: Mesh) -> torch.device:
        return torch.device(_convert.device_name(mesh.device))

    def _same_device(self, call: str, name: str, array: torch.Tensor) -> None:
        _check.same_device(call, name, array, self._device, "the scene")

    def _ids(self, call: str, name: str, value: object) -> object:
        if isinstance(value, torch.Tensor):
            if value.dim() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
                raise TypeError(f"{call}: '{name}' must be an int, a sequence of ints or a 1-D integer tensor, "
                                f"got a {value.dtype} tensor of shape {tuple(value.shape)}")
            return value.tolist()
        return value

    def _batch_entry(self, batch: torch.Tensor, k: int) -> torch.Tensor:
        return batch[k]

    def build(self) -> None:  # noqa: D102 - SceneBase.build's docstring
        with _convert.outside_transforms():  # what the scene keeps must not be functorch-wrapped
            super().build()

    build.__doc__ = SceneBase.build.__doc__

    def sync(self) -> None:  # noqa: D102
        with _convert.outside_transforms():
            super().sync()

    sync.__doc__ = SceneBase.sync.__doc__

    def _built(self) -> None:
        _ops.register(self)  # the key by which compiled graphs and vmap reach this scene
        self._state.prepare()  # device tables of the transforms made now, not in a traced query
        for dtype in (torch.float32, torch.float64):  # cached constants: the same graph before and after
            stand_in(dtype, self._device)

    def _tracing(self) -> bool:
        """Under ``torch.compile`` the lifecycle check is deferred to run time: reading version
        counters would break a compiled graph, so while tracing only the structural check runs
        (SceneBase._require_ready), and the search op repeats the full check each time the graph
        runs (:mod:`rayd.torch._ops`), raising the same ``RuntimeError``."""
        return torch.compiler.is_compiling()

    # ------------------------------------------------------------------ queries (RayQueries hooks)
    def _intersect(self, call: str, ray: Ray, active, flags: RayFlags, ignore) -> Intersection:
        batch, n, global_prim_id, ray = _trace.trace(self, call, ray, active, ignore, any_hit=False, widen=True)
        state = self._state
        meshes = [s.vertices for s in self._core.table.meshes]
        # one kernel: the requested fields, ids and hit interval in their final layout (None: op by op)
        fields = _intersect_fused.closest(state, ray, batch, global_prim_id, meshes, flags)
        if fields is None:
            dtype = self._output_dtype(ray.o, ray.d)
            o = ray.o.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
            d = ray.d.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
            face = hits.face_frame(self._core, dtype == torch.float64)  # float64: off-face winners miss
            on_device = (n > 0 and dtype == torch.float64 and not _walk_on.traced()
                         and not _walk_on.on_host(global_prim_id))
            if on_device:  # the winners decided first, without a host read, then evaluated once
                global_prim_id = _walk_on.walk_on(self, ray, ignore, batch, global_prim_id,
                                                  _walk_on.t_of(self, ray, batch, global_prim_id))
            geometry = gather(state.table, state.live(dtype), global_prim_id)
            fields = evaluate(o, d, global_prim_id, geometry, flags, face)
            if dtype == torch.float64 and not on_device:
                # a winner the float32 search put past tmin, or off its face in float64: search behind it
                found = _walk_on.walk_on(self, ray, ignore, batch, global_prim_id, fields["t"])
                if found is not global_prim_id:
                    global_prim_id = found
                    fields = evaluate(o, d, found, gather(state.table, state.live(dtype), found), flags, face)
            fields = _interval.enforce(fields, ray.tmin, ray.tmax, batch)
        if len(batch) == 1 and not torch.compiler.is_compiling():  # (N,) rays: the rows are the record's shape (one
            # tensor given twice, n = geo_n: viewed); under torch.compile the reshapes (Dynamo cannot take id() of a
            # tensor made in the graph: a graph break on CUDA, session 22's H100 run)
            seen: set[int] = set()
            fields = {k: v if id(v) not in seen and not seen.add(id(v)) else v.view_as(v) for k, v in fields.items()}
        else:
            fields = {k: v.reshape(tuple(batch) + v.shape[1:]) for k, v in fields.items()}
        return Intersection(flags, **fields)

    def _occluded(self, call: str, ray: Ray, active, ignore) -> torch.Tensor:
        batch, n, blocker, ray = _trace.trace(self, call, ray, active, ignore, any_hit=True, widen=True)
        if n and self._output_dtype(ray.o, ray.d) == torch.float64 and not _walk_on.traced():  # float64 t decides
            t = _walk_on.t_of(self, ray, batch, blocker)
            return _walk_on.confirm_blocked(self, ray, ignore, batch, blocker, t).reshape(batch)
        if _interval.host_ok(blocker):
            # In NumPy: torch's `>=` on the CPU wakes its OpenMP pool, whose threads then spin
            # (8-12 ms of CPU per 256 k rays, taken from the next query's cores).
            return torch.from_numpy(blocker.numpy() >= 0).reshape(batch)
        return (blocker >= 0).reshape(batch)

    def _unblocked(self, call: str, ray: Ray, active, ignore) -> torch.Tensor:
        # shadow_test's decision (float64 segments: the blocker's float64 t decides), then the segment rules
        return _trace.unblocked(ray, self._occluded(call, ray, active, ignore), active)

    # ------------------------------------------------------------------ copies
    _DEEPCOPY = "use copy.deepcopy(scene) for an independent scene"

    def __deepcopy__(self, memo: dict) -> "Scene":
        """``copy.deepcopy(scene)``: an independent scene with deep copies of the registered tensors.

        The shapes are added again in order (same ids, ``dynamic`` flags, instances,
        transforms — a batch given to ``set_mesh_transform`` stays one batch — enable
        flags and the edge mask), each from a deep copy of the tensors the original
        holds now: the vertex tensor last registered, faces, normals, uv, matrices.
        Tensors copied in the same ``deepcopy`` call are shared (``copy.deepcopy((scene,
        v))`` gives a scene whose mesh holds the copied ``v``); a non-leaf tensor is
        copied as its detached value. A built original gives a built, synced copy
        (new BVHs, so updates pending in the original are applied in the copy); an
        unbuilt one gives an unbuilt copy. Gradients never flow between the two.
        """
        return _copy.deepcopy_scene(self, memo)

    # ------------------------------------------------------------------ internals
    def _output_dtype(self, *arrays: torch.Tensor) -> torch.dtype:
        """The dtype of a query's differentiable outputs: ``arrays`` (a ``Ray``'s ``o`` and ``d``,
        or points) and the meshes' vertices promoted together."""
        dtype = arrays[0].dtype
        for array in arrays[1:]:
            dtype = torch.promote_types(dtype, array.dtype)
        return torch.promote_types(dtype, self._state.vertex_dtype)  # the meshes' (instances share them)


serialise_public(Scene, torch.compiler.is_compiling)
