"""Read access to the nodes of a ``wp.Bvh``, for our own ordered traversal.

Warp builds good BVHs (SAH on the host, LBVH on the GPU) over boxes we give it, but
its ray iterator visits children in a fixed order. To traverse near child first with
conservatively padded boxes we read Warp's node arrays directly. This relies on the
layout of Warp 1.19's native ``BVH`` descriptor and ``BVHPackedNodeHalf`` (16 bytes:
float x, y, z; 31-bit child/primitive index; 1-bit leaf flag), which is why
``warp-lang`` is pinned to 1.19.0; ``tests/engine`` checks the reading against
Warp's own traversal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import warp as wp

#: Stack depth of the ordered traversal; deeper trees are rebuilt with median splits.
MAX_DEPTH = 62


@dataclass
class BvhNodes:
    """Views of one ``wp.Bvh``'s nodes (owned by that BVH; valid while it lives).

    lowers, uppers: ``wp.array(dtype=wp.vec4)`` (num_nodes,), xyz = box corner.
    lower_index, upper_index: the same memory as ``wp.vec4i``; component 3 holds the
        child (inner node) or primitive range (leaf) index, bit 31 of
        ``lower_index`` flags a leaf.
    primitives: int32 (num_items,), item index per leaf slot.
    root: index of the root node.
    depth: the tree's maximum depth.
    """

    lowers: wp.array
    uppers: wp.array
    lower_index: wp.array
    upper_index: wp.array
    primitives: wp.array
    root: int
    depth: int


def read_nodes(bvh: wp.Bvh, num_items: int) -> BvhNodes:
    """Alias the node arrays of ``bvh`` (one small device-to-host read of its descriptor)."""
    device = bvh.device
    words = wp.array(ptr=bvh.id, dtype=wp.uint64, shape=(6,), device=device).numpy()
    counts = wp.array(ptr=bvh.id + 40, dtype=wp.int32, shape=(4,), device=device).numpy()
    node_lowers, node_uppers, primitive_indices = int(words[0]), int(words[1]), int(words[4])
    max_depth, max_nodes = int(counts[0]), int(counts[1])
    root_ptr = int(wp.array(ptr=bvh.id + 56, dtype=wp.uint64, shape=(1,), device=device).numpy()[0])
    root = int(wp.array(ptr=root_ptr, dtype=wp.int32, shape=(1,), device=device).numpy()[0])
    if not (node_lowers and node_uppers and primitive_indices) or not 0 <= root < max_nodes:
        raise RuntimeError("rayd.engine: unexpected wp.Bvh layout; rayd needs warp-lang 1.19.0")
    return BvhNodes(
        lowers=wp.array(ptr=node_lowers, dtype=wp.vec4, shape=(max_nodes,), device=device),
        uppers=wp.array(ptr=node_uppers, dtype=wp.vec4, shape=(max_nodes,), device=device),
        lower_index=wp.array(ptr=node_lowers, dtype=wp.vec4i, shape=(max_nodes,), device=device),
        upper_index=wp.array(ptr=node_uppers, dtype=wp.vec4i, shape=(max_nodes,), device=device),
        primitives=wp.array(ptr=primitive_indices, dtype=wp.int32, shape=(num_items,), device=device),
        root=root,
        depth=max_depth,
    )


def dummy_nodes(device, zeros: tuple[wp.array, wp.array, wp.array] | None = None) -> BvhNodes:
    """Placeholder views for a scene part that has no BVH.

    ``zeros``: the caller's zeroed ``vec4`` (1,), ``vec4i`` (1,) and ``int32`` (1,) arrays (default: made here).
    """
    if zeros is None:
        zeros = (wp.zeros(1, dtype=wp.vec4, device=device), wp.zeros(1, dtype=wp.vec4i, device=device),
                 wp.array(np.zeros(1, np.int32), dtype=wp.int32, device=device))
    z4, z4i, prims = zeros
    return BvhNodes(z4, z4, z4i, z4i, prims, 0, 0)
