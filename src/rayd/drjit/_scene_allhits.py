"""All hits along a ray for :class:`rayd.drjit.Scene`: ``intersect_all`` and ``count_intersections``.

The engine (:mod:`rayd.engine.all_hits`) lists each ray's first ``K`` crossings, sorted,
with hits of a shared edge or vertex merged into one; each listed hit is then evaluated
for its fixed face by ``intersect``'s own evaluation (``_intersect.evaluate``) on the
``N K`` lanes (slot ``k`` of ray ``i`` at lane ``i K + k``, like the top-k records), so
the fields and their gradients are those of ``intersect``.
"""

from __future__ import annotations

import drjit as dr

from rayd.core import hits
from rayd.core.docs import scene_annotations
from rayd.drjit._scene_docs import TYPES
from rayd.drjit import _convert, _trace
from rayd.drjit._intersect import empty, enforce, evaluate
from rayd.drjit.intersection import Intersection
from rayd.core.query_args import CANDIDATES
from rayd.engine import all_hits as engine_all_hits
from rayd.flags import RayFlags



class Intersections(Intersection):
    """The hits of ``Scene.intersect_all``: an :class:`Intersection` of shape ``(N, K)``.

    Fields as :class:`Intersection`'s, of width ``N K``: slot ``k`` of ray ``i`` at lane
    ``i K + k``, the ``k``-th crossing in increasing ``t``; unused slots (last) hold
    misses. ``is_valid()`` is a ``Bool`` of width ``N K``. Selecting rays
    (``hits[mask]``, a mask of width N) keeps every slot of each.
    """

    __slots__ = ("_shape",)

    def __init__(self, shape: tuple[int, int], flags: RayFlags, **fields: dr.ArrayBase) -> None:
        super().__init__(flags, **fields)
        self._shape = shape

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, K)``."""
        return self._shape

    def _resize(self, count: int) -> None:
        self._shape = (count, self._shape[1])


def _spread(value: object, UInt: type, ray_of_lane: dr.ArrayBase) -> object:
    """A per-ray value (a number, or an array of width N or 1) at the ``N K`` lanes."""
    if isinstance(value, (int, float)) or dr.width(value) == 1:
        return value
    return dr.gather(type(value), value, ray_of_lane)


# The hooks of rayd.core.queries.AllHitsQueries (bound fenced through rayd.drjit._parts.all_hits): it checks
# ``max_hits`` and ``flags``; these check the rays, search and evaluate.
def intersect_all(scene, call: str, ray, k: int, active, flags: RayFlags, ignore) -> Intersections:
    """``Scene.intersect_all`` after its checks of ``max_hits`` and ``flags``."""
    n, rays, keep, _ = _trace.prepare(scene, call, ray, active, ignore, widen=True)  # float64 t decides (enforce)
    m, double = scene._precision(ray.o, ray.d)
    if n == 0:
        return Intersections((0, k), flags, **empty(m, double, flags))
    gid, fields, ray_of_lane = _first_hits(scene, m, double, ray, rays, n, k, flags)
    del keep, rays
    UInt = m.UInt
    fields = enforce(m, fields, _spread(ray.tmin, UInt, ray_of_lane), _spread(ray.tmax, UInt, ray_of_lane))
    order = _valid_first(m, fields["global_prim_id"] >= 0, n, k)
    fields = {name: dr.gather(type(v), v, order) for name, v in fields.items()}
    return Intersections((n, k), flags, **fields)


def _first_hits(scene, m, double: bool, ray, rays, n: int, k: int, flags: RayFlags, crossings=None) -> tuple:
    """``(gid, fields, ray_of_lane)``: the engine's first ``k`` hits of ``rays`` (width ``N K``, -1 unused),
    evaluated for their fixed faces (``fields``, before any interval check), and each lane's ray.
    ``crossings`` (an int32 array of width ``N K``, optional) receives the crossings each hit counts (0: a touch)."""
    plain = _convert.module(scene._backend, False)
    gid = _convert.empty_int32(n * k, scene._backend)
    t32 = dr.empty(plain.Float, n * k)
    dr.make_opaque(t32)
    views = (_convert.scalar_view(t32, scene._device), _convert.scalar_view(gid, scene._device))
    extra = None if crossings is None else _convert.scalar_view(crossings, scene._device)
    _convert.launch(scene._device, engine_all_hits.all_hits, scene._core.accel, rays, k, *views, crossings=extra)
    del views, extra
    ray_of_lane = dr.arange(m.UInt, n * k) // k
    o = _spread(ray.o, m.UInt, ray_of_lane)
    d = _spread(ray.d, m.UInt, ray_of_lane)
    face = hits.face_frame(scene._core, double)  # float64: a hit off its face is a miss
    return gid, evaluate(m, double, o, d, gid, scene._state.live_geometry(m, double), flags, face), ray_of_lane


def count_intersections(scene, call: str, ray, active, ignore) -> dr.ArrayBase:
    """``Scene.count_intersections``: the engine's exact count of each ray's crossings.

    A float64 query is searched as :func:`intersect_all`'s, below the widened ``tmin`` (the search
    starts a ray with ``tmin < 0`` at ``o + tmin d``, and a ray grazing an edge may hit or miss by
    its origin's rounding), up to the float32 ``tmax``; crossings among the first ``CANDIDATES``
    whose float64 ``t`` is ``<= tmin`` are taken off (no host read: every float64 query)."""
    n, rays, keep, ray = _trace.prepare(scene, call, ray, active, ignore, widen="tmin")
    out = _convert.empty_int32(n, scene._backend)
    if n == 0:
        return out
    view = _convert.scalar_view(out, scene._device)
    _convert.launch(scene._device, engine_all_hits.count_hits, scene._core.accel, rays, view)
    del view
    m, double = scene._precision(ray.o, ray.d)
    if double:
        k = CANDIDATES
        weight = _convert.empty_int32(n * k, scene._backend)
        gid, fields, ray_of_lane = _first_hits(scene, m, True, ray, rays, n, k, RayFlags.Minimal, weight)
        t = m.Float64(dr.detach(fields["t"]))
        early = dr.select((gid >= 0) & (t <= _spread(ray.tmin, m.UInt, ray_of_lane)), weight, 0)  # a touch: 0
        base = dr.arange(m.UInt, n) * k
        for j in range(k):
            out = out - dr.gather(type(out), type(out)(early), base + j)
    del keep, rays
    return out


def _valid_first(m, valid: dr.ArrayBase, n: int, k: int) -> dr.ArrayBase:
    """The lane order (``UInt``, width ``N K``) that puts each ray's valid slots first, in their order.

    A hit the evaluation put outside ``(tmin, tmax)`` became a miss: it moves behind the hits.
    """
    UInt = m.UInt
    lane = dr.arange(UInt, n * k)
    if k == 1:
        return lane
    slot = lane % k
    first = lane - slot
    flag = dr.select(valid, UInt(1), UInt(0))
    before = dr.prefix_sum(flag)  # exclusive, over all lanes
    rank = before - dr.gather(UInt, before, first)  # valid slots before this one, in this ray
    last = first + (k - 1)
    hits = dr.gather(UInt, before, last) + dr.gather(UInt, flag, last) - dr.gather(UInt, before, first)
    target = first + dr.select(valid, rank, hits + (slot - rank))
    order = dr.zeros(UInt, n * k)
    dr.scatter(order, lane, target)
    return order


#: The docstrings of :class:`rayd.core.queries.AllHitsQueries`' methods on :class:`rayd.drjit.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "intersect_all": """The first ``max_hits`` hits of each ray in increasing ``t``, as :meth:`rayd.torch.Scene.intersect_all`.

    Hits of a shared edge or vertex (faces of one shape sharing a vertex index, ``t``
    equal to ``rayd.engine.all_hits.MERGE_TOLERANCE`` relative) are one hit,
    reported on the face with the smaller ``global_prim_id``. A ray that only touches
    a surface there is listed too (one hit), though :meth:`count_intersections` counts
    it 0.

    Args:
        ray: :class:`rayd.drjit.Ray` of width N; hits count for ``tmin < t < tmax``.
        max_hits: ``K``, an int in ``[1, 64]``.
        active: optional ``Bool`` of width N or 1; inactive rays have no hits.
        flags: :class:`rayd.RayFlags` selecting the fields (as ``intersect``).
        ignore: optional ``global_prim_id`` per ray to skip (-1 for none).

    Returns:
        :class:`Intersections` of shape ``(N, K)`` (fields of width ``N K``, slot ``k``
        of ray ``i`` at lane ``i K + k``; unused slots last, as misses).

    Gradients:
        As :meth:`intersect`, per slot, for the fixed faces (Dr.Jit AD, both modes).

    Units:
        ``t`` in multiples of ``|d|``; ``p`` in world units (as :meth:`intersect`).

    Raises:
        TypeError: ``max_hits`` is not an int; and as :meth:`intersect`.
        ValueError: ``max_hits`` outside ``[1, 64]``; and as :meth:`intersect`.
        RuntimeError: as :meth:`intersect`.
    """,
    "count_intersections": """The number of crossings of each ray, exact (no cap), as :meth:`rayd.torch.Scene.count_intersections`.

    A merged hit of a shared edge or vertex counts 1 where the ray passes from one
    side of the surface to the other there, 0 where it only touches it (the signed
    count of its faces containing the infinitesimally displaced ray, in absolute
    value), so a ray from ``o`` crosses a closed, consistently oriented mesh an odd
    number of times exactly where ``o`` lies inside it. Equals the number of hits
    ``intersect_all`` lists, except on rays that touch a surface (listed, not counted).

    Args:
        ray: :class:`rayd.drjit.Ray` of width N.
        active: optional ``Bool`` of width N or 1; inactive rays count 0.
        ignore: optional ``global_prim_id`` per ray to skip (-1 for none).

    Returns:
        ``Int`` (int32) of width N. Not differentiable.

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`intersect`.
    """,
}

ANNOTATIONS = scene_annotations({**TYPES, "Intersections": Intersections}, DOCS)
