"""rayd.core.docs.FrontendDocs: the edge, surface and reflection methods are core's code, documented on each
frontend's Scene in its own words (rayd.<frontend>._scene_edges / _scene_surface / _scene_reflect DOCS)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from rayd.core import edges, specular, surface
from rayd.core.docs import FrontendDocs

_GROUPS = [(edges.EdgeQueries, "_scene_edges"), (surface.SurfaceQueries, "_scene_surface"),
           (specular.ReflectionQueries, "_scene_reflect")]


@pytest.mark.parametrize("frontend, word", [("torch", "tensor"), ("drjit", "Dr.Jit")])
def test_scene_methods_run_core_code_with_frontend_docstrings(frontend, word):
    module = pytest.importorskip(f"rayd.{frontend}")
    for mixin, docs_module in _GROUPS:
        assert issubclass(mixin, FrontendDocs) and mixin._DOCS_MODULE == docs_module
        words = importlib.import_module(f"rayd.{frontend}.{docs_module}")
        assert words.DOCS  # every documented name is a method of the core mixin
        for name, doc in words.DOCS.items():
            method = getattr(module.Scene, name)
            assert getattr(method, '_rayd_serialised', False)  # run under the engine lock
            assert inspect.unwrap(method).__code__ is getattr(mixin, name).__code__
            assert method.__doc__ == doc
            assert method.__qualname__ == f"Scene.{name}"
            assert name in module.Scene.__dict__  # a copy of its own, not the mixin's
        assert any(word in doc for doc in words.DOCS.values())


def test_surface_annotations_name_the_frontend_types():
    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    assert rt.Scene.closest_point.__annotations__["points"] is torch.Tensor
    assert rt.Scene.closest_point.__annotations__["return"] is rt.ClosestPoint


def test_a_class_not_named_scene_is_left_alone():
    class Other(edges.EdgeQueries):  # in this test module, not a frontend: nothing is copied
        pass

    assert "nearest_edge" not in Other.__dict__


@pytest.mark.parametrize("frontend, array", [("torch", "torch.Tensor"), ("drjit", "drjit.ArrayBase")])
def test_find_specular_paths_is_core_code_with_frontend_words(frontend, array):
    """rayd.core.paths.path_finder: one signature and one argument sequence, the frontend's docstring."""
    module = pytest.importorskip(f"rayd.{frontend}")
    words = importlib.import_module(f"rayd.{frontend}.paths")
    record = "paths" if frontend == "torch" else "reflections"
    find = module.find_specular_paths
    assert find.__doc__ == words.DOCS["find_specular_paths"]
    assert (find.__module__, find.__name__, find.__qualname__) == (f"rayd.{frontend}.paths",) + ("find_specular_paths",) * 2
    assert str(inspect.signature(find)) == (
        f"(scene: rayd.{frontend}.scene.Scene, sources: {array}, targets: {array}, max_bounces: int, *, "
        f"num_rays: int = 100000, line_of_sight: bool = True) -> rayd.{frontend}.{record}.SpecularPathSet")
    with pytest.raises(TypeError, match=rf"^rayd\.{frontend}\.find_specular_paths\(\): 'scene' must be a "
                                        rf"rayd\.{frontend}\.Scene, got object"):
        find(object(), None, None, 1)
