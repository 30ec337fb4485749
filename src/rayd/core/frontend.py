"""`SceneBase`: the part of a frontend's ``Scene`` that is the same for every array library.

Each public lifecycle method is one sequence — check the arguments (frontend hooks),
hand the arrays to :class:`rayd.core.SceneCore`, done — so it is written once here.
A frontend subclass provides the hooks below (argument checks and conversions in its
own array library) and the queries, whose evaluation is frontend-specific.

What a frontend binds, once: its package ``rayd.<frontend>`` has a module ``_parts``
that names (by importing them) the pieces written in its array library, read here when
the ``Scene`` subclass is made (:meth:`SceneBase.__init_subclass__`):

- ``Mesh``, ``Ray``: its public types (``_MESH``, ``_RAY``; ``Mesh``'s
  :class:`~rayd.core.mesh.MeshBase` hooks check vertices and single matrices here too);
- ``Arrays``: its :class:`~rayd.core.protocol.ArrayProtocol` class (made with no arguments);
- ``LiveState(scene)``, ``SceneEdges(scene)``: the per-build state the queries read and
  the edges (an :class:`~rayd.core.edges.EdgeState`), made by ``build()`` in that order;
  ``sync()`` calls ``LiveState.synced()`` after it has synced the edges;
- ``check_ray(call, ray, device)``, ``check_transforms(call, name, value, count, device)``:
  a checked ``Ray`` of the scene's device, a checked batch of ``count`` matrices;
- ``check_active``, ``check_ignore``: a ray query's mask and ignore-id checks
  (:func:`rayd.core.query_args.query_arguments`);
- ``edge_queries``, ``surface``, ``all_hits``, ``reflections``: the modules of the edge,
  surface, all-hits and reflection queries (:class:`~rayd.core.edges.EdgeQueries`,
  :class:`~rayd.core.surface.SurfaceQueries`, :class:`~rayd.core.queries.AllHitsQueries`,
  :class:`~rayd.core.specular.ReflectionQueries`).

``_PREFIX`` (``"rayd.torch.Scene"``) is set from the subclass's module. Hooks a subclass
defines as methods:

- ``_mesh_device(mesh)``: the device name of a mesh;
- ``_same_device(call, name, array)``: raise ``ValueError`` unless ``array`` is on the scene's device;
- ``_ids(call, name, value)``: a list of ints from the frontend's id containers (default:
  ``value`` itself, a Python int sequence);
- ``_batch_entry(batch, k)``: the matrix ``k`` of a checked batch (differentiable view/gather);
- ``_built()``: anything else the frontend makes at ``build()``, after the live state and
  the edges (default: nothing); ``_before_sync()``: re-read in-place changed batches.
"""

from __future__ import annotations

import importlib
import inspect
import types
from typing import Any

import numpy as np

from rayd.core.docs import FrontendDocs
from rayd.core.scene import SceneCore
from rayd.core.shapes import Shape, ShapeTable
from rayd.engine.runtime import serialised


def type_name(value: object) -> str:
    """``module.Name`` of ``value``'s type for messages (rayd's own and the array libraries' types)."""
    cls = type(value)
    module = cls.__module__
    if module.startswith("torch"):
        module = "torch"
    if module == "builtins":
        return cls.__name__
    return f"{module}.{cls.__qualname__}"


def frontend_module(obj: object, name: str) -> types.ModuleType:
    """The module ``rayd.<frontend>.<name>`` of the frontend whose public class ``obj`` is (or is an instance of).

    ``obj``'s ``_name`` (:class:`PublicName`, ``"rayd.torch.Mesh"``) names the frontend; the
    module is imported on first use (core code reaches a frontend's pieces by name, never by
    importing torch or drjit itself).
    """
    return importlib.import_module(f"{obj._name.rsplit('.', 1)[0]}.{name}")


class PublicName:
    """Mixin: each subclass defined in ``rayd.torch`` / ``rayd.drjit`` gets ``_name``, its public
    name for messages and ``repr`` (``rayd.torch.NearestEdge``), unless it sets one itself."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parts = cls.__module__.split(".")
        if "_name" not in cls.__dict__ and parts[:2] in (["rayd", "torch"], ["rayd", "drjit"]):
            cls._name = f"rayd.{parts[1]}.{cls.__name__}"


class SceneBase(FrontendDocs):
    """Shared lifecycle of ``rayd.torch.Scene`` and ``rayd.drjit.Scene`` (see the module docstring).

    The docstrings of the ray queries and ``device`` on a frontend's ``Scene`` are its
    ``rayd.<frontend>._scene_docs.DOCS`` (:class:`~rayd.core.docs.FrontendDocs`).
    """

    _PREFIX = "rayd.Scene"
    _DOCS_MODULE = "_scene_docs"
    _PARTS: Any = None  # the frontend's ``_parts`` module (module docstring)
    _MESH: Any = object
    _RAY: Any = None
    _EDGE_QUERIES: Any = None
    _SURFACE: Any = None
    _ALL_HITS: Any = None
    _REFLECT: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parts = cls.__module__.split(".")
        if parts[:2] in (["rayd", "torch"], ["rayd", "drjit"]):
            if "_PREFIX" not in cls.__dict__:
                cls._PREFIX = f"rayd.{parts[1]}.{cls.__name__}"
            cls._PARTS = bound = importlib.import_module(f"rayd.{parts[1]}._parts")
            cls._MESH, cls._RAY = bound.Mesh, bound.Ray
            cls._EDGE_QUERIES, cls._SURFACE, cls._ALL_HITS = bound.edge_queries, bound.surface, bound.all_hits
            cls._REFLECT = bound.reflections

    def __init__(self) -> None:
        self._core = SceneCore(self._PARTS.Arrays(), self._PREFIX)
        self._device: Any = None
        self._edges: Any = None
        self._state: Any = None

    # ------------------------------------------------------------------ copies
    def __copy__(self):
        raise TypeError(f"copy.copy({self._PREFIX}): a shallow copy would share the BVHs and the change "
                        f"tracking of the original; {self._DEEPCOPY}")

    def __deepcopy__(self, memo: dict):
        raise TypeError(f"copy.deepcopy({self._PREFIX}) is not supported; make a new Scene and add the meshes again")

    def __reduce_ex__(self, protocol):
        raise TypeError(f"pickle.dumps({self._PREFIX}): a scene holds device acceleration structures and cannot "
                        "be pickled; save the meshes' arrays and rebuild")

    #: What ``copy.copy`` suggests instead (a frontend with ``__deepcopy__`` names it).
    _DEEPCOPY = "make a new Scene and add the meshes again"

    # ------------------------------------------------------------------ hooks (frontends)
    @property
    def device(self) -> Any:
        """The scene's device (that of its meshes), ``None`` while it is empty."""
        return self._device

    @property
    def _table(self) -> ShapeTable:
        return self._core.table

    @property
    def _shapes(self) -> list[Shape]:
        return self._core.table.shapes

    # ------------------------------------------------------------------ contents
    def add_mesh(self, mesh: Any, dynamic: bool = False) -> int:
        """Add a mesh; returns its shape id (meshes and instances count 0, 1, 2, ... together).

        Args:
            mesh: a ``Mesh`` of this frontend (``rayd.torch.Mesh`` / ``rayd.drjit.Mesh``).
            dynamic: ``True`` if its vertices will change (``update_mesh_vertices``).

        Returns:
            The shape id, which hits report as ``shape_id``; the first ``add_mesh``
            returns 0.

        Raises:
            TypeError: ``mesh`` is not this frontend's ``Mesh`` (rayd.torch and rayd.drjit
                objects do not mix), or ``dynamic`` is not a bool.
            ValueError: ``mesh`` is on another device than the scene's shapes.
        """
        call = f"{self._PREFIX}.add_mesh()"
        if not isinstance(mesh, self._MESH):
            name = type_name(mesh)
            if name.startswith("rayd.") and not name.startswith(self._PREFIX.rsplit(".", 1)[0]):
                name += " (rayd.torch and rayd.drjit objects do not mix)"
            raise TypeError(f"{call}: 'mesh' must be a {self._PREFIX.rsplit('.', 1)[0]}.Mesh, got {name}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"{call}: 'dynamic' must be a bool, got {type(dynamic).__name__}")
        if self._device is None:
            self._device = self._mesh_device(mesh)
        self._same_device(call, "mesh", mesh.vertices)
        return self._core.add_mesh(mesh, mesh.vertices, mesh.to_world, dynamic, str(self._device))

    def add_instance(self, mesh_id: int, to_world: Any) -> int:
        """Place another copy of a mesh, sharing its bottom-level BVH; returns its shape id.

        Args:
            mesh_id: the id ``add_mesh`` returned (the mesh stays present itself).
            to_world: one 4x4 float32/float64 matrix (torch (4, 4); Dr.Jit ``Matrix4f``/
                ``Matrix4f64`` of width 1 or ``drjit.scalar``), column-vector convention;
                the instance's placement is ``to_world @ M_mesh``. Gradients flow into it.

        Returns:
            The shape id; hits on the instance report it as ``shape_id`` and faces of the
            mesh as ``prim_id``.

        Raises:
            TypeError, ValueError: wrong id type/range (or an instance id), or a bad
                matrix (non-finite, beyond float32 range, singular).
        """
        call = f"{self._PREFIX}.add_instance()"
        base = self._table.get_mesh(call, "mesh_id", mesh_id)
        return self._core.add_instance(base, mesh_id, self._check_transform(call, "to_world", to_world, base))

    @property
    def num_meshes(self) -> int:
        """Number of meshes added (instances not counted)."""
        return self._table.num_meshes

    @property
    def num_shapes(self) -> int:
        """Number of shapes: meshes and instances."""
        return len(self._table)

    # ------------------------------------------------------------------ lifecycle
    def build(self) -> None:
        """Check and snapshot every shape, then build the acceleration structures.

        One BVH (SAH) over the world-space triangles of all meshes; when instances
        exist, a top-level BVH over instance boxes whose leaves share one object-space
        BVH per instanced mesh. Faces are checked here, where they are snapshotted.

        Raises:
            ValueError: the scene has no triangles, a mesh's faces index outside its
                vertices (e.g. changed in place after ``Mesh()``), or a mesh has
                non-finite vertices.
        """
        self._core.build(f"{self._PREFIX}.build()")
        self._state = self._PARTS.LiveState(self)
        self._edges = self._PARTS.SceneEdges(self)
        self._built()

    def _built(self) -> None:
        """Frontend hook: what else it makes at ``build()`` (after the live state and the edges)."""

    def update_mesh_vertices(self, mesh_id: int, vertices: Any) -> None:
        """Register new vertex positions for a dynamic mesh; ``sync()`` refits.

        Args:
            mesh_id: the id ``add_mesh`` returned.
            vertices: (V, 3) float32/float64 with the mesh's V (torch tensor; Dr.Jit
                ``Array3f``/``Array3f64`` of width V), on the scene's device. This array
                (not a copy) becomes the one gradients flow into; it may be the same
                array as before, e.g. a parameter just stepped in place.

        Raises:
            TypeError: ``mesh_id`` is not an int, or ``vertices`` not a float array.
            ValueError: ``mesh_id`` out of range or an instance, or a wrong shape or device.
            RuntimeError: the mesh was added with ``dynamic=False``.
        """
        call = f"{self._PREFIX}.update_mesh_vertices()"
        shape = self._table.get(call, "mesh_id", mesh_id)
        if shape.is_instance:
            raise ValueError(f"{call}: 'mesh_id' {mesh_id} is an instance; update the mesh it instances")
        if not shape.dynamic:
            raise RuntimeError(
                f"{call}: mesh {mesh_id} was added with dynamic=False; add it with dynamic=True to move it, "
                f"or call build() after changing it"
            )
        vertices = self._check_vertices(call, "vertices", vertices, shape.num_vertices, mesh_id)
        self._same_device(call, "vertices", vertices)
        self._core.update_vertices(mesh_id, vertices)

    def set_mesh_transform(self, shape_id: Any, to_world: Any) -> None:
        """Set the object-to-world matrix of a mesh or an instance; takes effect at ``sync()``.

        Args:
            shape_id: a mesh or instance id. For a mesh this is ``M_mesh`` (its
                instances follow, as ``M_instance @ M_mesh``); for an instance its own
                matrix. Any shape may move, dynamic or not. Also a sequence (torch: or a
                1-D integer tensor) of K distinct ids, to set K matrices in one call; K = 0
                with an empty batch is a no-op.
            to_world: one 4x4 float32/float64 matrix acting on column vectors, or K of
                them with K ids (torch (K, 4, 4); Dr.Jit width K). Gradients flow into it.
                Each call reads the matrices once to check them (one host
                synchronisation): prefer one call with K ids over K calls, or write new
                values in place into the array the shapes hold and call ``sync()``.

        Raises:
            TypeError, ValueError: wrong id type/range, repeated ids, dtype, shape or
                device; non-finite, beyond-float32 or singular matrices.
        """
        call = f"{self._PREFIX}.set_mesh_transform()"
        if isinstance(shape_id, (int, np.integer)) and not isinstance(shape_id, bool):
            shape_id = int(shape_id)
            shape = self._table.get(call, "shape_id", shape_id)
            self._core.set_transform(shape_id, self._check_transform(call, "to_world", to_world, shape))
            return
        ids = self._table.id_list(call, "shape_id", self._ids(call, "shape_id", shape_id))
        batch = self._check_transforms(call, "to_world", to_world, len(ids))
        for k, one in enumerate(ids):
            self._core.set_transform(one, self._batch_entry(batch, k), source=batch, index=k, count=len(ids))

    def set_shape_enabled(self, shape_id: int, flag: bool) -> None:
        """Enable or disable a mesh or instance for all queries; takes effect at ``sync()`` (no rebuild).

        A disabled shape is invisible to every query (hits, occlusion, edges, surface
        queries); its ids keep their numbers.

        Args:
            shape_id: Python or NumPy int, a mesh or instance id (``add_mesh`` /
                ``add_instance`` returned it).
            flag: Python or NumPy bool, True to enable.

        Returns:
            None; the scene has pending updates until ``sync()``.

        Raises:
            TypeError: ``shape_id`` not an integer (bools refused), or ``flag`` not a bool.
            ValueError: ``shape_id`` out of range.
        """
        call = f"{self._PREFIX}.set_shape_enabled()"
        shape = self._table.get(call, "shape_id", shape_id)
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{call}: 'flag' must be a bool, got {type(flag).__name__}")
        self._table.set_enabled(shape, bool(flag))

    def has_pending_updates(self) -> bool:
        """True if updates (vertices, transforms, enable flags, edge masks, in-place changes) await ``sync()``."""
        return self._table.has_pending() or (self._edges is not None and self._edges.pending)

    def is_ready(self) -> bool:
        """True if queries can run now: built, nothing added since, nothing pending or stale (edge masks included)."""
        return self._table.is_ready() and not (self._edges is not None and self._edges.pending)

    def sync(self) -> None:
        """Apply pending updates: refit moved meshes, refit the top level, apply enable flags and edge masks.

        Raises:
            RuntimeError: before ``build()``, after shapes were added without a new
                ``build()``, or if a static mesh changed in place (needs ``build()``).
            ValueError: an updated mesh has non-finite vertices.
        """
        call = f"{self._PREFIX}.sync()"
        self._table.require_built(call)
        self._before_sync()
        moved = self._core.sync(call)
        self._edges.sync(self._core.arrays.stream(str(self._device)), moved=bool(moved))
        self._state.synced()

    def _before_sync(self) -> None:
        """Frontend hook: re-read what an in-place change of a batch of matrices needs re-read."""

    # ------------------------------------------------------------------ argument checks
    def _check_vertices(self, call: str, name: str, vertices: Any, count: int, mesh_id: int) -> Any:
        """New vertices of mesh ``mesh_id``: a float array of ``count`` 3-vectors (the mesh's checks), else raise."""
        vertices = self._MESH._check_float(call, name, vertices, 3)
        if self._MESH._rows(call, name, vertices) != count:  # (Dr.Jit: a ragged array raises here, not at sync())
            raise ValueError(f"{call}: '{name}' must have shape ({count}, 3) like mesh {mesh_id}, "
                             f"got {self._MESH._shape_text(vertices)}")
        return vertices

    def _check_transform(self, call: str, name: str, value: Any, shape: Shape) -> Any:
        """One checked matrix for ``shape`` (the mesh's check, on the device of the shape's vertices)."""
        return self._MESH._check_transform(call, name, value, shape.mesh.vertices)

    def _check_transforms(self, call: str, name: str, value: Any, count: int) -> Any:
        """A checked batch of ``count`` matrices on the scene's device (the frontend's ``check_transforms``)."""
        return self._PARTS.check_transforms(call, name, value, count, self._device)

    def _check_ray(self, call: str, ray: Any) -> Any:
        """``ray`` if it is the frontend's ``Ray`` on the scene's device (the frontend's ``check_ray``), else raise."""
        return self._PARTS.check_ray(call, ray, self._device)

    def _ids(self, call: str, name: str, value: Any) -> Any:
        """The ids of a batch as the core reads them (a frontend may convert its own id arrays)."""
        return value

    # ------------------------------------------------------------------ shared internals
    def _require_built(self, call: str) -> None:
        self._table.require_built(call)

    def _require_current(self, call: str) -> None:
        self._table.require_current(call)

    def _require_ready(self, call: str) -> None:
        """The lifecycle check of a query (``RuntimeError`` unless built and synced, naming ``call``).

        While the frontend traces a graph (:meth:`_tracing`) only the structural check runs; a
        frontend that reads a check's content verdict later (:meth:`_ready_mark`,
        :meth:`_after_ready`) repeats the check there.
        """
        if self._tracing():
            self._table.require_built(call)
            return
        mark = self._ready_mark()
        self._table.require_ready(call)
        if self._edges is not None and self._edges.pending:  # every query, as is_ready() says
            self._edges.require_synced(call)
        self._after_ready(call, mark)

    def _tracing(self) -> bool:
        """Whether a graph is being traced now (rayd.torch under ``torch.compile``); default ``False``."""
        return False

    def _ready_mark(self) -> Any:
        """A mark taken before the lifecycle check, passed to :meth:`_after_ready`; default ``None``."""
        return None

    def _after_ready(self, call: str, mark: Any) -> None:
        """Run after the lifecycle check of ``call`` passed (``mark``: :meth:`_ready_mark`'s); default nothing."""

    def _synced_edges(self, call: str) -> Any:
        """The scene's edges (:class:`~rayd.core.edges.EdgeState`), refusing edge masks that await ``sync()``."""
        self._edges.require_synced(call)
        return self._edges

    def __repr__(self) -> str:
        state = "ready" if self.is_ready() else ("built" if self._table.built else "not built")
        return f"{self._PREFIX}(shapes={self.num_shapes}, device={self._device}, {state})"


def serialise_public(cls: type, bypass: Any = None) -> type:
    """Run every public method of ``cls`` (its own and inherited) under the engine lock.

    See :data:`rayd.engine.runtime.ENGINE_LOCK`: the engine's lazy module loads, recorded
    launches and lazily built accelerators are not thread-safe, so a frontend's ``Scene``
    and ``Camera`` answer calls from several threads one at a time. Called once per class,
    after its docstrings are set (``document``); the wrappers keep names, docstrings and
    signatures (``functools.wraps``). ``bypass``: see :func:`rayd.engine.runtime.serialised`.

    Returns:
        ``cls``.
    """
    for name in dir(cls):
        if name.startswith("_") and name != "__deepcopy__":
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, types.FunctionType):
            setattr(cls, name, serialised(attr, bypass))
    return cls
