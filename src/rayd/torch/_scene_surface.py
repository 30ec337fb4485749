"""Surface queries of :class:`rayd.torch.Scene`: the docstrings of :class:`rayd.core.surface.SurfaceQueries`'s methods.

The methods are written once in ``rayd.core.surface``; the work is in ``_closest_point.py``.
"""

from __future__ import annotations

import torch

from rayd.core.surface import SurfaceQueries, annotations  # noqa: F401 - the Scene's mixin, documented from DOCS
from rayd.torch._closest_point import ClosestPoint


#: The docstrings of the :class:`rayd.core.surface.SurfaceQueries` methods on :class:`rayd.torch.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "closest_point": """The closest point on any enabled triangle to each point, differentiable for the fixed winner.

    Args:
        points: (..., 3) float32/float64 on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive queries find nothing.
        max_distance: only triangles within this distance count (default ``inf``).

    Returns:
        :class:`ClosestPoint` with fields of shape ``...``. Concretely, over the
        enabled triangles it minimises ``distance = |points - p|`` with ``p`` the
        closest point of the triangle (Ericson 2004, 5.1.5); the search is a BVH
        walk in float32 (ties within float32 rounding to the smaller
        ``global_prim_id``), the outputs are recomputed for the winner in float64
        from the live vertices and transforms. Instances are walked too (top
        level, then each instance's BVH; faces measured in world space). None within ``max_distance``: ``distance = inf``,
        ids -1, zeros elsewhere. Non-finite points find nothing.

    Units:
        World units.

    Gradients:
        ``distance, p, barycentric, geo_n`` are differentiable (reverse and forward
        mode) with respect to the meshes' vertex tensors and transforms and to
        ``points``, for the fixed triangle and Voronoi region (vertex, edge or
        face) of the closest point; misses get zero gradient; the gradient of
        ``distance`` is taken as 0 where it is exactly 0.

    Raises:
        TypeError: ``points`` not a float tensor, ``active`` not bool,
            ``max_distance`` not a number.
        ValueError: wrong shapes or device, negative/NaN ``max_distance``.
        RuntimeError: the scene is not built or has pending changes.

    References:
        Ericson 2004, "Real-Time Collision Detection", sec. 5.1.5.
    """,
    "winding_number": """Generalised winding number of the enabled triangles and instances around each point.

    Args:
        points: (..., 3) float32/float64 on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive queries give 0.
        exact: sum every face exactly (``O(F)`` per point) instead of the
            hierarchical evaluation (``O(log F)``-like per point).

    Returns:
        (...) float (promoted dtype of points and vertices):
        ``sum_f Omega_f(points) / (4 pi)``, ``Omega_f`` the signed solid angle of
        face ``f`` (Van Oosterom, Strackee 1983); an instance contributes its
        world-space faces (a mirroring transform flips their orientation). 1
        inside a closed, outward-oriented mesh, 0 outside, fractional near holes
        (Jacobson et al. 2013). By default the fast winding number (Barill et al.
        2018): BVH nodes farther than ``beta = 2`` node radii use their expansion
        up to the second moment, nearer ones are summed exactly, in float64 over
        the float32 search-frame geometry. Accuracy (docs/api.md): bound 1e-2
        absolute vs the exact sum, measured max 5e-3 (mean 6e-4) on real meshes
        and random soups; ``exact=True`` is exact up to rounding (about 1e-7).
        Non-finite points give 0.

    Gradients:
        When ``points``, vertices or transforms require gradients (while grad mode
        is on), carry forward-mode tangents, or are differentiated by ``torch.func``
        (``grad``, ``jvp``, ...; a plain ``vmap`` is not), the value and its gradient
        come from the exact sum evaluated with torch ops in float64 (``O(N F)`` work,
        chunked): a smooth function away from the surface. The hierarchical
        evaluation is value-only (no gradients flow through it); it also runs under
        ``torch.no_grad()`` / ``inference_mode`` whatever requires grad.

    Raises:
        TypeError: as :meth:`closest_point`; ``exact`` not a bool.
        ValueError: as :meth:`closest_point`.
        RuntimeError: the scene is not built or has pending changes.

    References:
        Barill, Dickson, Schmidt, Levin, Jacobson 2018, ACM TOG 37(4); Jacobson,
        Kavan, Sorkine-Hornung 2013, ACM TOG 32(4); Van Oosterom, Strackee 1983,
        IEEE Trans. Biomed. Eng. 30(2).
    """,
    "contains": """Inside test: ``winding_number(points, exact=True) > 0.5``. Not differentiable.

    The hierarchical winding number decides, except where it lies within 0.05 of
    0.5: those points are summed exactly, so the answer equals the exact test
    wherever the hierarchy's error is below 0.05 (docs/api.md). ``exact=True``
    sums exactly everywhere.

    Args:
        points: (..., 3) float32/float64 on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive queries give False.
        exact: Python bool; sum every face exactly (``O(F)`` per point).

    Returns:
        (...) bool tensor: True inside a closed, outward-oriented mesh (and where
        open meshes wind more than half way around the point).

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`winding_number`.
    """,
    "signed_distance": """Signed distance to the enabled triangles: negative inside.

    ``O(log F)`` for the distance (BVH) and for the sign (hierarchical winding
    number as in :meth:`contains`; ``exact=True``: ``O(F)``).

    Args:
        points: (..., 3) float32/float64 on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive queries give ``+inf``.
        exact: Python bool; decide the sign by the exact winding number sum.

    Returns:
        (...) float tensor (promoted dtype of points and vertices): concretely,
        ``closest_point(points).distance``, negated where :meth:`contains`.

    Units: world units.

    Gradients: differentiable like ``distance`` (reverse and forward mode, into
    ``points``, vertices and transforms); the sign is held fixed.

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`closest_point`.
    """,
}

#: The annotations each method shows (the frontend's types).
ANNOTATIONS = annotations(torch.Tensor, torch.Tensor | None, ClosestPoint)
