"""Edge queries of :class:`rayd.drjit.Scene`: the docstrings of :class:`rayd.core.edges.EdgeQueries`'s methods.

The methods themselves are written once in ``rayd.core.edges``; the work is in ``_nearest_edge.py``.
"""

from __future__ import annotations

from rayd.core.docs import scene_annotations
from rayd.drjit._scene_docs import TYPES
from rayd.core.edges import EdgeQueries  # noqa: F401 - the Scene's mixin, documented from DOCS
from rayd.core.edges import NEAREST_EDGE_RULE, NEAREST_EDGE_TAIL, NEAREST_EDGES_UNITS, OVERFLOW_RAISES, TOPOLOGY_RULE


#: The docstrings of the :class:`rayd.core.edges.EdgeQueries` methods on :class:`rayd.drjit.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "edge_topology": """The scene's edges: unique undirected edges per mesh, in shape order.

    Returns:
        :class:`EdgeTopology` with ``v``, ``faces``, ``opposite`` (``Array2i`` of
        width E), ``is_boundary`` (``Bool``), ``shape_id``, ``edge_id``,
        ``global_edge_id`` (``Int``), of the scene's non-differentiable namespace.
""" + TOPOLOGY_RULE + """; instances repeat their mesh's edges under their
        own ``shape_id``. Computed by the engine on the scene's device at first use
        after ``build()`` (one host synchronisation per mesh). A copy in its own memory
        (each call copies the E rows): writes into it never reach the scene.

    Raises:
""" + OVERFLOW_RAISES + """        RuntimeError: the scene is not built (or shapes were added since).
    """,
    "set_edge_mask": """Hide edges from the edge queries; takes effect at ``sync()``.

    Args:
        mask: (E,) ``Bool`` of width E on the scene's backend and device; False
            hides edge ``global_edge_id``.

    Raises:
        TypeError: ``mask`` is not a Dr.Jit ``Bool`` array.
        ValueError: wrong width, backend or device.
        RuntimeError: the scene is not built.
    """,
    "edge_mask": """(E,) ``Bool``: the edge mask last set (all True after ``build()``); a copy.

    Raises:
        RuntimeError: the scene is not built.
    """,
    "nearest_edge": """The edge nearest to each point, or to each ray segment, differentiable for the fixed winner.

    Args:
        points_or_ray: (N, 3) points, an ``Array3f``/``Array3f64`` of width N, or a
            :class:`Ray` whose segment ``o + s d, s in [tmin, tmax]`` is queried (a
            half-line if ``tmax = inf`` or ``tmin = -inf``, the whole line if both); on the scene's
            backend and device.
        active: optional ``Bool`` of width N or 1; inactive queries miss.
        max_distance: only edges within this distance count (default ``inf``).
        points, ray: the same query by keyword (``nearest_edge(points=p)``, ``nearest_edge(ray=r)``,
            DESIGN.md's two forms); give exactly one of ``points_or_ray``, ``points``, ``ray``.

    Returns:
        :class:`NearestEdge` with fields of width N (``ray_t``, ``ray_point`` for
        rays). """ + NEAREST_EDGE_RULE + """        No edge within ``max_distance`` (or an inactive or malformed query):
        ``distance = inf``, ids -1, zeros elsewhere.

    Units:
        ``distance``, points in world units; ``ray_t`` in multiples of ``|d|``.

    Gradients:
        ``distance, edge_t, edge_point, ray_t, ray_point`` are differentiable through
        Dr.Jit's AD (``dr.backward``, ``dr.forward``) with respect to the meshes'
        vertex arrays and transforms and to ``points`` / ``ray.o``, ``ray.d``,
        ``ray.tmin``, ``ray.tmax``, wherever those are ``.ad`` arrays with gradients
        enabled; the winning edge is held fixed; misses get zero gradient. The
        gradient of ``distance`` is taken as 0 where it is exactly 0.

    Raises:
        TypeError: none, or more than one, of ``points_or_ray``, ``points``, ``ray`` given.
        TypeError: ``points`` not a Dr.Jit float array (e.g. a torch tensor), a
            rayd.torch ``Ray``, ``active`` not ``Bool``, ``max_distance`` not a number.
        ValueError: wrong component count, widths that do not broadcast, another
            backend or device, negative/NaN ``max_distance``.
""" + NEAREST_EDGE_TAIL,
    "nearest_edges": """The ``k`` edges nearest to each point, sorted by distance (ties by ``global_edge_id``).

    Args:
        points: (N, 3) ``Array3f``/``Array3f64`` of width N on the scene's backend.
        k: number of edges, ``1 <= k <= 16``.
        active: optional ``Bool`` of width N or 1.
        max_distance: only edges within this distance count.

    Returns:
        :class:`NearestEdge` of shape ``(N, k)``: fields of width ``N k``, slot ``j``
        of query ``i`` in lane ``i k + j``. Concretely, slot ``j`` holds the
        ``(j+1)``-th smallest ``(distance, global_edge_id)`` over the unmasked edges,
        fields as in :meth:`nearest_edge`; unfilled slots are invalid (``inf``, ids
        -1, zeros).
""" + NEAREST_EDGES_UNITS + """        ValueError: ``k`` outside ``[1, 16]``, wrong shapes, backend or device.
        RuntimeError: the scene is not built or has pending changes.
    """,
    "silhouette_edges": """Silhouette edges as seen from ``viewpoint`` (not differentiable).

    Args:
        viewpoint: (3,) world position: an ``Array3f``/``Array3f64`` of width 1 on
            the scene's backend and device.

    Returns:
        (E,) ``Bool``. Concretely, True for boundary edges and for edges whose two
        faces lie on opposite sides, where face ``(v0, v1, v2)`` faces ``c`` iff
        ``dot((v1 - v0) x (v2 - v0), c - v0) > 0`` (current vertex positions and
        transforms, in float64 if the viewpoint or any vertices are). Like every
        edge query, it sees only the edges the BVH sees: masked-out edges
        (:meth:`set_edge_mask`) and edges of disabled shapes are False.

    Raises:
        TypeError: ``viewpoint`` not a Dr.Jit float array.
        ValueError: not a 3-vector of width 1, or on another backend or device.
        RuntimeError: the scene is not built or has pending changes.
    """,
}

ANNOTATIONS = scene_annotations(TYPES, DOCS)
