"""Surface queries of :class:`rayd.torch.Scene` (a mixin; the work is in ``_closest_point.py``)."""

from __future__ import annotations

import math

import torch

from rayd.torch import _closest_point
from rayd.torch._closest_point import ClosestPoint


class SurfaceQueries:
    """``closest_point``, ``winding_number``, ``contains``, ``signed_distance``.

    Mixed into :class:`rayd.torch.Scene`, whose lifecycle checks and live state
    (``_require_ready``, ``_state``, ``_core``) they use. ``closest_point`` walks
    instances too; the winding number (hence ``contains``, ``signed_distance``)
    does not support instances yet (``RuntimeError``).
    """

    def closest_point(
        self, points: torch.Tensor, active: torch.Tensor | None = None, *, max_distance: float = math.inf
    ) -> ClosestPoint:
        """The closest point on any enabled triangle to each point, differentiable for the fixed winner.

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
        """
        return _closest_point.closest_point(self, points, active, max_distance)

    def winding_number(self, points: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Generalised winding number of the enabled triangles around each point.

        Args:
            points: (..., 3) float32/float64 on the scene's device.
            active: optional bool tensor broadcastable to ``...``; inactive queries give 0.

        Returns:
            (...) float (promoted dtype of points and vertices):
            ``sum_f Omega_f(points) / (4 pi)``, ``Omega_f`` the signed solid angle of
            face ``f`` (Van Oosterom, Strackee 1983). 1 inside a closed,
            outward-oriented mesh, 0 outside, fractional near holes (Jacobson et al.
            2013). Exact sum, ``O(F)`` work per point: no hierarchical (Barill et al.
            2018) approximation yet. Without gradients the engine sums in float64 over
            the float32 search-frame vertices and points (about 1e-7 absolute error); with
            gradients torch sums in float64 over the live vertices. Non-finite points give 0.

        Gradients:
            With respect to ``points``, vertices and transforms, as a smooth function
            away from the surface (then evaluated with torch ops, ``O(N F)`` memory in
            chunks); without gradients an engine kernel.

        Raises:
            TypeError, ValueError: as :meth:`closest_point`.
            RuntimeError: the scene is not built, has pending changes, or has instances.

        References:
            Jacobson, Kavan, Sorkine-Hornung 2013, ACM TOG 32(4); Van Oosterom,
            Strackee 1983, IEEE Trans. Biomed. Eng. 30(2).
        """
        return _closest_point.winding_number(self, points, active)

    def contains(self, points: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """(...) bool: ``winding_number(points) > 0.5`` (False for inactive queries). Not differentiable.

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`winding_number`.
        """
        return _closest_point.contains(self, points, active)

    def signed_distance(self, points: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """(...) float: ``closest_point(points).distance``, negated where :meth:`contains`.

        Inactive queries give ``+inf``. Differentiable like ``distance`` (the sign is
        held fixed). ``O(log F)`` for the distance (BVH) plus ``O(F)`` per point for
        the sign (exact winding number).

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`closest_point`.
        """
        return _closest_point.signed_distance(self, points, active)
