"""Engine adapters, one per engine users would pick, behind one interface (``base.Engine``).

Importing this package imports no engine library: each adapter imports its engine
lazily, so an engine that is not installed is skipped with a message.
"""

from __future__ import annotations

from .base import Engine, NotSupported
from .embree import Embree
from .mitsuba3 import Mitsuba3
from .rayd_torch import RaydTorch, RaydTorchEmbree
from .warp_mesh import WarpMeshLBVH, WarpMeshSAH

#: In run order; the first available one is the reference of the agreement check.
ENGINES: dict[str, type[Engine]] = {
    "rayd": RaydTorch,
    "rayd-embree": RaydTorchEmbree,
    "warp-sah": WarpMeshSAH,
    "warp-lbvh": WarpMeshLBVH,
    "mitsuba": Mitsuba3,
    "embree": Embree,
}

__all__ = ["ENGINES", "Engine", "NotSupported"]
