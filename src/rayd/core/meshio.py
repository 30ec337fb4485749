"""Hand-over of meshes from trimesh, shared by both frontends' ``Mesh.from_trimesh`` (NumPy only)."""

from __future__ import annotations

import sys

import numpy as np


def trimesh_arrays(call: str, mesh: object, normals: bool, uv: bool):
    """``(vertices, faces, normals or None, uv or None)`` as NumPy arrays of a ``trimesh.Trimesh``.

    Never imports trimesh: an object can only be a Trimesh if
    trimesh is already imported.
    """
    trimesh = sys.modules.get("trimesh")
    if trimesh is None or not isinstance(mesh, trimesh.Trimesh):
        hint = ""
        if trimesh is not None and isinstance(mesh, trimesh.Scene):
            hint = ' (a trimesh.Scene: flatten it with scene.to_geometry(), or load with trimesh.load(path, force="mesh"))'
        kind = type(mesh)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        raise TypeError(f"{call}: 'mesh' must be a trimesh.Trimesh, got {name}{hint}")
    # copies (trimesh's arrays are read-only views into its cache)
    vertices = np.array(mesh.vertices, dtype=np.float64).reshape(-1, 3)
    faces = np.array(mesh.faces, dtype=np.int64).reshape(-1, 3)
    if faces.size and (faces.min() < 0 or faces.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{call}: 'mesh.faces' holds indices outside the int32 range")
    vertex_normals = np.array(mesh.vertex_normals, dtype=np.float64).reshape(-1, 3) if normals else None
    texcoords = None
    if uv:
        texcoords = getattr(getattr(mesh, "visual", None), "uv", None)
        if texcoords is None:
            raise ValueError(f"{call}: uv=True but the mesh has no texture coordinates (mesh.visual.uv)")
        texcoords = np.array(texcoords, dtype=np.float64).reshape(-1, 2)
    return vertices, faces, vertex_normals, texcoords


def build_as(call: str, mesh_call: str, make):
    """``make()`` (a ``Mesh(...)`` construction), its errors renamed to start with ``call``.

    ``Mesh.from_trimesh(..., to_world=bad)`` must report ``from_trimesh()``, the public
    call, not the ``Mesh()`` it delegates to: a ``TypeError``/``ValueError`` whose
    message starts with ``mesh_call`` is raised again with that prefix replaced.
    """
    try:
        return make()
    except (TypeError, ValueError) as error:
        message = str(error)
        if not message.startswith(mesh_call + ":"):
            raise
        raise type(error)(call + message[len(mesh_call):]) from None
