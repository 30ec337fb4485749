"""A BVH built on the device by PLOC (Meister & Bittner 2018), in Warp's node layout.

Stages (every one a Warp kernel, so the same code builds on the CPU and on CUDA):

1. Morton keys of the box centres, sorted (``morton.py``: 63-bit keys, cubic cells);
   the sorted boxes become the initial clusters, leaf ``s`` holding sorted box ``s``.
2. PLOC iterations until one cluster is left: each cluster finds its nearest neighbour
   among the ``radius`` clusters on either side in the sorted order, by the surface area
   of the merged box (ties broken by a fixed total order on pairs, so that the
   closest pair is always mutual and equal boxes pair up (2k, 2k + 1) instead of
   chaining); mutual pairs merge into a new node that takes the place of the lower
   cluster; an exclusive scan compacts the clusters, keeping their order. Per
   iteration: 3 kernels and one scan; the cluster count stays on the device. The host
   launches the passes ahead of the count it has read (``ploc_ahead.py``: each count
   copied asynchronously to pinned memory, no wait per pass), or with ``ahead=0`` reads it
   every ``SYNC_EVERY`` iterations (to size the launches and stop).
   Each new node records, from its children (created in earlier iterations), its
   number of primitives, its SAH cost with the collapse decision (a subtree of at most
   ``max_leaf`` primitives becomes one leaf where ``C_I n A <= C_T A + cost(children)``,
   areas of the boxes), its node count and height after collapsing.
3. Layout: every node climbs to the root once, summing the sizes of the left siblings
   on its path: its depth-first (pre-order) position and its first primitive slot
   (leaves in depth-first order); nodes below a collapsed leaf are dropped. One kernel
   then writes Warp's packed nodes (``bvh_nodes.BvhNodes``: xyz + child or primitive
   range, bit 31 of ``lower`` flagging a leaf), the primitive of each slot and the
   parent of each node (for ``refit.FusedRefit``). The pre-order numbering makes the
   result independent of the order in which the device's threads allocated node ids.

Costs: unit ``C_T = C_I = 1`` by default (``costs``). Defaults :data:`RADIUS` 2 and
:data:`MAX_LEAF` 4 come from the counts of ``benchmarks/builder_quality.py``.

References:
    Meister & Bittner 2018, "Parallel Locally-Ordered Clustering for Bounding Volume
    Hierarchy Construction", IEEE TVCG 24(3); Walter et al. 2008, "Fast agglomerative
    clustering for rendering" (the nearest-neighbour merge rule); MacDonald & Booth
    1990 (the SAH); Karras 2012 (bottom-up quantities from atomically ordered children).
"""

from __future__ import annotations

import math
import os

import numpy as np
import warp as wp

from rayd.engine.bvh_nodes import BvhNodes
from rayd.engine.morton import BoxKeys, sorted_box_keys
from rayd.engine import ploc_ahead
from rayd.engine.ploc_ahead import run_ahead, scan_int
from rayd.engine.ploc_emit import emit_tree
from rayd.engine.runtime import StageTimer, carve, kept_launch, launch_once

wp.set_module_options({"enable_backward": False})

#: Neighbours searched on either side of a cluster. Meister & Bittner use 16-25; on rayd's
#: terrain, sphere and dragon a radius of 2 gives the fewest nodes visited per closest-hit
#: ray (within 1-9 % of Warp's host SAH tree, against 17-21 % at 16; benchmarks/README.md, #18).
RADIUS = int(os.environ.get("RAYD_PLOC_RADIUS", "2"))

#: Most primitives a leaf of the built tree holds (collapsing by SAH; 1 = no collapse).
MAX_LEAF = int(os.environ.get("RAYD_PLOC_LEAF_SIZE", "4"))

#: SAH costs ``(C_T, C_I)`` of a node and of a primitive test (they decide the leaf collapse).
COSTS = (1.0, 1.0)

#: PLOC passes between two host reads of the cluster count (the loop's only host synchronisation).
SYNC_EVERY = int(os.environ.get("RAYD_PLOC_SYNC_EVERY", "4"))

#: Clusters left (at most, as last read) when one thread finishes the passes in one launch (the
#: same passes, so the same tree; the last passes are launch-bound). 0 (default): never.
TAIL = int(os.environ.get("RAYD_PLOC_TAIL", "0"))

#: 1: each pass finds the nearest neighbours and the survivors in one kernel (a thread also
#: recomputes its neighbour's nearest neighbour: twice the search, one launch and one pass over
#: ``nearest`` fewer; the same tree). 0 (default): a kernel each.
FUSED_KEEP = int(os.environ.get("RAYD_PLOC_FUSED_KEEP", "0"))

#: Benchmarks only (``benchmarks/h200/builders.py --stages``): a dict to receive synchronised stage
#: times in ms (``keys``, ``passes_large`` / ``passes_mid`` / ``passes_small``: groups of passes
#: starting from more than 65,536 / more than 1,024 / at most 1,024 clusters, ``tail``, ``layout``,
#: ``emit``), or ``None`` (the default: no synchronisation is added).
PROFILE: dict | None = None

#: Emit the pair nodes, leaf corners and refit leaf list in the build (``triangles`` given) instead
#: of ``PairNodes``' and ``FusedRefit``'s passes over the finished tree (the same arrays, fewer
#: launches and host reads). ``RAYD_PLOC_EMIT_PAIRS=0`` turns it off (for A/B).
EMIT_PAIRS = os.environ.get("RAYD_PLOC_EMIT_PAIRS", "1").strip() != "0"

_LEAF_BIT = wp.constant(-2147483648)  # bit 31 of an int32


@wp.func
def _half_area(lo: wp.vec3, hi: wp.vec3) -> float:
    e = wp.max(hi - lo, wp.vec3(0.0, 0.0, 0.0))
    return e[0] * e[1] + e[1] * e[2] + e[2] * e[0]


@wp.func
def _before(d: float, lo: int, hi: int, best_d: float, best_lo: int, best_hi: int) -> bool:
    """Total order on candidate pairs ``lo < hi``: area, then gap, then even ``lo`` first, then ``lo``."""
    if d != best_d:
        return d < best_d
    gap = hi - lo
    best_gap = best_hi - best_lo
    if gap != best_gap:
        return gap < best_gap
    if (lo & 1) != (best_lo & 1):
        return (lo & 1) == 0
    return lo < best_lo


@wp.kernel
def _leaves_kernel(lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3), order: wp.array(dtype=wp.int32),
                   c_i: float, cl_node: wp.array(dtype=wp.int32), cl_lo: wp.array(dtype=wp.vec3),
                   cl_hi: wp.array(dtype=wp.vec3), node_lo: wp.array(dtype=wp.vec3), node_hi: wp.array(dtype=wp.vec3),
                   parent: wp.array(dtype=wp.int32), leaves: wp.array(dtype=wp.int32), cost: wp.array(dtype=float),
                   size: wp.array(dtype=wp.int32), height: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    s = wp.tid()
    lo = lowers[order[s]]
    hi = uppers[order[s]]
    cl_node[s] = s
    cl_lo[s] = lo
    cl_hi[s] = hi
    node_lo[s] = lo
    node_hi[s] = hi
    parent[s] = -1
    leaves[s] = 1
    cost[s] = c_i * _half_area(lo, hi)
    size[s] = 1
    height[s] = 1
    flag[s] = 1


@wp.func
def _nearest(cl_lo: wp.array(dtype=wp.vec3), cl_hi: wp.array(dtype=wp.vec3), count: int, radius: int, i: int) -> int:
    """The nearest neighbour of cluster ``i`` among ``i - radius .. i + radius`` (``-1`` if alone)."""
    lo_i = cl_lo[i]
    hi_i = cl_hi[i]
    best_d = float(0.0)
    best_lo = int(-1)
    best_hi = int(-1)
    best = int(-1)
    for j in range(wp.max(0, i - radius), wp.min(count, i + radius + 1)):
        if j != i:
            d = _half_area(wp.min(lo_i, cl_lo[j]), wp.max(hi_i, cl_hi[j]))
            a = wp.min(i, j)
            b = wp.max(i, j)
            if best < 0 or _before(d, a, b, best_d, best_lo, best_hi):
                best_d = d
                best_lo = a
                best_hi = b
                best = j
    return best


@wp.kernel
def _nearest_kernel(cl_lo: wp.array(dtype=wp.vec3), cl_hi: wp.array(dtype=wp.vec3), counts: wp.array(dtype=wp.int32),
                    radius: int, nearest: wp.array(dtype=wp.int32)):
    i = wp.tid()
    count = int(counts[0])
    if i < count:
        nearest[i] = wp.int32(_nearest(cl_lo, cl_hi, count, radius, i))


@wp.kernel
def _keep_kernel(counts: wp.array(dtype=wp.int32), nearest: wp.array(dtype=wp.int32), keep: wp.array(dtype=wp.int32)):
    """1 for a cluster that survives the merge (no mutual neighbour, or the lower of a mutual pair); 0 past the end."""
    i = wp.tid()
    count = int(counts[0])
    if i >= count:
        keep[i] = 0
    elif count == 1:
        keep[i] = 1
    else:
        j = int(nearest[i])
        keep[i] = wp.where(int(nearest[j]) == i and j < i, 0, 1)


@wp.kernel
def _nearest_keep_kernel(cl_lo: wp.array(dtype=wp.vec3), cl_hi: wp.array(dtype=wp.vec3),
                         counts: wp.array(dtype=wp.int32), radius: int, nearest: wp.array(dtype=wp.int32),
                         keep: wp.array(dtype=wp.int32)):
    """``_nearest_kernel`` and ``_keep_kernel`` in one (the neighbour's nearest neighbour recomputed)."""
    i = wp.tid()
    count = int(counts[0])
    if i >= count:
        keep[i] = 0
        return
    j = _nearest(cl_lo, cl_hi, count, radius, i)
    nearest[i] = wp.int32(j)
    if count == 1:
        keep[i] = 1
    else:
        keep[i] = wp.where(_nearest(cl_lo, cl_hi, count, radius, j) == i and j < i, 0, 1)


@wp.func
def _make_node(node: int, a: int, b: int, lo: wp.vec3, hi: wp.vec3, max_leaf: int, c_t: float, c_i: float,
               node_lo: wp.array(dtype=wp.vec3), node_hi: wp.array(dtype=wp.vec3), child: wp.array(dtype=wp.vec2i),
               parent: wp.array(dtype=wp.int32), leaves: wp.array(dtype=wp.int32), cost: wp.array(dtype=float),
               size: wp.array(dtype=wp.int32), height: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    """Node ``node`` over children ``a``, ``b`` (box ``lo``..``hi``): links, counts, SAH cost and collapse decision."""
    n = int(node_lo.shape[0] + 1) // 2
    node_lo[node] = lo
    node_hi[node] = hi
    child[node - n] = wp.vec2i(a, b)
    parent[a] = node
    parent[b] = node
    parent[node] = -1
    prims = leaves[a] + leaves[b]
    leaves[node] = prims
    area = _half_area(lo, hi)
    split = c_t * area + cost[a] + cost[b]
    as_leaf = c_i * float(prims) * area
    if prims <= max_leaf and as_leaf <= split:
        cost[node] = as_leaf
        size[node] = 1
        height[node] = 1
        flag[node] = 1
    else:
        cost[node] = split
        size[node] = 1 + size[a] + size[b]
        height[node] = 1 + wp.max(height[a], height[b])
        flag[node] = 0


@wp.kernel
def _merge_kernel(
    counts: wp.array(dtype=wp.int32), max_leaf: int, c_t: float, c_i: float,
    nearest: wp.array(dtype=wp.int32), keep: wp.array(dtype=wp.int32), position: wp.array(dtype=wp.int32),
    cl_node: wp.array(dtype=wp.int32), cl_lo: wp.array(dtype=wp.vec3), cl_hi: wp.array(dtype=wp.vec3),
    next_id: wp.array(dtype=wp.int32), next_count: wp.array(dtype=wp.int32),
    out_node: wp.array(dtype=wp.int32), out_lo: wp.array(dtype=wp.vec3), out_hi: wp.array(dtype=wp.vec3),
    node_lo: wp.array(dtype=wp.vec3), node_hi: wp.array(dtype=wp.vec3), child: wp.array(dtype=wp.vec2i),
    parent: wp.array(dtype=wp.int32), leaves: wp.array(dtype=wp.int32), cost: wp.array(dtype=float),
    size: wp.array(dtype=wp.int32), height: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    count = int(counts[0])
    if i >= count:
        return
    if i == count - 1:
        next_count[0] = position[i] + keep[i]
    if keep[i] == 0:
        return
    p = position[i]
    j = int(nearest[i])
    lo = cl_lo[i]
    hi = cl_hi[i]
    node = cl_node[i]
    if count > 1 and int(nearest[j]) == i:  # mutual, and i < j: a new node in i's place
        a = node
        b = cl_node[j]
        lo = wp.min(lo, cl_lo[j])
        hi = wp.max(hi, cl_hi[j])
        node = wp.atomic_add(next_id, 0, 1)
        _make_node(node, a, b, lo, hi, max_leaf, c_t, c_i, node_lo, node_hi, child, parent, leaves, cost, size,
                   height, flag)
    out_node[p] = node
    out_lo[p] = lo
    out_hi[p] = hi


@wp.kernel
def _tail_kernel(
    counts: wp.array(dtype=wp.int32), radius: int, max_leaf: int, c_t: float, c_i: float,
    nearest: wp.array(dtype=wp.int32), cl_node: wp.array(dtype=wp.int32), cl_lo: wp.array(dtype=wp.vec3),
    cl_hi: wp.array(dtype=wp.vec3), next_id: wp.array(dtype=wp.int32),
    node_lo: wp.array(dtype=wp.vec3), node_hi: wp.array(dtype=wp.vec3), child: wp.array(dtype=wp.vec2i),
    parent: wp.array(dtype=wp.int32), leaves: wp.array(dtype=wp.int32), cost: wp.array(dtype=float),
    size: wp.array(dtype=wp.int32), height: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32),
):
    """The remaining PLOC passes in one thread (the same passes, so the same tree), clusters compacted in place."""
    count = int(counts[0])
    while count > 1:
        for i in range(count):
            nearest[i] = wp.int32(_nearest(cl_lo, cl_hi, count, radius, i))
        p = int(0)
        for i in range(count):
            j = int(nearest[i])
            if int(nearest[j]) == i and j < i:
                continue  # merged into j
            lo = cl_lo[i]
            hi = cl_hi[i]
            node = cl_node[i]
            if int(nearest[j]) == i:
                lo = wp.min(lo, cl_lo[j])
                hi = wp.max(hi, cl_hi[j])
                made = int(next_id[0])
                next_id[0] = made + 1
                _make_node(made, node, cl_node[j], lo, hi, max_leaf, c_t, c_i, node_lo, node_hi, child, parent,
                           leaves, cost, size, height, flag)
                node = made
            cl_node[p] = node  # p <= i < j: nothing still to be read is overwritten
            cl_lo[p] = lo
            cl_hi[p] = hi
            p += 1
        count = p
    counts[0] = count


class PlocBvh:
    """A PLOC BVH over ``n`` boxes (see the module docstring), built on the boxes' device.

    Args:
        lowers, uppers: ``wp.array(dtype=wp.vec3)`` (n,), the boxes (n >= 1).
        stream: the stream to build on (``None`` on the CPU).
        max_leaf: most primitives per leaf, 1 to 8 (default :data:`MAX_LEAF`).
        radius: neighbours searched on either side (default :data:`RADIUS`).
        costs: ``(C_T, C_I)``, the SAH costs of a node and of a primitive test (default :data:`COSTS`).
        sync_every: passes between host reads of the cluster count (default :data:`SYNC_EVERY`).
        tail: once at most this many clusters are left (as last read), one thread finishes
            the passes in one launch (default :data:`TAIL`; 0: never).
        fused_keep: one kernel for the nearest neighbours and the survivors (default :data:`FUSED_KEEP`).
        ahead: passes the host may launch ahead of the newest cluster count it has read, with no
            wait per pass (``ploc_ahead.py``; default ``ploc_ahead.AHEAD``); 0: a blocking read of
            the count every ``sync_every`` passes. The same tree either way.
        triangles: ``(points, indices, face_base)`` when the boxes are these triangles' (as in
            ``TriangleScene``): the build then also emits the child-pair nodes and leaf corners of
            ``pair_nodes.PairNodes`` and the fused refit's leaf list (``ploc_emit.py``), unless
            :data:`EMIT_PAIRS` is off.

    Attributes:
        nodes: :class:`rayd.engine.bvh_nodes.BvhNodes` of the tree (root 0, pre-order),
            owned by this object.
        parents: int32 (num_nodes,), parent of each node (``-1`` at the root).
        num_nodes: nodes of the tree.
        pairs: ``ploc_emit.EmittedPairs`` (``number``, ``boxes``, ``links``, ``tris``, ``root``) or ``None``.
        leaf_nodes: int32 (leaves,), the node of each leaf in slot order (with ``pairs``), or ``None``.
        iterations: PLOC passes launched (up to ``ahead`` or ``sync_every - 1`` after the last merge);
            launches: kernel launches of the build (copies and each scan or sort counted as one).

    Raises:
        ValueError: if there are no boxes or ``max_leaf`` is not in 1..8.
    """

    def __init__(self, lowers: wp.array, uppers: wp.array, stream: wp.Stream | None = None, *,
                 max_leaf: int | None = None, radius: int | None = None,
                 costs: tuple[float, float] | None = None, sync_every: int | None = None,
                 tail: int | None = None, triangles: tuple | None = None,
                 fused_keep: bool | None = None, ahead: int | None = None, _lag: int = 0) -> None:
        n = lowers.shape[0]
        max_leaf = MAX_LEAF if max_leaf is None else int(max_leaf)
        radius = RADIUS if radius is None else int(radius)
        sync_every = max(1, SYNC_EVERY if sync_every is None else int(sync_every))
        tail = TAIL if tail is None else int(tail)
        fused_keep = bool(FUSED_KEEP if fused_keep is None else fused_keep)
        ahead = ploc_ahead.AHEAD if ahead is None else int(ahead)
        if n < 1:
            raise ValueError("rayd.engine.PlocBvh(): needs at least one box")
        if not 1 <= max_leaf <= 8:
            raise ValueError(f"rayd.engine.PlocBvh(): 'max_leaf' must be in 1..8, got {max_leaf}")
        if radius < 1:
            raise ValueError(f"rayd.engine.PlocBvh(): 'radius' must be at least 1, got {radius}")
        dev = lowers.device
        self.device = dev
        costs = COSTS if costs is None else costs
        c_t, c_i = float(costs[0]), float(costs[1])
        m = 2 * n - 1
        stages = StageTimer(PROFILE, dev)
        # The build's scratch (keys, clusters, per-node build data, the passes' arrays and counters, the
        # layout's) carved from one allocation, freed when the build returns (as the separate arrays were).
        i32, v3 = wp.int32, wp.vec3
        scratch = carve(dev, [*BoxKeys.parts(n), (i32, n), (i32, n), (v3, n), (v3, n), (v3, n), (v3, n), (v3, m),
                              (v3, m), (wp.vec2i, max(1, n - 1)), *[(i32, m)] * 2, (float, m), *[(i32, m)] * 3,
                              *[(i32, n)] * 3, *[(i32, 1)] * 3, *[(i32, m)] * 4, (i32, 4)])
        keys = BoxKeys(n, dev, scratch[0:4])
        (cl_node0, cl_node1, cl_lo0, cl_lo1, cl_hi0, cl_hi1, node_lo, node_hi, child, parent, leaves, cost, size,
         height, flag, nearest, keep, position, next_id, count0, count1) = scratch[4:25]
        layout_scratch = scratch[25:30]  # (emit_tree's pre, slot, inner_before, leaves_before, info)
        launches = sorted_box_keys(lowers, uppers, keys, stream)
        order = keys.order[:n]
        cl_node, cl_lo, cl_hi = [cl_node0, cl_node1], [cl_lo0, cl_lo1], [cl_hi0, cl_hi1]
        launch_once(_leaves_kernel, n, [lowers, uppers, order, c_i, cl_node[0], cl_lo[0], cl_hi[0], node_lo,
                                        node_hi, parent, leaves, cost, size, height, flag], dev, stream)
        launches += 1
        stages.mark("keys")
        next_id.fill_(n)  # (fills: no host-to-device copy)
        count0.fill_(n)
        counts = [count0, count1]
        # The cluster count stays on the device: each pass reads it there (threads past it return),
        # launched over the count last read on the host, which reads it every ``sync_every`` passes
        # (passes after the last merge change nothing).
        count, src, iterations = n, 0, 0
        limit = 64 + 8 * max(1, math.ceil(math.log2(n)))
        # The three kernels of a pass, recorded once per parity of the double buffers (their
        # arguments are packed once: Warp's per-launch packing costs more host time than a
        # small pass costs on the GPU); each pass only resizes them. The commands are kept for the
        # process (runtime.kept_launch) and re-bound to this build's arrays (less host time than
        # recording them again).
        passes = []
        for a in range(2 if n > 1 else 0):
            b = 1 - a
            if fused_keep:
                before = (kept_launch(_nearest_keep_kernel, a, n, [cl_lo[a], cl_hi[a], counts[a], radius, nearest,
                                                                   keep], dev),)
            else:
                before = (kept_launch(_nearest_kernel, a, n, [cl_lo[a], cl_hi[a], counts[a], radius, nearest], dev),
                          kept_launch(_keep_kernel, a, n, [counts[a], nearest, keep], dev))
            passes.append((
                before,
                kept_launch(_merge_kernel, a, n,
                            [counts[a], max_leaf, c_t, c_i, nearest, keep, position, cl_node[a], cl_lo[a], cl_hi[a],
                             next_id, counts[b], cl_node[b], cl_lo[b], cl_hi[b], node_lo, node_hi, child, parent,
                             leaves, cost, size, height, flag], dev),
            ))
        def launch_tail(at: int) -> None:
            wp.launch(_tail_kernel, 1, [counts[at], radius, max_leaf, c_t, c_i, nearest, cl_node[at], cl_lo[at],
                                        cl_hi[at]],
                      [next_id, node_lo, node_hi, child, parent, leaves, cost, size, height, flag], device=dev,
                      stream=stream)

        if ahead > 0 and n > 1:
            iterations, made, src = run_ahead(passes, counts, keep, position, n, limit, tail, launch_tail, stream,
                                              dev, ahead, _lag)
            launches += made
            stages.mark("passes")
            count = 1
        while count > 1:
            if count <= tail:
                launch_tail(src)
                launches += 1
                stages.mark("tail")
                break
            if iterations >= limit:  # cannot happen with the pair order above; guards the loop
                raise RuntimeError(f"rayd.engine.PlocBvh(): no convergence after {iterations} iterations")
            for cmd in passes[0][0] + passes[1][0] + (passes[0][1], passes[1][1]):
                cmd.set_dim(count)
            keep_now, position_now = keep[:count], position[:count]
            for _ in range(sync_every):
                before, merge = passes[src]
                for cmd in before:
                    cmd.launch(stream)
                scan_int(keep_now, position_now, count)
                merge.launch(stream)
                launches += 2 + len(before)
                src = 1 - src
                iterations += 1
            group = "passes_large" if count > 65536 else ("passes_mid" if count > 1024 else "passes_small")
            count = int(counts[src].numpy()[0])
            stages.mark(group)
        root = m - 1  # the last node made (the only one of the last iteration); leaf 0 when n == 1
        tree = emit_tree(n, order, child, parent, leaves, size, height, flag, node_lo, node_hi, root, stages,
                         stream, triangles=triangles if EMIT_PAIRS else None, scratch=layout_scratch)
        self.primitives, self.parents, self.num_nodes, self.nodes = (tree.primitives, tree.parents, tree.num_nodes,
                                                                     tree.nodes)
        self.pairs, self.leaf_nodes, self._keep = tree.pairs, tree.leaf_nodes, tree
        self.iterations = iterations
        self.launches = launches + tree.launches

def tree_arrays(nodes: BvhNodes) -> dict[str, np.ndarray]:
    """Host copies of a tree (for tests and benchmarks): ``lo``, ``hi`` (M, 3), ``left``, ``right`` (M,)
    (children, or ``first``/``end`` slots of a leaf), ``leaf`` (M,) bool, ``primitives`` (F,)."""
    low = nodes.lowers.numpy()
    up = nodes.uppers.numpy()
    li = nodes.lower_index.numpy()[:, 3]
    ui = nodes.upper_index.numpy()[:, 3]
    return {"lo": low[:, :3], "hi": up[:, :3], "left": li & 0x7FFFFFFF, "right": ui & 0x7FFFFFFF, "leaf": li < 0,
            "primitives": nodes.primitives.numpy(), "root": nodes.root}
