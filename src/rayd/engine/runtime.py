"""Warp start-up, devices and streams for the engine."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import numpy as np
import warp as wp

#: The line Warp's native library prints (to the C stderr, at ``wp.init()``) when it
#: finds no CUDA driver; on a CPU-only machine it is noise in every process.
NO_DRIVER_MESSAGE = "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver."

#: One re-entrant lock for the engine's work. Warp loads a module lazily at its first
#: launch (not thread-safe: concurrent first launches crash or raise ``KeyError`` in
#: ``Module.load``), recorded launches (:class:`LaunchCache`) are re-parameterised per
#: call, and the CPU accelerators and edge trees are built lazily; so every public
#: ``Scene`` / ``Camera`` method and every differentiable backward of the frontends runs
#: under it (:func:`serialised`). Calls from several threads are then answered one at a
#: time (each one still uses all cores on the CPU and the whole GPU).
ENGINE_LOCK = threading.RLock()


def serialised(fn, bypass=None):
    """``fn`` run under :data:`ENGINE_LOCK` (same name, docstring and signature).

    ``bypass``: an optional predicate; when it returns True the lock is not taken (the
    torch frontend passes ``torch.compiler.is_compiling``: a graph being traced by
    ``torch.compile`` cannot hold a lock, and its compiled graph runs rayd's custom ops).
    """
    if getattr(fn, "_rayd_serialised", False):
        return fn

    if bypass is None:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            with ENGINE_LOCK:
                return fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if bypass():
                return fn(*args, **kwargs)
            with ENGINE_LOCK:
                return fn(*args, **kwargs)

    call._rayd_serialised = True
    return call


def _cuda_driver_loadable() -> bool:
    """Whether the CUDA driver library Warp looks for can be loaded (the names Warp tries)."""
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so", "libcuda.so.1")
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def _init_warp() -> None:
    """``wp.init()``, without Warp's no-driver line on a machine without a CUDA driver.

    Where a driver can be loaded, Warp starts as usual (its CUDA errors and warnings are
    printed as ever). Where none can, Warp's native stderr is captured during ``init``
    and replayed, less exactly the no-driver line: any other message still appears.
    """
    if _cuda_driver_loadable():
        wp.init()
        return
    try:
        saved = os.dup(2)
    except OSError:  # no usable stderr (e.g. a detached process): nothing to keep quiet
        wp.init()
        return
    with tempfile.TemporaryFile(mode="w+b") as capture:
        sys.stderr.flush()
        os.dup2(capture.fileno(), 2)
        try:
            wp.init()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(NO_DRIVER_MESSAGE))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


# rayd prints nothing on import: Warp's start-up banner and module-load lines would
# otherwise appear once per rank. Only when rayd is the one starting Warp; a program
# that initialised Warp itself keeps its own log level (and saw its own messages).
if wp._src.context.runtime is None:
    wp.config.log_level = wp.LOG_WARNING
    _init_warp()
wp.init()  # no-op once initialised


def warp_device(name: str) -> wp.context.Device:
    """The Warp device for a device name such as ``"cpu"`` or ``"cuda:1"``.

    Never Warp's default device: every engine call names its device explicitly.
    """
    if name == "cuda":
        raise ValueError("rayd.engine.warp_device(): give the CUDA ordinal, e.g. 'cuda:0'")
    return wp.get_device(name)


@contextlib.contextmanager
def launch_stream(device: wp.context.Device, stream: wp.Stream | None) -> Iterator[None]:
    """Make ``stream`` Warp's current stream on ``device`` for work that takes no stream argument.

    Used around BVH build and refit, which run on the current stream of the device.
    ``stream=None`` (or a CPU device) only scopes the device.
    """
    if device.is_cpu or stream is None:
        with wp.ScopedDevice(device):
            yield
    else:
        with wp.ScopedStream(stream, sync_enter=False):
            yield


#: 1: :func:`read_back` of small CUDA arrays copies them on the stream into one pinned staging buffer
#: and waits once (default); 0: a wait for the stream, then ``wp.array.numpy()`` per array (a blocking
#: copy each). ``RAYD_STAGED_READS`` 
#: (session 20, one H200, ``benchmarks/results/h200-session20/``: with the other build switches, ``build()``
#: terrain 2 M 12.39 -> 10.37 ms, sphere 1 M 13.37 -> 11.33 ms, medians of 10, the same tree).
STAGED_READS = int(os.environ.get("RAYD_STAGED_READS", "1"))
_STAGING_BYTES = 1 << 16
_staging: dict = {}  # CUDA device name -> pinned uint8 buffer (reused: every read_back waits before it returns)


def _staged(stream: wp.Stream, arrays: tuple) -> tuple[np.ndarray, ...] | None:
    """The copies of :func:`read_back` through pinned memory (one wait), or ``None`` where it does not apply."""
    dev = arrays[0].device
    if not all(a.device == dev and a.is_contiguous for a in arrays):
        return None
    spans, end = [], 0
    for a in arrays:
        nbytes = a.size * wp.types.type_size_in_bytes(a.dtype)
        spans.append((end, nbytes))
        end += (nbytes + 15) & ~15
    core = getattr(getattr(getattr(wp, "_src", None), "context", None), "runtime", None)
    memcpy = getattr(getattr(core, "core", None), "wp_memcpy_d2h", None)
    if end > _STAGING_BYTES or memcpy is None:
        return None
    buf = _staging.get(str(dev))
    if buf is None:
        buf = _staging[str(dev)] = wp.empty(_STAGING_BYTES, dtype=wp.uint8, device="cpu", pinned=True)
    for a, (at, nbytes) in zip(arrays, spans):
        if nbytes and not memcpy(dev.context, buf.ptr + at, a.ptr, nbytes, stream.cuda_stream):
            return None  # (nothing read yet: the caller's plain path reads again)
    wp.synchronize_stream(stream)
    return tuple(wp.array(ptr=buf.ptr + at, dtype=a.dtype, shape=a.shape, device="cpu").numpy().copy()
                 for a, (at, _) in zip(arrays, spans))


def read_back(stream: wp.Stream | None, *arrays: wp.array) -> tuple[np.ndarray, ...]:
    """Host copies of ``arrays`` once the work queued on ``stream`` has finished.

    ``wp.array.numpy()`` copies on the CUDA legacy default stream, which does not wait
    for non-blocking streams (Dr.Jit's, PyTorch's side streams): reading without waiting
    for ``stream`` first could return what the buffers held before the launch. Small CUDA
    arrays (:data:`STAGED_READS`) are copied on ``stream`` itself into pinned memory, with one
    wait for all of them. ``stream`` ``None``: Warp's current stream of the arrays' device.
    """
    if STAGED_READS and arrays and arrays[0].device.is_cuda:
        got = _staged(stream if stream is not None else wp.get_stream(arrays[0].device), arrays)
        if got is not None:
            return got
    if stream is not None:
        wp.synchronize_stream(stream)
    return tuple(a.numpy() for a in arrays)


#: CPU launches of at least this many threads are split across the machine's cores
#: (Warp runs one CPU launch on one core; its launches release the GIL).
CPU_SPLIT_MIN = 8192

_pool = None
_warmed: set = set()
_load_lock = threading.Lock()


def load_once(kernel, device) -> None:
    """Load ``kernel``'s module on ``device`` now, on this thread, unless a launch already did: the
    load at a first launch is not thread-safe (two threads loading one module at once left a recorded
    launch with the entry point of a copy the other load unloaded), so call this before a kernel's
    first launch on several threads."""
    if kernel.key in _warmed:
        return
    with _load_lock:
        if kernel.key not in _warmed:
            wp.load_module(kernel.module, device=device)
            _warmed.add(kernel.key)
#: Cores for CPU launches, read once (``os.cpu_count()`` reads sysfs: tens of microseconds
#: on every launch, CUDA ones included, when it was called per launch).
_WORKERS = os.cpu_count() or 1


def host_array(ptr: int, dtype, n: int, owner: object = None) -> wp.array | None:
    """A contiguous 1-D ``wp.array`` of ``n`` ``dtype`` aliasing host memory at ``ptr``, made without
    ``wp.array.__init__`` (about 1 us, against 5-6 us for ``wp.array(ptr=...)`` and 16-19 us for
    ``wp.from_torch``, which a query called 19 times: issue 12).

    The array has exactly the attributes ``wp.array(ptr=ptr, dtype=dtype, shape=(n,), device="cpu")``
    has (checked once against one made so, for Warp 1.19's layout); ``owner`` is kept as its
    ``_tensor`` (what ``wp.from_torch`` keeps: the memory's owner stays alive with the view).

    Args:
        ptr: address of the first element (nonzero); n: number of elements (> 0).
        dtype: a Warp scalar, vector or matrix type.
        owner: the object that owns the memory (a torch tensor), or ``None``.

    Returns:
        The array, or ``None`` where this Warp's array layout differs (the caller then makes it
        through Warp).
    """
    template = _HOST_TEMPLATE or _host_template()
    if template is False:
        return None
    return _from_template(template, ptr, dtype, n, "_tensor", owner)


_NEW = object.__new__
_ITEM_SIZES: dict = {}


def _item_size(dtype) -> int:
    """Bytes of one ``dtype`` element (a Warp type), cached."""
    size = _ITEM_SIZES.get(dtype)
    if size is None:
        size = _ITEM_SIZES[dtype] = wp.types.type_size_in_bytes(dtype)
    return size


def _from_template(template: dict, ptr: int, dtype, n: int, keep_name: str, keep) -> wp.array:
    """A 1-D contiguous ``wp.array`` of ``n`` ``dtype`` at ``ptr`` from a checked attribute template (what
    ``wp.array(ptr=...)`` sets, less the per-array attributes), holding ``keep`` as ``keep_name``."""
    size = _item_size(dtype)
    a = _NEW(wp.array)
    d = a.__dict__
    d.update(template)
    d["ptr"] = ptr
    d["dtype"] = dtype
    d["shape"] = (n,)
    d["strides"] = (size,)
    d["size"] = n
    d["capacity"] = n * size
    d[keep_name] = keep
    return a
#: ``wp.array(ptr=..., device="cpu")``'s attributes other than the per-array ones (:func:`host_array`);
#: ``None`` until first used, ``False`` where the layout check failed.
_HOST_TEMPLATE: dict | bool | None = None
_PER_ARRAY = ("ptr", "dtype", "shape", "strides", "size", "capacity")


def _host_template() -> dict | bool:
    """Make :data:`_HOST_TEMPLATE`: the attributes of a reference array, checked against one made by
    :func:`host_array` for a scalar and a vector type (a Warp with another layout: ``False``)."""
    global _HOST_TEMPLATE
    buf = np.zeros(12, dtype=np.float32)
    ok = True
    template: dict = {}
    try:
        for dtype, n in ((wp.float32, 12), (wp.vec3, 4)):
            ref = wp.array(ptr=buf.ctypes.data, dtype=dtype, shape=(n,), device="cpu")
            attrs = {k: v for k, v in vars(ref).items() if k not in _PER_ARRAY}
            if template and attrs != template:
                ok = False
            template = attrs
        if ok:
            template["_tensor"] = None
            _HOST_TEMPLATE = template
            made = host_array(buf.ctypes.data, wp.vec3, 4)
            ref = wp.array(ptr=buf.ctypes.data, dtype=wp.vec3, shape=(4,), device="cpu")
            ok = {k: v for k, v in vars(made).items() if k != "_tensor"} == vars(ref) and made.__class__ is wp.array
    except Exception:  # pragma: no cover - another Warp
        ok = False
    _HOST_TEMPLATE = template if ok else False
    return _HOST_TEMPLATE


#: ``RAYD_BUILD_KEPT_CUDA``: 1 (default) lets CUDA builds use the kept launches (:func:`launch_once`,
#: :func:`kept_launch`) and the template-made views (:func:`carve`, :func:`alias`) that CPU builds use; 0 gives
#: CUDA builds Warp's own calls instead (``wp.launch``, a recording per build, ``wp.empty`` / ``wp.zeros`` per
#: array, ``wp.array(ptr=...)``), the mechanics before session 23. The arrays, the launches, their order and the
#: tree are the same either way (``tests/engine/test_build_bit_equal.py`` runs both on the CPU). Session 23's one
#: H100 call (``benchmarks/results/h100-session23/``): the CUDA tests of ``test_build_host.py``, the PLOC,
#: update and off-face files passed with 1 as far as the time limit reached; ``build()`` 1.6-1.7 ms faster.
BUILD_KEPT_CUDA = os.environ.get("RAYD_BUILD_KEPT_CUDA", "1").strip() != "0"


def _kept_on(device) -> bool:
    """Whether builds on ``device`` (a Warp device) use the kept launches and template-made views."""
    return BUILD_KEPT_CUDA or device.is_cpu


#: Byte alignment of each view :func:`carve` makes, from the start of its allocation.
CARVE_ALIGN = 256
_WARP_TYPES = {float: wp.float32, int: wp.int32, bool: wp.bool}  # (Python types Warp arrays accept)
_VIEW_TEMPLATES: dict = {}  # device alias -> the attributes of a view other than the per-view ones (or False)


def _view_template(device) -> dict | bool:
    """The attributes ``wp.array(ptr=..., device=device)`` gives a view, less the per-view ones, checked on a
    scalar and a vector view against Warp's own (``False`` where they differ: :func:`carve` then makes
    its views through ``wp.array(ptr=...)``)."""
    key = device.alias
    got = _VIEW_TEMPLATES.get(key)
    if got is not None:
        return got
    probe = wp.empty(16, dtype=wp.float32, device=device)
    template: dict = {}
    ok = True
    try:
        for dtype, n in ((wp.float32, 12), (wp.vec3, 4)):
            ref = wp.array(ptr=probe.ptr, dtype=dtype, shape=(n,), device=device)
            attrs = {k: v for k, v in vars(ref).items() if k not in _PER_ARRAY}
            if template and attrs != template:
                ok = False
            template = attrs
        if ok and "_ref" in template:
            _VIEW_TEMPLATES[key] = template
            made = _view(probe, 0, wp.vec3, 4)
            ref = wp.array(ptr=probe.ptr, dtype=wp.vec3, shape=(4,), device=device)
            ok = ({k: v for k, v in vars(made).items() if k != "_ref"} == {k: v for k, v in vars(ref).items()
                                                                          if k != "_ref"}
                  and made.__class__ is wp.array and made._ref is probe)
        else:
            ok = False
    except Exception:  # pragma: no cover - another Warp
        ok = False
    _VIEW_TEMPLATES[key] = template if ok else False
    return _VIEW_TEMPLATES[key]


def _view(owner: wp.array, at: int, dtype, n: int) -> wp.array:
    """A 1-D contiguous view of ``n`` ``dtype`` at byte ``at`` of ``owner`` (kept alive as Warp's slices keep
    their array: ``_ref``): from :data:`_VIEW_TEMPLATES`' entry for its device where builds on it use the
    template-made views (:func:`_kept_on`) and the entry passed its check, else by ``wp.array(ptr=...)``."""
    device = owner.device
    template = _VIEW_TEMPLATES.get(device.alias) if _kept_on(device) else False
    if template is None:
        template = _view_template(device)
    if template is False:  # another Warp's layout, or CUDA with RAYD_BUILD_KEPT_CUDA=0
        view = wp.array(ptr=owner.ptr + at, dtype=dtype, shape=(n,), device=device)
        view._ref = owner
        return view
    return _from_template(template, owner.ptr + at, dtype, n, "_ref", owner)


def alias(base: wp.array, dtype, n: int | None = None, at: int = 0) -> wp.array:
    """A 1-D contiguous view of ``base``'s memory from byte ``at`` as ``n`` ``dtype`` (default: as many as its
    bytes after ``at`` hold), keeping ``base`` alive (``_ref``): what ``wp.array(ptr=base.ptr + at, dtype=dtype,
    shape=(n,), device=base.device)`` makes (5-7 us), made as :func:`carve`'s views are (about 1 us).

    Args:
        base: a contiguous array; dtype: a Warp type; n: elements (within ``base``'s bytes); at: byte offset.
    """
    dtype = _WARP_TYPES.get(dtype, dtype)
    if n is None:
        n = (base.capacity - at) // _item_size(dtype)
    return _view(base, at, dtype, n)


def carve(device, parts: list[tuple[object, int]], zero: bool = False) -> list[wp.array]:
    """Contiguous 1-D arrays of ``n`` ``dtype`` each (``parts``: ``(dtype, n)``, ``n >= 1``) carved from one
    allocation on ``device`` (contents undefined, as ``wp.empty``'s; ``zero``: all zero, by one fill of the
    allocation on Warp's current stream of ``device``, as ``wp.zeros``), each at a multiple of
    :data:`CARVE_ALIGN` bytes from the allocation's start (Warp's CUDA allocations are aligned to at least that):
    one allocation instead of one per array (issue 18, "build": each
    ``wp.empty`` costs 10-15 us of host time, a view made here about 1 us). Every view keeps the
    allocation alive (Warp's ``_ref``, as a slice keeps its array), so it is freed with the last view.

    Args:
        device: the Warp device; parts: the arrays' dtypes (Warp scalar, vector or matrix types) and lengths.
        zero: fill the arrays with zeros.

    Returns:
        The arrays, in the order of ``parts``.
    """
    device = wp.get_device(device)
    parts = [(_WARP_TYPES.get(dtype, dtype), n) for dtype, n in parts]  # (float -> wp.float32, as wp.empty)
    if not _kept_on(device):  # (RAYD_BUILD_KEPT_CUDA=0: an allocation per array, as before session 23)
        make = wp.zeros if zero else wp.empty
        return [make(n, dtype=dtype, device=device) for dtype, n in parts]
    offsets, end = [], 0
    for dtype, n in parts:
        offsets.append(end)
        end += (n * _item_size(dtype) + CARVE_ALIGN - 1) // CARVE_ALIGN * CARVE_ALIGN
    owner = wp.empty(max(1, end // 4), dtype=wp.int32, device=device)
    if zero:
        owner.zero_()
    return [_view(owner, at, dtype, n) for (dtype, n), at in zip(parts, offsets)]


class PerRow:
    """Marks a launch input that holds one entry per row (sliced when a launch is split)."""

    __slots__ = ("array",)

    def __init__(self, array: wp.array) -> None:
        self.array = array


def per_row(array: wp.array, n: int) -> tuple[object, int]:
    """``(input, stride)`` for an array of length ``n`` or 1 (stride 0: broadcast)."""
    if array.shape[0] == 1 and n != 1:
        return array, 0
    return PerRow(array), 1


def launch_rows(kernel, n: int, inputs: list, outputs: list, device, stream) -> None:
    """Launch ``kernel`` over ``n`` rows; on the CPU, split the rows across cores.

    ``inputs`` are the kernel's inputs in order, with per-row arrays wrapped in
    :class:`PerRow`; ``outputs`` are per-row arrays. The chunks are disjoint and the
    kernel writes only its own rows, so the result equals one launch.
    """
    if n == 0:
        return
    workers = _WORKERS
    if not device.is_cpu or n < CPU_SPLIT_MIN or workers < 2 or kernel.key not in _warmed:
        plain = [x.array if isinstance(x, PerRow) else x for x in inputs]
        wp.launch(kernel, dim=n, inputs=plain, outputs=outputs, device=device, stream=stream)
        _warmed.add(kernel.key)
        return
    parts = min(CPU_CHUNKS_PER_CORE * workers, max(1, n // (CPU_SPLIT_MIN // 2)))
    bounds = [n * k // parts for k in range(parts + 1)]

    def run(k: int) -> None:
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            part = [x.array[lo:hi] if isinstance(x, PerRow) else x for x in inputs]
            wp.launch(kernel, dim=hi - lo, inputs=part, outputs=[None if o is None else o[lo:hi] for o in outputs],
                      device=device)

    run_parallel(run, parts)


def launch_offset_rows(kernel, n: int, inputs: list, device, stream, block_dim: int = 256) -> None:
    """Launch ``kernel`` over rows ``0 .. n - 1``; on the CPU, in chunks across cores.

    For kernels whose rows are not their thread ids (e.g. a thread reads its row through a
    sort order): the kernel's last input is ``base``, its row index is ``wp.tid() + base``,
    and ``inputs`` are the others, passed whole to every chunk. Chunks as in
    :func:`launch_rows` (the first launch of a kernel, and launches under ``CPU_SPLIT_MIN``
    rows, run as one). ``block_dim``: threads per block of a CUDA launch.
    """
    if n == 0:
        return
    workers = _WORKERS
    if not device.is_cpu or n < CPU_SPLIT_MIN or workers < 2 or kernel.key not in _warmed:
        wp.launch(kernel, dim=n, inputs=[*inputs, 0], device=device, stream=stream, block_dim=block_dim)
        _warmed.add(kernel.key)
        return
    parts = min(CPU_CHUNKS_PER_CORE * workers, max(1, n // (CPU_SPLIT_MIN // 2)))
    bounds = [n * k // parts for k in range(parts + 1)]

    def run(k: int) -> None:
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            wp.launch(kernel, dim=hi - lo, inputs=[*inputs, lo], device=device)

    run_parallel(run, parts)


#: CPU launches are split in up to this many chunks per core, taken in turn (see :func:`run_parallel`).
CPU_CHUNKS_PER_CORE = 4


def run_parallel(run, parts: int) -> None:
    """``run(k)`` for every ``k < parts``, on a pool of ``cores - 1`` threads and the calling thread.

    Each thread takes the next chunk when it is done with one, so a core that another
    process holds for a while leaves its share to the others (a fixed split of one chunk
    per core would wait for it). ``run`` must release the GIL for its work (Warp CPU
    launches and Embree do). Exceptions are re-raised here.
    """
    global _pool
    workers = _WORKERS
    if parts <= 1 or workers == 1:
        for k in range(parts):
            run(k)
        return
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="rayd-cpu")
    chunks = iter(range(parts))  # next() of a range iterator is atomic under the GIL

    def drain() -> None:
        for k in chunks:
            run(k)

    futures = [_pool.submit(drain) for _ in range(min(workers - 1, parts - 1))]
    try:
        drain()
    finally:
        # A task no pool thread has started has nothing left to take: cancel it (no wait for a
        # sleeping thread, and no deadlock where a chunk itself runs a split launch).
        for f in futures:
            if not f.cancel():
                f.result()


def _signature(a: object) -> object:
    """What a recorded launch argument is compared by: an array by its memory and layout (no
    reference kept, so a cached launch does not keep a caller's array alive), anything else by value.

    The first item is the argument's type (an array's ``dtype``), so that the signatures also give
    the key of the recorded command. Exact types are tested first: ``isinstance`` against
    ``wp.array`` (a generic class) costs about a microsecond, which 16-24 launches of 23-47 arguments
    per query turned into about 1 ms of Python (issue 12).
    """
    kind = type(a)
    if kind is int or kind is float or kind is bool:
        return (kind, a)
    if kind is wp.array or isinstance(a, wp.array):
        return (a.dtype, a.ptr, a.shape, a.strides, a.device.alias)
    if isinstance(a, ctypes.Array):
        # Warp vectors and matrices are ctypes arrays: their bytes compare in well under a
        # microsecond, a tuple of a matrix's rows (Warp's own __eq__ per row) in hundreds.
        return (kind, bytes(a))
    if isinstance(a, (int, float, bool)):
        return (kind, a)
    try:
        return (kind, tuple(a))  # Warp vectors and matrices (flat sequences of scalars)
    except TypeError:
        return (object, id(a))  # never equal to another object's


class LaunchCache:
    """Recorded launches (``wp.launch(..., record_cmd=True)``) of kernels an owner launches again and
    again with mostly the same arguments (a BVH's refit, the placement of a mesh's points).

    ``wp.launch`` resolves the overload and packs every argument on each call (tens of
    microseconds of host time); a replay repacks only the arguments that changed (an
    array counts as unchanged when its pointer, dtype, shape and strides are) and costs a
    few microseconds. One command per (kernel, device, argument dtypes); the cache keeps no
    reference to the arguments (the packed pointers only), so it must not be replayed
    under a Warp APIC capture. On the CPU a replay also keeps the kernel's argument struct
    (:class:`_CpuArgs`) and calls the kernel with it, where Warp's ``Launch.launch`` would
    build a new one (one ``setattr`` per argument); under an APIC capture it goes through
    Warp as before.
    """

    __slots__ = ("_cmds", "_buffers")

    def __init__(self) -> None:
        self._cmds: dict = {}
        self._buffers: dict = {}

    def buffer(self, name: str, n: int, dtype, device) -> wp.array:
        """A scratch array of ``n`` ``dtype`` kept for the owner's next calls (contents undefined)."""
        key = (name, str(device))
        buf = self._buffers.get(key)
        if buf is None or buf.shape[0] != n or buf.dtype != dtype:
            buf = self._buffers[key] = wp.empty(n, dtype=dtype, device=device)
        return buf

    def launch(self, kernel, dim: int, args: list, device, stream: wp.Stream | None = None) -> None:
        """Launch ``kernel`` over ``dim`` threads with ``args`` (inputs then outputs, in order)."""
        device = wp.get_device(device)
        sigs = [_signature(a) for a in args]
        key = (kernel, device.alias, tuple([s[0] for s in sigs]))
        entry = self._cmds.get(key)
        if entry is None:
            cmd = wp.launch(kernel, dim=dim, inputs=args, device=device, record_cmd=True)
            entry = self._cmds[key] = [cmd, sigs, dim, _cpu_args(cmd)]
        else:
            cmd, last, last_dim, packed = entry
            if packed is not None and packed.busy:
                # another thread runs this command's kept struct now (the kernel reads it while it runs):
                # this launch and later ones go through Warp's replay, which packs a struct per launch
                packed = entry[3] = None
            if sigs != last:  # (one C-level comparison when nothing changed)
                params = cmd.params
                for i, sig in enumerate(sigs):
                    if sig != last[i]:
                        a = args[i]
                        if (packed is not None and type(a) is wp.array and type(params[i + 1]) is _ARRAY_T
                                and len(sig[2]) == len(last[i][2]) and a._grad is None and not a._retain_grad):
                            # a plain array of the recorded dtype and rank, on the recorded device: its
                            # descriptor as Warp's array.__ctype__ makes it, without pack_arg's checks
                            c = _ARRAY_T(data=a.ptr, grad=0, ndim=a.ndim, shape=a.shape, strides=a.strides)
                            params[i + 1] = c
                            packed.set(i, c)
                        else:
                            cmd.set_param_at_index(i, a)
                            if packed is not None and not packed.set(i, params[i + 1]):
                                packed = entry[3] = None
                        last[i] = sig
            if dim != last_dim:
                cmd.set_dim(dim)
                entry[2] = dim
        cmd.fwd_args = None  # (kept by Warp for graph-capture replays only): no references to the arguments
        packed = entry[3]
        if packed is not None and _apic_capture(device) is None:
            packed.busy = True
            try:
                packed.forward(ctypes.byref(cmd.params[0]), packed.byref)  # (ctypes: the GIL is released)
            finally:
                packed.busy = False
        else:
            cmd.launch(None if device.is_cpu else stream)


#: The recorded launches of the kernels every ``build()`` launches once (``Scene.build()``: checks, placement,
#: Morton keys, PLOC leaves and layout, wide nodes; issue 18, "build"), kept for the process: a new scene's
#: build re-binds the arguments of a command recorded by an earlier build (:meth:`LaunchCache.launch`,
#: a few microseconds per changed argument) instead of Warp's ``wp.launch`` (overload, module check and
#: every argument packed: tens of microseconds). The commands keep no reference to any array (the packed
#: pointers only; a launch copies them when it is enqueued), so scenes never share arrays through it.
#: Used under :data:`ENGINE_LOCK` (every public ``Scene`` method holds it).
BUILD_LAUNCHES = LaunchCache()


def launch_once(kernel, dim: int, args: list, device, stream: wp.Stream | None = None) -> None:
    """``wp.launch(kernel, dim, args, device=device, stream=stream)`` through :data:`BUILD_LAUNCHES`.

    The same launch on the same stream (``stream`` ``None``: the device's current one, as ``wp.launch``);
    for kernels launched once per build with new arrays. ``dim`` 0 launches nothing (as ``wp.launch``).

    Args:
        kernel: a ``@wp.kernel``; dim: threads; args: its inputs then outputs, in order.
        device: the Warp device (or its name); stream: the stream (ignored on the CPU).
    """
    if dim > 0:
        device = wp.get_device(device)
        if _kept_on(device):
            BUILD_LAUNCHES.launch(kernel, dim, args, device, stream)
        else:
            wp.launch(kernel, dim, args, device=device, stream=stream)


_KEPT: dict = {}  # (kernel, device alias, slot) -> a recorded wp.Launch (kept_launch)


def kept_launch(kernel, slot: object, dim: int, args: list, device) -> wp.Launch:
    """A recorded launch (``wp.Launch``, not launched) of ``kernel`` over ``dim`` threads with ``args``, kept for
    the process per ``(kernel, device, slot)`` and re-bound here to ``args``: for a builder that records the same
    commands at every build (PLOC's passes) and replays them (``cmd.launch(stream)``, ``set_dim``) itself.

    Each array argument is set from its own Warp descriptor (``wp.array.__ctype__``, the value ``wp.launch``
    packs) through ``Launch.set_param_at_index_from_ctype``, other arguments through
    ``set_param_at_index``: a fifth of the host time of recording the command anew (Warp's overload
    resolution, module check and every argument's checks). The command keeps no reference to an array
    (Warp's ``fwd_args`` is dropped), so a kept command never holds a build's arrays alive, and two builds
    never share arrays through it: a build re-binds every argument before its first replay, and each
    replay copies the arguments when it is enqueued. Under :data:`ENGINE_LOCK` (one build at a time).

    Args:
        kernel: a ``@wp.kernel``; slot: tells apart commands of one kernel kept together (e.g. the parity
            of double buffers); dim: threads; args: the kernel's arguments (inputs then outputs, in order:
            arrays of the recorded dtypes, or values); device: the Warp device.

    Returns:
        The command, bound to ``args`` and sized ``dim``.
    """
    device = wp.get_device(device)
    if not _kept_on(device):  # (RAYD_BUILD_KEPT_CUDA=0: recorded anew at every build, as before session 23)
        return wp.launch(kernel, dim, args, device=device, record_cmd=True)
    key = (kernel, device.alias, slot)
    cmd = _KEPT.get(key)
    if cmd is None:
        cmd = _KEPT[key] = wp.launch(kernel, dim, args, device=device, record_cmd=True)
    else:
        for i, a in enumerate(args):
            if type(a) is wp.array and a._grad is None:
                cmd.set_param_at_index_from_ctype(i, a.__ctype__())
            else:
                cmd.set_param_at_index(i, a)
        if cmd.bounds.size != dim:  # (a build of the same size as the last: no resize)
            cmd.set_dim(dim)
    cmd.fwd_args = None  # (kept by Warp for APIC capture replays only): no references to the arguments
    return cmd


#: Warp's array descriptor type (:meth:`LaunchCache.launch` re-packs CPU array arguments as one).
_ARRAY_T = wp._src.types.array_t


_STRUCT_TYPES: dict = {}  # (kernel, argument ctypes) -> the ctypes Structure class of its arguments (_CpuArgs)


class _CpuArgs:
    """A recorded CPU launch's argument struct, kept between replays (Warp's ``Launch.launch`` builds a
    new one per launch, one ``setattr`` per argument: 15-20 us for the search's 40 arguments, 16 to 24
    launches per query); :meth:`LaunchCache.launch` re-sets the arguments that changed and calls the
    kernel's entry point as Warp's ``invoke`` does. A command replayed by a second thread while its kernel
    runs on another drops the kept struct (the running kernel reads it) and goes through Warp."""

    __slots__ = ("struct", "names", "types", "forward", "byref", "busy")

    def __init__(self, cmd) -> None:
        self.busy = False  # a kernel runs with the struct (set and read under the GIL)
        self.names = [arg.label for arg in cmd.kernel.adj.args]
        self.types = [type(p) for p in cmd.params[1:]]
        key = (cmd.kernel, tuple(self.types))
        struct = _STRUCT_TYPES.get(key)  # (a ctypes Structure class costs about 10 us to make: one per kernel)
        if struct is None:
            struct = _STRUCT_TYPES[key] = type("ArgsStruct", (ctypes.Structure,),
                                               {"_fields_": list(zip(self.names, self.types))})
        self.struct = struct()
        for name, value in zip(self.names, cmd.params[1:]):
            setattr(self.struct, name, value)
        self.forward = cmd.hooks.forward
        self.byref = ctypes.byref(self.struct)

    def set(self, i: int, value) -> bool:
        """Argument ``i`` re-packed (False: its ctype changed, the struct no longer fits)."""
        if type(value) is not self.types[i]:
            return False
        setattr(self.struct, self.names[i], value)
        return True


def _cpu_args(cmd) -> _CpuArgs | None:
    """The kept argument struct of a recorded CPU forward launch (``None``: replay through Warp)."""
    if not (CPU_DIRECT and _apic_capture is not None and cmd.device.is_cpu and not cmd.adjoint
            and getattr(cmd, "block_dim", 1) == 1 and getattr(cmd.hooks, "forward", None)):
        return None
    try:
        return _CpuArgs(cmd)
    except (AttributeError, TypeError):  # pragma: no cover - another Warp's Launch layout
        return None


#: Recorded CPU launches replayed with their kept argument struct (:class:`_CpuArgs`); off: through
#: Warp's ``Launch.launch`` (for measurements). Written for Warp 1.19's ``Launch`` and ``invoke``.
CPU_DIRECT = True

try:  # Warp's check for an APIC capture on a device (a launch under one is recorded, not run)
    from warp._src.context import _get_apic_capture_for_device as _apic_capture
except ImportError:  # pragma: no cover - another Warp: replay through Launch.launch
    _apic_capture = None


class StageTimer:
    """Synchronised stage timers for benchmarks: :meth:`mark` adds the ms since the last mark (or
    since construction) to ``profile[name]``, synchronising ``device`` first; with ``profile=None``
    every call is a no-op (no synchronisation is added).

    Args:
        profile: a dict to receive the times, or ``None``.
        device: the Warp device whose work is timed.
    """

    def __init__(self, profile: dict | None, device) -> None:
        self.profile, self.device, self.t = profile, device, 0.0
        if profile is not None:
            wp.synchronize_device(device)
            self.t = time.perf_counter()

    def mark(self, name: str) -> None:
        """Add the time since the last mark to ``profile[name]`` (ms)."""
        if self.profile is None:
            return
        wp.synchronize_device(self.device)
        now = time.perf_counter()
        self.profile[name] = self.profile.get(name, 0.0) + (now - self.t) * 1e3
        self.t = now
