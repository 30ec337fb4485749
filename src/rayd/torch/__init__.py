"""rayd.torch: differentiable ray-geometry queries on PyTorch tensors.

Quick start::

    import torch
    import rayd.torch as rt

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, faces))      # (V, 3) float, (F, 3) int
    scene.build()
    hit = scene.intersect(rt.Ray(o, d))           # (..., 3) origins and directions
    hit.t.sum().backward()                         # gradients reach vertices, o, d
"""

from rayd._extras import require as _require

_require("torch", "rayd.torch needs PyTorch: pip install 'rayd-geom[torch]' (torch>=2.11; on a machine "
         "without a GPU, first: pip install torch --index-url https://download.pytorch.org/whl/cpu)")

from rayd.core.docs import annotate_scene_arguments
from rayd.flags import RayFlags
from rayd.torch import _optim  # noqa: F401 - fused optimiser steps bump version counters
from rayd.torch._closest_point import ClosestPoint
from rayd.torch._edge_sampling import EdgeSamples
from rayd.torch.camera import Camera
from rayd.torch.edges import EdgeTopology, NearestEdge
from rayd.torch.intersection import Intersection
from rayd.torch.mesh import Mesh
from rayd.torch.paths import SpecularPathSet, find_specular_paths
from rayd.torch.ray import Ray
from rayd.torch.reflections import ReflectionChain, SpecularPaths
from rayd.torch.scene import Scene


annotate_scene_arguments(Scene, find_specular_paths, Camera.sample_edges)  # (core.paths, core.camera_frontend)

__all__ = ["Camera", "ClosestPoint", "EdgeSamples", "EdgeTopology", "Intersection", "Mesh", "NearestEdge", "Ray", "RayFlags", "ReflectionChain", "Scene", "SpecularPathSet", "SpecularPaths", "find_specular_paths"]
