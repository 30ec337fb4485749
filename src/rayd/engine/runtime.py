"""Warp start-up, devices and streams for the engine."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections.abc import Iterator

import warp as wp

# rayd prints nothing on import: Warp's start-up banner and module-load lines would
# otherwise appear once per rank. Only when rayd is the one starting Warp; a program
# that initialised Warp itself keeps its own log level.
if wp._src.context.runtime is None:
    wp.config.log_level = wp.LOG_WARNING
wp.init()


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


#: CPU launches of at least this many threads are split across the machine's cores
#: (Warp runs one CPU launch on one core; its launches release the GIL).
CPU_SPLIT_MIN = 8192

_pool = None
_warmed: set = set()


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
    global _pool
    if n == 0:
        return
    workers = os.cpu_count() or 1
    if not device.is_cpu or n < CPU_SPLIT_MIN or workers < 2 or kernel.key not in _warmed:
        plain = [x.array if isinstance(x, PerRow) else x for x in inputs]
        wp.launch(kernel, dim=n, inputs=plain, outputs=outputs, device=device, stream=stream)
        _warmed.add(kernel.key)
        return
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rayd-cpu")
    bounds = [n * k // workers for k in range(workers + 1)]

    def run(k: int) -> None:
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            part = [x.array[lo:hi] if isinstance(x, PerRow) else x for x in inputs]
            wp.launch(kernel, dim=hi - lo, inputs=part, outputs=[o[lo:hi] for o in outputs], device=device)

    list(_pool.map(run, range(workers)))
