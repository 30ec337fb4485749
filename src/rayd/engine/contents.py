"""Copies of caller-owned arrays and exact comparisons with them (:mod:`rayd.core.contents`).

A frontend whose arrays are Warp views (rayd.drjit: DLPack views of Dr.Jit's component
arrays) keeps an engine-side copy of each registered array at ``build()``/``sync()`` and
compares the view with it at every check: bit for bit, every word. On the CPU by NumPy
on the calling thread (zero-copy views of both); on CUDA by one kernel launch per array
into a flag per array, read back once.
"""

from __future__ import annotations

import contextlib

import numpy as np
import warp as wp

from rayd.engine.runtime import read_back


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
    ``(view, copy, host)``, ``host`` the NumPy ``uint32`` words of both on the CPU (zero-copy, made once:
    a check then makes no Warp call), else ``None``."""
    out = wp.empty_like(view)
    wp.copy(out, view, stream=stream)
    host = (_words(view).numpy(), _words(out).numpy()) if view.device.is_cpu and view.size else None
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
        return [host is None or bool(np.array_equal(*host)) for _, _, host in entries]
    scope = wp.ScopedStream(stream) if stream is not None else contextlib.nullcontext()
    with scope:  # the zero fill ordered before the launches, on the caller's stream
        flags = wp.zeros(len(entries), dtype=wp.int32, device=device)
        for k, (v, c, _) in enumerate(entries):
            words = _words(v)
            if words.size:
                wp.launch(_contents_differ_kernel, dim=words.size, inputs=[words, _words(c), k, flags],
                          device=device, stream=stream)
    return [not bad for bad in read_back(stream, flags)[0].tolist()]
