"""The starting search radius of the ``max_distance`` queries (closest point, nearest edges).

The searches rank float32 squared distances measured in the search frame, while the
frontends report distances re-evaluated from the live geometry (float64 inside). Near
``max_distance`` the two can disagree by rounding: a triangle at a reported distance of
exactly ``max_distance`` (a point on a surface with ``max_distance = 0``, or
``max_distance`` set to the distance a query just reported) was left out by the float32
test about half of the time. So the search starts from ``max_distance`` widened by a
rounding allowance, and the frontends keep a winner only where its reported distance is
at most ``max_distance`` (:func:`rayd.core.closest.within_max_distance`).

The allowance: float32 distances computed from coordinates of magnitude at most ``reach``
(centre-relative) are off by a few ``2^-24 reach``; :data:`SLACK` (``2^-16``) leaves a wide
margin (slivers, placed instances, float64 vertices rounded to float32).
"""

from __future__ import annotations

import warp as wp

wp.set_module_options({"enable_backward": False})

#: Relative rounding allowance of a search radius (see the module docstring).
SLACK = 2.0**-16
_SLACK = wp.constant(SLACK)


@wp.func
def widened_radius_sq(max_distance_sq: float, reach: float) -> float:
    """The squared search radius ``(r (1 + SLACK) + SLACK reach)^2`` for ``r = sqrt(max_distance_sq)``.

    ``reach``: the largest magnitude of the search-frame coordinates the distances are
    computed from (the query point's, plus the scene's for ray segments). ``inf`` stays
    ``inf``; a product that overflows float32 is ``inf`` (every candidate counts).
    """
    if not wp.isfinite(max_distance_sq):
        return max_distance_sq
    r = wp.sqrt(max_distance_sq) * (1.0 + _SLACK) + _SLACK * reach
    return r * r


@wp.func
def magnitude(p: wp.vec3) -> float:
    """``max(|p_x|, |p_y|, |p_z|)``."""
    return wp.max(wp.max(wp.abs(p[0]), wp.abs(p[1])), wp.abs(p[2]))
