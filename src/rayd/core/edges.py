"""Edge bookkeeping shared by both frontends: state, lifecycle and the public edge methods.

- :class:`EdgeState`: a built scene's edges: the lazily computed topology, the edge
  mask and the enable flags the edge BVH sees, the world-space vertex copy and the
  engine's edge BVH, refreshed by ``sync()``. A frontend subclasses it and provides
  the parts written in its array library (hooks listed on the class).
- :class:`TopologyBase`: ``len()`` and ``repr()`` of a frontend's ``EdgeTopology``.
- :class:`EdgeQueries`: the scene's edge methods (``edge_topology``, ``set_edge_mask``,
  ``edge_mask``, ``nearest_edge``, ``nearest_edges``, ``silhouette_edges``); each frontend
  mixes it into its ``Scene`` and gives the methods their own docstrings with
  :func:`document`.

The topology rule itself is the engine's (:mod:`rayd.engine.edge_topology`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from rayd.core.docs import FrontendDocs, document  # noqa: F401 - document re-exported (its first home)
from rayd.core.checks import lifecycle, max_distance as check_max_distance, top_k
from rayd.core.frontend import PublicName, frontend_module
from rayd.core.topology import assemble, check_total, mesh_passes  # noqa: F401 - check_total re-exported
from rayd.engine.nearest_edge import MAX_K


@dataclass(frozen=True, repr=False)
class TopologyBase(PublicName):
    """The fields, ``num_edges``, ``len()`` and ``repr()`` of a frontend's ``EdgeTopology``.

    A frozen dataclass of the seven (E,)-row fields of DESIGN.md ("Edges"); the
    frontend's subclass documents them in its array types; ``repr`` says where they live
    by the frontend's ``_convert.where``.
    """

    _name = "rayd.EdgeTopology"
    v: Any
    faces: Any
    opposite: Any
    is_boundary: Any
    shape_id: Any
    edge_id: Any
    global_edge_id: Any

    @property
    def num_edges(self) -> int:
        """E, the number of edge records."""
        return len(self.global_edge_id)

    def __len__(self) -> int:
        return self.num_edges

    def __repr__(self) -> str:
        return f"{self._name}(num_edges={self.num_edges}, {frontend_module(self, '_convert').where(self.v)})"

    @staticmethod
    def _copy_array(array: Any) -> Any:
        """An independent copy of one field (a frontend hook: ``tensor.clone()``, ``type(a)(a)``)."""
        raise NotImplementedError

    def copy(self) -> "TopologyBase":
        """A record of the same type whose fields are copies: writes into them leave this one as it is."""
        return replace(self, **{f.name: self._copy_array(getattr(self, f.name)) for f in fields(self)})


class EdgeState:
    """A built scene's edges: topology, the edge mask, and the engine's edge BVH.

    Created by ``Scene.build()`` (cheaply: the topology and the BVH are computed on
    first use), refreshed by ``Scene.sync()``. Keeps its own float32 world-space copy
    of every shape's vertices (instances included, placed by ``M_instance @ M_mesh``)
    for the engine; edges of disabled shapes are hidden like masked edges.

    Hooks a frontend subclass defines:

    - ``_mesh_records(base, stream)``: the engine's records of the mesh ``base`` (a shape
      id of :func:`rayd.core.topology.mesh_passes`) as ``(count, arrays)``;
    - ``_make_topology(records, plan)``: the frontend's ``EdgeTopology`` from the passes'
      records (in pass order) gathered by the :class:`~rayd.core.topology.TopologyPlan`;
      also sets its own index arrays, the user mask ``_mask`` (all True) and the buffer
      the BVH reads (``_update_mask`` is called next, with the topology set);
    - ``_per_edge(enabled)``: the (E,) bool array ``enabled[shape_id]`` of a per-shape list
      of Python bools (only called when some shape is disabled);
    - ``_write_applied(stream, applied)``: write the (E,) bool array ``applied`` into the
      BVH's flag buffer;
    - ``_refresh_points(stream)``: write the world-space vertices into the BVH's buffer;
    - ``_build_bvh(stream)``: the engine's ``EdgeBvh`` over those buffers;
    - ``_checked_mask(call, mask)``: ``(copy, count, shown)``: the frontend's own copy of
      a user mask of the right type and device (else raise), its entry count (-1 if it
      is not one-dimensional) and its shape as messages show it;
    - ``_copy_mask()``: a copy of ``_mask`` for the user;
    - ``_refit(stream)`` (optional): refit the BVH (default ``_bvh.refit(stream)``);
    - ``silhouette(...)`` (called by the frontend's ``silhouette_edges``): (E,) bool, the
      silhouette rule: a face ``(v0, v1, v2)`` faces the viewpoint ``c`` when
      ``dot((v1 - v0) x (v2 - v0), c - v0) > 0``; an edge is a silhouette edge when it is
      a boundary edge or exactly one of its two faces faces ``c``, and it is applied (not
      masked out, its shape enabled).

    Args:
        shapes: the scene's list of shape records, in shape order (the scene's own list,
            read live: enable flags and vertices change after ``build()``).
        arrays: the frontend's :class:`~rayd.core.protocol.ArrayProtocol` (its streams).
        device: the scene's device name.
    """

    def __init__(self, shapes: list, arrays: Any, device: str) -> None:
        self._shapes = shapes
        self._arrays = arrays
        self._device_name = device
        self._world_offsets: list[int] = []  # first row of each shape in the world-space vertex copy
        total = 0
        for shape in shapes:
            self._world_offsets.append(total)
            total += shape.mesh.num_vertices
        self._num_world_vertices = total
        self._topology: Any = None
        self._mask: Any = None  # as set by the user
        self._bvh: Any = None
        self._enabled: list[bool] = []  # the enable flags the BVH's mask was made with
        self.pending = False
        # What sync() left for the next edge query (the BVH is refitted lazily, issue 18 "update"):
        # None (nothing), "refit" (the applied mask changed) or "points" (vertices moved: refresh then refit).
        self._stale: str | None = None

    # ------------------------------------------------------------------ hooks
    def _mesh_records(self, base: int, stream) -> tuple[int, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _make_topology(self, records: list, plan: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _per_edge(self, enabled: list[bool]) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _write_applied(self, stream, applied: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _refresh_points(self, stream) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _build_bvh(self, stream) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _checked_mask(self, call: str, mask: object) -> tuple[Any, int, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _copy_mask(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _refit(self, stream) -> None:
        self._bvh.refit(stream)

    # ------------------------------------------------------------------ topology
    @property
    def _owner(self) -> str:
        """The scene's public name for messages (``"rayd.torch.Scene"``), from the frontend's module."""
        return f"rayd.{type(self).__module__.split('.')[1]}.Scene"

    def _compute_topology(self) -> None:
        """One engine pass per mesh (shared by its instances), then the scene's rows by the
        host plan of :func:`rayd.core.topology.assemble` (one gather per field, so the work
        does not grow with the number of shapes), then the applied mask."""
        owner, shapes = self._owner, self._shapes
        stream = self._arrays.stream(self._device_name)
        passes = {b: self._mesh_records(b, stream) for b in mesh_passes(owner, shapes)}
        plan = assemble(owner, shapes, self._world_offsets, {b: count for b, (count, _) in passes.items()})
        self._topology = self._make_topology([records for _, records in passes.values()], plan)
        self._update_mask(stream)

    # ------------------------------------------------------------------ state
    def _enabled_now(self) -> list[bool]:
        return [getattr(s, "enabled", True) for s in self._shapes]

    def _update_mask(self, stream) -> None:
        """``applied = mask & enabled[shape_id]`` (what the BVH sees), from the current enable flags."""
        self._enabled = self._enabled_now()
        applied = self._mask if all(self._enabled) else self._mask & self._per_edge(self._enabled)
        self._write_applied(stream, applied)

    @property
    def topology(self) -> Any:
        """The frontend's ``EdgeTopology``, computed on first use."""
        if self._topology is None:
            self._compute_topology()
        return self._topology

    def bvh(self, stream) -> Any:
        """The engine's edge BVH over the current (synced) vertices, built on first use and
        refitted here, on the first use after a ``sync()`` that moved vertices or changed the
        applied mask (so a ``sync()`` with no edge query after it costs no edge refit)."""
        if self._bvh is None:
            self.topology  # noqa: B018 - computes the topology, the edge rows and the masks
            self._refresh_points(stream)
            self._bvh = self._build_bvh(stream)
            self._stale = None
        elif self._stale is not None:
            if self._stale == "points":
                self._refresh_points(stream)
            self._refit(stream)
            self._stale = None
        return self._bvh

    @property
    def refit_pending(self) -> bool:
        """True while the edge BVH awaits the refit the last ``sync()`` deferred to the next edge query."""
        return self._bvh is not None and self._stale is not None

    def mask(self) -> Any:
        """(E,) bool: the mask last given to ``set_mask`` (all True by default); a copy."""
        self.topology  # noqa: B018
        return self._copy_mask()

    def set_mask(self, call: str, mask: object) -> None:
        """Record a new edge mask; it takes effect at the next ``sync()``.

        Raises:
            TypeError, ValueError: as the frontend's ``_checked_mask``; ``ValueError`` if
                the mask does not have one entry per edge.
        """
        checked, count, shown = self._checked_mask(call, mask)
        e = self.topology.num_edges
        if count != e:
            raise ValueError(f"{call}: 'mask' must have shape ({e},) (one entry per edge), got {shown}")
        self._mask = checked
        self.pending = True

    def require_synced(self, call: str) -> None:
        """``RuntimeError`` if an edge mask was set since the last ``sync()``."""
        if self.pending:
            raise lifecycle(call, "the edge mask changed since the last sync(); call sync() first")

    def sync(self, stream, moved: bool) -> None:
        """Apply a pending mask and enable flags; mark the BVH for a refit (done by :meth:`bvh`, at
        the next edge query) if anything ``moved`` or changed.

        The refit reads the scene's vertices and transforms then; they are the synced ones,
        since any later change makes the scene pending and edge queries raise until ``sync()``.
        """
        if self._topology is None:
            self.pending = False
            return
        changed = self.pending or self._enabled_now() != self._enabled
        if changed:
            self._update_mask(stream)
            self.pending = False
        if self._bvh is not None and (moved or changed):
            if moved or self._stale == "points":
                self._stale = "points"
            else:
                self._stale = "refit"


#: Docstring text the frontends' ``edge_topology`` share (``rayd.<frontend>._scene_edges.DOCS``):
#: the topology rule of DESIGN.md ("Edges"), in the Returns section (8-space indent, no final stop).
TOPOLOGY_RULE = """        Concretely, per mesh the edges are keyed by their sorted vertex pair, in
        ascending key order; an edge with one face gives a boundary record, an edge
        with ``2 <= k <= 8`` faces ``k (k - 1) / 2`` records (one per unordered face
        pair, lexicographic), an edge with ``k > 8`` faces the ``k`` consecutive
        pairs ``(f_0, f_1), ..., (f_{k-1}, f_0)`` of its faces in ascending order
        (so at most ``10.5 F`` records for ``F`` faces; ``rayd.engine.edge_topology``
        explains the rule); triangle ``(0, 1, 2)`` gives edges
        ``(0, 1), (0, 2), (1, 2)``"""

#: The ``ValueError`` line of ``edge_topology``'s Raises section (both frontends).
OVERFLOW_RAISES = """        ValueError: the records would overflow int32 edge ids (a mesh of more than
            about 204 million faces, or instances repeating more than ``2**31 - 1``
            records in all); raised before anything that large is allocated.
"""

#: What ``nearest_edge`` minimises (the Returns section of both frontends' docstrings).
NEAREST_EDGE_RULE = """Concretely, over the unmasked edges ``[a, b]`` it minimises
        ``distance = |q - edge_point|`` with ``edge_point = a + edge_t (b - a)``,
        ``edge_t in [0, 1]``, and ``q = p`` (points) or ``q = ray_point = o + ray_t d``,
        ``ray_t in [tmin, tmax]`` (rays); ties go to the smaller ``global_edge_id``.
"""

#: The end of ``nearest_edge``'s Raises section and its References (both frontends).
NEAREST_EDGE_TAIL = """        RuntimeError: the scene is not built, or has pending changes (an edge mask
            set since the last ``sync()`` included).

    References:
        Ericson 2004, "Real-Time Collision Detection", sec. 5.1.2 and 5.1.9.
    """

#: ``nearest_edges``' Units, Gradients and first Raises line (both frontends).
NEAREST_EDGES_UNITS = """
    Units:
        World units.

    Gradients:
        As :meth:`nearest_edge`, for each slot's fixed edge.

    Raises:
        TypeError: wrong types (``k`` not an int included).
"""


class EdgeQueries(FrontendDocs):
    """The edge methods of a frontend's ``Scene`` (a mixin over :class:`rayd.core.frontend.SceneBase`).

    Documented in each frontend's words from ``rayd.<frontend>._scene_edges.DOCS``
    (:class:`rayd.core.docs.FrontendDocs`).

    Each method is the same sequence in both frontends, written here: the lifecycle
    checks (``_require_ready``, then the edge state made ready), the checks that are
    not about arrays (``k``, ``max_distance``), the choice between a point and a ray
    query, then the frontend's search and evaluation.

    Hooks: ``_PREFIX`` (``"rayd.torch.Scene"``), ``_RAY`` (its ``Ray``), ``_check_ray``
    and ``_EDGE_QUERIES``, the frontend's module of ``(scene, call, ...)`` functions:
    ``ready(scene, call)`` (the scene's edge state, synced and with its lazily built
    parts made: :meth:`EdgeState.require_synced` and more), ``nearest_edge_ray(scene,
    call, edges, ray, active, max_distance)``, ``nearest_edge_points(scene, call, edges,
    points, active, max_distance)``, ``nearest_edges(scene, call, edges, points, k,
    active, max_distance)`` (array checks, engine search, evaluation, record) and
    ``silhouette_edges(scene, call, viewpoint)``.
    """

    _PREFIX = "rayd.Scene"
    _DOCS_MODULE = "_scene_edges"
    _EDGE_QUERIES: Any = None  # bound from the frontend's ``_parts.edge_queries`` (rayd.core.frontend)

    def edge_topology(self):
        self._require_current(f"{self._PREFIX}.edge_topology()")
        # A copy: the edge queries read the scene's own record, which in-place writes into the
        # returned arrays must not reach (DESIGN.md: changes are detected or refused).
        return self._edges.topology.copy()

    def set_edge_mask(self, mask) -> None:
        call = f"{self._PREFIX}.set_edge_mask()"
        self._require_current(call)
        self._edges.set_mask(call, mask)

    def edge_mask(self):
        self._require_current(f"{self._PREFIX}.edge_mask()")
        return self._edges.mask()

    def nearest_edge(self, points_or_ray=None, active=None, *, max_distance: float = math.inf, points=None,
                     ray=None):
        call = f"{self._PREFIX}.nearest_edge()"
        given = [(name, value) for name, value in (("points_or_ray", points_or_ray), ("points", points),
                                                    ("ray", ray)) if value is not None]
        if len(given) != 1:
            raise TypeError(f"{call} takes the query points or a Ray once: positionally, or as points= or ray= "
                            f"(got {', '.join(name for name, _ in given) or 'none'})")
        name, points_or_ray = given[0]
        if name == "ray" and not isinstance(points_or_ray, self._RAY):
            raise TypeError(f"{call}: 'ray' must be a {self._PREFIX.rsplit('.', 1)[0]}.Ray, "
                            f"got {type(points_or_ray).__name__}")
        if name == "points" and isinstance(points_or_ray, self._RAY):
            raise TypeError(f"{call}: 'points' must be an array of points, got a Ray (pass it as ray=)")
        self._require_ready(call)
        queries = self._EDGE_QUERIES
        edges = queries.ready(self, call)
        max_distance = check_max_distance(call, max_distance)
        if isinstance(points_or_ray, self._RAY):
            ray = self._check_ray(call, points_or_ray)
            return queries.nearest_edge_ray(self, call, edges, ray, active, max_distance)
        return queries.nearest_edge_points(self, call, edges, points_or_ray, active, max_distance)

    def nearest_edges(self, points, k: int, active=None, *, max_distance: float = math.inf):
        call = f"{self._PREFIX}.nearest_edges()"
        self._require_ready(call)
        edges = self._EDGE_QUERIES.ready(self, call)
        k = top_k(call, k, MAX_K)
        max_distance = check_max_distance(call, max_distance)
        return self._EDGE_QUERIES.nearest_edges(self, call, edges, points, k, active, max_distance)

    def silhouette_edges(self, viewpoint):
        call = f"{self._PREFIX}.silhouette_edges()"
        self._require_ready(call)
        if self._edges is not None:  # it reads the applied mask: a newer one must be synced first
            self._edges.require_synced(call)
        return self._EDGE_QUERIES.silhouette_edges(self, call, viewpoint)
