"""`Mesh`: a triangle mesh given as Dr.Jit arrays."""

from __future__ import annotations

from typing import Callable

import drjit as dr
import numpy as np

from rayd.drjit import _check, _convert
from rayd.drjit._convert import host_matrices
from rayd.core.transforms import check_matrices, checked_batch
from rayd.core.mesh import MeshBase

class Mesh(MeshBase):
    """A triangle mesh: vertex positions, faces and optional per-vertex attributes.

    The mesh holds references to the arrays (no copy). A :class:`Scene` snapshots
    them into its acceleration structure at ``build()`` / ``sync()``; queries
    recompute the continuous outputs from the live arrays, so gradients land on the
    very arrays given here.

    Args:
        vertices: (V, 3) positions in object space: an ``Array3f`` or ``Array3f64`` of
            width V from ``drjit.llvm(.ad)`` or ``drjit.cuda(.ad)``.
        faces: (F, 3) vertex indices in ``[0, V)``: ``Array3u``, ``Array3i``,
            ``Array3u64`` or ``Array3i64`` of width F, same backend; the winding order
            defines ``geo_n`` (right-hand rule).
        normals: optional (V, 3) ``Array3f``/``Array3f64`` per-vertex shading normals
            (any length; the interpolated normal is normalised), every component of width V
            (as for ``vertices``: a width-1 component is refused, not broadcast).
        uv: optional (V, 2) ``Array2f``/``Array2f64`` per-vertex texture coordinates, every
            component of width V. Normals and uv are read at each query (not snapshotted): one
            whose component was replaced by one of another width makes queries raise ``ValueError``.
        to_world: optional 4x4 object-to-world matrix acting on column vectors,
            ``p_world = to_world @ [p, 1]``: a ``Matrix4f``/``Matrix4f64`` of the
            backend (width 1) or of ``drjit.scalar`` (held as given, like the others: a
            later write into it, ``m[2, 3] = 1``, is seen; no gradients).

    Gradients:
        Flow into ``vertices``, ``normals``, ``uv`` and ``to_world`` through the
        outputs of scene queries when they are ``.ad`` arrays with gradients enabled
        (``dr.enable_grad``).

    Raises:
        TypeError: an argument is not a Dr.Jit array (e.g. a torch tensor) or has the
            wrong dtype.
        ValueError: wrong component counts or widths, arrays on different backends
            or devices, or a face index outside ``[0, V)`` (this check reads
            ``faces`` once, synchronising; ``Scene.build()`` checks again, since
            ``faces`` may be written in place in between).
    """

    # ------------------------------------------------------------------ MeshBase hooks
    # (arrays a scene keeps: never symbolic variables, which its later build()/sync() could not read)
    _check_float = staticmethod(lambda call, name, value, k: _stored(call, name, _check.float_array(call, name, value, k)))
    _check_faces = staticmethod(lambda call, name, value: _stored(call, name, _check.index_array(call, name, value)))
    _same_device = staticmethod(_check.same_backend)
    _rows = staticmethod(_check.common_width)
    _count = staticmethod(dr.width)
    _check_face_range = staticmethod(_check.face_range)
    _shape_text = staticmethod(lambda value: f"width {dr.width(value)}")
    _device_of = staticmethod(lambda call, name, value: _convert.device_name(value))
    _check_rows = staticmethod(lambda call, name, value, count: _check.rows(call, name, value, count, "'vertices'"))
    _check_transform = staticmethod(lambda call, name, value, vertices: check_transform(call, name, value, vertices))

    @staticmethod
    def _trimesh_converter(call: str, *, backend: str = "llvm", dtype: str = "float32",
                           ad: bool = True) -> Callable[[str, np.ndarray], dr.ArrayBase]:
        """``from_trimesh``'s options checked; the converter of its NumPy arrays into columns (faces ``Array3u``)."""
        if backend not in ("llvm", "cuda"):
            raise ValueError(f"{call}: 'backend' must be 'llvm' or 'cuda', got {backend!r}")
        if not dr.has_backend(getattr(dr.JitBackend, backend.upper())):
            raise ValueError(f"{call}: 'backend' is {backend!r}, but Dr.Jit has no {backend.upper()} backend on this "
                             "machine (no CUDA device or driver, or no LLVM library)")
        if dtype not in ("float32", "float64"):
            raise TypeError(f"{call}: 'dtype' must be 'float32' or 'float64', got {dtype!r}")
        m = _convert.module(backend, ad)
        wide = dtype == "float64"
        kinds = {"vertices": m.Array3f64 if wide else m.Array3f, "faces": m.Array3u,
                 "normals": m.Array3f64 if wide else m.Array3f, "uv": m.Array2f64 if wide else m.Array2f}

        def columns(name: str, array: np.ndarray) -> dr.ArrayBase:
            numpy_dtype = np.uint32 if name == "faces" else (np.float64 if wide else np.float32)
            return kinds[name](np.ascontiguousarray(array.T.astype(numpy_dtype)))

        return columns

    @property
    def device(self) -> str:
        """``'cpu'`` (LLVM backend) or ``'cuda:<ordinal>'``."""
        return _convert.device_name(self.vertices)

    @property
    def backend(self) -> str:
        """``'llvm'`` or ``'cuda'``."""
        return _convert.backend_name(self.vertices)


def _stored(call: str, name: str, value: dr.ArrayBase) -> dr.ArrayBase:
    """``value`` unless it holds symbolic variables (:func:`rayd.drjit._check.not_symbolic`)."""
    _check.not_symbolic(call, name, value)
    return value


def check_transform(call: str, name: str, value: object, like: dr.ArrayBase) -> dr.ArrayBase:
    """A finite, invertible 4x4 float matrix of ``like``'s backend (width 1), or of ``drjit.scalar``.

    A ``drjit.scalar`` matrix is held as it is, like a matrix of the backend: the scene
    reads its values at ``build()`` / ``sync()`` and sees a later write into it (its
    version is its values, :func:`rayd.drjit._convert.version`); it has no gradients.
    Reads the matrix once (a host synchronisation at ``Mesh()`` / ``add_instance`` /
    ``set_mesh_transform``, never in queries).
    """
    if _convert.is_scalar_matrix(value):
        _check_values(call, name, value)
        return value
    value = _matrices(call, name, value, "have shape (4, 4): a Matrix4f or Matrix4f64")
    _check.same_backend(call, name, value, _convert.device_name(like), "the mesh")
    if dr.width(value) != 1:
        raise ValueError(f"{call}: '{name}' must hold one matrix (width 1), got width {dr.width(value)}")
    _check_values(call, name, value)
    return value


def check_transforms(call: str, name: str, value: object, count: int, device: str | None) -> dr.ArrayBase:
    """``value`` if it is a ``Matrix4f``/``Matrix4f64`` of width ``count`` on ``device``, all finite and invertible.

    ``count`` may be 0 (a width-0 matrix is the only valid partner of an empty id
    list). ``device`` is ``None`` for an empty scene (no device check). Reads the batch
    once (one host synchronisation).
    """
    value = _matrices(call, name, value, f"be a Matrix4f or Matrix4f64 of width {count}")
    if device is not None:
        _check.same_backend(call, name, value, device, "the mesh")
    if dr.width(value) != count:
        raise ValueError(f"{call}: '{name}' must hold {count} matrices (one per shape id), got width {dr.width(value)}")
    return checked_batch(call, name, value, count, host_matrices)


def _matrices(call: str, name: str, value: object, expected: str) -> dr.ArrayBase:
    """``value`` if it is a float32/float64 4x4 Dr.Jit matrix of the LLVM or CUDA backend, else the contract's error.

    ``expected`` completes the shape message: ``'{name}' must {expected}, got <type>``.
    """
    value = _check.jit_array(call, name, value, "Matrix4f")
    if dr.type_v(value) not in (dr.VarType.Float32, dr.VarType.Float64):
        raise TypeError(f"{call}: '{name}' must have dtype float32 or float64, got {_convert.type_name(value)}")
    if not dr.is_matrix_v(value) or dr.size_v(value) != 4:
        raise ValueError(f"{call}: '{name}' must {expected}, got {_convert.type_name(value)}")
    _check.not_symbolic(call, name, value)
    # an entry replaced by one of another width
    _check.not_ragged(call, name, sorted({dr.width(entry) for row in value for entry in row}), "entries")
    return value


def _check_values(call: str, name: str, value: dr.ArrayBase) -> None:
    """Non-finite, beyond-float32 entries or a singular 3x3 linear part are the contract's ``ValueError``."""
    check_matrices(call, name, host_matrices(value), batch=False)


