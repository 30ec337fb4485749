"""The ray queries of a frontend's ``Scene``: ``intersect``, ``shadow_test``, ``visible``, all hits.

What the two frontends share in them is written once here, in :class:`RayQueries` and
:class:`AllHitsQueries` (mixins over :class:`rayd.core.frontend.SceneBase`): the public
signatures, the argument checks that are not about arrays (flags, ``max_hits``), and
the rule that ``visible`` tests the open interior of the segment,
``s in (VISIBILITY_EPSILON, 1 - VISIBILITY_EPSILON)``, as an any-hit search. The
frontend documents the methods in its own words (:func:`rayd.core.edges.document`) and
implements the hooks in its array library. :class:`RayQueries`' hooks:

- ``_RAY``: its ``Ray`` class;
- ``_intersect(call, ray, active, flags, ignore)``: trace, evaluate and record the
  closest hits (``flags`` already checked);
- ``_occluded(call, ray, active, ignore)``: bool per ray, True where any hit exists in
  ``(tmin, tmax)`` (inactive rays False);
- ``_segment_points(start, end)``: the checked points as the segment ray is to be made
  from them (default: as they are; Dr.Jit detaches them); the checks themselves (types,
  devices, broadcasting) are the ``Ray`` class's hooks (:class:`rayd.core.rays.RayBase`);
- ``_unblocked(call, ray, active, ignore)``: bool per segment ray, True where it is
  well formed, active and not occluded.

:class:`AllHitsQueries`' hook is ``_ALL_HITS``, the frontend's module ``_parts.all_hits``
(bound by :class:`rayd.core.frontend.SceneBase`, as the edge and surface query modules) with

- ``intersect_all(scene, call, ray, k, active, flags, ignore)``: the first ``k`` crossings of
  each ray, evaluated and recorded (``k`` and ``flags`` already checked);
- ``count_intersections(scene, call, ray, active, ignore)``: the exact count of crossings.
"""

from __future__ import annotations

from typing import Any

from rayd.core.checks import int_in_range
from rayd.core.docs import FrontendDocs
from rayd.engine.all_hits import MAX_HITS
from rayd.flags import RayFlags, check_flags

#: ``visible()`` tests the open segment interior ``s in (EPSILON, 1 - EPSILON)``, with
#: ``s`` the parameter along ``start -> end``: relative to the segment length.
VISIBILITY_EPSILON = 1e-4

#: ``visible``'s rule, from the Returns section on (both frontends' docstrings,
#: ``rayd.<frontend>._scene_docs.DOCS``); the frontend writes the returned type before it.
VISIBLE_RULE = """True where no triangle crosses ``start + s (end - start)`` for
        ``s in (VISIBILITY_EPSILON, 1 - VISIBILITY_EPSILON)`` (``1e-4``, relative
        to the segment length, so endpoints lying on surfaces do not block
        themselves); decided as ``shadow_test`` over that interval (float64
        segments: on the float64 crossing). Symmetric in its endpoints (except
        for segments lying in a face's plane). Not differentiable. Degenerate
        (zero-length or non-finite) segments report False.

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`intersect`.
    """


#: The end of ``intersect``'s docstring (both frontends): its lifecycle error and references.
INTERSECT_TAIL = """        RuntimeError: the scene is not built, or has pending/unsynced changes.

    References:
        Woop, Benthin, Wald 2013, "Watertight Ray/Triangle Intersection", JCGT 2(1)
        (the search); Moeller, Trumbore 1997, JGT 2(1) (the evaluation).
    """


class RayQueries:
    """``intersect``, ``shadow_test`` and ``visible`` of a frontend's ``Scene`` (see the module docstring)."""

    _PREFIX = "rayd.Scene"
    _RAY: Any = None

    def intersect(self, ray, active=None, flags: RayFlags = RayFlags.All, *, ignore=None):
        call = f"{self._PREFIX}.intersect()"
        return self._intersect(call, ray, active, check_flags(call, flags), ignore)

    def shadow_test(self, ray, active=None, *, ignore=None):
        return self._occluded(f"{self._PREFIX}.shadow_test()", ray, active, ignore)

    def visible(self, start, end, active=None, *, ignore=None):
        call = f"{self._PREFIX}.visible()"
        start, end = self._check_segment(call, start, end)
        ray = self._RAY(start, end - start, 1.0 - VISIBILITY_EPSILON, tmin=VISIBILITY_EPSILON)
        return self._unblocked(call, ray, active, ignore)

    def _check_segment(self, call: str, start: Any, end: Any) -> tuple[Any, Any]:
        """``(start, end)`` of ``visible``: 3-vectors of the frontend, on the scene's device, whose batches broadcast."""
        rays = self._RAY
        start = rays._check_vectors(call, "start", start)
        end = rays._check_vectors(call, "end", end)
        device = rays._device_of(start)
        rays._same_device(call, "start", start, self._device or device, "the scene")
        rays._same_device(call, "end", end, device, "'start'")
        rays._broadcast(call, [("start", rays._batch(start, True)), ("end", rays._batch(end, True))])
        return self._segment_points(start, end)

    def _segment_points(self, start: Any, end: Any) -> tuple[Any, Any]:
        return start, end


class AllHitsQueries(FrontendDocs):
    """``intersect_all`` and ``count_intersections`` of a frontend's ``Scene`` (see the module docstring);
    their docstrings are the frontend's ``_scene_allhits.DOCS``."""

    _PREFIX = "rayd.Scene"
    _DOCS_MODULE = "_scene_allhits"
    _ALL_HITS: Any = None  # bound from the frontend's ``_parts.all_hits`` (rayd.core.frontend)

    def intersect_all(self, ray, max_hits: int, active=None, flags: RayFlags = RayFlags.All, *, ignore=None):
        call = f"{self._PREFIX}.intersect_all()"
        k = int_in_range(call, "max_hits", max_hits, MAX_HITS)
        return self._ALL_HITS.intersect_all(self, call, ray, k, active, check_flags(call, flags), ignore)

    def count_intersections(self, ray, active=None, *, ignore=None):
        return self._ALL_HITS.count_intersections(self, f"{self._PREFIX}.count_intersections()", ray, active, ignore)
