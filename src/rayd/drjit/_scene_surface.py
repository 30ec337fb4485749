"""Surface queries of :class:`rayd.drjit.Scene`: the docstrings of :class:`rayd.core.surface.SurfaceQueries`'s methods.

The methods are written once in ``rayd.core.surface``; the work is in ``_closest_point.py``.
"""

from __future__ import annotations

import drjit as dr

from rayd.core.surface import SurfaceQueries, annotations  # noqa: F401 - the Scene's mixin, documented from DOCS
from rayd.drjit._closest_point import ClosestPoint


#: The docstrings of the :class:`rayd.core.surface.SurfaceQueries` methods on :class:`rayd.drjit.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "closest_point": """The closest point on any enabled triangle to each point, differentiable for the fixed winner.

    Args:
        points: (N, 3) ``Array3f``/``Array3f64`` of width N on the scene's backend.
        active: optional ``Bool`` of width N (or 1); inactive queries find nothing.
        max_distance: only triangles within this distance count (default ``inf``).

    Returns:
        :class:`ClosestPoint` of width N: the same search and formulas as
        ``rayd.torch.Scene.closest_point`` (Ericson 2004, 5.1.5; float32 BVH search,
        ties to the smaller ``global_prim_id``, float64 evaluation of the winner).
        None within ``max_distance``: ``distance = inf``, ids -1, zeros elsewhere.

    Gradients:
        ``distance, p, barycentric, geo_n`` with respect to vertices, transforms
        and ``points`` (Dr.Jit AD), for the fixed triangle and Voronoi region;
        misses get zero gradient.

    Units:
        World units.

    Raises:
        TypeError, ValueError: wrong types, widths, backend, ``max_distance``.
        RuntimeError: not built or pending changes.
    """,
    "winding_number": """Generalised winding number of the enabled triangles and instances around each point (Jacobson et al. 2013).

    Args:
        points: (N, 3) ``Array3f``/``Array3f64`` of width N on the scene's backend.
        active: optional ``Bool`` of width N (or 1); inactive queries give 0.
        exact: sum every face exactly (``O(F)`` per point) instead of the
            hierarchical evaluation.

    Returns:
        (N,) ``Float``/``Float64``: the same engine evaluation as
        ``rayd.torch.Scene.winding_number`` (by default the fast winding number of
        Barill et al. 2018, ``beta = 2``, expansion up to the second moment,
        measured max absolute error vs the exact sum below 1e-2, docs/api.md;
        ``exact=True``: the exact sum of signed solid angles / 4 pi, about 1e-7
        absolute error). Instances contribute their world-space faces. 0 for
        inactive or non-finite points.

    Gradients:
        When ``points``, a mesh's vertices or a registered matrix has gradients
        enabled, the value and its derivatives (``dr.backward`` and
        ``dr.forward_to``) come from the exact sum written in Dr.Jit ops in float64
        (``O(N F)`` work, chunked; the AD namespace), as rayd.torch's: a smooth
        function away from the surface. Otherwise the non-differentiable namespace.

    Units:
        Dimensionless (turns: 1 inside a closed, outward-oriented mesh).

    Raises:
        TypeError: as :meth:`closest_point`; ``exact`` not a bool.
        ValueError, RuntimeError: as :meth:`closest_point`.

    References:
        Barill, Dickson, Schmidt, Levin, Jacobson 2018, ACM TOG 37(4); Jacobson,
        Kavan, Sorkine-Hornung 2013, ACM TOG 32(4); Van Oosterom, Strackee 1983,
        IEEE Trans. Biomed. Eng. 30(2).
    """,
    "contains": """Inside test: ``winding_number(points, exact=True) > 0.5``. Not differentiable.

    The hierarchical value decides except within 0.05 of 0.5, where the exact sum
    does (as rayd.torch's); ``exact=True`` sums exactly everywhere.

    Args:
        points: (N, 3) ``Array3f``/``Array3f64`` of width N on the scene's backend.
        active: optional ``Bool`` of width N (or 1); inactive queries give False.
        exact: Python bool; sum every face exactly (``O(F)`` per point).

    Returns:
        (N,) ``Bool``: True inside a closed, outward-oriented mesh.

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`winding_number`.
    """,
    "signed_distance": """Signed distance to the enabled triangles: negative inside.

    Args:
        points: (N, 3) ``Array3f``/``Array3f64`` of width N on the scene's backend.
        active: optional ``Bool`` of width N (or 1); inactive queries give ``+inf``.
        exact: Python bool; decide the sign by the exact winding number sum.

    Returns:
        (N,) ``Float``/``Float64``: concretely, ``closest_point(points).distance``,
        negated where :meth:`contains`.

    Units: world units.

    Gradients: differentiable like ``distance`` (Dr.Jit AD, reverse and forward,
    into ``points``, vertices and transforms); the sign is held fixed.

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`closest_point`.
    """,
}

#: The annotations each method shows (the frontend's types).
ANNOTATIONS = annotations(dr.ArrayBase, dr.ArrayBase | None, ClosestPoint)
