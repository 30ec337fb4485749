"""Edge queries of :class:`rayd.torch.Scene`: the docstrings of :class:`rayd.core.edges.EdgeQueries`'s methods.

The methods themselves are written once in ``rayd.core.edges``; the work is in ``_nearest_edge.py``.
"""

from __future__ import annotations

from rayd.core.docs import scene_annotations
from rayd.torch._scene_docs import TYPES
from rayd.core.edges import EdgeQueries  # noqa: F401 - the Scene's mixin, documented from DOCS
from rayd.core.edges import NEAREST_EDGE_RULE, NEAREST_EDGE_TAIL, NEAREST_EDGES_UNITS, OVERFLOW_RAISES, TOPOLOGY_RULE


#: The docstrings of the :class:`rayd.core.edges.EdgeQueries` methods on :class:`rayd.torch.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "edge_topology": """The scene's edges: unique undirected edges per mesh, in shape order.

    Returns:
        :class:`EdgeTopology` with ``v [E, 2]``, ``faces [E, 2]``, ``opposite [E, 2]``,
        ``is_boundary [E]``, ``shape_id [E]``, ``edge_id [E]``, ``global_edge_id [E]``.
""" + TOPOLOGY_RULE + """. Computed on the scene's device at first use
        after ``build()``. A copy (each call clones the E rows): writes into it never
        reach the scene.

    Raises:
""" + OVERFLOW_RAISES + """        RuntimeError: the scene is not built (or meshes were added since).
    """,
    "set_edge_mask": """Hide edges from the edge queries; takes effect at ``sync()``.

    Args:
        mask: (E,) bool on the scene's device; False hides edge ``global_edge_id``.

    Raises:
        TypeError: ``mask`` is not a bool tensor.
        ValueError: wrong shape or device.
        RuntimeError: the scene is not built.
    """,
    "edge_mask": """(E,) bool: the edge mask last set (all True after ``build()``); a copy.

    Raises:
        RuntimeError: the scene is not built.
    """,
    "nearest_edge": """The edge nearest to each point, or to each ray segment, differentiable for the fixed winner.

    Args:
        points_or_ray: (..., 3) float32/float64 points, or a :class:`Ray` whose
            segment ``o + s d, s in [tmin, tmax]`` is queried (a half-line if
            ``tmax = inf`` or ``tmin = -inf``, the whole line if both); on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive queries miss.
        max_distance: only edges within this distance count (default ``inf``).
        points, ray: the same query by keyword (``nearest_edge(points=p)``, ``nearest_edge(ray=r)``,
            DESIGN.md's two forms); give exactly one of ``points_or_ray``, ``points``, ``ray``.

    Returns:
        :class:`NearestEdge` with fields of shape ``...`` (``ray_t``, ``ray_point``
        for rays). """ + NEAREST_EDGE_RULE + """        No edge within ``max_distance``: ``distance = inf``, ids -1, zeros elsewhere.

    Units:
        ``distance``, points in world units; ``ray_t`` in multiples of ``|d|``.

    Gradients:
        ``distance, edge_t, edge_point, ray_t, ray_point`` are differentiable
        (reverse and forward mode) with respect to the meshes' vertex tensors and
        transforms and to ``points`` / ``ray.o``, ``ray.d``, ``ray.tmin``, ``ray.tmax``;
        the winning edge is held fixed; misses get zero gradient. The gradient of
        ``distance`` is taken as 0 where it is exactly 0.

    Raises:
        TypeError: none, or more than one, of ``points_or_ray``, ``points``, ``ray`` given.
        TypeError: ``points`` not a float tensor, ``active`` not bool, ``max_distance``
            not a number.
        ValueError: wrong shapes or device, negative/NaN ``max_distance``.
""" + NEAREST_EDGE_TAIL,
    "nearest_edges": """The ``k`` edges nearest to each point, sorted by distance (ties by ``global_edge_id``).

    Args:
        points: (..., 3) float32/float64 on the scene's device.
        k: number of edges, ``1 <= k <= 16``.
        active: optional bool tensor broadcastable to ``...``.
        max_distance: only edges within this distance count.

    Returns:
        :class:`NearestEdge` with fields of shape ``[..., k]`` (``edge_point``
        ``[..., k, 3]``). Concretely, slot ``j`` holds the ``(j+1)``-th smallest
        ``(distance, global_edge_id)`` over the unmasked edges, fields as in
        :meth:`nearest_edge`; unfilled slots are invalid (``inf``, ids -1, zeros).
""" + NEAREST_EDGES_UNITS + """        ValueError: ``k`` outside ``[1, 16]``, wrong shapes or device.
        RuntimeError: the scene is not built or has pending changes.
    """,
    "silhouette_edges": """Silhouette edges as seen from ``viewpoint`` (not differentiable).

    Args:
        viewpoint: (3,) float32/float64 world position on the scene's device.

    Returns:
        (E,) bool. Concretely, True for boundary edges and for edges whose two
        faces lie on opposite sides, where face ``(v0, v1, v2)`` faces ``c`` iff
        ``dot((v1 - v0) x (v2 - v0), c - v0) > 0`` (current vertex positions).
        Like every edge query, it sees only the edges the BVH sees: masked-out
        edges (:meth:`set_edge_mask`) and edges of disabled shapes are False.

    Raises:
        TypeError, ValueError: ``viewpoint`` not a float tensor of shape (3,) on
            the scene's device.
        RuntimeError: the scene is not built or has pending changes.
    """,
}

ANNOTATIONS = scene_annotations(TYPES, DOCS)
