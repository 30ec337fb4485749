"""Surface queries of :class:`rayd.drjit.Scene` (a mixin; the work is in ``_closest_point.py``)."""

from __future__ import annotations

import math

import drjit as dr

from rayd.drjit import _closest_point
from rayd.drjit._closest_point import ClosestPoint


class SurfaceQueries:
    """``closest_point``, ``winding_number``, ``contains``, ``signed_distance`` (as rayd.torch's).

    Mixed into :class:`rayd.drjit.Scene`. ``closest_point`` walks instances too; the
    winding number (hence ``contains``, ``signed_distance``) does not support them
    yet (``RuntimeError``).
    """

    def closest_point(
        self, points: dr.ArrayBase, active: dr.ArrayBase | None = None, *, max_distance: float = math.inf
    ) -> ClosestPoint:
        """The closest point on any enabled triangle to each point, differentiable for the fixed winner.

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

        Raises:
            TypeError, ValueError: wrong types, widths, backend, ``max_distance``.
            RuntimeError: not built or pending changes.
        """
        return _closest_point.closest_point(self, points, active, max_distance)

    def winding_number(self, points: dr.ArrayBase, active: dr.ArrayBase | None = None) -> dr.ArrayBase:
        """Generalised winding number of the enabled triangles around each point (Jacobson et al. 2013).

        Returns:
            (N,) ``Float``/``Float64`` of the non-differentiable namespace: the exact
            ``O(F)``-per-point sum of signed solid angles / 4 pi (Van Oosterom, Strackee
            1983) in float64 over the float32 search-frame vertices and points (about
            1e-7 absolute error); 0 for inactive or non-finite points. Not
            differentiable in rayd.drjit yet (rayd.torch's is).

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`closest_point`.
        """
        return _closest_point.winding_number(self, points, active)

    def contains(self, points: dr.ArrayBase, active: dr.ArrayBase | None = None) -> dr.ArrayBase:
        """(N,) ``Bool``: ``winding_number(points) > 0.5``.

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`winding_number`.
        """
        return _closest_point.contains(self, points, active)

    def signed_distance(self, points: dr.ArrayBase, active: dr.ArrayBase | None = None) -> dr.ArrayBase:
        """(N,) ``closest_point(points).distance``, negated where :meth:`contains`; differentiable like it.

        Raises:
            TypeError, ValueError, RuntimeError: as :meth:`closest_point`.
        """
        return _closest_point.signed_distance(self, points, active)
