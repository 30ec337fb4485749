"""What issue 13's 17th-session moves wrote once in rayd.core, checked in both frontends.

The all-hits and reflection query modules are bound through ``_parts`` (as the edge and
surface ones); ``Camera.generate_rays`` / ``project`` and the camera-space maps are
``CameraBase``'s code over the frontend's ``Camera._OPS``; ``repr`` says where arrays live
by the frontend's ``_convert.where``; the edge state is made from the scene by core's
``EdgeBuffers.__init__``; ``Ray``'s bounds are checked by ``RayBase._check_bound``.
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

from rayd.core import queries, specular
from rayd.core.camera_frontend import CameraBase
from rayd.core.edge_state import EdgeBuffers
from rayd.core.rays import RayBase

_OPS = ("working", "pixel_centres", "checked_samples", "checked_points", "cast", "components", "vector",
        "intrinsics", "placement", "rotate", "unrotate", "zero3", "unit", "select", "ray", "empty")


def _frontend(name: str):
    pytest.importorskip(name)
    return importlib.import_module(f"rayd.{name}")


def _scene(name: str):
    """A built one-triangle scene of ``name``'s frontend."""
    fe = _frontend(name)
    v = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    if name == "torch":
        import torch

        mesh = fe.Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor([[0, 1, 2]]))
    else:
        from drjit.llvm.ad import Array3f, Array3u

        mesh = fe.Mesh(Array3f(*v.T), Array3u([0], [1], [2]))
    scene = fe.Scene()
    scene.add_mesh(mesh)
    scene.build()
    return fe, mesh, scene


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_query_modules_are_bound_through_parts(name):
    fe = _frontend(name)
    parts = fe.Scene._PARTS
    assert fe.Scene._ALL_HITS is parts.all_hits and fe.Scene._REFLECT is parts.reflections
    for fn in ("intersect_all", "count_intersections"):
        assert callable(getattr(parts.all_hits, fn)), fn
    for fn in ("trace_reflections", "specular_paths", "path_points", "path_sequences", "path_active",
               "host_points", "host_corners", "host_search"):
        assert callable(getattr(parts.reflections, fn)), fn
    # the mixins are core's own classes: no per-frontend subclass is left between them and Scene
    assert queries.AllHitsQueries in fe.Scene.__mro__ and specular.ReflectionQueries in fe.Scene.__mro__
    for cls in fe.Scene.__mro__:
        assert not cls.__name__.endswith("Queries") or cls.__module__.startswith("rayd.core"), cls


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_camera_maps_are_core_code_over_the_frontends_ops(name):
    fe = _frontend(name)
    for method in ("generate_rays", "project"):
        assert inspect.unwrap(getattr(fe.Camera, method)).__code__ is getattr(CameraBase, method).__code__
    assert "_generate_rays" not in vars(fe.Camera) and "_project" not in vars(fe.Camera)
    for op in _OPS:
        assert callable(getattr(fe.Camera._OPS, op)), op


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_reprs_say_where_arrays_live_by_convert_where(name):
    fe, mesh, scene = _scene(name)
    where = importlib.import_module(f"rayd.{name}._convert").where
    assert repr(mesh) == f"rayd.{name}.Mesh(V=3, F=1, {where(mesh.vertices)})"
    top = scene.edge_topology()
    assert repr(top) == f"rayd.{name}.EdgeTopology(num_edges=3, {where(top.v)})"
    assert ("device=cpu" if name == "torch" else "type=drjit.llvm") in repr(mesh)


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_edge_state_is_made_from_the_scene_by_core(name):
    fe, _, scene = _scene(name)
    edges = scene._edges
    assert isinstance(edges, EdgeBuffers)
    if name == "drjit":  # rayd.torch's adds its build-time face tables after core's
        assert "__init__" not in vars(type(edges))
    assert edges._scene is scene and edges._state is scene._state and edges._device == scene._device
    assert edges._arrays is scene._core.arrays  # the scene's protocol (stream, fences)


@pytest.mark.parametrize("name", ["torch", "drjit"])
def test_ray_bounds_are_checked_by_core(name):
    fe = _frontend(name)
    assert fe.Ray._check_bound is RayBase._check_bound and "_check_bound" not in vars(fe.Ray)
    if name == "torch":
        import torch

        o, bad = torch.zeros(2, 3), torch.zeros(2, dtype=torch.int32)
    else:
        from drjit.llvm.ad import Array3f, Int

        o, bad = Array3f([0, 0], [0, 0], [0, 0]), Int([0, 0])
    with pytest.raises(TypeError, match=rf"^rayd\.{name}\.Ray\(\): 'tmax' must "):
        fe.Ray(o, o, bad)
