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


def check_flags(call: str, flags: object) -> RayFlags:
    """``flags`` as a :class:`RayFlags`: ``TypeError`` for a non-int, ``ValueError`` for unknown bits."""
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise TypeError(f"{call}: 'flags' must be a rayd.RayFlags, got {type(flags).__name__}")
    if flags & ~int(RayFlags.All):
        raise ValueError(f"{call}: 'flags' has unknown bits {int(flags) & ~int(RayFlags.All):#x}")
    # no new RayFlags when it already is one: TorchDynamo 2.11 cannot trace an IntFlag's construction
    return flags if isinstance(flags, RayFlags) else RayFlags(flags)


def unrequested(flags: RayFlags) -> set[str]:
    """Names of the optional fields that ``flags`` does not ask for."""
    return {name for name, flag in FIELD_FLAGS.items() if not flags & flag}
