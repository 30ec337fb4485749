"""`TriangleScene`: the engine's copy of a scene's triangles and its BVH."""

from __future__ import annotations

import warp as wp

from rayd.engine.runtime import launch_stream

#: BVH construction used by ``build()``. SAH traverses fastest (measured on an H200,
#: see benchmarks/README.md); Warp builds it on the host.
DEFAULT_BVH_CONSTRUCTOR = "sah"


class TriangleScene:
    """All triangles of a scene in one world-space array, with one BVH over them.

    The frontend owns the storage: ``points`` is a Warp ``vec3`` view of a float32
    buffer the frontend fills at ``build()`` and refreshes before ``refit()``;
    ``indices`` is a flat int32 view of the scene-wide triangle list (vertex ids into
    ``points``). Face ``f`` of the scene is ``global_prim_id == f``.

    Args:
        points: ``wp.array(dtype=wp.vec3)`` of shape (V,), contiguous.
        indices: ``wp.array(dtype=wp.int32)`` of shape (3 F,), contiguous.
        stream: the stream to build on (``None`` on the CPU).
        bvh_constructor: ``"sah"``, ``"median"``, ``"lbvh"`` (CUDA only) or ``"cubql"``.

    Raises:
        ValueError: if the scene has no triangles.
    """

    def __init__(
        self,
        points: wp.array,
        indices: wp.array,
        stream: wp.Stream | None = None,
        bvh_constructor: str = DEFAULT_BVH_CONSTRUCTOR,
    ) -> None:
        if indices.size == 0 or indices.size % 3 != 0:
            raise ValueError(f"rayd.engine.TriangleScene(): 'indices' must hold 3 F > 0 entries, got {indices.size}")
        self.device = points.device
        self.points = points
        self.indices = indices
        self.num_triangles = indices.size // 3
        self.bvh_constructor = bvh_constructor
        if self.device.is_cpu and bvh_constructor == "lbvh":
            bvh_constructor = "sah"
        with launch_stream(self.device, stream):
            self.mesh = wp.Mesh(points=points, indices=indices, bvh_constructor=bvh_constructor)

    @property
    def id(self) -> int:
        """The ``wp.Mesh`` id that query kernels take."""
        return self.mesh.id

    def refit(self, stream: wp.Stream | None = None) -> None:
        """Refit the BVH to the current contents of ``points`` (topology unchanged)."""
        with launch_stream(self.device, stream):
            self.mesh.refit()
