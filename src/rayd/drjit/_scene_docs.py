"""rayd.drjit's words for the core's ray queries and ``device``: as :mod:`rayd.torch._scene_docs`, for Dr.Jit arrays."""

import drjit as dr

from rayd.core.docs import lifecycle_annotations, scene_annotations
from rayd.core.queries import INTERSECT_TAIL, VISIBLE_RULE
from rayd.drjit.edges import EdgeTopology, NearestEdge
from rayd.drjit.intersection import Intersection
from rayd.drjit.mesh import Mesh
from rayd.drjit.ray import Ray
from rayd.drjit.reflections import ReflectionChain, SpecularPaths

DOCS = {
    "device": """The scene's device, ``'cpu'`` (LLVM) or ``'cuda:<ordinal>'``; ``None`` while empty.""",
    "intersect": """Closest hit of each ray, differentiable for the fixed winning triangle.

    Args:
        ray: :class:`Ray` with ``o``, ``d`` of shape (N, 3) (``Array3f`` or
            ``Array3f64``) on the scene's backend and device.
        active: optional ``Bool`` of width N or 1; inactive rays miss.
        flags: :class:`RayFlags` selecting the fields to compute.
        ignore: optional ``global_prim_id`` per ray (``Int``/``UInt`` of width N or
            1, or an int; -1 for none) whose face the ray skips, e.g. the face a
            reflected ray leaves.

    Returns:
        :class:`Intersection` with fields of width N. Concretely, for the first
        triangle hit with ``tmin < t < tmax``, ``t, u, v`` solve
        ``o + t d = (1 - u - v) v0 + u v1 + v v2``, ``p = o + t d``,
        ``barycentric = (1 - u - v, u, v)``. Misses: ``t = inf``, ids -1, zeros.
        Fields are ``.ad`` types when any input (a mesh's arrays, ``o``, ``d``) is.

    Units:
        ``t`` in multiples of ``|d|``; ``p`` in world units.

    Gradients:
        ``t, p, n, geo_n, barycentric, uv`` are differentiable through Dr.Jit's AD,
        in reverse (``dr.backward``) and forward (``dr.forward``) mode, with
        respect to the meshes' vertex arrays, normals, uv and transforms, and to
        ``ray.o`` and ``ray.d``, wherever those are ``.ad`` arrays with gradients
        enabled. The choice of triangle is held fixed; misses get exactly zero
        gradient.

    Raises:
        TypeError: ``ray`` is not a ``rayd.drjit.Ray`` (e.g. a rayd.torch one),
            ``active`` is not a ``Bool`` array, ``ignore`` is not an integer,
            ``flags`` is not a ``RayFlags``.
        ValueError: inputs on another backend or device, or widths that do not
            broadcast.
""" + INTERSECT_TAIL,
    "shadow_test": """Any-hit occlusion test: is anything hit with ``tmin < t < tmax``?

    Args:
        ray: :class:`Ray` with ``o``, ``d`` of shape (N, 3) on the scene's backend.
        active: optional ``Bool`` of width N or 1; inactive rays report False.
        ignore: optional ``global_prim_id`` per ray to skip (-1 for none).

    Returns:
        (N,) ``Bool``, True where the ray is occluded. Not differentiable. The
        traversal stops at the first blocker found (any hit).

    Raises:
        TypeError, ValueError, RuntimeError: as :meth:`intersect`.
    """,
    "visible": """Line of sight: is the open segment between ``start`` and ``end`` unblocked?

    Args:
        start: (N, 3) ``Array3f``/``Array3f64`` points on the scene's backend.
        end: (N, 3) same types, width N or 1.
        active: optional ``Bool`` of width N or 1; inactive pairs report False.
        ignore: optional ``global_prim_id`` per pair to skip (-1 for none).

    Returns:
        (N,) ``Bool``, """ + VISIBLE_RULE,
}

#: The frontend's types that the query methods' annotations name (:func:`rayd.core.docs.scene_annotations`;
#: ``Intersections`` is added by ``_scene_allhits``, where it is defined).
TYPES = {"Mesh": Mesh, "array": dr.ArrayBase, "Ray": Ray, "Intersection": Intersection,
         "EdgeTopology": EdgeTopology, "NearestEdge": NearestEdge, "ReflectionChain": ReflectionChain,
         "SpecularPaths": SpecularPaths}

ANNOTATIONS = {"device": {"return": str | None}, **scene_annotations(TYPES, DOCS), **lifecycle_annotations(TYPES)}
