"""`Mesh`: a triangle mesh given as torch tensors."""

from __future__ import annotations


import numpy as np
import torch

from rayd.torch import _check, _convert
from rayd.core.transforms import transform_problem
from rayd.core.meshio import trimesh_arrays

_CALL = "rayd.torch.Mesh()"


class Mesh:
    """A triangle mesh: vertex positions, faces and optional per-vertex attributes.

    The mesh holds references to the tensors (no copy). A :class:`Scene` snapshots
    them into its acceleration structure at ``build()`` / ``sync()``; queries
    recompute the continuous outputs from the live tensors, so gradients land on the
    very tensors given here.

    Args:
        vertices: (V, 3) float32 or float64, positions in object space.
        faces: (F, 3) int32 or int64, vertex indices in ``[0, V)``; the winding
            order defines ``geo_n`` (right-hand rule).
        normals: optional (V, 3) float32/float64 per-vertex shading normals (any
            length; the interpolated normal is normalised).
        uv: optional (V, 2) float32/float64 per-vertex texture coordinates.
        to_world: optional (4, 4) float32/float64 object-to-world matrix acting on
            column vectors, ``p_world = to_world @ [p, 1]``: an affine transform, so
            its last row is taken as (0, 0, 0, 1) whatever it holds (and gets no
            gradient). Values must be finite, within float32 range, and the 3x3
            linear part invertible.

    Gradients:
        Flow into ``vertices``, ``normals``, ``uv`` and ``to_world`` through the
        outputs of scene queries.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype.
        ValueError: wrong shapes, tensors on different devices, or a face index
            outside ``[0, V)`` (this check reads ``faces`` once, synchronising).
            ``Scene.build()`` checks the faces again (they may have been changed in
            place since), and queries refuse faces changed in place after ``build()``.
    """

    def __init__(
        self,
        vertices: torch.Tensor,
        faces: torch.Tensor,
        *,
        normals: torch.Tensor | None = None,
        uv: torch.Tensor | None = None,
        to_world: torch.Tensor | None = None,
    ) -> None:
        vertices = _check.float_tensor(_CALL, "vertices", vertices, last=3, ndim=2)
        faces = _check.index_tensor(_CALL, "faces", faces, last=3, ndim=2)
        _check.supported_device(_CALL, "vertices", vertices)
        _check.same_device(_CALL, "faces", faces, vertices.device, "'vertices'")
        if normals is not None:
            normals = _check.float_tensor(_CALL, "normals", normals, last=3, ndim=2)
            _check.same_device(_CALL, "normals", normals, vertices.device, "'vertices'")
            if normals.shape[0] != vertices.shape[0]:
                raise ValueError(
                    f"{_CALL}: 'normals' must have shape ({vertices.shape[0]}, 3) like 'vertices', "
                    f"got {tuple(normals.shape)}"
                )
        if uv is not None:
            uv = _check.float_tensor(_CALL, "uv", uv, last=2, ndim=2)
            _check.same_device(_CALL, "uv", uv, vertices.device, "'vertices'")
            if uv.shape[0] != vertices.shape[0]:
                raise ValueError(
                    f"{_CALL}: 'uv' must have shape ({vertices.shape[0]}, 2) like 'vertices', got {tuple(uv.shape)}"
                )
        if to_world is not None:
            to_world = check_transform(_CALL, "to_world", to_world, vertices.device)
        _check.face_indices(_CALL, "faces", _convert.primal(faces), vertices.shape[0])
        self.vertices = vertices
        self.faces = faces
        self.normals = normals
        self.uv = uv
        self.to_world = to_world

    @classmethod
    def from_trimesh(
        cls,
        mesh: object,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        normals: bool = False,
        uv: bool = False,
        to_world: torch.Tensor | None = None,
    ) -> "Mesh":
        """A mesh from a ``trimesh.Trimesh`` (trimesh is not needed otherwise).

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
        """
        call = "rayd.torch.Mesh.from_trimesh()"
        vertices, faces, vertex_normals, texcoords = trimesh_arrays(call, mesh, normals, uv)
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{call}: 'dtype' must be torch.float32 or torch.float64, got {dtype}")

        def tensor(array: np.ndarray | None, kind: torch.dtype) -> torch.Tensor | None:
            return None if array is None else torch.as_tensor(array, dtype=kind, device=device).contiguous()

        return cls(tensor(vertices, dtype), tensor(faces, torch.int32), normals=tensor(vertex_normals, dtype),
                   uv=tensor(texcoords, dtype), to_world=to_world)

    @property
    def device(self) -> torch.device:
        """The device all of the mesh's tensors live on."""
        return self.vertices.device

    @property
    def num_vertices(self) -> int:
        """V."""
        return int(self.vertices.shape[0])

    @property
    def num_faces(self) -> int:
        """F."""
        return int(self.faces.shape[0])

    def __repr__(self) -> str:
        extras = [name for name in ("normals", "uv", "to_world") if getattr(self, name) is not None]
        more = f", with {', '.join(extras)}" if extras else ""
        return f"rayd.torch.Mesh(V={self.num_vertices}, F={self.num_faces}, device={self.device}{more})"


_host = _convert.host_matrices


def check_transforms(call: str, name: str, value: object, count: int, device: torch.device | None) -> torch.Tensor:
    """``count`` finite, invertible matrices as one (count, 4, 4) float32/float64 tensor on ``device``.

    Reads the batch once (one host synchronisation for all of them); ``count`` may be 0
    (a (0, 4, 4) tensor is the only valid partner of an empty id list: nothing to read).
    """
    value = _check.float_tensor(call, name, value)
    if tuple(value.shape) != (count, 4, 4):
        raise ValueError(f"{call}: '{name}' must have shape ({count}, 4, 4) (one matrix per shape id), got "
                         f"{tuple(value.shape)}")
    if device is not None:  # None: a scene without shapes (only an empty id list gets here)
        _check.same_device(call, name, value, device, "the mesh")
    if count == 0:
        return value
    found = transform_problem(_host(value))
    if found is not None:
        raise ValueError(f"{call}: '{name}[{found[0]}]' {found[1]}")
    return value


def check_transform(call: str, name: str, value: object, device: torch.device) -> torch.Tensor:
    """A finite, invertible (4, 4) float32/float64 matrix on ``device``, else the contract's error.

    Reads the matrix once (a host synchronisation at ``Mesh()`` / ``add_instance`` /
    ``set_mesh_transform``, never in queries).
    """
    value = _check.float_tensor(call, name, value)
    if tuple(value.shape) != (4, 4):
        raise ValueError(f"{call}: '{name}' must have shape (4, 4), got {tuple(value.shape)}")
    _check.same_device(call, name, value, device, "the mesh")
    found = transform_problem(_host(value))
    if found is not None:
        raise ValueError(f"{call}: '{name}' {found[1]}")
    return value
