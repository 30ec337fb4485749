"""Reflection chains of :class:`rayd.drjit.Scene` (``trace_reflections``) and their record.

Each bounce is a closest-hit query (``Scene.intersect``) of the reflected rays, whose
origins and directions are the previous bounce's differentiable ``p`` and ``d_out``:
one engine search per bounce, and Dr.Jit's AD carries gradients through the chain.
The slots are interleaved into fields of width ``N B`` (slot ``b`` of ray ``i`` at lane
``i B + b``), like the top-k records.
"""

from __future__ import annotations

import drjit as dr

from rayd.drjit import _trace
from rayd.drjit.intersection import DrjitRecord
from rayd.drjit.ray import Ray
from rayd.flags import RayFlags
from rayd.records import FieldRecord

#: Largest ``max_bounces``.
MAX_BOUNCES = 16
_PER_RAY = ("num_bounces", "path_length")


class ReflectionChain(DrjitRecord, FieldRecord):
    """The specular chain of each ray (see ``rayd.torch.ReflectionChain``), shape ``(N, B)``.

    Slot fields (width ``N B``, slot ``b`` of ray ``i`` at lane ``i B + b``): ``t``
    (``inf`` empty), ``p``, ``geo_n``, ``d_out``, ``image_source`` (0 empty), ``prim_id``,
    ``shape_id``, ``global_prim_id`` (-1 empty). Per-ray fields (width ``N``):
    ``num_bounces`` (``Int``), ``path_length`` (world units, 0 with no hit).
    Float fields are differentiable (Dr.Jit AD, reverse and forward) for the fixed chain.
    Selecting rays (``chain[mask]``, mask of width N) keeps every slot of each.
    """

    __slots__ = ("_shape",)
    _name = "rayd.drjit.ReflectionChain"
    _width_field = "t"

    def __init__(self, shape: tuple[int, int], **fields: dr.ArrayBase) -> None:
        super().__init__(**fields)
        self._shape = shape

    def is_valid(self) -> dr.ArrayBase:
        """``Bool`` of width ``N B``: True in the slots that hold a hit."""
        return self._fields["global_prim_id"] >= 0

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, B)``."""
        return self._shape

    def __getitem__(self, index: object):
        lanes, count = self._query_lanes(index)
        k = int(self._shape[1])
        rays = dr.gather(type(lanes), lanes, dr.arange(type(lanes), count) * k) // k if count else lanes

        def pick(name, value):
            return dr.gather(type(value), value, rays if name in _PER_RAY else lanes)

        new = self._map(pick)
        new._shape = (count, k)
        return new


def _bounces(call: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{call}: 'max_bounces' must be an int in [1, {MAX_BOUNCES}], got {type(value).__name__}")
    if not 1 <= value <= MAX_BOUNCES:
        raise ValueError(f"{call}: 'max_bounces' must be an int in [1, {MAX_BOUNCES}], got {value}")
    return value


def _dot(a, b):
    return a.x * b.x + a.y * b.y + a.z * b.z


class ReflectionQueries:
    """Mixin of :class:`rayd.drjit.Scene`: ``trace_reflections``."""

    def trace_reflections(self, ray: Ray, max_bounces: int, active: dr.ArrayBase | None = None, *,
                          ignore: dr.ArrayBase | int | None = None) -> ReflectionChain:
        """The specular chain of each ray, as :meth:`rayd.torch.Scene.trace_reflections`.

        Args:
            ray: :class:`rayd.drjit.Ray` of width N.
            max_bounces: ``B``, an int in ``[1, 16]``.
            active: optional ``Bool`` of width N or 1; inactive rays get empty chains.
            ignore: optional ``global_prim_id`` per ray for segment 0 (-1 for none).

        Returns:
            :class:`ReflectionChain` of shape ``(N, B)``.

        Raises:
            TypeError: ``max_bounces`` is not an int; and as :meth:`intersect`.
            ValueError: ``max_bounces`` outside ``[1, 16]``; and as :meth:`intersect`.
            RuntimeError: as :meth:`intersect`.
        """
        call = "rayd.drjit.Scene.trace_reflections()"
        bounces = _bounces(call, max_bounces)
        self._require_ready(call)
        ray = _trace.check_ray(call, ray, self._device)
        n, _ = _trace.check_active(call, ray, active, self._device)
        n, _ = _trace.check_ignore(call, n, ignore, self._device)
        hit = self.intersect(ray, active, RayFlags.Geometric, ignore=ignore)
        Float = type(hit.t)
        Vec = type(hit.p)
        Int = type(hit.global_prim_id)
        UInt = dr.uint32_array_t(Float)
        d0 = Vec(ray.d)
        if dr.width(d0) != n:
            d0 = dr.gather(Vec, d0, dr.zeros(UInt, n))
        image = Vec(ray.o)
        direction = d0
        total = n * bounces
        out = {"t": dr.full(Float, float("inf"), total), "p": dr.zeros(Vec, total), "geo_n": dr.zeros(Vec, total),
               "d_out": dr.zeros(Vec, total), "image_source": dr.zeros(Vec, total),
               "prim_id": dr.full(Int, -1, total), "shape_id": dr.full(Int, -1, total),
               "global_prim_id": dr.full(Int, -1, total)}
        count = dr.zeros(Int, n)
        length = dr.zeros(Float, n)
        if n == 0:
            return ReflectionChain((0, bounces), **out, num_bounces=count, path_length=length)
        lanes = dr.arange(UInt, n) * bounces
        for b in range(bounces):
            if b > 0:
                hit = self.intersect(Ray(origin, direction), valid, RayFlags.Geometric, ignore=hit.global_prim_id)
            valid = hit.global_prim_id >= 0
            g, p = hit.geo_n, hit.p
            d_out = dr.select(valid, direction - 2.0 * _dot(direction, g) * g, 0.0)
            image = dr.select(valid, image - 2.0 * _dot(image - p, g) * g, 0.0)
            values = {"t": hit.t, "p": p, "geo_n": g, "d_out": d_out, "image_source": image,
                      "prim_id": hit.prim_id, "shape_id": hit.shape_id, "global_prim_id": hit.global_prim_id}
            for name, value in values.items():
                dr.scatter(out[name], value, lanes + b)
            count += dr.select(valid, 1, 0)
            length += dr.select(valid, hit.t, 0.0)
            origin, direction = p, d_out
        sq = _dot(d0, d0)
        norm = dr.select(sq > 0, dr.sqrt(dr.select(sq > 0, sq, 1.0)), 0.0)
        out["num_bounces"] = count
        out["path_length"] = length * norm
        return ReflectionChain((n, bounces), **out)
