"""`Intersection`: the closest-hit record returned by ``Scene.intersect``."""

from __future__ import annotations

import drjit as dr

from rayd.records import HitRecord


class Intersection(HitRecord):
    """Closest hit per ray, with miss values encoded in the data.

    Attributes (N rays; Dr.Jit types of the ray's backend, ``.ad`` when any input was):
        t: (N,) ``Float``/``Float64``, hit distance in multiples of ``|d|``; ``+inf``
            on a miss.
        p: (N, 3) ``Array3f``/``Array3f64`` hit point ``o + t d``; 0 on a miss.
            Needs ``RayFlags.Geometric``.
        geo_n: (N, 3) unit geometric normal ``normalize((v1 - v0) x (v2 - v0))`` in
            world space; 0 on a miss. Needs ``RayFlags.Geometric``.
        barycentric: (N, 3) weights ``(w0, w1, w2)`` of the face's vertices,
            ``p = w0 v0 + w1 v1 + w2 v2``; 0 on a miss. Needs ``RayFlags.Geometric``.
        n: (N, 3) unit shading normal ``normalize(w0 n0 + w1 n1 + w2 n2)`` of the
            vertex normals (``geo_n`` when the mesh has none; never flipped); 0 on a
            miss. Needs ``RayFlags.ShadingN``.
        uv: (N, 2) ``Array2f``/``Array2f64`` interpolated texture coordinates, or
            ``(w1, w2)`` when the mesh has none; 0 on a miss. Needs ``RayFlags.UV``.
        prim_id: (N,) ``Int`` (int32) face index within the hit mesh; -1 on a miss.
        shape_id: (N,) ``Int`` id of the hit mesh (or instance); -1 on a miss.
        global_prim_id: (N,) ``Int`` scene-wide face id (``prim_id`` + the shape's
            face offset); -1 on a miss.

    Float fields have the promoted dtype of the rays and the scene's vertices and are
    differentiable (fixed winner, DESIGN.md). Reading a field that was not requested
    raises ``AttributeError`` naming the flag to pass. Never NaN.
    """

    __slots__ = ()
    _name = "rayd.drjit.Intersection"

    def is_valid(self) -> dr.ArrayBase:
        """(N,) ``Bool``: True where the ray hit something."""
        return super().is_valid()

    @property
    def shape(self) -> tuple[int]:
        """The batch shape ``(N,)``."""
        return (dr.width(self._fields["t"]),)
