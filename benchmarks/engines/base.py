"""What every engine adapter provides to the benchmark runner."""

from __future__ import annotations

import numpy as np


class NotSupported(Exception):
    """The engine has no such operation (e.g. vertex gradients); the metric is recorded as null."""


class Engine:
    """One ray-tracing engine on one device, loaded with one workload.

    Subclasses set ``name`` and implement the methods below. Every timed method
    launches its work and returns; the runner calls ``synchronize()`` before reading
    the clock, so asynchronous engines are timed to completion.

    Lifecycle: ``Engine(device)`` -> ``load(workload)`` (first build, untimed) ->
    timed calls -> ``close()``.
    """

    #: engine name in results, e.g. "rayd.torch"
    name: str = ""
    #: how ``update`` works, recorded in results ("refit", "rebuild", ...)
    update_kind: str = "refit"

    def __init__(self, device: str) -> None:
        self.device = device

    @classmethod
    def missing(cls, device: str) -> str | None:
        """Why the engine cannot run on ``device`` (not installed, no such backend), or ``None``."""
        return None

    @classmethod
    def versions(cls) -> dict[str, str]:
        """Versions of the packages the engine runs on."""
        return {}

    def load(self, workload) -> None:
        """Copy the workload's mesh and rays to the device and build the acceleration structure."""
        raise NotImplementedError

    def closest(self, minimal: bool = False):
        """Closest hit of every ray; ``minimal``: t and ids only, else every field the engine offers.

        Returns an engine-specific handle that ``hits`` reads.
        """
        raise NotImplementedError

    def hits(self, handle) -> tuple[np.ndarray, np.ndarray]:
        """``(prim_id int64 [N] with -1 on a miss, t float64 [N] with inf on a miss)`` on the host."""
        raise NotImplementedError

    def forward_backward(self) -> None:
        """Closest hit, loss = sum of ``t`` over hits, gradient of the loss to the vertex buffer."""
        raise NotSupported(f"{self.name} offers no vertex gradients")

    def last_gradient(self) -> np.ndarray | None:
        """The vertex gradient (V, 3) of the last ``forward_backward`` call, on the host."""
        return None

    def update(self, which: int) -> None:
        """Move every vertex to vertex set ``which`` (0: original, 1: moved) and make queries valid again."""
        raise NotSupported(f"{self.name} cannot update vertices")

    def build(self) -> None:
        """Build the acceleration structure again from the data already on the device."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all work launched so far."""

    def peak_memory(self, fn) -> int | None:
        """Peak device memory (bytes) that ``fn()`` allocates, or ``None`` if not measurable.

        Only used on CUDA; on the CPU the runner measures the process's peak resident
        memory for every engine alike.
        """
        return None

    def release_cached_memory(self) -> None:
        """Return memory the engine's allocator caches (before a memory measurement)."""

    def close(self) -> None:
        """Release device memory."""
