"""Each frontend binds its pieces once (``rayd.<frontend>._parts``, read by rayd.core.frontend.SceneBase).

Also: records are slotted by their metaclass, and a property documented by
``rayd.core.edges.document`` shows the frontend's docstring.
"""

from __future__ import annotations

import inspect

import pytest

_NAMES = ("Mesh", "Ray", "Arrays", "LiveState", "SceneEdges", "check_ray", "check_transforms", "edge_queries",
          "surface")


def _frontend(name: str):
    pytest.importorskip(name)
    import importlib

    return importlib.import_module(f"rayd.{name}")


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_scene_binds_the_frontends_parts(name):
    fe = _frontend(name)
    parts = fe.Scene._PARTS
    assert parts.__name__ == f"rayd.{name}._parts"
    for part in _NAMES:
        assert getattr(parts, part) is not None, part
    assert fe.Scene._MESH is fe.Mesh and fe.Scene._RAY is fe.Ray
    assert fe.Scene._EDGE_QUERIES is parts.edge_queries and fe.Scene._SURFACE is parts.surface
    # every edge/surface query function the core mixins call is there
    for fn in ("ready", "nearest_edge_ray", "nearest_edge_points", "nearest_edges", "silhouette_edges"):
        assert callable(getattr(parts.edge_queries, fn)), fn
    for fn in ("closest_point", "winding_number", "contains", "signed_distance"):
        assert callable(getattr(parts.surface, fn)), fn


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_scene_device_property_has_the_frontends_docstring(name):
    fe = _frontend(name)
    prop = inspect.getattr_static(fe.Scene, "device")
    assert isinstance(prop, property)
    assert "device" in prop.__doc__ and prop.__doc__ == fe.Scene.device.__doc__
    assert prop.fget.__qualname__ == "Scene.device"
    assert "return" in prop.fget.__annotations__
    other = _frontend("drjit" if name == "torch" else "torch")
    assert fe.Scene.device.__doc__ != other.Scene.device.__doc__  # each frontend's own words
    assert fe.Scene().device is None


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_records_have_no_instance_dict(name):
    fe = _frontend(name)
    for record in ("Intersection", "NearestEdge", "ClosestPoint", "EdgeSamples", "ReflectionChain", "SpecularPaths",
                   "SpecularPathSet"):
        cls = getattr(fe, record)
        assert "__slots__" in cls.__dict__, record
        assert all("__dict__" not in vars(k) for k in cls.__mro__ if k is not object), record
