"""What both frontends' live state assembles the same way, over the frontend's array functions.

A query's differentiable evaluation reads the registered per-vertex attributes of every
mesh, concatenated in mesh order (the rows of the engine's global vertex array). This
module holds that rule once; the frontends give their cast, zeros and concatenation.
It imports no array library.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from rayd.core.shapes import face_flags

class LiveBase:
    """What both frontends' ``LiveState`` (their ``_parts.LiveState``) read the same way at ``build()``.

    ``LiveState(scene)`` keeps the scene's :class:`~rayd.core.SceneCore` as ``core``, reads
    its host tables once and hands them, with the per-face flags of the meshes that carry
    normals and uv (:func:`rayd.core.shapes.face_flags` over the meshes with faces), to
    the frontend's ``_tables(scene, host, has_normals, has_uv)``, which makes its own
    arrays of them.

    Args:
        scene: the frontend's ``Scene``, just built.
    """

    def __init__(self, scene: Any) -> None:
        self.core = core = scene._core
        table = core.table
        meshes = [s for s in table.shapes if not s.is_instance and s.num_faces]
        self._tables(scene, table.tables(), face_flags(meshes, "normals"), face_flags(meshes, "uv"))

    def _tables(self, scene: Any, host: dict[str, np.ndarray], has_normals: np.ndarray | None,
                has_uv: np.ndarray | None) -> None:
        """Make the frontend's arrays of one build (``host``: :meth:`rayd.core.shapes.ShapeTable.tables`)."""
        raise NotImplementedError


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
        Without either, no call beyond this one (it runs in every query).
    """
    normals = _attribute(meshes, "normals", 3, take, zeros, concat) if wanted[0] else None
    uv = _attribute(meshes, "uv", 2, take, zeros, concat) if wanted[1] else None
    return normals, uv


def _attribute(meshes: Sequence[Any], name: str, components: int, take: Callable[[Any, int], Any],
               zeros: Callable[[int, int], Any], concat: Callable[[list], Any]) -> Any:
    """One attribute (``"normals"`` or ``"uv"``) of every mesh, concatenated (``zeros`` rows where a mesh has none)."""
    parts = []
    for s in meshes:
        array = getattr(s.mesh, name)
        parts.append(zeros(s.mesh.num_vertices, components) if array is None else take(array, components))
    return concat(parts)
