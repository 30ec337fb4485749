"""`Scene`: meshes, their acceleration structure, its lifecycle, and queries.

The scene logic (ids, numbering, change tracking, transforms, build/sync) is
:class:`rayd.core.SceneCore`'s and the lifecycle methods are
:class:`rayd.core.frontend.SceneBase`'s, the ray queries' shared steps
:class:`rayd.core.queries.RayQueries`'s; this class holds what is Dr.Jit's: argument
checks, the hand-over of arrays, the differentiable evaluation and the records.
"""

from __future__ import annotations

import functools

import drjit as dr

from rayd.core import contents, hits
from rayd.core.frontend import SceneBase, serialise_public
from rayd.core.queries import VISIBILITY_EPSILON, AllHitsQueries, RayQueries  # noqa: F401 - VISIBILITY_EPSILON: public here
from rayd.drjit import _check, _convert, _trace, _verdicts, _walk_on
from rayd.drjit._intersect import empty, enforce, evaluate
from rayd.drjit._live import gather_matrix, shape_is_ad
from rayd.drjit._scene_edges import EdgeQueries
from rayd.drjit._scene_surface import SurfaceQueries
from rayd.core.specular import ReflectionQueries
from rayd.drjit.intersection import Intersection
from rayd.drjit.mesh import Mesh
from rayd.drjit.ray import Ray
from rayd.flags import RayFlags

class Scene(AllHitsQueries, ReflectionQueries, EdgeQueries, SurfaceQueries, RayQueries, SceneBase):
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

    @property
    def backend(self) -> str | None:
        """The scene's Dr.Jit backend, ``'llvm'`` or ``'cuda'``; ``None`` while empty."""
        return None if self._device is None else _convert.backend_of(self._device)

    _backend = backend  # (the name the query modules read; it follows from the device)

    # ------------------------------------------------------------------ SceneBase hooks (and rayd.drjit._parts)
    def _mesh_device(self, mesh: Mesh) -> str:
        self._core.arrays.device = mesh.device  # the protocol works on the scene's device
        return mesh.device

    def _same_device(self, call: str, name: str, array: dr.ArrayBase) -> None:
        _check.same_backend(call, name, array, self._device, "the scene")

    def _ready_mark(self) -> int:
        """Inside a query on CUDA the lifecycle check's content comparison is read at the query's fence
        (:func:`rayd.drjit._verdicts.deferring`): the verdicts deferred before the check."""
        return _verdicts.deferred_count()

    def _after_ready(self, call: str, mark: int) -> None:
        """If the check deferred a verdict, the query repeats the check at its fence, raising its error
        there if an array changed."""
        if _verdicts.deferred_count() > mark:
            _verdicts.on_changed(lambda: self._table.require_ready(call))

    def _batch_entry(self, batch: dr.ArrayBase, k: int) -> dr.ArrayBase:
        return gather_matrix(batch, k, self._backend)

    def _before_sync(self) -> None:
        memo: dict = {}
        self._table.unchanged()  # (what matrix_changed reads: also writes no version stamp sees)
        for shape in self._table:  # a batch changed in place: take the new values (differentiably)
            if shape.source is not None and self._table.matrix_changed(shape, memo):
                shape.to_world = gather_matrix(shape.source, shape.source_index, self._backend)

    # ------------------------------------------------------------------ queries (RayQueries hooks)
    def _intersect(self, call: str, ray: Ray, active, flags: RayFlags, ignore) -> Intersection:
        n, global_prim_id = _trace.trace(self, call, ray, active, ignore, any_hit=False, widen=True)
        m, double = self._precision(ray.o, ray.d)
        if n == 0:
            return Intersection(flags, **empty(m, double, flags))
        face = hits.face_frame(self._core, double)  # float64: a winner off its face is a miss
        fields = evaluate(m, double, ray.o, ray.d, global_prim_id, self._state.live_geometry(m, double), flags, face)
        if double:  # a winner the float32 search put past tmin or off its face: the first crossings decide
            found = _walk_on.walk_on(self, m, ray, ignore, global_prim_id, fields["t"])  # (masked, no host read)
            fields = evaluate(m, double, ray.o, ray.d, found, self._state.live_geometry(m, double), flags, face)
        return Intersection(flags, **enforce(m, fields, ray.tmin, ray.tmax))

    def _occluded(self, call: str, ray: Ray, active, ignore) -> dr.ArrayBase:
        n, blocker = _trace.trace(self, call, ray, active, ignore, any_hit=True, widen=True)
        if n == 0:
            return _convert.module(self._backend, False).Bool()
        m, double = self._precision(ray.o, ray.d)
        if double:  # the blocker's float64 t decides
            return _walk_on.confirm_blocked(self, m, ray, ignore, blocker)
        return blocker >= 0

    def _segment_points(self, start: dr.ArrayBase, end: dr.ArrayBase) -> tuple[dr.ArrayBase, dr.ArrayBase]:
        start, end = dr.detach(start), dr.detach(end)
        if dr.width(start) == 0 or dr.width(end) == 0:  # no segments: Dr.Jit's `end - start` refuses widths 0 and 1
            return type(start)(), type(end)()
        return start, end

    def _unblocked(self, call: str, ray: Ray, active, ignore) -> dr.ArrayBase:
        # shadow_test's decision (float64 segments: the blocker's float64 t decides), then the segment rules
        blocked = self._occluded(call, ray, active, ignore)
        if dr.width(blocked) == 0:
            return blocked
        return _trace.unblocked(ray, blocked, active)

    # ------------------------------------------------------------------ internals
    def _precision(self, *arrays: dr.ArrayBase) -> tuple:
        """``(m, double)`` of a query on ``arrays``: the Dr.Jit module to evaluate in (its AD
        variant when any of ``arrays`` or the registered arrays is an AD array) and whether the
        output is float64 (any of ``arrays`` or the meshes' vertices is)."""
        if self._state is not None:  # the registered arrays' kinds, once per sync (no pass over every shape)
            meshes_double, shapes_ad = self._state.precision()
        else:
            meshes_double = any(_convert.is_double(s.vertices) for s in self._table.meshes)
            shapes_ad = any(shape_is_ad(s) for s in self._shapes)
        double = meshes_double or any(_convert.is_double(a) for a in arrays)
        ad = shapes_ad or any(_convert.is_ad(a) for a in arrays)
        return _convert.module(self._backend, ad), double

    def _check_active(self, call: str, ray: Ray, active: object):
        return _trace.check_active(call, ray, active, self._device)

    def _shape_is_ad(self, shape) -> bool:
        return shape_is_ad(shape)

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



# One host synchronisation per CUDA query, after its last engine launch (rayd.drjit._convert.one_fence):
# the frontend's part of each query is wrapped, so the public methods keep running the core's own code.
for _name in ("_intersect", "_occluded", "_unblocked"):
    setattr(Scene, _name, _convert.one_fence(getattr(Scene, _name)))


def _content_scope(method):
    """``method`` (a public query) run as one query scope (:func:`rayd.drjit._convert.one_fence`), so that its
    lifecycle check's content comparison leaves its verdict to the query's one fence (nested scopes fence
    once, at the outermost's end), wherever the content check runs (:data:`rayd.core.contents.MODE`: on the
    CPU by default; on CUDA opt-in, and there without this scope the fences stay where they were)."""
    scoped = _convert.one_fence(method)
    call = f"rayd.drjit.Scene.{method.__name__}()"

    @functools.wraps(method)
    def query(self, *args, **kwargs):
        _check.outside_recording(call)
        if self._device is None:
            return method(self, *args, **kwargs)  # (not built: the lifecycle check raises)
        token = _check.enter_query(call)  # (named by checks deep inside: rayd.drjit._live)
        try:
            if self._device.startswith("cuda") and contents.MODE not in ("1", "all"):
                return method(self, *args, **kwargs)
            return scoped(self, *args, **kwargs)
        finally:
            _check.leave_query(token)

    return query


for _name in ("intersect", "shadow_test", "visible", "intersect_all", "count_intersections", "trace_reflections",
              "specular_paths", "closest_point", "winding_number", "contains", "signed_distance", "nearest_edge",
              "nearest_edges", "silhouette_edges"):
    setattr(Scene, _name, _content_scope(getattr(Scene, _name)))


def _guarded(check, method):
    """``method`` with ``check(call)`` run first: :func:`_check.outside_recording` (lifecycle calls that read
    arrays on the host: refused inside symbolic regions and ``drjit.freeze``, Dr.Jit's obscure errors there) or
    :func:`_check.outside_freezing` (calls that change the scene or return its arrays: refused while
    ``drjit.freeze`` records, since replays would skip them; they still run in symbolic loops)."""
    call = f"rayd.drjit.Scene.{method.__name__}()"

    @functools.wraps(method)
    def scene_call(self, *args, **kwargs):
        check(call)
        return method(self, *args, **kwargs)

    return scene_call


for _name in ("build", "sync", "set_mesh_transform"):
    setattr(Scene, _name, _guarded(_check.outside_recording, getattr(Scene, _name)))
for _name in ("add_mesh", "add_instance", "update_mesh_vertices", "set_shape_enabled", "set_edge_mask", "edge_mask",
              "edge_topology"):
    setattr(Scene, _name, _guarded(_check.outside_freezing, getattr(Scene, _name)))
del _name
serialise_public(Scene)
_check.exact_math_public(Scene)  # float64 derivatives exact on CUDA (FastMath off inside every call)
