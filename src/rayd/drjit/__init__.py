"""rayd.drjit: differentiable ray-geometry queries on Dr.Jit arrays (LLVM and CUDA).

Quick start::

    import drjit as dr
    from drjit.llvm.ad import Array3f, Array3u   # or drjit.cuda.ad on the GPU
    import rayd.drjit as rd

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vertices, faces))      # Array3f width V, Array3u width F
    scene.build()
    dr.enable_grad(vertices)
    hit = scene.intersect(rd.Ray(o, d))           # Array3f origins and directions
    dr.backward(dr.sum(hit.t))                    # gradients reach vertices, o, d
    near = scene.nearest_edge(points)             # nearest edge per Array3f point (or to a Ray)

The backend (``drjit.llvm`` on the CPU, ``drjit.cuda`` on the GPU) follows the type of
the arrays. Gradients flow wherever inputs are ``.ad`` arrays with gradients enabled.
rayd.torch and rayd.drjit objects do not mix.
"""

from rayd._extras import require as _require

_require("drjit", "rayd.drjit needs Dr.Jit: pip install 'rayd-geom[drjit]' (drjit==1.5.0)")

from rayd.drjit._closest_point import ClosestPoint
from rayd.drjit.camera import Camera, EdgeSamples
from rayd.drjit.edges import EdgeTopology, NearestEdge
from rayd.drjit.intersection import Intersection
from rayd.drjit.mesh import Mesh
from rayd.drjit.paths import find_specular_paths
from rayd.drjit.reflections import ReflectionChain, SpecularPathSet, SpecularPaths
from rayd.drjit.ray import Ray
from rayd.drjit.scene import Scene
from rayd.core.docs import annotate_scene_arguments
from rayd.flags import RayFlags


annotate_scene_arguments(Scene, find_specular_paths, Camera.sample_edges)  # (core.paths, core.camera_frontend)

__all__ = ["Camera", "ClosestPoint", "EdgeSamples", "EdgeTopology", "Intersection", "Mesh", "NearestEdge", "Ray", "RayFlags",
           "ReflectionChain", "Scene", "SpecularPathSet", "SpecularPaths", "find_specular_paths"]

from rayd.drjit._scene_allhits import Intersections  # noqa: E402 - the record of Scene.intersect_all

__all__ += ["Intersections"]
