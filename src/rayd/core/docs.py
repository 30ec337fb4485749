"""Frontend docstrings for methods written once in :mod:`rayd.core`, bound where the ``Scene`` is made.

A core query mixin (:class:`rayd.core.edges.EdgeQueries`, :class:`rayd.core.surface.SurfaceQueries`,
:class:`rayd.core.specular.ReflectionQueries`) holds the methods; each frontend only has
words of its own for them (its array types, its shapes). The mixin derives from
:class:`FrontendDocs` and names, in ``_DOCS_MODULE``, the module of each frontend that
holds those words as ``DOCS`` (method name -> docstring) and optionally ``ANNOTATIONS``
(method name -> annotations shown). When a frontend's ``Scene`` is created (a subclass
in ``rayd.torch`` or ``rayd.drjit``), :func:`rayd.core.edges.document` gives it its own
copies of the methods (the same code objects) with those docstrings, so a frontend needs
no mixin class of its own just to document them.

Also here: :func:`document` itself (re-exported by :mod:`rayd.core.edges`, where it was first).
"""

from __future__ import annotations

import importlib
import inspect
import types
from typing import Any

FRONTENDS = ("torch", "drjit")


class FrontendDocs:
    """Base of a core query mixin whose methods each frontend documents (module docstring).

    ``_DOCS_MODULE``: the module name under ``rayd.<frontend>`` that holds ``DOCS``;
    ``_DOCUMENTED``: the name of the frontend's public class that gets them (``"Scene"``;
    ``"Mesh"``, ``"Camera"`` for :class:`~rayd.core.mesh.MeshBase`, :class:`~rayd.core.camera_frontend.CameraBase`).
    """

    _DOCS_MODULE: str = ""
    _DOCUMENTED: str = "Scene"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parts = cls.__module__.split(".")
        if cls.__name__ != cls._DOCUMENTED or parts[0] != "rayd" or len(parts) < 2 or parts[1] not in FRONTENDS:
            return  # only a frontend's public class (its Scene, Mesh, Camera) is documented
        for base in cls.__mro__[1:]:
            name = base.__dict__.get("_DOCS_MODULE")
            if name:
                words = importlib.import_module(f"rayd.{parts[1]}.{name}")
                document(cls, words.DOCS, getattr(words, "ANNOTATIONS", None))


def document(cls: type, docs: dict[str, str], annotations: dict[str, dict[str, Any]] | None = None) -> type:
    """Give ``cls`` its own copies of inherited methods, with the frontend's docstrings.

    Each copy runs the very code of the inherited method (no wrapper call), so the
    frontend documents its types and words while the logic stays in one place.

    Args:
        cls: the frontend's mixin (a subclass of a core mixin such as :class:`EdgeQueries`).
        docs: method name -> docstring.
        annotations: method name -> annotations to show (the frontend's types); a
            name here but not in ``docs`` keeps the inherited docstring.

    Returns:
        ``cls``, to allow use as a decorator's helper.
    """
    annotations = annotations or {}
    names = [*docs, *(name for name in annotations if name not in docs)]
    for name in names:
        base = inspect.getattr_static(cls, name)
        doc = docs.get(name, _doc_of(base))
        if isinstance(base, (classmethod, staticmethod)):  # the function inside, wrapped again
            method = _copy(cls, name, base.__func__, doc, annotations.get(name, {}))
            setattr(cls, name, type(base)(method))
            continue
        if isinstance(base, property):  # a property: its getter copied the same way
            getter = _copy(cls, name, base.fget, doc, annotations.get(name, {}))
            setattr(cls, name, property(getter, base.fset, base.fdel, doc))
            continue
        setattr(cls, name, _copy(cls, name, base, doc, annotations.get(name, {})))
    return cls


def _doc_of(base: Any) -> str | None:
    """The docstring of an inherited method, classmethod, staticmethod or property."""
    if isinstance(base, (classmethod, staticmethod)):
        return base.__func__.__doc__
    return base.__doc__


def _copy(cls: type, name: str, base: Any, doc: str, annotations: dict[str, Any]) -> Any:
    """A copy of function ``base`` (same code) as ``cls.name``, with ``doc`` and extra ``annotations``."""
    method = types.FunctionType(base.__code__, base.__globals__, name, base.__defaults__, base.__closure__)
    method.__kwdefaults__ = base.__kwdefaults__
    method.__annotations__ = {**base.__annotations__, **annotations}
    method.__doc__ = doc
    method.__module__ = cls.__module__
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    return method


def scene_annotations(types: dict[str, Any], names: Any) -> dict[str, dict[str, Any]]:
    """The annotations a frontend's ``Scene`` query methods show (for a docs module's ``ANNOTATIONS``).

    Args:
        types: the frontend's types by role: ``"array"`` (``torch.Tensor``, ``drjit.ArrayBase``),
            ``"Ray"``, ``"Intersection"``, ``"Intersections"`` (the ``intersect_all`` record),
            ``"EdgeTopology"``, ``"NearestEdge"``, ``"ReflectionChain"``, ``"SpecularPaths"``.
        names: the method names wanted (a docs module's ``DOCS``).

    Returns:
        method name -> parameter name (and ``"return"``) -> annotation (type objects, so
        ``typing.get_type_hints`` resolves them), for the methods of ``names`` that are queries.
    """
    array, ray = types["array"], types["Ray"]
    optional, ignore = array | None, array | int | None
    rays = {"ray": ray, "active": optional, "ignore": ignore}
    points = {"points": array, "active": optional}
    table = {
        "intersect": {**rays, "return": types["Intersection"]},
        "shadow_test": {**rays, "return": array},
        "visible": {"start": array, "end": array, "active": optional, "ignore": ignore, "return": array},
        "intersect_all": {**rays, "return": types.get("Intersections")},
        "count_intersections": {**rays, "return": array},
        "edge_topology": {"return": types["EdgeTopology"]},
        "set_edge_mask": {"mask": array, "return": None},
        "edge_mask": {"return": array},
        "nearest_edge": {"points_or_ray": array | ray | None, "active": optional, "points": optional,
                         "ray": ray | None, "return": types["NearestEdge"]},
        "nearest_edges": {**points, "k": int, "return": types["NearestEdge"]},
        "silhouette_edges": {"viewpoint": array, "return": array},
        "trace_reflections": {**rays, "max_bounces": int, "return": types["ReflectionChain"]},
        "specular_paths": {"source": array, "target": array, "prim_sequence": array, "active": optional,
                           "return": types["SpecularPaths"]},
    }
    return {name: table[name] for name in names if name in table}


def lifecycle_annotations(types: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The frontend's types of ``Scene``'s content methods (written in :class:`~rayd.core.frontend.SceneBase`
    with ``Any``), for the ``ANNOTATIONS`` of a frontend's ``_scene_docs``; their docstrings stay core's.

    Args:
        types: as for :func:`scene_annotations`, plus ``"Mesh"``.

    Returns:
        method name -> parameter name -> annotation. ``set_mesh_transform``'s ``shape_id`` (an id or
        a batch of ids, each frontend its own kinds) keeps ``Any``.
    """
    array = types["array"]
    return {"add_mesh": {"mesh": types["Mesh"]}, "add_instance": {"to_world": array},
            "update_mesh_vertices": {"vertices": array}, "set_mesh_transform": {"to_world": array}}


def mesh_annotations(array: type) -> dict[str, dict[str, Any]]:
    """The frontend's types of ``Mesh``'s constructor and array attributes (written in
    :class:`~rayd.core.mesh.MeshBase` without them), for the ``ANNOTATIONS`` of a frontend's ``_mesh_docs``.

    Args:
        array: the frontend's array type (``torch.Tensor``, ``drjit.ArrayBase``).

    Returns:
        method or property name -> parameter name (``"return"`` for a property) -> annotation.
        ``from_trimesh`` returns the frontend's ``Mesh`` (set by :class:`~rayd.core.mesh.MeshBase`).
    """
    optional = array | None
    return {"from_trimesh": {"to_world": optional},
            "__init__": {"vertices": array, "faces": array, "normals": optional, "uv": optional, "to_world": optional},
            "vertices": {"return": array}, "faces": {"return": array}, "normals": {"return": optional},
            "uv": {"return": optional}, "to_world": {"return": optional}}


def annotate_scene_arguments(scene: type, *functions: Any) -> None:
    """Set the ``scene`` annotation of ``functions`` (``find_specular_paths``, ``Camera.sample_edges``:
    written in ``rayd.core`` before the frontend's ``Scene`` exists) to the frontend's ``scene`` class."""
    for function in functions:
        function.__annotations__["scene"] = scene
