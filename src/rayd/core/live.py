"""What both frontends' live state assembles the same way, over the frontend's array functions.

A query's differentiable evaluation reads the registered per-vertex attributes of every
mesh, concatenated in mesh order (the rows of the engine's global vertex array). This
module holds that rule once; the frontends give their cast, zeros and concatenation.
It imports no array library.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

#: The per-vertex attributes a mesh may carry besides its positions: (name, components).
ATTRIBUTES = (("normals", 3), ("uv", 2))


def vertex_attributes(meshes: Sequence[Any], wanted: tuple[bool, bool], take: Callable[[Any, int], Any],
                      zeros: Callable[[int, int], Any], concat: Callable[[list], Any]) -> tuple[Any, Any]:
    """``(normals, uv)``: each wanted attribute of ``meshes`` as one array in mesh order, else ``None``.

    Args:
        meshes: the scene's mesh shapes (:class:`rayd.core.shapes.Shape`), in row order.
        wanted: ``(normals, uv)``: whether to assemble each (some mesh has it).
        take: ``take(array, components)``: a mesh's registered (V, components) array in the
            query's dtype (differentiable: gradients flow back into it).
        zeros: ``zeros(V, components)``: the rows of a mesh without the attribute.
        concat: the concatenation of a list of such arrays along the rows.

    Returns:
        ``(normals, uv)``, each (sum of V, 3) / (sum of V, 2) or ``None`` where not wanted.
    """
    out = []
    for (name, components), want in zip(ATTRIBUTES, wanted):
        if not want:
            out.append(None)
            continue
        parts = []
        for s in meshes:
            array = getattr(s.mesh, name)
            parts.append(zeros(s.mesh.num_vertices, components) if array is None else take(array, components))
        out.append(concat(parts))
    return out[0], out[1]
