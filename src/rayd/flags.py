"""`RayFlags`: which fields of an intersection record a query computes."""

from __future__ import annotations

import enum


class RayFlags(enum.IntFlag):
    """Fields that ``Scene.intersect`` computes, combinable with ``|``.

    Attributes:
        Minimal: only ``t`` and the ids (``prim_id``, ``shape_id``, ``global_prim_id``).
        Geometric: adds ``p``, ``geo_n`` and ``barycentric``.
        ShadingN: adds ``n`` (interpolated vertex normals).
        UV: adds ``uv`` (interpolated texture coordinates).
        All: every field.

    Reading a field that was not requested raises ``AttributeError`` naming the flag
    to pass.
    """

    Minimal = 0
    Geometric = 1
    ShadingN = 2
    UV = 4
    All = 7


#: Which flag each optional field of an intersection record needs.
FIELD_FLAGS: dict[str, RayFlags] = {
    "p": RayFlags.Geometric,
    "geo_n": RayFlags.Geometric,
    "barycentric": RayFlags.Geometric,
    "n": RayFlags.ShadingN,
    "uv": RayFlags.UV,
}
