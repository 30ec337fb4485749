"""The last stage of ``ploc.PlocBvh``: the finished PLOC tree laid out in Warp's node layout and,
for a triangle scene, rayd's child-pair nodes and the fused refit's leaf list in the same pass.

Every node climbs to the root once (``_layout_kernel``), summing over the left siblings on its
path (a node ``s`` of the collapsed tree has ``size[s]`` nodes, so ``(size[s] + 1) / 2``
leaves and ``(size[s] - 1) / 2`` inner nodes, the tree being full binary):

- its pre-order position (the Warp node it becomes; ``-1`` below a collapsed leaf);
- its first primitive slot (leaves in pre-order, the slots of ``primitives``);
- the inner nodes before it in pre-order (its ancestors plus the left siblings' inner nodes):
  for an inner node, its number in ``pair_nodes.PairNodes`` (which numbers inner nodes by an
  exclusive scan over Warp's node order: the same value);
- the leaves before it: for a leaf, its entry in ``refit.FusedRefit``'s leaf list (leaves in
  node order, as that class's scan of leaf flags gives).

One kernel (``_emit_kernel``) then writes each node's Warp node, its parent, its pair-node
number and, for an inner node, its pair node (both children's boxes and refs), so that
``PairNodes`` and ``FusedRefit`` need none of their own passes, scans or host reads; the leaf
corners are written by ``pair_nodes``' own slot kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import warp as wp

from rayd.engine.bvh_nodes import BvhNodes
from rayd.engine.pair_nodes import _leaf_tris_kernel
from rayd.engine.runtime import alias, carve, launch_once, read_back

wp.set_module_options({"enable_backward": False})

_LEAF_BIT = wp.constant(-2147483648)  # bit 31 of an int32


@wp.kernel
def _layout_kernel(n: int, order: wp.array(dtype=wp.int32), child: wp.array(dtype=wp.vec2i),
                   parent: wp.array(dtype=wp.int32), leaves: wp.array(dtype=wp.int32), size: wp.array(dtype=wp.int32),
                   flag: wp.array(dtype=wp.int32), pre: wp.array(dtype=wp.int32), slot: wp.array(dtype=wp.int32),
                   inner_before: wp.array(dtype=wp.int32), leaves_before: wp.array(dtype=wp.int32),
                   primitives: wp.array(dtype=wp.int32)):
    """Pre-order position (``-1`` below a collapsed leaf), first slot, inner nodes and leaves before node ``v``."""
    v = wp.tid()
    position = int(0)
    first = int(0)
    inner = int(0)
    before = int(0)
    kept = int(1)
    c = v
    p = int(parent[c])
    while p >= 0:
        if flag[p] != 0:
            kept = 0
        left = child[p - n][0]
        position += 1
        inner += 1
        if c != left:
            position += size[left]
            first += leaves[left]
            inner += (size[left] - 1) // 2
            before += (size[left] + 1) // 2
        c = p
        p = int(parent[c])
    pre[v] = wp.where(kept != 0, position, -1)
    slot[v] = first
    inner_before[v] = inner
    leaves_before[v] = before
    if v < n:
        primitives[first] = order[v]


@wp.func
def _pair_ref(c: int, flag: wp.array(dtype=wp.int32), slot: wp.array(dtype=wp.int32),
              leaves: wp.array(dtype=wp.int32), inner_before: wp.array(dtype=wp.int32)) -> int:
    """``pair_nodes``' ref of node ``c``: its inner-node number, or ``-1 - (8 first + count - 1)`` for a leaf."""
    if flag[c] != 0:
        return -1 - (slot[c] * 8 + wp.clamp(leaves[c], 1, 8) - 1)
    return inner_before[c]


@wp.kernel
def _emit_kernel(n: int, node_lo: wp.array(dtype=wp.vec3), node_hi: wp.array(dtype=wp.vec3),
                 child: wp.array(dtype=wp.vec2i), parent: wp.array(dtype=wp.int32), leaves: wp.array(dtype=wp.int32),
                 flag: wp.array(dtype=wp.int32), pre: wp.array(dtype=wp.int32), slot: wp.array(dtype=wp.int32),
                 inner_before: wp.array(dtype=wp.int32), leaves_before: wp.array(dtype=wp.int32), pairs: int,
                 lower_f: wp.array(dtype=float), upper_f: wp.array(dtype=float), lower_i: wp.array(dtype=wp.int32),
                 upper_i: wp.array(dtype=wp.int32), parents_out: wp.array(dtype=wp.int32),
                 number: wp.array(dtype=wp.int32), leaf_nodes: wp.array(dtype=wp.int32),
                 boxes: wp.array(dtype=wp.vec4), links: wp.array(dtype=wp.vec4i)):
    """Warp's packed node ``pre[v]`` from node ``v`` and its parent; with ``pairs``: its pair-node number,
    its leaf-list entry (a leaf) or its pair node (an inner node)."""
    v = wp.tid()
    k = int(pre[v])
    if k < 0:
        return
    lo = node_lo[v]
    hi = node_hi[v]
    for a in range(3):
        lower_f[4 * k + a] = lo[a]
        upper_f[4 * k + a] = hi[a]
    p = int(parent[v])
    parents_out[k] = wp.where(p >= 0, pre[wp.max(p, 0)], -1)
    if flag[v] != 0:
        first = int(slot[v])
        lower_i[4 * k + 3] = first | _LEAF_BIT
        upper_i[4 * k + 3] = (first + leaves[v]) | _LEAF_BIT
        if pairs != 0:
            number[k] = inner_before[v]
            leaf_nodes[leaves_before[v]] = k
        return
    ab = child[v - n]
    lower_i[4 * k + 3] = pre[ab[0]]
    upper_i[4 * k + 3] = pre[ab[1]]
    if pairs != 0:
        q = inner_before[v]
        number[k] = q
        la = node_lo[ab[0]]
        lb = node_hi[ab[0]]
        ra = node_lo[ab[1]]
        rb = node_hi[ab[1]]
        boxes[4 * q] = wp.vec4(la[0], la[1], la[2], lb[0])
        boxes[4 * q + 1] = wp.vec4(lb[1], lb[2], ra[0], ra[1])
        boxes[4 * q + 2] = wp.vec4(ra[2], rb[0], rb[1], rb[2])
        links[4 * q + 3] = wp.vec4i(_pair_ref(ab[0], flag, slot, leaves, inner_before),
                                    _pair_ref(ab[1], flag, slot, leaves, inner_before), 0, 0)


@wp.kernel
def _info_kernel(root: int, size: wp.array(dtype=wp.int32), height: wp.array(dtype=wp.int32),
                 leaves: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32), info: wp.array(dtype=wp.int32)):
    info[0] = size[root]
    info[1] = height[root]
    info[2] = flag[root]
    info[3] = leaves[root]


@dataclass
class EmittedPairs:
    """What ``pair_nodes.PairNodes`` holds, written by the PLOC build (see the module docstring).

    number: int32 (num_nodes,), inner nodes before each node in Warp's order (the pair number of an inner node).
    boxes, links: ``wp.vec4`` / ``wp.vec4i`` views of the pair nodes (4 entries per inner node, at least 4).
    tris: ``wp.vec4`` (3 F,), the corners of the triangle in each slot.
    root: the root's ref.
    """

    number: wp.array
    boxes: wp.array
    links: wp.array
    tris: wp.array
    root: int


@dataclass
class EmittedTree:
    """The arrays :func:`emit_tree` made (owned here; ``nodes`` views them)."""

    nodes: BvhNodes
    primitives: wp.array
    parents: wp.array
    num_nodes: int
    pairs: EmittedPairs | None
    leaf_nodes: wp.array | None
    launches: int
    storage: tuple


def emit_tree(n: int, order: wp.array, child: wp.array, parent: wp.array, leaves: wp.array, size: wp.array,
              height: wp.array, flag: wp.array, node_lo: wp.array, node_hi: wp.array, root: int, stages,
              stream: wp.Stream | None, triangles: tuple | None = None, scratch: list | None = None) -> EmittedTree:
    """Lay out the finished PLOC tree (its per-node build arrays, ``m = 2 n - 1`` nodes, root ``root``).

    Args:
        n: primitives; order: int32 (n,), primitive of each sorted leaf; child: ``vec2i`` (n - 1,);
            parent, leaves, size, height, flag: int32 (m,); node_lo, node_hi: ``vec3`` (m,)
            (``ploc.PlocBvh``'s build arrays).
        root: the root node; stages: a ``runtime.StageTimer``; stream: the stream (``None`` on the CPU).
        triangles: ``(points, indices, face_base)`` to also emit the pair nodes, leaf corners and leaf list.
        scratch: the layout's int32 scratch, freed by the caller after the build: ``pre``, ``slot``,
            ``inner_before``, ``leaves_before`` (m,) and ``info`` (4,) (default: allocated here).

    Returns:
        An :class:`EmittedTree`. One host read (node count, height, root's leaf flag and size).
    """
    dev = order.device
    m = 2 * n - 1
    primitives = wp.empty(n, dtype=wp.int32, device=dev)
    if scratch is None:
        scratch = [*(wp.empty(m, dtype=wp.int32, device=dev) for _ in range(4)), wp.empty(4, dtype=wp.int32,
                                                                                              device=dev)]
    pre, slot, inner_before, leaves_before, info = scratch
    launch_once(_layout_kernel, m, [n, order, child, parent, leaves, size, flag, pre, slot, inner_before,
                                    leaves_before, primitives], dev, stream)
    launch_once(_info_kernel, 1, [root, size, height, leaves, flag, info], dev, stream)
    num_nodes, depth, root_leaf, root_prims = (int(x) for x in read_back(stream, info)[0])
    stages.mark("layout")
    inner = (num_nodes - 1) // 2
    # The tree's arrays (kept with it) from one allocation (runtime.carve: about 10 us of host time fewer per
    # array); every element is written by the emit and corner kernels below, but the pair boxes of a
    # tree with no inner node (zeroed, as before).
    parts = [(float, 4 * num_nodes), (float, 4 * num_nodes), (wp.int32, num_nodes)]
    if triangles is not None:
        parts += [(wp.int32, num_nodes), (wp.int32, num_nodes - inner), (wp.vec4, 4 * max(1, inner)),
                  (wp.vec4, 3 * n)]
    arrays = carve(dev, parts)
    lower, upper, parents = arrays[:3]
    lower_i, upper_i = alias(lower, wp.int32), alias(upper, wp.int32)
    pairs = leaf_nodes = None
    launches = 3
    if triangles is not None:
        number, leaf_nodes, boxes, tris = arrays[3:]
        if inner == 0:
            boxes.zero_()
        links = alias(boxes, wp.vec4i)
        root_ref = -1 - (min(8, max(1, root_prims)) - 1) if root_leaf else 0
        pairs = EmittedPairs(number, boxes, links, tris, root_ref)
        points, indices, face_base = triangles
        launch_once(_leaf_tris_kernel, n, [points, indices, face_base, primitives, pairs.tris], dev, stream)
        launches += 1
        out = [number, leaf_nodes, boxes, links]
    else:
        dummy = wp.empty(1, dtype=wp.int32, device=dev)
        dummy4 = wp.empty(1, dtype=wp.vec4, device=dev)
        out = [dummy, dummy, dummy4, wp.array(ptr=dummy4.ptr, dtype=wp.vec4i, shape=(1,), device=dev)]
        keep_dummy = (dummy, dummy4)
    launch_once(_emit_kernel, m, [n, node_lo, node_hi, child, parent, leaves, flag, pre, slot, inner_before,
                                  leaves_before, int(triangles is not None), lower, upper, lower_i, upper_i, parents,
                                  *out], dev, stream)
    stages.mark("emit")
    nodes = BvhNodes(
        lowers=alias(lower, wp.vec4),
        uppers=alias(upper, wp.vec4),
        lower_index=alias(lower, wp.vec4i),
        upper_index=alias(upper, wp.vec4i),
        primitives=primitives,
        root=0,
        depth=depth,
    )
    storage = (lower, upper) if triangles is not None else (lower, upper, keep_dummy)
    return EmittedTree(nodes, primitives, parents, num_nodes, pairs, leaf_nodes, launches, storage)
