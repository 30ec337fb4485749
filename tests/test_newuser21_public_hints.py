"""Every public callable of rayd.torch and rayd.drjit shows type hints and a docstring (help() is the reference
a new user reads first): each class of ``__all__``, its public methods and properties, and the module functions;
``typing.get_type_hints`` resolves every one of them (tools that read hints at run time).

Methods a class inherits from Python itself (``int``'s methods on ``RayFlags``, ``object.__init__``) are not rayd's
and are skipped.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import typing

import pytest


def _own(cls: type, name: str) -> bool:
    """True if ``cls.name`` is rayd's (defined by a class of a rayd module), not Python's or enum's."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__module__.startswith("rayd")
    return False


def _gaps(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    gaps = []

    def check(qual: str, function, init: bool = False) -> None:
        if not (inspect.getdoc(function) or init):
            gaps.append(f"{qual}: no docstring")
        signature = inspect.signature(function)
        for parameter in signature.parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or parameter.name in ("self", "cls"):
                continue
            if parameter.annotation is inspect.Parameter.empty:
                gaps.append(f"{qual}: no type hint on '{parameter.name}'")
        if signature.return_annotation is inspect.Signature.empty and not init:
            gaps.append(f"{qual}: no return type hint")
        try:
            typing.get_type_hints(inspect.unwrap(function))
        except Exception as error:  # a string annotation that does not name anything where it is read
            gaps.append(f"{qual}: typing.get_type_hints fails: {error}")

    for name in module.__all__:
        obj = getattr(module, name)
        qual = f"{module_name}.{name}"
        if not inspect.isclass(obj):
            check(qual, obj)
            continue
        if not inspect.getdoc(obj):
            gaps.append(f"{qual}: no class docstring")
        if issubclass(obj, enum.Enum):
            continue  # RayFlags: members and int's methods
        for member in sorted(vars(obj).keys() | {n for k in obj.__mro__ for n in vars(k)}):
            if (member.startswith("_") and member not in ("__init__", "__call__", "__getitem__")) or not _own(obj, member):
                continue
            raw = inspect.getattr_static(obj, member)
            if isinstance(raw, property):
                if not raw.__doc__:
                    gaps.append(f"{qual}.{member}: property without docstring")
                if "return" not in getattr(raw.fget, "__annotations__", {}):
                    gaps.append(f"{qual}.{member}: property without return type hint")
                else:
                    try:
                        typing.get_type_hints(raw.fget)
                    except Exception as error:
                        gaps.append(f"{qual}.{member}: typing.get_type_hints fails: {error}")
            elif isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw):
                check(f"{qual}.{member}", getattr(obj, member), init=member == "__init__")
    return gaps


@pytest.mark.parametrize("frontend", ["torch", "drjit"])
def test_public_api_has_type_hints_and_docstrings(frontend):
    pytest.importorskip(frontend)
    assert _gaps(f"rayd.{frontend}") == []


@pytest.mark.parametrize("frontend", ["torch", "drjit"])
def test_scene_queries_name_the_frontend_types(frontend):
    module = pytest.importorskip(f"rayd.{frontend}")
    array = {"torch": "torch.Tensor", "drjit": "drjit.ArrayBase"}[frontend]
    array = getattr(importlib.import_module(array.split(".")[0]), array.split(".")[1])
    hints = typing.get_type_hints(module.Scene.intersect)
    assert (hints["ray"], hints["active"], hints["return"]) == (module.Ray, array | None, module.Intersection)
    assert typing.get_type_hints(module.Scene.visible)["start"] is array
    hints = typing.get_type_hints(module.Scene.nearest_edge)
    assert hints["points_or_ray"] == array | module.Ray | None and hints["ray"] == module.Ray | None
    assert typing.get_type_hints(module.Scene.trace_reflections)["max_bounces"] is int
    assert typing.get_type_hints(module.Mesh.__init__)["vertices"] is array
    assert typing.get_type_hints(module.Mesh.vertices.fget)["return"] is array
    assert typing.get_type_hints(module.Mesh.from_trimesh)["return"] is module.Mesh
    assert typing.get_type_hints(module.find_specular_paths)["scene"] is module.Scene
    # the copies run the shared code: the docstring is kept, the behaviour too
    assert "read-only" in module.Mesh.vertices.__doc__
