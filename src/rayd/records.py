"""The backend-neutral part of the frontends' result records (``Intersection``, ``NearestEdge``).

A record holds its fields in a dict, one array per field, with misses encoded in the
data; ``dir()`` lists the fields; reading a field the query did not compute raises
``AttributeError`` saying what to pass. ``detach()`` and indexing (``record[mask]``) are
generic here: they build a record of the same type and state with every field mapped
by the frontend's ``_detach_field`` / ``_index_field``.
"""

from __future__ import annotations

from typing import Any

from rayd.flags import FIELD_FLAGS, RayFlags


class _Slotted(type):
    """The metaclass of records: a record class that declares no ``__slots__`` gets ``()``.

    A record never has an instance ``__dict__`` (its state is ``_fields`` plus the slots
    its classes declare, which :meth:`FieldRecord._replace` copies), so every subclass,
    the frontends' mixins (``TorchRecord``, ``DrjitRecord``) included, is slotted
    without saying so.
    """

    def __new__(mcls, name: str, bases: tuple, namespace: dict, **kwargs: Any) -> type:
        namespace.setdefault("__slots__", ())
        return super().__new__(mcls, name, bases, namespace, **kwargs)


class FieldRecord(metaclass=_Slotted):
    """Fields by name, read as attributes; ``_name`` is the public name used in messages.

    Subclasses are slotted (``__slots__ = ()`` unless they declare their own, :class:`_Slotted`).
    """

    __slots__ = ("_fields",)
    _name = "rayd.Record"

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def _missing(self, name: str) -> str | None:
        """Why ``name`` is absent, if it is a known field not computed by this query (else ``None``)."""
        return None

    def __getattr__(self, name: str) -> Any:
        if name == "_fields":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        fields = self._fields  # a plain slot read (traceable by torch.compile)
        if name in fields:
            return fields[name]
        why = self._missing(name)
        if why is not None:
            raise AttributeError(f"{self._name}.{name}: {why}")
        raise AttributeError(f"{self._name} has no field '{name}'")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._fields))

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the fields this record holds."""
        return tuple(self._fields)

    def __repr__(self) -> str:
        return f"{self._name}(shape={tuple(self.shape)}, fields=[{', '.join(self._fields)}])"

    # -- generic transformations; frontends supply the per-field operations ----------------

    def _replace(self, fields: dict[str, Any]) -> "FieldRecord":
        """A record of the same type and state (``flags``, ...) holding ``fields``."""
        new = object.__new__(type(self))
        for cls in type(self).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot != "_fields":
                    object.__setattr__(new, slot, object.__getattribute__(self, slot))
        object.__setattr__(new, "_fields", fields)
        return new

    def _map(self, fn: Any) -> "FieldRecord":
        """The record with ``fn(name, value)`` in place of every field."""
        return self._replace({name: fn(name, value) for name, value in self._fields.items()})

    def _detach_field(self, value: Any) -> Any:
        raise NotImplementedError(f"{self._name}.detach(): not supported by this frontend")

    def _index_field(self, value: Any, index: Any) -> Any:
        raise NotImplementedError(f"{self._name}[...]: indexing is not supported by this frontend")

    def detach(self) -> "FieldRecord":
        """The same record with every field detached from the autodiff graph (no copy).

        Returns:
            A record of the same type, fields and flags whose arrays share memory with
            these and carry no gradient.
        """
        return self._map(lambda name, value: self._detach_field(value))

    def __getitem__(self, index: Any) -> "FieldRecord":
        """The record of the selected queries: ``index`` applies to the batch dimensions.

        Args:
            index: anything the frontend's arrays accept for their leading dimensions
                (a bool mask over the batch, integer indices, slices); trailing
                component dimensions (the 3 of ``p``) are kept.

        Returns:
            A record of the same type, fields and flags; its fields stay
            differentiable (indexing is an autodiff op).

        Raises:
            IndexError: a bool mask whose shape is not the batch shape or a leading
                part of it, or an index out of range (the array library's own error).
        """
        return self._map(lambda name, value: self._index_field(value, index))


class EdgeRecord(FieldRecord):
    """Fields of a nearest-edge query; ``ray_t`` / ``ray_point`` only for ray queries."""

    _name = "rayd.NearestEdge"

    def _missing(self, name: str) -> str | None:
        if name in ("ray_t", "ray_point"):
            frontend = self._name.rsplit(".", 1)[0]
            return f"only ray queries have it; pass a {frontend}.Ray to Scene.nearest_edge()"
        return None

    def is_valid(self) -> Any:
        """True where an edge was found (``global_edge_id >= 0``), in the frontend's bool type."""
        return self._fields["global_edge_id"] >= 0


class ClosestPointRecord(FieldRecord):
    """Fields of a closest-point query (``Scene.closest_point``): a face was found where ``global_prim_id >= 0``."""

    _name = "rayd.ClosestPoint"

    def is_valid(self) -> Any:
        """True where a triangle was found (``global_prim_id >= 0``), in the frontend's bool type."""
        return self._fields["global_prim_id"] >= 0


class HitRecord(FieldRecord):
    """Fields of a closest-hit query, some present only when their ``RayFlags`` were given.

    Frontends subclass it with their array types, a docstring and ``_name`` (the public
    name used in messages, e.g. ``"rayd.torch.Intersection"``). Reading a field that
    was not requested raises ``AttributeError`` naming the flag to pass.
    """

    __slots__ = ("flags",)
    _name = "rayd.Intersection"

    def __init__(self, flags: RayFlags, **fields: Any) -> None:
        super().__init__(**fields)
        # Not re-constructed when already a RayFlags: TorchDynamo 2.11 cannot trace the
        # enum call (a graph break under torch.compile(fullgraph=True), seen on the H200).
        self.flags = flags if isinstance(flags, RayFlags) else RayFlags(flags)

    def _missing(self, name: str) -> str | None:
        flag = FIELD_FLAGS.get(name)
        if flag is None:
            return None
        return (f"not computed; pass flags=RayFlags.{flag.name} (or RayFlags.All) to the query that made "
                f"this record (Scene.intersect() or Scene.intersect_all())")

    def is_valid(self) -> Any:
        """True where the ray hit something (``prim_id >= 0``), in the frontend's bool type."""
        return self._fields["prim_id"] >= 0


class ChainRecord(FieldRecord):
    """Fields of a reflection chain (``ReflectionChain``): a slot is valid where it holds a hit."""

    def is_valid(self) -> Any:
        """True in the slots that hold a hit (``global_prim_id >= 0``), in the frontend's bool type."""
        return self._fields["global_prim_id"] >= 0


class PathRecord(FieldRecord):
    """Fields of specular paths (``SpecularPaths``, ``SpecularPathSet``): ``is_valid()`` is the ``valid`` field."""

    def is_valid(self) -> Any:
        """The ``valid`` field (bool per path)."""
        return self._fields["valid"]
