"""`RayBatch`: the engine's view of a batch of rays (arrays of length N or 1)."""

from __future__ import annotations

from dataclasses import dataclass

import warp as wp

from rayd.engine.runtime import per_row


@dataclass
class RayBatch:
    """Ray arrays as query kernels read them; an array of length 1 broadcasts to all N rays.

    o, d: ``wp.array(dtype=wp.vec3)``; tmin, tmax: float32; active: uint8 (0 =
    inactive); ignore: int32 ``global_prim_id`` to skip (-1 for none).
    """

    o: wp.array
    d: wp.array
    tmin: wp.array
    tmax: wp.array
    active: wp.array
    ignore: wp.array

    def launch_args(self, n: int) -> list:
        """Kernel inputs ``array, stride, ...`` in argument order (stride 0 broadcasts)."""
        return [x for a in (self.o, self.d, self.tmin, self.tmax, self.active, self.ignore) for x in per_row(a, n)]
