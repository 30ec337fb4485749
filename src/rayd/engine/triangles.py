"""`TriangleScene`: a BVH over triangles with conservatively padded boxes."""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.bvh_nodes import MAX_DEPTH, read_nodes
from rayd.engine.runtime import launch_stream

#: BVH construction used by ``build()``. SAH traverses fastest (measured on an H200);
#: Warp builds it on the host.
DEFAULT_BVH_CONSTRUCTOR = "sah"

#: Triangles per BVH leaf (at most); see benchmarks/README.md for the measurement.
LEAF_SIZE = int(os.environ.get("RAYD_BVH_LEAF_SIZE", "1"))

#: Boxes are padded by this fraction of the scene's magnitude (largest absolute
#: coordinate plus extent), so that slab tests rounded in float32 never reject a ray
#: through a shared edge or vertex lying on a box face: a watertight triangle test
#: needs a conservative traversal (Woop et al. 2013, sec. 4; Ize 2013).
BOX_PADDING = wp.constant(1.0e-5)

# Bounds kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})


@wp.kernel
def _padded_bounds_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    magnitude: wp.array(dtype=float),
    lowers: wp.array(dtype=wp.vec3),
    uppers: wp.array(dtype=wp.vec3),
):
    f = wp.tid()
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    a = points[indices[3 * (face_base + f)]]
    b = points[indices[3 * (face_base + f) + 1]]
    c = points[indices[3 * (face_base + f) + 2]]
    lo = wp.min(wp.min(a, b), c)
    hi = wp.max(wp.max(a, b), c)
    grow = wp.vec3(pad, pad, pad)
    lowers[f] = lo - grow
    uppers[f] = hi + grow


@wp.kernel
def _magnitude_kernel(points: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    p = points[wp.tid()]
    wp.atomic_max(out, 0, wp.max(wp.max(wp.abs(p[0]), wp.abs(p[1])), wp.abs(p[2])))


class TriangleScene:
    """A ``wp.Bvh`` over ``F`` triangles ``indices[3 (face_base + f) + k]`` of ``points``.

    The frontend owns the storage: ``points`` is a Warp ``vec3`` view of a float32
    buffer the frontend fills at build time and refreshes before ``refit()``;
    ``indices`` is a flat int32 view of a triangle list (vertex ids into ``points``).
    Several scenes may share ``points``/``indices`` with different ``face_base``.

    Args:
        points: ``wp.array(dtype=wp.vec3)`` of shape (V,), contiguous.
        indices: ``wp.array(dtype=wp.int32)``, contiguous.
        stream: the stream to build on (``None`` on the CPU).
        num_triangles: F (default: all of ``indices``); faces ``face_base ..
            face_base + F - 1`` are covered.
        face_base: first face of ``indices`` that this BVH covers.
        bvh_constructor: ``"sah"``, ``"median"`` or ``"lbvh"`` (CUDA only).

    Raises:
        ValueError: if there are no triangles.
    """

    def __init__(
        self,
        points: wp.array,
        indices: wp.array,
        stream: wp.Stream | None = None,
        *,
        num_triangles: int | None = None,
        face_base: int = 0,
        bvh_constructor: str = DEFAULT_BVH_CONSTRUCTOR,
    ) -> None:
        if num_triangles is None:
            num_triangles = indices.size // 3
        if num_triangles <= 0:
            raise ValueError(f"rayd.engine.TriangleScene(): needs at least one triangle, got {num_triangles}")
        self.device = points.device
        self.points = points
        self.indices = indices
        self.num_triangles = num_triangles
        self.face_base = face_base
        self.version = 0  # counts refits (caches of per-node data compare it)
        if self.device.is_cpu and bvh_constructor == "lbvh":
            bvh_constructor = "sah"
        self.lowers = wp.empty(num_triangles, dtype=wp.vec3, device=self.device)
        self.uppers = wp.empty(num_triangles, dtype=wp.vec3, device=self.device)
        self.magnitude = wp.zeros(1, dtype=float, device=self.device)
        with launch_stream(self.device, stream):
            self._bounds(stream)
            self.bvh = wp.Bvh(self.lowers, self.uppers, constructor=bvh_constructor, leaf_size=LEAF_SIZE)
            self.nodes = read_nodes(self.bvh, num_triangles)
            if self.nodes.depth > MAX_DEPTH:
                # Degenerate inputs can make SAH trees deeper than the traversal stack:
                # a median split is balanced (depth about log2 F).
                self.bvh = wp.Bvh(self.lowers, self.uppers, constructor="median", leaf_size=LEAF_SIZE)
                self.nodes = read_nodes(self.bvh, num_triangles)

    @property
    def id(self) -> int:
        """The ``wp.Bvh`` id that query kernels take."""
        return self.bvh.id

    def _bounds(self, stream: wp.Stream | None) -> None:
        # The padding follows the current magnitude, measured on the device (no host
        # read), so a refit to a much larger or farther scene stays watertight.
        self.magnitude.zero_()
        wp.launch(_magnitude_kernel, self.points.shape[0], [self.points], [self.magnitude],
                  device=self.device, stream=stream)
        wp.launch(
            _padded_bounds_kernel,
            self.num_triangles,
            [self.points, self.indices, self.face_base, self.magnitude],
            [self.lowers, self.uppers],
            device=self.device,
            stream=stream,
        )

    def refit(self, stream: wp.Stream | None = None) -> None:
        """Refit the BVH (and its box padding) to the current contents of ``points`` (topology unchanged)."""
        with launch_stream(self.device, stream):
            self._bounds(stream)
            self.bvh.refit()
        self.version += 1
        mirror = getattr(self, "cpu_mirror", None)
        if mirror is not None:  # a CPU accelerator's copy (rayd.engine.cpu_embree): rebuilt here, at sync()
            mirror.refresh()
