"""Warp start-up, devices and streams for the engine."""

from __future__ import annotations

import contextlib
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
