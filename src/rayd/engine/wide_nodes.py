"""rayd's 4-wide node layout of a triangle BVH, collapsed on the device from the child-pair nodes.

Each wide node holds up to four children, stored as eight rows of four (128 bytes, one
aligned line; the walk reads seven of them with 128-bit loads), structure of arrays over
the children ``j = 0..3``:

- ``data[8 w + 0]`` = ``lo.x`` of the four children, ``data[8 w + 1]`` = ``hi.x``,
- ``data[8 w + 2]``, ``data[8 w + 3]`` = ``lo.y``, ``hi.y``; ``data[8 w + 4]``, ``data[8 w + 5]`` = ``lo.z``, ``hi.z``,
- ``links[8 w + 6]`` = the children's refs (int32, the same memory): ``r >= 0`` wide node ``r``,
  ``r < 0`` a leaf encoded as in ``pair_nodes.py`` (same slots, same leaf triangles),
- ``links[8 w + 7]`` = where each child's box comes from, ``2 k + side`` (child ``side`` of pair
  node ``k``; -1 for an empty slot): the refit copies the boxes again from the pair nodes.

An empty slot has the box ``lo = +1e38``, ``hi = -1e38``: a slab test that takes the
near plane by the sign of the ray's direction (``wide_walk.py``) rejects it on every
axis; its ref repeats child 0's so that even an accepted empty slot is harmless.

Collapse: ``"sah"`` (the default, ``RAYD_WIDE_COLLAPSE``) chooses which pair nodes become wide
nodes by the dynamic programme of Ylitie, Karras & Laine 2017 ("Efficient incoherent ray
traversal on GPUs through compressed wide BVHs", HPG, sec. 4), here with the binary tree's
leaves kept as they are: bottom-up, each pair node ``n`` gets ``F(n, m)``, the least total
surface area of the wide nodes that represent its subtree as at most ``m`` children of a
wide node (``m = 1``: ``n`` itself a wide node, ``A(n) + D(n, 4)``; else the better of
``F(n, m - 1)`` and ``D(n, m)``, the best split of ``m`` slots between its two children), which
is proportional to the wide nodes a uniformly random ray visits (each visit tests all four
slots at once, and the leaves are the same in every collapse). One launch climbs the pair
tree with a counter per node (as the fused refit does); the wide nodes are then made top down,
level by level (two launches per level, ``depth`` levels, no host read in between), each
following the programme's choices; children of one wide node are numbered contiguously.
``"greedy"``: a wide node starts with the two children of its pair node and opens the inner
child of largest surface area while it has fewer than four (Wald et al. 2008's rule; fills
balanced trees of odd depth badly: the last level's wide nodes get two leaves each). The boxes
are the pair nodes' (padded, see ``triangles.py``), so the wide walk tests the same boxes as
the pair walk, fewer of them.
"""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.pair_nodes import PairNodes
from rayd.engine.refit import _fence, _load_l2
from rayd.engine.runtime import alias, carve, launch_once, read_back
from rayd.engine.wide_levels import collapse_levels

wp.set_module_options({"enable_backward": False})

#: Entries of the wide walk's stack; a tree whose walk could need more keeps the pair walk.
STACK = 64
_EMPTY_LO = wp.constant(1.0e38)

#: How pair nodes are grouped into wide nodes (read when a tree is built): ``"sah"`` or ``"greedy"``.
COLLAPSES = ("sah", "greedy")
COLLAPSE = os.environ.get("RAYD_WIDE_COLLAPSE", "sah").strip().lower()
if COLLAPSE not in COLLAPSES:
    raise ValueError(f"rayd.engine: RAYD_WIDE_COLLAPSE must be one of {COLLAPSES}, got {COLLAPSE!r}")


@wp.func
def _child_box(boxes: wp.array(dtype=wp.vec4), code: int) -> tuple[wp.vec3, wp.vec3]:
    """(lo, hi) of child ``code & 1`` of pair node ``code >> 1``."""
    k = code >> 1
    if (code & 1) == 0:
        b0 = boxes[4 * k]
        b1 = boxes[4 * k + 1]
        return wp.vec3(b0[0], b0[1], b0[2]), wp.vec3(b0[3], b1[0], b1[1])
    b1 = boxes[4 * k + 1]
    b2 = boxes[4 * k + 2]
    return wp.vec3(b1[2], b1[3], b2[0]), wp.vec3(b2[1], b2[2], b2[3])


@wp.func
def _half_area(lo: wp.vec3, hi: wp.vec3) -> float:
    e = hi - lo
    return e[0] * e[1] + e[1] * e[2] + e[2] * e[0]


@wp.func
def _write_boxes(boxes: wp.array(dtype=wp.vec4), codes: wp.vec4i, w: int, data: wp.array(dtype=wp.vec4)):
    """Write the six box rows of wide node ``w`` from the pair boxes named by ``codes``."""
    lx = wp.vec4(_EMPTY_LO)
    hx = wp.vec4(-_EMPTY_LO)
    ly = wp.vec4(_EMPTY_LO)
    hy = wp.vec4(-_EMPTY_LO)
    lz = wp.vec4(_EMPTY_LO)
    hz = wp.vec4(-_EMPTY_LO)
    for j in range(4):
        if codes[j] >= 0:
            lo, hi = _child_box(boxes, codes[j])
            lx[j] = lo[0]
            hx[j] = hi[0]
            ly[j] = lo[1]
            hy[j] = hi[1]
            lz[j] = lo[2]
            hz[j] = hi[2]
    data[8 * w] = lx
    data[8 * w + 1] = hx
    data[8 * w + 2] = ly
    data[8 * w + 3] = hy
    data[8 * w + 4] = lz
    data[8 * w + 5] = hz


@wp.kernel
def _parent_kernel(links: wp.array(dtype=wp.vec4i), parent: wp.array(dtype=wp.int32)):
    k = wp.tid()
    pl = links[4 * k + 3]
    if pl[0] == pl[1]:
        return  # a slot of Warp's node array that no node reaches (its pair entry stays zero)
    if pl[0] >= 0:
        parent[pl[0]] = k
    if pl[1] >= 0:
        parent[pl[1]] = k


@wp.func
def _subtree_cost(cost: wp.array(dtype=wp.vec4), ref: int) -> wp.vec4:
    """``F(ref, m)``, m = 1..4 (a leaf costs nothing: it is in every collapse once)."""
    if ref < 0:
        return wp.vec4(0.0)
    return _load_l2(cost, ref)


@wp.func
def _split_cost(fl: wp.vec4, fr: wp.vec4, m: int) -> float:
    """``D(n, m)``: the best split of ``m`` (2..4) slots between children costing ``fl``, ``fr``."""
    best = fl[0] + fr[m - 2]
    for a in range(2, m):
        best = wp.min(best, fl[a - 1] + fr[m - a - 1])
    return best


@wp.func
def _split_slots(fl: wp.vec4, fr: wp.vec4, m: int) -> int:
    """The left child's share of the best split of ``m`` slots (fewest slots on ties)."""
    best = fl[0] + fr[m - 2]
    share = int(1)
    for a in range(2, m):
        c = fl[a - 1] + fr[m - a - 1]
        if c < best:
            best = c
            share = a
    return share


@wp.kernel
def _cost_kernel(boxes: wp.array(dtype=wp.vec4), links: wp.array(dtype=wp.vec4i), parent: wp.array(dtype=wp.int32),
                 arrive: wp.array(dtype=wp.int32), cost: wp.array(dtype=wp.vec4)):
    """``cost[k] = F(k, 1..4)`` bottom up: a thread per pair node with leaf children only climbs while
    it is the last child to arrive (a counter per node with two inner children)."""
    k = wp.tid()
    pl = links[4 * k + 3]
    if pl[0] >= 0 or pl[1] >= 0:
        return
    while True:
        pl = links[4 * k + 3]
        fl = _subtree_cost(cost, pl[0])
        fr = _subtree_cost(cost, pl[1])
        lo_l, hi_l = _child_box(boxes, 2 * k)
        lo_r, hi_r = _child_box(boxes, 2 * k + 1)
        d4 = _split_cost(fl, fr, 4)
        f1 = _half_area(wp.min(lo_l, lo_r), wp.max(hi_l, hi_r)) + d4
        f2 = wp.min(f1, _split_cost(fl, fr, 2))
        f3 = wp.min(f2, _split_cost(fl, fr, 3))
        cost[k] = wp.vec4(f1, f2, f3, wp.min(f3, d4))
        _fence()
        up = parent[k]
        if up < 0:
            return
        ul = links[4 * up + 3]
        if ul[0] >= 0 and ul[1] >= 0:
            if wp.atomic_add(arrive, up, 1) == 0:
                return  # the sibling's thread finishes the parent
            _fence()
        k = up


@wp.func
def _greedy_children(boxes: wp.array(dtype=wp.vec4), links: wp.array(dtype=wp.vec4i),
                     p: int) -> tuple[wp.vec4i, wp.vec4i, int]:
    """(box codes, refs, count) of the wide node at pair node ``p``: open the largest inner child while < 4."""
    pl = links[4 * p + 3]
    codes = wp.vec4i(2 * p, 2 * p + 1, -1, -1)
    refs = wp.vec4i(pl[0], pl[1], 0, 0)
    n = int(2)
    for _step in range(2):
        best = int(-1)
        area = float(-1.0)
        for j in range(4):
            if j < n and refs[j] >= 0:
                lo, hi = _child_box(boxes, codes[j])
                a = _half_area(lo, hi)
                if a > area:
                    area = a
                    best = j
        if best >= 0:
            q = refs[best]
            ql = links[4 * q + 3]
            codes[best] = 2 * q
            refs[best] = ql[0]
            codes[n] = 2 * q + 1
            refs[n] = ql[1]
            n += 1
    return codes, refs, n


@wp.func
def _sah_children(links: wp.array(dtype=wp.vec4i), cost: wp.array(dtype=wp.vec4),
                  p: int) -> tuple[wp.vec4i, wp.vec4i, int]:
    """(box codes, refs, count) of the wide node at pair node ``p``, as the cost programme chose."""
    pl = links[4 * p + 3]
    share = _split_slots(_subtree_cost(cost, pl[0]), _subtree_cost(cost, pl[1]), 4)
    codes = wp.vec4i(2 * p, 2 * p + 1, -1, -1)
    refs = wp.vec4i(pl[0], pl[1], 0, 0)
    budget = wp.vec4i(share, 4 - share, 0, 0)
    n = int(2)
    for _step in range(8):
        opened = int(0)
        for j in range(4):
            if opened == 0 and j < n and budget[j] > 1:
                q = refs[j]
                if q < 0:
                    budget[j] = 1
                else:
                    ql = links[4 * q + 3]
                    fl = _subtree_cost(cost, ql[0])
                    fr = _subtree_cost(cost, ql[1])
                    best = cost[q][0]
                    slots = int(1)
                    for m in range(2, budget[j] + 1):
                        c = _split_cost(fl, fr, m)
                        if c < best:
                            best = c
                            slots = m
                    if slots == 1:
                        budget[j] = 1
                    else:
                        a = _split_slots(fl, fr, slots)
                        codes[j] = 2 * q
                        refs[j] = ql[0]
                        budget[j] = a
                        codes[n] = 2 * q + 1
                        refs[n] = ql[1]
                        budget[n] = slots - a
                        n += 1
                        opened = 1
    return codes, refs, n


@wp.func
def _collapse_node(
    w: int,
    boxes: wp.array(dtype=wp.vec4),
    links: wp.array(dtype=wp.vec4i),
    cost: wp.array(dtype=wp.vec4),
    sah: int,
    counter: wp.array(dtype=wp.int32),
    src: wp.array(dtype=wp.int32),
    need: wp.array(dtype=wp.int32),
    data: wp.array(dtype=wp.vec4),
    wlinks: wp.array(dtype=wp.vec4i),
):
    """Wide node ``w`` (its pair node in ``src``) picks its children; their numbers from ``counter[0]``."""
    p = src[w]
    codes = wp.vec4i()
    refs = wp.vec4i()
    n = int(0)
    if sah != 0:
        codes, refs, n = _sah_children(links, cost, p)
    else:
        codes, refs, n = _greedy_children(boxes, links, p)
    inner = int(0)
    for j in range(4):
        if j < n and refs[j] >= 0:
            inner += 1
    base = int(0)
    if inner > 0:
        base = wp.atomic_add(counter, 0, inner)
    depth = need[w] + n - 1
    wp.atomic_max(counter, 1, depth)
    k = int(0)
    for j in range(4):
        if j < n and refs[j] >= 0:
            src[base + k] = refs[j]
            need[base + k] = depth
            refs[j] = base + k
            k += 1
    for j in range(4):
        if j >= n:
            refs[j] = refs[0]
    _write_boxes(boxes, codes, w, data)
    wlinks[8 * w + 6] = refs
    wlinks[8 * w + 7] = codes


@wp.kernel
def _collapse_kernel(
    boxes: wp.array(dtype=wp.vec4),
    links: wp.array(dtype=wp.vec4i),
    cost: wp.array(dtype=wp.vec4),
    sah: int,
    level: wp.array(dtype=wp.int32),
    counter: wp.array(dtype=wp.int32),
    src: wp.array(dtype=wp.int32),
    need: wp.array(dtype=wp.int32),
    data: wp.array(dtype=wp.vec4),
    wlinks: wp.array(dtype=wp.vec4i),
):
    """One level: wide nodes ``level[0] .. level[1] - 1`` (their pair nodes in ``src``) pick their children."""
    w = level[0] + wp.tid()
    if w >= level[1]:
        return
    _collapse_node(w, boxes, links, cost, sah, counter, src, need, data, wlinks)


@wp.kernel
def _collapse_level_kernel(
    boxes: wp.array(dtype=wp.vec4),
    links: wp.array(dtype=wp.vec4i),
    cost: wp.array(dtype=wp.vec4),
    sah: int,
    level: wp.array(dtype=wp.int32),
    counter: wp.array(dtype=wp.int32),
    src: wp.array(dtype=wp.int32),
    need: wp.array(dtype=wp.int32),
    data: wp.array(dtype=wp.vec4),
    wlinks: wp.array(dtype=wp.vec4i),
    threads: int,
):
    """``_collapse_kernel`` with ``threads`` threads, each taking nodes ``level[0] + tid + k threads``, then
    ``_next_level_kernel`` done by the last thread to finish (``level[2]`` counts them): one launch per level."""
    w = level[0] + wp.tid()
    end = level[1]
    while w < end:
        _collapse_node(w, boxes, links, cost, sah, counter, src, need, data, wlinks)
        w += threads
    _fence()  # (this thread's nodes and counter bumps before its count below)
    if wp.atomic_add(level, 2, 1) == threads - 1:
        _fence()
        level[2] = 0
        level[0] = end
        level[1] = wp.atomic_add(counter, 0, 0)  # (every thread's bump is in: they counted themselves after it)


@wp.kernel
def _next_level_kernel(level: wp.array(dtype=wp.int32), counter: wp.array(dtype=wp.int32)):
    level[0] = level[1]
    level[1] = counter[0]


@wp.kernel
def _refresh_kernel(boxes: wp.array(dtype=wp.vec4), wlinks: wp.array(dtype=wp.vec4i), data: wp.array(dtype=wp.vec4)):
    w = wp.tid()
    _write_boxes(boxes, wlinks[8 * w + 7], w, data)


@wp.kernel
def _slots_kernel(wlinks: wp.array(dtype=wp.vec4i), slots: wp.array(dtype=wp.int32)):
    w = wp.tid()
    codes = wlinks[8 * w + 7]
    for j in range(4):
        if codes[j] >= 0:
            slots[codes[j]] = 4 * w + j


class WideNodes:
    """The 4-wide nodes of one BVH (see the module docstring), over its :class:`PairNodes`.

    Args:
        pairs: the tree's child-pair nodes (their leaf triangles are shared, not copied).
        depth: an upper bound of the tree's depth (``BvhNodes.depth``): the number of levels collapsed.
        stream: the stream to build on (``None`` on the CPU).
        collapse: ``"sah"`` or ``"greedy"`` (default :data:`COLLAPSE`).

    Raises:
        ValueError: for an unknown ``collapse``.

    Attributes:
        data: ``wp.array(dtype=wp.vec4)`` (8 W,), W wide nodes (at least one entry).
        links: the same memory as ``wp.vec4i``.
        root: the root's ref (the pair root's leaf ref when the tree is a single leaf).
        count: W.
        stack_need: the most stack entries a walk of this tree can hold.
        slots: ``wp.array(dtype=wp.vec2i)`` (pair nodes,): per pair node ``k`` and side, ``4 w + j`` if
            that child's box is child ``j`` of wide node ``w``, else -1 (each child box is in at most one
            slot): the fused refit writes the wide boxes as it writes the pair nodes
            (``refit.FusedRefit``); ``None`` for a tree of one leaf.
        ok: every node was made within ``depth`` levels and ``stack_need <= STACK`` (else the scene
            keeps the pair walk).
        q: the compressed copies of the nodes (``wide_q.attach``; layout ``"wide4q"``), else ``None``.
    """

    def __init__(self, pairs: PairNodes, depth: int, stream: wp.Stream | None = None,
                 collapse: str | None = None) -> None:
        self.pairs = pairs
        self.collapse = COLLAPSE if collapse is None else collapse
        if self.collapse not in COLLAPSES:
            raise ValueError(f"rayd.engine.WideNodes(): 'collapse' must be one of {COLLAPSES}, got {collapse!r}")
        device = pairs.boxes.device
        inner = pairs.boxes.shape[0] // 4
        # every row of a node made is written by the collapse (and the rest dropped): no fill but for a leaf root
        self.data = (wp.zeros if pairs.root < 0 else wp.empty)(8 * max(1, inner), dtype=wp.vec4, device=device)
        self.links = alias(self.data, wp.vec4i)
        self.count, self.stack_need, self.root = 1, 0, pairs.root
        self.slots = self.q = None
        if pairs.root < 0:
            self.ok = True
            return
        sah = int(self.collapse == "sah")
        rows = max(1, inner)
        # The collapse's scratch from one allocation (runtime.carve), filled only where a kernel reads what no
        # kernel wrote: wide node w reads src[w] and need[w] (_collapse_node), which its parent's thread
        # wrote at the level before, but for the root's (the fills here); the SAH costs are written for
        # every pair node by _cost_kernel before any is read (every pair node is on the climb of one
        # thread from a node with leaf children only); parent (the root's stays -1) and arrive (counters)
        # are read as filled.
        src, need, state, cost, parent, arrive = carve(device, [(wp.int32, rows), (wp.int32, rows), (wp.int32, 5),
                                                                (wp.vec4, rows if sah else 1),
                                                                (wp.int32, rows if sah else 1),
                                                                (wp.int32, rows if sah else 1)])
        src[0:1].fill_(pairs.root)
        need[0:1].zero_()
        if sah:
            parent.fill_(-1)
            arrive.zero_()
            launch_once(_parent_kernel, inner, [pairs.links, parent], device, stream)
            launch_once(_cost_kernel, inner, [pairs.boxes, pairs.links, parent, arrive, cost], device, stream)
        # level (first, end, threads done), then wide nodes made and the deepest stack: (0, 1, 0, 1, 0) by fills
        state.zero_()
        state[1:2].fill_(1)
        state[3:4].fill_(1)
        level, counter = state[0:3], state[3:5]
        args = [pairs.boxes, pairs.links, cost, sah, level, counter, src, need, self.data, self.links]
        collapse_levels((_collapse_level_kernel, _collapse_kernel, _next_level_kernel), args, level, counter, inner,
                        depth, device, stream)
        (read,) = read_back(stream, state)  # one small read at build (after the launches on the stream)
        done, tail = read[0:2], read[3:5]
        self.count, self.stack_need = int(tail[0]), int(tail[1])
        self.root = 0
        # every wide node made (a depth below the true one would leave some unfilled) and the stack suffices
        self.ok = self.stack_need <= STACK and int(done[0]) == int(done[1]) == self.count
        if self.ok and self.count < inner:  # keep only the nodes made (about 0.4 of the pair nodes)
            data = wp.empty(8 * self.count, dtype=wp.vec4, device=device)
            wp.copy(data, self.data, 0, 0, 8 * self.count, stream=stream)
            if stream is not None:
                wp.synchronize_stream(stream)  # before the full-size array is released
            self.data = data
            self.links = alias(data, wp.vec4i)
        if self.ok:
            flat = wp.full(2 * max(1, inner), -1, dtype=wp.int32, device=device)
            launch_once(_slots_kernel, self.count, [self.links, flat], device, stream)
            self._slots_flat = flat
            self.slots = alias(flat, wp.vec2i)

    @property
    def nbytes(self) -> int:
        """Bytes held by the wide nodes (the leaf triangles are the pair layout's)."""
        return 8 * 16 * self.count

    def refresh(self, stream: wp.Stream | None = None) -> None:
        """Copy the children's boxes again from the pair nodes (after a refit that did not write them,
        ``refit.FusedRefit.writes_wide``; topology unchanged)."""
        if self.pairs.root < 0:
            return
        wp.launch(_refresh_kernel, self.count, [self.pairs.boxes, self.links], [self.data],
                  device=self.data.device, stream=stream)


def dummy_wide(device, data: wp.array | None = None) -> WideNodes:
    """A placeholder with one empty node (for a scene without the wide layout); ``data``: the caller's zeroed
    ``vec4`` (8,) array (default: made here)."""
    w = WideNodes.__new__(WideNodes)
    w.data = wp.zeros(8, dtype=wp.vec4, device=device) if data is None else data
    w.links = alias(w.data, wp.vec4i)
    w.root, w.count, w.stack_need, w.ok, w.slots, w.q = 0, 1, 0, True, None, None
    return w
