"""The docstring of :meth:`rayd.drjit.Mesh.from_trimesh` (core's code: :class:`rayd.core.mesh.MeshBase`),
bound by :class:`rayd.core.docs.FrontendDocs` when the Mesh class is made."""

import drjit as dr
from rayd.core.docs import mesh_annotations

DOCS = {
    "from_trimesh": """A mesh from a ``trimesh.Trimesh`` (trimesh is not needed otherwise).

        Args:
            mesh: a ``trimesh.Trimesh``; its ``vertices`` (V, 3) and ``faces`` (F, 3)
                are copied into new arrays (``Array3f``/``Array3f64``, ``Array3u``).
            backend: ``"llvm"`` (CPU, default) or ``"cuda"``.
            dtype: ``"float32"`` (default) or ``"float64"`` for vertices, normals and uv.
            ad: use the differentiable namespace (``drjit.<backend>.ad``, default) or
                the plain one.
            normals: also copy ``mesh.vertex_normals`` as shading normals (off by
                default: ``n`` equals ``geo_n`` unless asked for).
            uv: also copy ``mesh.visual.uv`` (the mesh must have texture coordinates).
            to_world: optional 4x4 transform, as for :class:`Mesh`.

        Returns:
            A :class:`Mesh` (gradients not enabled: call ``dr.enable_grad(mesh.vertices)``).

        Raises:
            TypeError: ``mesh`` is not a ``trimesh.Trimesh``, or a wrong ``dtype``.
            ValueError: an unknown ``backend``, or one Dr.Jit does not have on this
                machine; ``uv=True`` for a mesh without texture coordinates; and what
                :class:`Mesh` raises.
        """,
}

ANNOTATIONS = mesh_annotations(dr.ArrayBase)
