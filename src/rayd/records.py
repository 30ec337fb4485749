"""`HitRecord`: the backend-neutral part of the frontends' ``Intersection`` records."""

from __future__ import annotations

from typing import Any

from rayd.flags import FIELD_FLAGS, RayFlags


class HitRecord:
    """Fields of a closest-hit query, some present only when their ``RayFlags`` were given.

    Frontends subclass it with their array types, a docstring and ``_name`` (the public
    name used in messages, e.g. ``"rayd.torch.Intersection"``). Reading a field that
    was not requested raises ``AttributeError`` naming the flag to pass.
    """

    __slots__ = ("_fields", "flags")
    _name = "rayd.Intersection"

    def __init__(self, flags: RayFlags, **fields: Any) -> None:
        self.flags = RayFlags(flags)
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        fields = object.__getattribute__(self, "_fields")
        if name in fields:
            return fields[name]
        flag = FIELD_FLAGS.get(name)
        if flag is not None:
            raise AttributeError(
                f"{self._name}.{name}: not computed; pass flags=RayFlags.{flag.name} "
                f"(or RayFlags.All) to Scene.intersect()"
            )
        raise AttributeError(f"{self._name} has no field '{name}'")

    def is_valid(self) -> Any:
        """True where the ray hit something (``prim_id >= 0``), in the frontend's bool type."""
        return self._fields["prim_id"] >= 0

    def __repr__(self) -> str:
        names = ", ".join(self._fields)
        return f"{self._name}(shape={tuple(self.shape)}, fields=[{names}])"
