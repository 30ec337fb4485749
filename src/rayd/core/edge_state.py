"""The engine-facing half of a scene's edge state, written once for both frontends.

:class:`EdgeBuffers` is the :class:`~rayd.core.edges.EdgeState` of a frontend that
keeps the three arrays the engine's edge BVH reads as Warp views of its own buffers:

- ``_points_view``: ``vec3`` (V,) float32 world-space vertices (minus the search centre),
  written in place by the frontend's ``_refresh_points``;
- ``_edges_view``: ``vec2i`` (E,) endpoints of every edge as rows of that copy;
- ``_applied_view``: ``uint8`` (E,) flags ``mask & enabled[shape_id]``, written in
  place by the frontend's ``_write_applied``.

The frontend's ``_make_topology`` also sets ``_edge_rows``: each edge's endpoints as
rows of the vertex table the frontend evaluates winners from (its own choice of
table), read through :attr:`EdgeBuffers.edge_rows`. Building and refitting the BVH over
those views, with the frontend's fences around the engine work (a no-op for torch;
Dr.Jit on CUDA waits, see ``rayd.drjit._convert.fence``), is written here.
"""

from __future__ import annotations

from typing import Any

from rayd.core.edges import EdgeState
from rayd.engine.edges import EdgeBvh


class EdgeBuffers(EdgeState):
    """An :class:`~rayd.core.edges.EdgeState` over Warp views of the frontend's buffers (module docstring).

    Made as ``SceneEdges(scene)`` (:meth:`__init__`). Hooks as :class:`~rayd.core.edges.EdgeState`'s, less
    ``_build_bvh`` and ``_refit``
    (written here); ``_make_topology`` sets ``_edge_rows`` and ``_edges_view``, and the
    ``_applied_view`` of a buffer that ``_write_applied`` updates in place;
    ``_refresh_points`` sets ``_points_view`` of a buffer it writes in place.
    """

    _points_view: Any = None
    _edges_view: Any = None
    _applied_view: Any = None
    _edge_rows: Any = None

    def __init__(self, scene: Any) -> None:
        """The edge state of ``scene``, just built (``Scene.build()`` makes it).

        Reads the scene's shape list (live, in shape order), its device, its array protocol
        (``scene._core.arrays``: the stream and fences of the engine work) and keeps the
        scene (``_scene``) and its live state (``_state``, made before the edges).
        """
        super().__init__(scene._shapes, scene._core.arrays, str(scene._device))
        self._scene = scene
        self._device = scene._device
        self._state = scene._state

    @property
    def edge_rows(self) -> Any:
        """(E, 2) int32 endpoints of every edge as rows of the frontend's vertex table, made on first use.

        torch: rows of the world-space vertex copy (every shape's vertices, instances
        included, in shape order); Dr.Jit: rows of the scene's concatenated mesh vertices
        (an instance's edges use its mesh's rows). A property (not a field set as a side
        effect of the first BVH build), so queries that never touch the BVH (an empty
        batch first of all) can read it.
        """
        self.topology  # noqa: B018 - computes the topology and the rows
        return self._edge_rows

    def _build_bvh(self, stream: Any) -> EdgeBvh:
        """The engine's edge BVH over the three views, on ``stream``, fenced by the frontend."""
        device = self._device_name
        self._arrays.fence(device)
        bvh = EdgeBvh(self._points_view, self._edges_view, self._applied_view, stream)
        self._arrays.fence(device)
        return bvh

    def _refit(self, stream: Any) -> None:
        """Refit the edge BVH to the current points and flags, on ``stream``, fenced by the frontend."""
        device = self._device_name
        self._arrays.fence(device)
        self._bvh.refit(stream)
        self._arrays.fence(device)
