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


def copy_of(view: wp.array, stream: wp.Stream | None = None) -> wp.array:
    """An engine-owned copy of ``view`` (enqueued on ``stream`` on CUDA)."""
    out = wp.empty_like(view)
    wp.copy(out, view, stream=stream)
    return out


def same_views(pairs: list[tuple[wp.array, wp.array]], stream: wp.Stream | None = None) -> list[bool]:
    """Per ``(view, copy)`` pair, whether ``view`` holds ``copy``'s bytes (one host read on CUDA).

    Args:
        pairs: views of caller-owned arrays and the copies :func:`copy_of` made of them.
        stream: the CUDA stream to compare on (ordered after the caller's writes).
    """
    if not pairs:
        return []
    device = pairs[0][0].device
    if device.is_cpu:
        return [v.shape == c.shape and bool(np.array_equal(_words(v).numpy(), _words(c).numpy())) for v, c in pairs]
    scope = wp.ScopedStream(stream) if stream is not None else contextlib.nullcontext()
    with scope:  # the zero fill ordered before the launches, on the caller's stream
        flags = wp.zeros(len(pairs), dtype=wp.int32, device=device)
        for k, (v, c) in enumerate(pairs):
            words = _words(v)
            if words.size:
                wp.launch(_contents_differ_kernel, dim=words.size, inputs=[words, _words(c), k, flags],
                          device=device, stream=stream)
    return [not bad for bad in read_back(stream, flags)[0].tolist()]
