"""`Mesh`: a triangle mesh given as torch tensors."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from rayd.torch import _check, _convert
from rayd.core.transforms import check_matrices, checked_batch
from rayd.core.mesh import MeshBase

class Mesh(MeshBase):
    """A triangle mesh: vertex positions, faces and optional per-vertex attributes.

    The mesh holds references to the tensors (no copy). A :class:`Scene` snapshots
    them into its acceleration structure at ``build()`` / ``sync()``; queries
    recompute the continuous outputs from the live tensors, so gradients land on the
    very tensors given here.

    Args:
        vertices: (V, 3) float32 or float64, positions in object space.
        faces: (F, 3) int32 or int64 (uint32 and uint64 are held as int32/int64 views
            of the same memory), vertex indices in ``[0, V)``; the winding order defines
            ``geo_n`` (right-hand rule).
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

    # ------------------------------------------------------------------ MeshBase hooks
    @staticmethod
    def _check_float(call: str, name: str, value: object, components: int) -> torch.Tensor:
        return _check.unbatched(call, name, _check.float_tensor(call, name, value, last=components, ndim=2))

    @staticmethod
    def _check_faces(call: str, name: str, value: object) -> torch.Tensor:
        if isinstance(value, torch.Tensor) and value.dtype in _UNSIGNED:
            # uint32/uint64 (e.g. torch.from_numpy of a PLY file's faces): the same bits as int32/int64
            # for every index in range; a view, so the mesh still holds the caller's memory (and its
            # version counter). An index of 2^31 or more reads negative: refused by the range check.
            value = _convert.primal(value).view(_UNSIGNED[value.dtype])
        return _check.unbatched(call, name, _check.index_tensor(call, name, value, last=3, ndim=2))

    @staticmethod
    def _device_of(call: str, name: str, value: torch.Tensor) -> torch.device:
        _check.supported_device(call, name, value)
        return value.device

    _same_device = staticmethod(_check.same_device)

    @staticmethod
    def _rows(call: str, name: str, value: torch.Tensor) -> int:
        return int(value.shape[0])

    @staticmethod
    def _count(value: torch.Tensor) -> int:
        return int(value.shape[0])

    @staticmethod
    def _shape_text(value: torch.Tensor) -> str:
        return str(tuple(value.shape))

    @staticmethod
    def _check_rows(call: str, name: str, value: torch.Tensor, count: int) -> None:
        if value.shape[0] != count:
            raise ValueError(
                f"{call}: '{name}' must have shape ({count}, {value.shape[1]}) like 'vertices', got {tuple(value.shape)}"
            )

    @staticmethod
    def _check_transform(call: str, name: str, value: object, vertices: torch.Tensor) -> torch.Tensor:
        return check_transform(call, name, value, vertices.device)

    @staticmethod
    def _check_face_range(call: str, name: str, faces: torch.Tensor, num_vertices: int) -> None:
        _check.face_indices(call, name, _convert.primal(faces), num_vertices)

    @staticmethod
    def _trimesh_converter(call: str, *, device: torch.device | str | None = None,
                           dtype: torch.dtype = torch.float32) -> Callable[[str, np.ndarray], torch.Tensor]:
        """``from_trimesh``'s options checked; the converter of its NumPy arrays (faces int32)."""
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{call}: 'dtype' must be torch.float32 or torch.float64, got {dtype}")
        if device is not None:
            try:
                where = torch.device(device)
            except (RuntimeError, TypeError) as error:
                raise ValueError(f"{call}: 'device' must name a torch device, got {device!r}") from error
            if where.type not in ("cpu", "cuda"):
                raise ValueError(f"{call}: 'device' is {where}; rayd runs on 'cpu' and 'cuda' devices")
            if where.type == "cuda" and not (torch.cuda.is_available()
                                             and (where.index or 0) < torch.cuda.device_count()):
                raise ValueError(f"{call}: 'device' is {where}, but this PyTorch sees no such CUDA device")

        def tensor(name: str, array: np.ndarray) -> torch.Tensor:
            kind = torch.int32 if name == "faces" else dtype
            return torch.as_tensor(array, dtype=kind, device=device).contiguous()

        return tensor

    @property
    def device(self) -> torch.device:
        """The device all of the mesh's tensors live on."""
        return self.vertices.device


_host = _convert.host_matrices
_UNSIGNED = {getattr(torch, u): getattr(torch, i) for u, i in (("uint32", "int32"), ("uint64", "int64"))
             if hasattr(torch, u)}  # unsigned face dtypes, read as the signed type of their width


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
    return checked_batch(call, name, value, count, _host)


def check_transform(call: str, name: str, value: object, device: torch.device) -> torch.Tensor:
    """A finite, invertible (4, 4) float32/float64 matrix on ``device``, else the contract's error.

    Reads the matrix once (a host synchronisation at ``Mesh()`` / ``add_instance`` /
    ``set_mesh_transform``, never in queries).
    """
    value = _check.float_tensor(call, name, value)
    if tuple(value.shape) != (4, 4):
        raise ValueError(f"{call}: '{name}' must have shape (4, 4), got {tuple(value.shape)}")
    _check.same_device(call, name, value, device, "the mesh")
    check_matrices(call, name, _host(value), batch=False)
    return value
