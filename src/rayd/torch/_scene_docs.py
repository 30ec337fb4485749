"""The docstrings of :class:`rayd.torch.Scene`'s ray queries and ``device`` (core's code:
:class:`rayd.core.queries.RayQueries`, :class:`rayd.core.frontend.SceneBase`), bound by
:class:`rayd.core.docs.FrontendDocs` when the Scene class is made."""

import torch

from rayd.core.docs import lifecycle_annotations, scene_annotations
from rayd.core.queries import INTERSECT_TAIL, VISIBLE_RULE
from rayd.torch.edges import EdgeTopology, NearestEdge
from rayd.torch.intersection import Intersection
from rayd.torch.mesh import Mesh
from rayd.torch.ray import Ray
from rayd.torch.reflections import ReflectionChain, SpecularPaths

DOCS = {
    "device": """The scene's device (that of its meshes), ``None`` while it is empty.""",
    "intersect": """Closest hit of each ray, differentiable for the fixed winning triangle.

    Args:
        ray: :class:`Ray` with ``o``, ``d`` of shape (..., 3), float32 or float64,
            on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive rays miss.
        flags: :class:`RayFlags` selecting the fields to compute.
        ignore: optional ``global_prim_id`` per ray (int tensor broadcastable to
            ``...``, or an int; -1 for none) whose face the ray skips, e.g. the
            face a reflected ray leaves.

    Returns:
        :class:`Intersection` with fields of shape ``...``. Concretely, for the
        first triangle hit with ``tmin < t < tmax``, ``t, u, v`` solve
        ``o + t d = (1 - u - v) v0 + u v1 + v v2``, ``p = o + t d``,
        ``barycentric = (1 - u - v, u, v)``. Misses: ``t = inf``, ids -1, zeros.

    Units:
        ``t`` in multiples of ``|d|``; ``p`` in world units.

    Gradients:
        ``t, p, n, geo_n, barycentric, uv`` are differentiable (reverse and forward
        mode) with respect to the meshes' vertex tensors, normals, uv and
        transforms (mesh and instance), and to ``ray.o`` and ``ray.d``. The choice
        of triangle is held fixed; misses get exactly zero gradient. Gradients are
        accumulated with ``index_put_(accumulate=True)``, which is bitwise
        deterministic under ``torch.use_deterministic_algorithms(True)`` (on CUDA
        otherwise atomic: faster, run-to-run differences in the last bits).

    Raises:
        TypeError: ``ray`` is not a ``rayd.torch.Ray``, ``active`` is not bool,
            ``ignore`` is not an integer, ``flags`` is not a ``RayFlags``.
        ValueError: inputs on another device, or batch shapes that do not broadcast.
""" + INTERSECT_TAIL,
    "shadow_test": """Any-hit occlusion test: is anything hit with ``tmin < t < tmax``?

    Args:
        ray: :class:`Ray` with ``o``, ``d`` of shape (..., 3) on the scene's device.
        active: optional bool tensor broadcastable to ``...``; inactive rays report False.
        ignore: optional ``global_prim_id`` per ray to skip (-1 for none).

    Returns:
        (...) bool, True where the ray is occluded. Not differentiable. The
        traversal stops at the first blocker found (any hit).

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`intersect`.
    """,
    "visible": """Line of sight: is the open segment between ``start`` and ``end`` unblocked?

    Args:
        start: (..., 3) float32/float64 points on the scene's device.
        end: (..., 3) float32/float64, broadcastable against ``start``.
        active: optional bool tensor broadcastable to ``...``; inactive pairs report False.
        ignore: optional ``global_prim_id`` per pair to skip (-1 for none).

    Returns:
        (...) bool, """ + VISIBLE_RULE,
}

#: The frontend's types that the query methods' annotations name (:func:`rayd.core.docs.scene_annotations`).
TYPES = {"Mesh": Mesh, "array": torch.Tensor, "Ray": Ray, "Intersection": Intersection, "Intersections": Intersection,
         "EdgeTopology": EdgeTopology, "NearestEdge": NearestEdge, "ReflectionChain": ReflectionChain,
         "SpecularPaths": SpecularPaths}

ANNOTATIONS = {"device": {"return": torch.device | None}, **scene_annotations(TYPES, DOCS), **lifecycle_annotations(TYPES)}
