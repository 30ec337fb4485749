"""All torch <-> Warp hand-over for rayd.torch: storage, dtypes, devices, streams."""

from __future__ import annotations

import contextlib

import torch
import warp as wp

from rayd.core.protocol import ArraysBase, cached_stream
from rayd.engine import runtime
from rayd.engine.contents import copy_bytes, same_bytes
from rayd.engine import warp_device

try:  # functorch transforms (torch.func.jvp, grad, ...) wrap tensors without storage
    from torch._C._functorch import get_unwrapped as _get_unwrapped
    from torch._C._functorch import is_functorch_wrapped_tensor as _is_wrapped
except ImportError:  # pragma: no cover - every supported torch has them
    _get_unwrapped = None
    _is_wrapped = None


def primal(tensor: torch.Tensor) -> torch.Tensor:
    """The plain value of ``tensor``: functorch wrappers removed, detached from autograd.

    Used for the non-differentiable search, which needs real storage even when the
    caller runs under ``torch.func.jvp`` / ``torch.func.grad``. Under ``torch.compile``
    and for ``torch.func.vmap``-batched tensors it is ``tensor.detach()``: there the
    search is a custom op (:mod:`rayd.torch._ops`) that receives the tensor as it is.
    """
    if torch.compiler.is_compiling():
        return tensor.detach()
    if _is_wrapped is not None and _is_wrapped(tensor):
        if is_batched(tensor):
            return tensor.detach()
        while _is_wrapped(tensor):
            tensor = _get_unwrapped(tensor)
    if tensor.is_leaf and not tensor.requires_grad:
        return tensor
    return tensor.detach()


def is_wrapped(tensor: torch.Tensor) -> bool:
    """True for functorch wrapper tensors (inside ``torch.func`` transforms)."""
    if torch.compiler.is_compiling():
        return False
    return _is_wrapped is not None and bool(_is_wrapped(tensor))


def unwrapped(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with functorch wrappers removed (same storage and version counter; not detached)."""
    if _is_wrapped is not None:
        while _is_wrapped(tensor):
            tensor = _get_unwrapped(tensor)
    return tensor


def version(tensor: torch.Tensor) -> int | None:
    """The autograd version counter of ``tensor``'s storage, or ``None`` if it has none."""
    tensor = unwrapped(tensor)
    try:
        return tensor._version
    except (RuntimeError, AttributeError):  # pragma: no cover - tensors without a version counter
        return None


def device_name(device: torch.device) -> str:
    """Canonical name of a torch device, with the CUDA ordinal made explicit."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index}"
    return device.type


def where(tensor: torch.Tensor) -> str:
    """Where a tensor lives, as the ``repr`` of rayd.torch's objects says it (``device=cpu``)."""
    return f"device={tensor.device}"


def to_warp_device(device: torch.device) -> wp.context.Device:
    """The Warp device for a torch device (never Warp's default device)."""
    return warp_device(device_name(device))


def current_stream(device: torch.device) -> wp.Stream | None:
    """Warp view of torch's current stream on ``device`` (``None`` on the CPU).

    Engine work is launched on it, so it is ordered with the caller's torch work
    without any device synchronisation.
    """
    if device.type != "cuda":
        return None
    stream = torch.cuda.current_stream(device)
    return cached_stream(device_name(device), stream.cuda_stream, lambda: wp.stream_from_torch(stream))


def vec3_view(tensor: torch.Tensor) -> wp.array:
    """Zero-copy ``wp.array(dtype=vec3)`` of a contiguous float32 tensor of shape (N, 3).

    Views are of ``primal(tensor)``: inside ``torch.func`` transforms even freshly
    allocated buffers come wrapped, without storage of their own. A dense CPU tensor's view
    is made by :func:`rayd.engine.runtime.host_array` (no ``wp.from_torch``: see there).
    """
    value = primal(tensor)
    if (value.device.type == "cpu" and value.dtype == torch.float32 and value.dim() == 2 and value.shape[1] == 3
            and value.numel() and value.is_contiguous()):
        view = runtime.host_array(value.data_ptr(), wp.vec3, value.shape[0], value)
        if view is not None:
            return view
    return wp.from_torch(_dense(value), dtype=wp.vec3)


def vec2i_view(tensor: torch.Tensor) -> wp.array:
    """Zero-copy ``wp.array(dtype=vec2i)`` of a contiguous int32 tensor of shape (N, 2)."""
    return wp.from_torch(_dense(primal(tensor)), dtype=wp.vec2i)


def scalar_view(tensor: torch.Tensor) -> wp.array:
    """Zero-copy 1-D Warp array of a contiguous tensor (int32, uint8, float32); a dense 1-D CPU
    tensor's by :func:`rayd.engine.runtime.host_array`."""
    value = primal(tensor)
    if value.device.type == "cpu" and value.dim() == 1 and value.numel() and value.is_contiguous():
        dtype = _SCALARS.get(value.dtype)
        if dtype is not None:
            view = runtime.host_array(value.data_ptr(), dtype, value.shape[0], value)
            if view is not None:
                return view
    return wp.from_torch(_dense(value))


#: The Warp scalar type of a torch dtype, as ``wp.from_torch`` maps it (the dtypes :func:`scalar_view` makes
#: views of on the CPU without it).
_SCALARS = {torch.float32: wp.float32, torch.float64: wp.float64, torch.int32: wp.int32, torch.int64: wp.int64,
            torch.uint8: wp.uint8, torch.int8: wp.int8, torch.int16: wp.int16}


def _dense(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, or a fresh one of its shape when it is empty: torch calls an empty tensor
    contiguous whatever its strides (``x[:, ::2]`` of a (0, 6) tensor keeps stride 2), and
    ``wp.from_torch`` refuses inner strides that are not the element's."""
    return tensor if tensor.numel() else tensor.new_empty(tensor.shape)


def flat_float32(tensor: torch.Tensor, batch: torch.Size, width: int | None) -> torch.Tensor:
    """``tensor`` broadcast to ``batch`` (+ ``(width,)``) as a contiguous float32 buffer.

    A tensor that is the same for every ray (one origin for many directions, a scalar
    ``tmax``) stays a single row, which the engine reads with stride 0: no copy per ray.
    """
    value = primal(tensor)
    if (value.dtype == torch.float32 and len(batch) == 1 and value.dim() == (1 if width is None else 2)
            and value.shape[0] == batch[0] != 1 and (width is None or value.shape[1] == width) and value.is_contiguous()):
        return value  # already the rows (the common (N, 3) float32 ray batch): no view ops
    tail = () if width is None else (width,)
    lead = value.shape[: value.dim() - len(tail)]
    if lead.numel() == 1:
        return value.reshape((1,) + tail).to(torch.float32).contiguous()
    return value.expand(tuple(batch) + tail).reshape((-1,) + tail).to(torch.float32).contiguous()


def vec3_rows(tensor: torch.Tensor) -> tuple[wp.array, torch.Tensor]:
    """A Warp ``vec3``/``vec3d`` view of an (N, 3) float tensor's rows and the tensor behind it.

    float32 and float64 stay as they are (zero-copy when contiguous); the engine places
    them in float64 and rounds once.
    """
    value = primal(tensor)
    if value.dtype not in (torch.float32, torch.float64):
        value = primal(value.to(torch.float32))
    value = _dense(primal(value.contiguous()))  # ops inside torch.func re-wrap: unwrap last
    return wp.from_torch(value, dtype=wp.vec3d if value.dtype == torch.float64 else wp.vec3), value


_VERSION = __import__("operator").attrgetter("_version")


def serialised(fn):
    """``fn`` under the engine lock (:func:`rayd.engine.runtime.serialised`), not while ``torch.compile`` traces."""
    return runtime.serialised(fn, torch.compiler.is_compiling)


def save_for_backward(ctx, *tensors: torch.Tensor | None) -> bool:
    """``ctx.save_for_backward(*tensors)``, saving a copy of each inference tensor; True if any.

    torch refuses to save a tensor made under ``torch.inference_mode()`` ("Inference tensors
    cannot be saved for backward"), yet a scene may hold such vertices and a query may get such
    rays (docs/lifecycle.md: nothing is refused). Such a tensor has no version counter, so an
    in-place write between the forward and the backward would go unseen: the backward reads a
    copy taken now instead (made outside inference mode, an ordinary tensor; an inference
    tensor never requires a gradient, so nothing flows to it). Where this returns True, Warp
    views of the original tensors made in the forward must not be reused by the backward.
    """
    copied = any(t is not None and t.is_inference() for t in tensors)
    if copied:
        with torch.inference_mode(False):
            tensors = tuple(t.clone() if t is not None and t.is_inference() else t for t in tensors)
    ctx.save_for_backward(*tensors)
    return copied


def host_array(value: torch.Tensor, dtype: torch.dtype | None = None):
    """``value`` as a NumPy array on the host (detached; ``dtype`` if given), also inside
    ``torch.func`` transforms, whose ops (even on plain tensors) return wrappers without
    storage: unwrapped, then converted and copied with the transforms off."""
    with outside_transforms():
        plain = value
        while _is_wrapped is not None and _is_wrapped(plain):  # vmap-batched too: every element
            plain = _get_unwrapped(plain)
        plain = plain.detach()
        return (plain if dtype is None else plain.to(dtype)).cpu().numpy()


def host_matrices(value: torch.Tensor):
    """(..., 4, 4) matrices as a (K, 4, 4) float64 NumPy array on the host (one copy)."""
    import numpy as np  # noqa: PLC0415

    plain = primal(value).detach()
    try:
        host = plain.to("cpu", torch.float64).numpy()
    except RuntimeError:  # inside torch.func transforms a tensor made there has no storage to read
        host = np.array(plain.tolist(), dtype=np.float64)
    return host.reshape(-1, 4, 4)


def from_warp(array: wp.array) -> torch.Tensor:
    """Zero-copy torch view of an engine-owned Warp array."""
    return wp.to_torch(array)


def is_batched(tensor: torch.Tensor) -> bool:
    """True if ``tensor`` is (or wraps, at any functorch level) a ``torch.func.vmap`` batched tensor."""
    if _is_wrapped is None:
        return False
    from torch._C._functorch import is_batchedtensor  # noqa: PLC0415

    while True:
        if is_batchedtensor(tensor):
            return True
        if not _is_wrapped(tensor):
            return False
        tensor = _get_unwrapped(tensor)


def grad_wrapped(tensor: torch.Tensor) -> bool:
    """True if a functorch wrapper of ``tensor`` tracks gradients (``grad``, ``jvp``, ``jacrev``, ...);
    False for a plain tensor and for one only batched by ``vmap``."""
    if _is_wrapped is None:
        return False
    from torch._C._functorch import is_gradtrackingtensor  # noqa: PLC0415

    while _is_wrapped(tensor):
        if is_gradtrackingtensor(tensor):
            return True
        tensor = _get_unwrapped(tensor)
    return False


def transforms_active() -> bool:
    """True inside a ``torch.func`` transform (grad, jvp, vmap, jacrev, hessian, ...); False while compiling."""
    if torch.compiler.is_compiling():
        return False
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return bool(active()) if active is not None else False


def outside_transforms():
    """Context in which new tensors are plain (not functorch-wrapped), for caches.

    Inside ``torch.func`` transforms even factory functions return wrapper tensors tied
    to the transform's level; a tensor kept beyond the call (a cache, a scene's
    lazily built state) must be made here, or later transforms fail with
    ``INTERNAL ASSERT FAILED``.
    """
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    disable = getattr(torch._C, "_DisableFuncTorch", None)
    return disable() if disable is not None else contextlib.nullcontext()


def _equal(a: torch.Tensor, c: torch.Tensor, cuda: bool):
    """``a`` holds ``c``'s values (same shape and dtype; ``c`` contiguous): a device bool on CUDA; on the
    CPU a Python bool, byte for byte (:func:`rayd.engine.contents.same_bytes`; no torch op where ``a`` is
    contiguous)."""
    if cuda:
        return (a == c).all()
    if not a.is_contiguous():
        a = a.contiguous()  # (not .numpy(): it would mark the user's storage not resizable)
    return same_bytes(a.data_ptr(), c.data_ptr(), a.numel() * a.element_size())


def _plan(copies: list[torch.Tensor]) -> tuple[list[tuple[list[int], torch.Tensor]], list[int]]:
    """For :meth:`TorchArrays.same`: the groups of two or more small arrays of one shape, dtype and
    device (compared stacked, each against its stacked copy), and the rest (compared one by one)."""
    found: dict = {}
    for k, c in enumerate(copies):
        if c.numel() <= 64:
            found.setdefault((tuple(c.shape), c.dtype, c.device), []).append(k)
    groups = [(members, torch.stack([copies[k] for k in members])) for members in found.values() if len(members) > 1]
    grouped = {k for members, _ in groups for k in members}
    return groups, [k for k in range(len(copies)) if k not in grouped]


class TorchArrays(ArraysBase):
    """rayd.core's array protocol (:mod:`rayd.core.protocol`) for torch tensors (``fence``: ArraysBase's no-op)."""

    #: A tensor's version counter is its storage's, shared by every view of it (and ``same`` compares
    #: the live tensor with a private copy, whatever its stamp).
    storage_stamps = True

    version = staticmethod(version)

    def versions(self, arrays: list[torch.Tensor]) -> list[int | None]:
        try:  # one pass in C over plain tensors
            return list(map(_VERSION, arrays))
        except (RuntimeError, AttributeError):
            return [version(a) for a in arrays]

    def __init__(self) -> None:
        self._views: dict = {}  # (data_ptr, rows, dtype, device) -> a pointer-only Warp view (vec3_view)

    def vec3_view(self, array: torch.Tensor) -> tuple[wp.array, torch.Tensor]:
        # The scene places the same vertex tensors again and again (every sync): a view of the same
        # memory is kept and reused (``wp.from_torch`` costs tens of microseconds of host time). The
        # views hold a pointer only (no reference to a tensor, which may be freed): one is reused only
        # for the live tensor returned beside it, at that address with that layout.
        value = primal(array)
        if (value.dtype not in (torch.float32, torch.float64) or not value.is_contiguous() or value.dim() != 2
                or not value.numel()):  # (empty: any strides pass is_contiguous(); vec3_rows makes them dense)
            return vec3_rows(array)
        key = (value.data_ptr(), value.shape[0], value.dtype, value.device)
        view = self._views.get(key)
        if view is None:
            made = wp.from_torch(value, dtype=wp.vec3d if value.dtype == torch.float64 else wp.vec3)
            view = wp.array(ptr=made.ptr, dtype=made.dtype, shape=made.shape, device=made.device)
            if len(self._views) >= 8:
                self._views.pop(next(iter(self._views)))
            self._views[key] = view
        return view, value


    def index_view(self, array: torch.Tensor) -> tuple[wp.array, torch.Tensor]:
        value = primal(primal(array).reshape(-1).contiguous())  # ops inside torch.func re-wrap
        return wp.from_torch(value), value

    host_matrices = staticmethod(host_matrices)

    def snapshot(self, array: torch.Tensor) -> torch.Tensor:
        """A private contiguous copy of ``array``'s values (no autograd, no functorch wrapper; :mod:`rayd.core.contents`)."""
        with torch.no_grad(), outside_transforms():
            value = unwrapped(array).detach()
            if value.device.type == "cpu" and value.is_contiguous():
                # memmove on this thread: torch's copy wakes its thread pool (+11 ms CPU per sync under
                # load); NumPy would mark the user's storage not resizable (Tensor.numpy() does)
                out = torch.empty(value.shape, dtype=value.dtype)
                copy_bytes(out.data_ptr(), value.data_ptr(), value.numel() * value.element_size())
                return out
            return value.clone(memory_format=torch.contiguous_format)

    def same(self, arrays: list[torch.Tensor], copies: list[torch.Tensor], memo: dict) -> list[bool]:
        """Per array, whether it still holds its copy's values (:mod:`rayd.core.contents`).

        Arrays of at most 64 elements (matrices, small meshes) are compared per group of one
        shape and dtype: one ``torch.stack`` of the group against one stacked copy (kept in
        ``memo``), so the torch ops per check do not grow with the number of shapes. On the CPU
        the bytes are compared by ``memcmp`` (:func:`rayd.engine.contents.same_bytes`; no torch
        op; ``torch.equal`` wakes the intra-op thread pool: 16 ms for 160 k floats on a loaded
        2-core host, against 0.03 ms); on CUDA on the device, with one host read.
        """
        if not arrays:
            return []
        host = memo.get("host")
        if host is None:
            host = memo["host"] = all(c.device.type == "cpu" and c.numel() > 64 for c in copies)
        if host:  # every copy a large CPU array (no groups): memcmp only, no torch op, no context
            out = []
            for a, c in zip(arrays, copies):
                a = unwrapped(a)
                if not a.is_contiguous():
                    break
                out.append(a.shape == c.shape and a.dtype == c.dtype and a.device == c.device
                           and same_bytes(a.data_ptr(), c.data_ptr(), c.numel() * c.element_size()))
            else:
                return out
        with torch.no_grad(), outside_transforms():
            plan = memo.get("plan")
            if plan is None:
                plan = memo["plan"] = _plan(copies)
            groups, large = plan
            out = [True] * len(arrays)
            cuda = copies[0].device.type == "cuda"
            flags, where = [], []
            for members, stacked in groups:
                try:
                    now = torch.stack([unwrapped(arrays[k]) for k in members])  # (no_grad: one op, no graph)
                    ok = now.shape == stacked.shape and now.dtype == stacked.dtype and now.device == stacked.device
                except RuntimeError:  # a shape or device changed through .data: one by one below
                    ok = False
                if ok:
                    flags.append(_equal(now, stacked, cuda))
                    where.append(members)
                else:
                    large = list(members) + list(large)
            for k in large:
                a, c = unwrapped(arrays[k]), copies[k]
                if a.shape != c.shape or a.dtype != c.dtype or a.device != c.device:
                    out[k] = False
                    continue
                flags.append(_equal(a, c, cuda))
                where.append(k)
            if cuda and flags:
                flags = torch.stack(flags).tolist()  # the one host read
            for k, ok in zip(where, flags):
                if ok:
                    continue
                if isinstance(k, int):
                    out[k] = False
                else:  # which one of the group moved
                    for j in k:
                        a, c = unwrapped(arrays[j]), copies[j]
                        out[j] = bool(a.shape == c.shape and a.dtype == c.dtype and a.device == c.device
                                      and _equal(a, c, cuda))
            return out

    def rows(self, call: str, name: str, array: torch.Tensor) -> int:
        if array.dim() != 2 or array.shape[1] != 3:
            raise ValueError(f"{call}: '{name}' must have shape (n, 3), got {tuple(array.shape)} (changed in place?)")
        return int(array.shape[0])

    def stream(self, device: str) -> wp.Stream | None:
        return current_stream(torch.device(device))
