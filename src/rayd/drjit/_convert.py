"""All Dr.Jit <-> Warp hand-over for rayd.drjit: array families, devices, streams, views.

Dr.Jit arrays are flat (one lane per ray or vertex); a 3-vector such as ``Array3f`` is
stored as three component arrays (structure of arrays). The engine reads ``vec3``
rows, so 3-vectors are packed once per call into an interleaved float32 buffer with
``dr.ravel(order='F')`` (one fused Dr.Jit kernel) and handed to Warp zero-copy over
DLPack. Packing costs a few percent of a closest-hit query (benchmarks/drjit_ray_layout.py);
scalars (``tmin``, ``tmax``, ``active``, outputs) need no packing.

On CUDA every engine launch goes on Dr.Jit's own stream for the calling thread, so
Warp work is ordered after the Dr.Jit kernels that produced its inputs and before
the ones that read its outputs, without any host synchronisation. On the LLVM
backend DLPack export waits for Dr.Jit's thread pool (Warp's CPU kernels run on the
calling thread).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import drjit as dr
import numpy as np
import warp as wp

from rayd.core.frontend import type_name  # noqa: F401 - one rule for messages (drjit.llvm.ad.Array3f, torch.Tensor)
from rayd.core.protocol import cached_stream
from rayd.engine import runtime, warp_device

_BACKENDS = {dr.JitBackend.LLVM: "llvm", dr.JitBackend.CUDA: "cuda"}


def is_jit_array(value: object) -> bool:
    """True for a Dr.Jit array of the LLVM or CUDA backend (not ``drjit.scalar``)."""
    return isinstance(value, dr.ArrayBase) and dr.backend_v(value) in _BACKENDS


def backend_name(value: dr.ArrayBase) -> str:
    """``'llvm'`` or ``'cuda'``."""
    return _BACKENDS[dr.backend_v(value)]


def module(backend: str, ad: bool) -> ModuleType:
    """The Dr.Jit type namespace, e.g. ``drjit.cuda.ad`` for ``('cuda', True)``."""
    return importlib.import_module(f"drjit.{backend}.ad" if ad else f"drjit.{backend}")


def is_ad(value: object) -> bool:
    """True for arrays of an ``.ad`` namespace (which may carry gradients)."""
    return isinstance(value, dr.ArrayBase) and dr.is_diff_v(value)


def is_double(value: object) -> bool:
    """True for float64 arrays."""
    return dr.type_v(value) == dr.VarType.Float64


def device_name(value: dr.ArrayBase) -> str:
    """``'cpu'`` for the LLVM backend, ``'cuda:<ordinal>'`` for Dr.Jit's current CUDA device."""
    device_type, device_id = value.__dlpack_device__()
    if dr.backend_v(value) == dr.JitBackend.CUDA:
        return f"cuda:{device_id}"
    return "cpu"


def backend_of(device: str) -> str:
    """The backend of a device name (:func:`device_name`'s): ``'llvm'`` for ``'cpu'``, else ``'cuda'``."""
    return "llvm" if device == "cpu" else "cuda"


def where(value: dr.ArrayBase) -> str:
    """What an array is, as the ``repr`` of rayd.drjit's objects says it (``type=drjit.llvm.ad.Array3f``)."""
    return f"type={type_name(value)}"


def to_warp_device(name: str) -> wp.context.Device:
    """The Warp device for a device name (never Warp's default device)."""
    return warp_device(name)


def is_scalar_matrix(value: object) -> bool:
    """True for a float32/float64 4x4 matrix of ``drjit.scalar`` (a host object, e.g. ``drjit.scalar.Matrix4f``)."""
    return (isinstance(value, dr.ArrayBase) and dr.backend_v(value) == dr.JitBackend.Invalid
            and dr.is_matrix_v(value) and dr.size_v(value) == 4
            and dr.type_v(value) in (dr.VarType.Float32, dr.VarType.Float64))


def version(value: dr.ArrayBase) -> tuple:
    """The JIT variable ids behind ``value``'s components (a ``drjit.scalar`` matrix: its values).

    A scalar matrix has no JIT variables: it is a host object whose entries Python writes in
    place (``m[2, 3] = 1``), so its version is the bytes of its 16 values (a host read, no
    device work).

    Assigning a component (``v.y = ...``), augmented assignment (``v.z += 1``), a
    masked ``dr.select`` written back, ``dr.scatter_add`` and friends give a component
    a new variable id. A scatter into an array whose variable nobody else references
    (``dr.scatter(v.z, ...)``, ``v.x[k] = ...``) writes in place and keeps the id;
    :func:`track` holds a second reference so that such a write copies (Dr.Jit's
    copy-on-write) and shows up here too. Enabling gradients does not change the
    version (AD ids are masked).
    """
    if dr.backend_v(value) == dr.JitBackend.Invalid:
        return ("values", np.array(value).tobytes())
    return tuple(i & 0xFFFFFFFF for i in dr.detail.collect_indices(value))


def track(value: dr.ArrayBase) -> tuple[tuple[int, ...], dr.ArrayBase]:
    """Snapshot-time ``(version, hold)`` of a registered array, so later in-place writes change its version.

    ``value`` is made opaque first (evaluated, no literals: its contents do not
    change, only how Dr.Jit stores them), so that a later ``dr.make_opaque`` or
    ``dr.eval`` by the user does not count as a change. ``hold`` is a plain (no AD)
    second reference to the same JIT variables; keep it until the next snapshot.
    While it lives, every Dr.Jit write into ``value`` (``dr.scatter``,
    ``dr.scatter_reduce``, ``dr.scatter_exch``, ``v.x[k] = ...``, ...) copies the
    variable first and so gives it a new id; the first such write costs one copy of
    the written component, later ones are in place again. Writes that bypass Dr.Jit
    (through a zero-copy view: ``.numpy()``, ``.torch()``, DLPack, Warp) change no id;
    they are seen by content (:mod:`rayd.core.contents`, :mod:`rayd.drjit._contents`).
    """
    if dr.backend_v(value) == dr.JitBackend.Invalid:  # a scalar matrix: its version is its values
        return version(value), None
    dr.make_opaque(value)
    plain = module(backend_name(value), False)
    hold = getattr(plain, type(value).__name__)(dr.detach(value))
    return version(value), hold


# ---------------------------------------------------------------------------- streams
_core: ctypes.CDLL | None = None


def _jit_cuda_stream() -> int:
    """The CUstream Dr.Jit uses on the calling thread (``jit_cuda_stream()`` of drjit-core)."""
    global _core
    if _core is None:
        _core = ctypes.CDLL(os.path.join(os.path.dirname(dr.__file__), "libdrjit-core.so"))
    fn = getattr(_core, "_Z15jit_cuda_streamv", None) or getattr(_core, "jit_cuda_stream")
    fn.restype = ctypes.c_void_p
    fn.argtypes = []
    return int(fn() or 0)


def current_stream(device: str) -> wp.Stream | None:
    """Warp view of Dr.Jit's current CUDA stream (``None`` on the CPU).

    Dr.Jit's queued work is flushed first, so the engine's launches are ordered after it.
    """
    if not device.startswith("cuda"):
        return None
    dr.flush_thread()
    handle = _jit_cuda_stream()
    stream = cached_stream(device, handle, lambda: wp.Stream(to_warp_device(device), cuda_stream=handle))
    scope = getattr(_query, "scope", None)
    if scope is not None and not getattr(_query, "scoped", False):
        # Inside a public query: Warp's implicit work (output fills, uploads, copies) goes
        # on this stream too, ordered with the launches, until the query returns.
        scope.enter_context(wp.ScopedStream(stream, sync_enter=True))
        _query.scoped = True
    return stream


def fence(device: str) -> None:
    """On CUDA, wait for all queued Dr.Jit and Warp work of this thread/device.

    Used at ``build()`` / ``sync()`` around engine work. No-op on the LLVM backend,
    whose DLPack export already waits.
    """
    if device.startswith("cuda"):
        dr.sync_thread()
        wp.synchronize_device(to_warp_device(device))
        if getattr(_query, "verdicts", None):
            after_fence()


#: Host synchronisations of a query on CUDA (``RAYD_DRJIT_QUERY_FENCES``): 3 (the default:
#: one per query, after its last engine launch, :func:`one_fence`), 1 (one after each engine
#: launch: twice for float64 ``intersect`` / ``shadow_test`` and ``signed_distance``, which
#: launch twice), 0 (none: the launches are ordered on Dr.Jit's stream; Warp's temporaries
#: freed after the query may then be reused by other work before the kernels that read them
#: end, so 0 is for experiments) or 2 (before and after every launch, as in earlier
#: versions). History: with 3, one H200 run of session 11 got one miss where a hit was due
#: (``test_batched_set_mesh_transform``); the cause was Warp's implicit work (fills, uploads)
#: running on Warp's own stream instead of Dr.Jit's, fixed in session 12 (builds, syncs and
#: queries now run on Dr.Jit's stream). Since, the Dr.Jit CUDA suite passed with 3 three
#: times on a subset (session 12) and twice in full (session 13,
#: ``benchmarks/results/h200-session13/drjit_fences.txt``), and with 0 twice.
QUERY_FENCES = int(os.environ.get("RAYD_DRJIT_QUERY_FENCES", "3"))

_query = threading.local()  # per thread (Dr.Jit's streams are): depth of public queries, a launch since


def _no_hook() -> None:
    return None


#: Run after a fence and at the end of the outermost query while content verdicts wait there
#: (:mod:`rayd.drjit._verdicts` sets them: its ``read`` and ``finish``).
after_fence = after_query = _no_hook


def query_fence(device: str, after: bool) -> None:
    """The fence around a query's engine launch (see :data:`QUERY_FENCES`).

    With ``QUERY_FENCES == 3``, inside a public query (:func:`one_fence`) the fence after
    a launch waits for the query's end: a query with several launches (float64
    ``intersect`` and its walk-on, ``signed_distance``) synchronises once, after its last.
    """
    if QUERY_FENCES == 2:
        fence(device)
    elif after and QUERY_FENCES == 1:
        fence(device)
    elif after and QUERY_FENCES == 3:
        if getattr(_query, "depth", 0):
            _query.device = device
        else:
            fence(device)


def launch(device: str, engine_function: Callable, *args, **kwargs) -> Any:
    """``engine_function(*args, stream, **kwargs)`` on ``device``'s current Dr.Jit stream, between the query fences.

    The one place a query's engine launch is fenced (:func:`query_fence` before and after,
    as :data:`QUERY_FENCES` says); ``stream`` (:func:`current_stream`) is the launch's last
    positional argument. Returns what ``engine_function`` returns.
    """
    query_fence(device, after=False)
    result = engine_function(*args, current_stream(device), **kwargs)
    query_fence(device, after=True)
    return result


def one_fence(method: Callable) -> Callable:
    """``method`` (the frontend's part of a ``Scene`` query) with its launches' fences made one, at its end."""

    @functools.wraps(method)
    def query(*args, **kwargs):
        depth = getattr(_query, "depth", 0)
        if depth == 0:
            _query.device = None
            _query.scope, _query.scoped = contextlib.ExitStack(), False
            # (nothing of an earlier query's content check carries over: rayd.drjit._verdicts)
            _query.verdicts, _query.changed, _query.recheck = None, False, None
        _query.depth = depth + 1
        try:
            return method(*args, **kwargs)
        finally:
            _query.depth = depth
            if depth == 0:
                scope, _query.scope, _query.scoped = _query.scope, None, False
                scope.close()
                if _query.device is not None:
                    device, _query.device = _query.device, None
                    fence(device)
                try:
                    if getattr(_query, "verdicts", None) or getattr(_query, "changed", False):
                        after_query()
                finally:  # (the recheck holds its scene: never kept past the query)
                    _query.recheck = None

    return query


class Fenced:
    """A module whose functions ``names`` are :func:`one_fence`-wrapped (other attributes pass through)."""

    def __init__(self, module: ModuleType, names: tuple[str, ...]) -> None:
        self._module = module
        for name in names:
            setattr(self, name, one_fence(getattr(module, name)))

    def __getattr__(self, name: str):
        return getattr(self._module, name)


# ------------------------------------------------------------------------ hand-over
def _capsule(value: dr.ArrayBase, device: str):
    # -1: no producer-side synchronisation; the consumer runs on Dr.Jit's own stream.
    return value.__dlpack__(stream=-1) if device.startswith("cuda") else value.__dlpack__()


def _view(value: dr.ArrayBase, device: str, dtype=None) -> wp.array:
    """``wp.from_dlpack`` of ``value``'s capsule; on the CPU, for a dense 1-D array (or (N, 3) rows
    taken as ``dtype`` vec3), the array is made by :func:`rayd.engine.runtime.host_array` from the
    capsule's DLTensor (``wp.from_dlpack`` built it through ``wp.array.__init__``: about 19 us a view,
    7 views a ray query; issue 12). The capsule is consumed as ``wp.from_dlpack`` consumes it (renamed,
    its tensor released by Warp's holder when the array goes)."""
    capsule = _capsule(value, device)
    if _DL is not None and device == "cpu":
        view = _host_view(capsule, dtype)
        if view is not None:
            return view
    return wp.from_dlpack(capsule, dtype=dtype)


def _host_view(capsule, dtype) -> wp.array | None:
    """:func:`_view`'s CPU path (``None``: the capsule is left for ``wp.from_dlpack``). The DLTensor is read
    as bytes (one ``string_at``, one ``unpack``: ctypes' structure fields cost ~1 us apiece)."""
    dl = _DL
    try:
        mem = _GET_POINTER(capsule, b"dltensor")
    except ValueError:  # (not a fresh DLPack capsule)
        return None
    data, device_type, _, ndim, code, bits, lanes, shape, strides, offset = _DLTENSOR.unpack(_STRING_AT(mem, 48))
    if device_type != 1 or lanes != 1 or offset or not data or ndim not in (1, 2):  # kDLCPU only
        return None
    kind = _DL_SCALARS.get((code, bits))
    if kind is None:
        return None
    dims = _INT64S[ndim].unpack(_STRING_AT(shape, 8 * ndim))
    steps = _INT64S[ndim].unpack(_STRING_AT(strides, 8 * ndim)) if strides else None
    if dtype is None and ndim == 1:
        n, dtype = dims[0], kind
        dense = steps is None or steps[0] == 1
    elif dtype is wp.vec3 and kind is wp.float32 and ndim == 2 and dims[1] == 3:
        n = dims[0]
        dense = steps is None or (steps[1] == 1 and (steps[0] == 3 or n == 1))
    else:
        return None
    if n <= 0 or not dense:
        return None
    holder = dl._DLPackTensorHolder(mem)  # releases the tensor when the view goes (as wp.from_dlpack's)
    view = runtime.host_array(data, dtype, n, holder)
    if view is None:
        holder.mem_ptr = None  # (the capsule still owns it)
        return None
    _SET_NAME(capsule, b"used_dltensor")
    return view


try:  # Warp's DLPack structures and capsule functions (Warp 1.19), for the CPU views of _view
    from warp._src import dlpack as _DL
    _DL_SCALARS = {(_DL.DLDataTypeCode.kDLFloat, 32): wp.float32, (_DL.DLDataTypeCode.kDLFloat, 64): wp.float64,
                   (_DL.DLDataTypeCode.kDLInt, 32): wp.int32, (_DL.DLDataTypeCode.kDLInt, 64): wp.int64,
                   (_DL.DLDataTypeCode.kDLUInt, 8): wp.uint8, (_DL.DLDataTypeCode.kDLUInt, 32): wp.uint32,
                   (_DL.DLDataTypeCode.kDLUInt, 64): wp.uint64}
    _GET_POINTER, _SET_NAME = _DL.PyCapsule_GetPointer, _DL.PyCapsule_SetName
except (ImportError, AttributeError):  # pragma: no cover - another Warp: wp.from_dlpack
    _DL = None
#: DLPack's ``DLTensor`` (64-bit): data, device (type, id), ndim, dtype (code, bits, lanes), shape, strides, byte_offset.
_DLTENSOR = __import__("struct").Struct("=QiiiBBHQQQ")
_INT64S = {k: __import__("struct").Struct(f"={k}q") for k in (1, 2)}
_STRING_AT = ctypes.string_at


def vec3_view(value: dr.ArrayBase, device: str) -> tuple[wp.array, dr.ArrayBase]:
    """A ``wp.array(dtype=vec3)`` of a 3-vector array's rows as float32 (one packing copy).

    Returns the view and the Dr.Jit buffer behind it (keep it alive while Warp uses it).
    Gradients are not tracked (the search is not differentiated).
    """
    plain = module(backend_name(value), False)
    packed = dr.ravel(plain.Array3f(dr.detach(value)), order="F")
    n = dr.width(packed) // 3
    tensor = plain.TensorXf(packed, shape=(n, 3))
    return _view(tensor, device, wp.vec3), tensor


def vec3_buffer(n: int, backend: str, device: str) -> tuple[dr.ArrayBase, wp.array]:
    """A Dr.Jit-owned float32 buffer of ``n`` rows of 3 and its ``wp.array(dtype=vec3)`` view.

    The engine keeps the view (e.g. BVH points) and the frontend rewrites it in place.
    """
    plain = module(backend, False)
    buffer = plain.TensorXf(dr.empty(plain.Float, 3 * n), shape=(n, 3))
    dr.make_opaque(buffer)
    return buffer, wp.from_dlpack(_capsule(buffer, device), dtype=wp.vec3)


def mat44_view(flat: dr.ArrayBase, n: int, device: str) -> tuple[wp.array, dr.ArrayBase]:
    """A ``wp.array(dtype=mat44)`` of a flat float32 array of ``16 n`` row-major entries."""
    plain = module(backend_name(flat), False)
    tensor = plain.TensorXf(plain.Float(flat), shape=(n, 4, 4))
    return wp.from_dlpack(_capsule(tensor, device), dtype=wp.mat44), tensor


def scalar_view(value: dr.ArrayBase, device: str) -> wp.array:
    """Zero-copy 1-D Warp array of a flat Dr.Jit array (Float, Int32, UInt8, ...)."""
    return _view(value, device)


def float32(value: dr.ArrayBase | float, backend: str) -> dr.ArrayBase:
    """A flat float32 array (no gradient tracking) of a float or a Float/Float64 array."""
    plain = module(backend, False)
    if isinstance(value, (int, float)):
        return dr.full(plain.Float, float(value), 1)
    return plain.Float(dr.detach(value))


def uint8(value: dr.ArrayBase | None, backend: str) -> dr.ArrayBase:
    """A flat uint8 array from a Bool mask (``None``: a single 1, all rays active)."""
    plain = module(backend, False)
    return dr.full(plain.UInt8, 1, 1) if value is None else plain.UInt8(dr.detach(value))


def int32(value: dr.ArrayBase | int, backend: str) -> dr.ArrayBase:
    """A flat int32 array (``global_prim_id`` values) from an int or an integer array."""
    plain = module(backend, False)
    if isinstance(value, int):
        return dr.full(plain.Int, value, 1)
    return plain.Int(dr.detach(value))


def empty_int32(n: int, backend: str) -> dr.ArrayBase:
    """An uninitialised Int32 array of width ``n`` for the engine to write into."""
    out = dr.empty(module(backend, False).Int, n)
    dr.make_opaque(out)
    return out


def vec2i_buffer(n: int, backend: str, device: str) -> tuple[dr.ArrayBase, wp.array]:
    """A Dr.Jit-owned int32 buffer of ``n`` rows of 2 (``TensorXi``) and its ``wp.array(dtype=vec2i)`` view."""
    plain = module(backend, False)
    buffer = plain.TensorXi(dr.empty(plain.Int, 2 * n), shape=(n, 2))
    dr.make_opaque(buffer)
    return buffer, wp.from_dlpack(_capsule(buffer, device), dtype=wp.vec2i)


def vec2i_view(value: dr.ArrayBase, device: str) -> tuple[wp.array, dr.ArrayBase]:
    """A ``wp.array(dtype=vec2i)`` of an ``Array2i``'s rows (one packing copy) and the buffer behind it."""
    plain = module(backend_name(value), False)
    value = plain.Array2i(value)
    dr.eval(value)  # may come from dr.concat (pending scatters)
    packed = dr.ravel(value, order="F")
    tensor = plain.TensorXi(packed, shape=(dr.width(packed) // 2, 2))
    dr.make_opaque(tensor)
    return wp.from_dlpack(_capsule(tensor, device), dtype=wp.vec2i), tensor


def int32_rows_buffer(n: int, k: int, backend: str, device: str) -> tuple[dr.ArrayBase, wp.array]:
    """An uninitialised Dr.Jit ``TensorXi`` of shape (n, k) and its 2-D int32 Warp view."""
    plain = module(backend, False)
    buffer = plain.TensorXi(dr.empty(plain.Int, n * k), shape=(n, k))
    dr.make_opaque(buffer)
    return buffer, wp.from_dlpack(_capsule(buffer, device))


def vec3_rows(value: dr.ArrayBase, device: str) -> tuple[wp.array, dr.ArrayBase]:
    """A ``wp.array(dtype=vec3 | vec3d)`` of a 3-vector array's rows in its own precision (one packing copy).

    float64 arrays stay float64 (the engine places them in float64 and rounds once).
    """
    plain = module(backend_name(value), False)
    double = is_double(value)
    packed = dr.ravel((plain.Array3f64 if double else plain.Array3f)(dr.detach(value)), order="F")
    n = dr.width(packed) // 3
    tensor = (plain.TensorXf64 if double else plain.TensorXf)(packed, shape=(n, 3))
    dr.eval(tensor)
    return wp.from_dlpack(_capsule(tensor, device), dtype=wp.vec3d if double else wp.vec3), tensor


class DrjitArrays:
    """rayd.core's array protocol (:mod:`rayd.core.protocol`) for Dr.Jit arrays of one device."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    def version(self, array: dr.ArrayBase) -> tuple[int, ...]:
        return version(array)

    def track(self, array: dr.ArrayBase) -> tuple[tuple[int, ...], dr.ArrayBase]:
        return track(array)

    def rows(self, call: str, name: str, array: dr.ArrayBase) -> int:
        if dr.depth_v(array) == 2 and not dr.is_tensor_v(array) and not dr.is_matrix_v(array):
            widths = [dr.width(c) for c in array]
            if len(set(widths)) > 1:
                raise ValueError(f"{call}: '{name}' is ragged: its components have widths {widths}")
            return widths[0]
        return dr.width(array)

    def vec3_view(self, array: dr.ArrayBase) -> tuple[wp.array, dr.ArrayBase]:
        return vec3_rows(array, self.device)

    def index_view(self, array: dr.ArrayBase) -> tuple[wp.array, dr.ArrayBase]:
        plain = module(backend_name(array), False)
        kind = {dr.VarType.Int64: plain.Array3i64, dr.VarType.UInt64: plain.Array3u64,
                dr.VarType.UInt32: plain.Array3u}.get(dr.type_v(array), plain.Array3i)
        flat = dr.ravel(kind(dr.detach(array)), order="F")
        dr.eval(flat)
        return wp.from_dlpack(_capsule(flat, self.device)), flat

    def host_matrices(self, array: dr.ArrayBase):
        return host_matrices(array)

    stream = staticmethod(current_stream)

    def fence(self, device: str) -> None:
        fence(device)


def from_warp_int32(array: wp.array, count: int, backend: str) -> dr.ArrayBase:
    """A Dr.Jit ``Int`` copy of the first ``count`` entries of an engine-owned int32 Warp array."""
    plain = module(backend, False)
    return plain.Int(array.numpy()[:count]) if count else plain.Int()


def host_matrices(value: dr.ArrayBase) -> np.ndarray:
    """A ``Matrix4f``/``Matrix4f64`` of width K as a (K, 4, 4) float64 NumPy array (one read, no gradient).

    The entries are made opaque first: converting a matrix of literals (e.g. one built
    from Python floats) to NumPy directly compiles a kernel per distinct matrix (the
    values are baked into it), which made each ``add_instance`` take milliseconds.
    """
    value = dr.detach(value)
    if dr.backend_v(value) != dr.JitBackend.Invalid:
        dr.make_opaque(value)
    m = np.array(value, dtype=np.float64)
    return m.reshape(4, 4, -1).transpose(2, 0, 1)
