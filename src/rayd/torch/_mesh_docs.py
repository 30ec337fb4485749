"""The docstring of :meth:`rayd.torch.Mesh.from_trimesh` (core's code: :class:`rayd.core.mesh.MeshBase`),
bound by :class:`rayd.core.docs.FrontendDocs` when the Mesh class is made."""

import torch
from rayd.core.docs import mesh_annotations

DOCS = {
    "from_trimesh": """A mesh from a ``trimesh.Trimesh`` (trimesh is not needed otherwise).

        Args:
            mesh: a ``trimesh.Trimesh``; its ``vertices`` (V, 3) and ``faces`` (F, 3)
                are copied into new tensors (vertices in ``dtype``, faces int32).
            device: where the tensors go (default: the CPU).
            dtype: float32 (default) or float64 for vertices, normals and uv.
            normals: also copy ``mesh.vertex_normals`` (trimesh computes them on first
                use: area-weighted face normals) as shading normals. Off by default, so
                ``n`` equals ``geo_n`` unless asked for.
            uv: also copy ``mesh.visual.uv`` (the mesh must have texture coordinates).
            to_world: optional (4, 4) transform, as for :class:`Mesh`.

        Returns:
            A :class:`Mesh` whose tensors do not require gradients (call
            ``mesh.vertices.requires_grad_()`` to optimise them).

        Raises:
            TypeError: ``mesh`` is not a ``trimesh.Trimesh`` (a ``trimesh.Scene`` can be
                flattened with ``scene.to_geometry()`` or loaded with ``trimesh.load(path, force="mesh")``), or ``dtype`` is not
                float32/float64.
            ValueError: ``uv=True`` for a mesh without texture coordinates; and what
                :class:`Mesh` raises.
        """,
}

ANNOTATIONS = mesh_annotations(torch.Tensor)
