"""The ray queries of a frontend's ``Scene``: ``intersect``, ``shadow_test``, ``visible``.

What the two frontends share in them is written once here, in :class:`RayQueries` (a
mixin over :class:`rayd.core.frontend.SceneBase`): the public signatures, the flags
check, and the rule that ``visible`` tests the open interior of the segment,
``s in (VISIBILITY_EPSILON, 1 - VISIBILITY_EPSILON)``, as an any-hit search. The
frontend documents the methods in its own words (:func:`rayd.core.edges.document`) and
implements the hooks in its array library:

- ``_RAY``: its ``Ray`` class;
- ``_intersect(call, ray, active, flags, ignore)``: trace, evaluate and record the
  closest hits (``flags`` already checked);
- ``_occluded(call, ray, active, ignore)``: bool per ray, True where any hit exists in
  ``(tmin, tmax)`` (inactive rays False);
- ``_check_segment(call, start, end)``: the checked ``(start, end)`` points (types,
  devices, broadcasting), as the segment ray is to be made from them;
- ``_unblocked(call, ray, active, ignore)``: bool per segment ray, True where it is
  well formed, active and not occluded.
"""

from __future__ import annotations

from typing import Any

from rayd.flags import RayFlags, check_flags

#: ``visible()`` tests the open segment interior ``s in (EPSILON, 1 - EPSILON)``, with
#: ``s`` the parameter along ``start -> end``: relative to the segment length.
VISIBILITY_EPSILON = 1e-4


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
