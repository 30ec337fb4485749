"""Copies of caller-owned arrays and exact comparisons with them (:mod:`rayd.core.contents`).

A frontend whose arrays are Warp views (rayd.drjit: DLPack views of Dr.Jit's component
arrays) keeps an engine-side copy of each registered array at ``build()``/``sync()`` and
compares the view with it at every check: bit for bit, every byte. On the CPU by the C
library's ``memcmp`` (:func:`same_bytes`: chunks of 4 MiB over the machine's cores for large
arrays; 2-3x faster than ``numpy.array_equal``, which also allocates a mask); on CUDA by one
kernel launch per array into a flag per array, read back once. rayd.torch uses
:func:`same_bytes` for its CPU tensors too.
"""

from __future__ import annotations

import contextlib

import warp as wp

from rayd.engine.runtime import read_back, run_parallel

#: Bytes per ``memcmp`` chunk, and the size from which a comparison is split across the cores.
CHUNK = 4 << 20


def _libc_memcmp():
    import ctypes  # noqa: PLC0415
    import sys  # noqa: PLC0415

    try:
        lib = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
        fn = lib.memcmp
    except (OSError, AttributeError):  # pragma: no cover - every supported platform has one
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


_memcmp = _libc_memcmp()


def copy_bytes(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` bytes of host memory from address ``src`` to ``dst`` (``memmove``, on this thread)."""
    if nbytes > 0:
        import ctypes  # noqa: PLC0415

        ctypes.memmove(dst, src, nbytes)


def same_bytes(a: int, b: int, nbytes: int) -> bool:
    """Whether the host memory at addresses ``a`` and ``b`` holds the same ``nbytes`` bytes.

    ``memcmp`` (it releases the GIL) in chunks of :data:`CHUNK` over the machine's cores
    (:func:`rayd.engine.runtime.run_parallel`) from ``2 * CHUNK`` bytes on, else one call.
    """
    if nbytes <= 0:
        return True
    if _memcmp is None:  # pragma: no cover
        import ctypes  # noqa: PLC0415

        return ctypes.string_at(a, nbytes) == ctypes.string_at(b, nbytes)
    if nbytes < 2 * CHUNK:
        return _memcmp(a, b, nbytes) == 0
    parts = -(-nbytes // CHUNK)
    differ = []

    def run(k: int) -> None:
        if not differ:
            lo = k * CHUNK
            if _memcmp(a + lo, b + lo, min(CHUNK, nbytes - lo)) != 0:
                differ.append(k)

    run_parallel(run, parts)
    return not differ


@wp.kernel
def _contents_differ_kernel(now: wp.array(dtype=wp.uint32), copy: wp.array(dtype=wp.uint32), slot: int,
                            flags: wp.array(dtype=wp.int32)):
    i = wp.tid()
    if now[i] != copy[i]:
        flags[slot] = 1


def _words(a: wp.array) -> wp.array:
    """``a``'s bytes as a flat ``uint32`` array (zero-copy; ``a`` contiguous, of 4- or 8-byte elements)."""
    nbytes = a.size * wp.types.type_size_in_bytes(a.dtype)
    return wp.array(ptr=a.ptr, dtype=wp.uint32, shape=(nbytes // 4,), device=a.device)


def copy_of(view: wp.array, stream: wp.Stream | None = None) -> tuple:
    """An engine-owned copy of ``view`` (enqueued on ``stream`` on CUDA), as the entry :func:`same_views` reads:
    ``(view, copy, host)``, ``host`` ``(address of view, address of copy, bytes)`` on the CPU (a check
    then makes no Warp call), else ``None``."""
    out = wp.empty_like(view)
    wp.copy(out, view, stream=stream)
    host = (view.ptr, out.ptr, view.size * wp.types.type_size_in_bytes(view.dtype)) if view.device.is_cpu else None
    return view, out, host


def same_views(entries: list[tuple], stream: wp.Stream | None = None) -> list[bool]:
    """Per entry of :func:`copy_of`, whether its view holds its copy's bytes (one host read on CUDA).

    Args:
        entries: ``copy_of``'s entries of views of caller-owned arrays.
        stream: the CUDA stream to compare on (ordered after the caller's writes).
    """
    if not entries:
        return []
    device = entries[0][0].device
    if device.is_cpu:
        return [same_bytes(*host) for _, _, host in entries]
    return [not bad for bad in read_back(stream, compare_views(entries, stream))[0].tolist()]


def compare_views(entries: list[tuple], stream: wp.Stream | None = None) -> wp.array:
    """On CUDA: enqueue the comparisons of :func:`same_views` on ``stream``; returns the flags (int32,
    one per entry, 1 where the bytes differ), to read once the stream's work is done."""
    device = entries[0][0].device
    scope = wp.ScopedStream(stream) if stream is not None else contextlib.nullcontext()
    with scope:  # the zero fill ordered before the launches, on the caller's stream
        flags = wp.zeros(len(entries), dtype=wp.int32, device=device)
        for k, (v, c, _) in enumerate(entries):
            words = _words(v)
            if words.size:
                wp.launch(_contents_differ_kernel, dim=words.size, inputs=[words, _words(c), k, flags],
                          device=device, stream=stream)
    return flags
