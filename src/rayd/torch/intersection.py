"""`Intersection`: the closest-hit record returned by ``Scene.intersect``."""

from __future__ import annotations

import torch

from rayd.records import HitRecord


class Intersection(HitRecord):
    """Closest hit per ray, with miss values encoded in the data.

    Attributes (``...`` is the ray batch shape):
        t: (...) float, hit distance in multiples of ``|d|``; ``+inf`` on a miss.
        p: (..., 3) hit point ``o + t d``; 0 on a miss. Needs ``RayFlags.Geometric``.
        geo_n: (..., 3) unit geometric normal ``normalize((v1 - v0) x (v2 - v0))`` in
            world space; 0 on a miss. Needs ``RayFlags.Geometric``.
        barycentric: (..., 3) weights ``(w0, w1, w2)`` of the face's vertices,
            ``p = w0 v0 + w1 v1 + w2 v2``; 0 on a miss. Needs ``RayFlags.Geometric``.
        n: (..., 3) unit shading normal ``normalize(w0 n0 + w1 n1 + w2 n2)`` of the
            vertex normals (``geo_n`` when the mesh has none; never flipped); 0 on a
            miss. Needs ``RayFlags.ShadingN``.
        uv: (..., 2) interpolated texture coordinates, or ``(w1, w2)`` when the mesh
            has none; 0 on a miss. Needs ``RayFlags.UV``.
        prim_id: (...) int32 face index within the hit mesh; -1 on a miss.
        shape_id: (...) int32 id of the hit mesh (or instance); -1 on a miss.
        global_prim_id: (...) int32 scene-wide face id (``prim_id`` + the shape's
            face offset); -1 on a miss.

    Float fields have the promoted dtype of the rays and the scene's vertices and are
    differentiable (fixed winner, DESIGN.md). Reading a field that was not requested
    raises ``AttributeError`` naming the flag to pass. Never NaN.
    """

    __slots__ = ()
    _name = "rayd.torch.Intersection"

    def is_valid(self) -> torch.Tensor:
        """(...) bool: True where the ray hit something."""
        return super().is_valid()

    @property
    def shape(self) -> torch.Size:
        """The ray batch shape ``...``."""
        return self._fields["t"].shape
