"""Refit without Warp's separate passes: the scene magnitude by a reduction, then one fused
bottom-up kernel (issue 18, "Refit").

:func:`magnitude_zeroed` computes the largest absolute coordinate of the points in two short
passes (each thread folds a strided run of points, then 256 partial maxima are folded
into one), not by an ``atomic_max`` of every point on one address.

:class:`FusedRefit` refits a ``TriangleScene`` whose tree has no unused node slots and a
parent per node: a ``wp.Bvh`` from Warp's host builder with one triangle per leaf
(``2 F - 1`` nodes, parents recorded by Warp), or a ``ploc.PlocBvh`` (leaves of one or
more triangles): one thread per leaf computes its padded triangle boxes (the leaf's box,
each triangle's box in ``lowers``/``uppers``, and the leaf-ordered corners of
``pair_nodes.PairNodes.tris``), then climbs with one atomic counter per node; the
second child to arrive writes the parent's box into Warp's node arrays (which other
queries read) and both children's boxes into the parent's pair node (Karras 2012,
sec. 4's bottom-up pass; Warp's own refit does the same on Warp's nodes alone).
"""

from __future__ import annotations

import os

import numpy as np
import warp as wp

from rayd.engine.bvh_nodes import BvhNodes
from rayd.engine.runtime import LaunchCache, alias, launch_once

wp.set_module_options({"enable_backward": False})

#: Threads of the first magnitude pass (at most; also of a placement that folds it, ``assemble.place_points``)
#: and partial maxima of the second. Each thread folds a strided run of points, one point after the other
#: (about 16 DRAM latencies in series on the terrain 2 M); :func:`set_magnitude_threads` changes it (A/B).
_MAG_THREADS = 65536
_MAG_PARTIALS = wp.constant(256)

#: Box padding as in ``triangles.BOX_PADDING`` (a fraction of the magnitude).
BOX_PADDING = wp.constant(1.0e-5)

#: How :class:`FusedRefit` climbs (issue 18, "Refit"; ``RAYD_REFIT_ORDER`` sets it):
#: ``"climb"``: one launch, a thread per leaf climbing with per-node arrival counters
#: (fence before each counter, second arrival finishes the parent); ``"climb1"``: the
#: same with one fence per level (the finishing thread reads its sibling's box from L2
#: without a second fence); ``"levels"``: no atomics or fences, one launch for the
#: leaves, then one launch per tree level from the deepest up (a node's children are
#: complete when its level runs; launches are recorded once at build and replayed). On the H200
#: (session 11, ``benchmarks/h200/refit_orders.py``, terrain 2 M) the refit kernels took 0.755 /
#: 0.691 / 1.546 ms, so ``"climb1"`` is the default (a slot pass plus a leaf climb, as the
#: edge refit does, took 0.788 ms and was dropped).
ORDERS = ("climb", "climb1", "levels")
_order = os.environ.get("RAYD_REFIT_ORDER", "climb1").strip().lower()  # the fastest on the H200 (session 11)
if _order not in ORDERS:
    raise ValueError(f"rayd.engine: RAYD_REFIT_ORDER must be one of {ORDERS}, got {_order!r}")


def set_refit_order(name: str) -> None:
    """Choose how fused refits of BVHs built from now on climb (``"climb"``, ``"climb1"`` or ``"levels"``).

    Raises:
        ValueError: for another name.
    """
    global _order
    if name not in ORDERS:
        raise ValueError(f"rayd.engine.set_refit_order(): 'name' must be one of {ORDERS}, got {name!r}")
    _order = name


def set_magnitude_threads(n: int) -> None:
    """Set how many threads (at most) fold the points into the magnitude's partial maxima from now on (the
    refit's first pass and a placement that folds it). The magnitude is the same for any ``n`` (a maximum).

    Raises:
        ValueError: for ``n < 256`` (every partial maximum needs a thread).
    """
    global _MAG_THREADS
    if int(n) < 256:
        raise ValueError(f"rayd.engine.set_magnitude_threads(): 'n' must be at least 256, got {n}")
    _MAG_THREADS = int(n)


def magnitude_threads() -> int:
    """Threads (at most) of the magnitude's first pass now."""
    return _MAG_THREADS


def refit_order() -> str:
    """The climbing order fused refits of BVHs built now get."""
    return _order


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    __threadfence();
#endif
""")
def _fence():
    """Make this thread's writes visible to the whole device before the counter it then bumps."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    float x, y, z, w;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(x), "=f"(y), "=f"(z), "=f"(w)
                 : "l"(wp::address(arr, i)) : "memory");
    return wp::vec4(x, y, z, w);
#else
    return wp::load(wp::address(arr, i));
#endif
""")
def _load_l2(arr: wp.array(dtype=wp.vec4), i: int) -> wp.vec4:
    """``arr[i]`` read from L2 (PTX ``ld.global.cg``, not a possibly stale L1 line): another block may just
    have written it. (Warp's JIT runtime has no ``__ldcg``, so the PTX is written out.)"""
    ...


@wp.kernel
def _magnitude_partial_reset_kernel(points: wp.array(dtype=wp.vec3), threads: int, partial: wp.array(dtype=float),
                                    out: wp.array(dtype=float)):
    i = wp.tid()
    if i == 0:
        out[0] = 0.0  # (the previous refit, earlier on the stream, has read it)
    m = float(0.0)
    for k in range(i, points.shape[0], threads):
        p = points[k]
        m = wp.max(m, wp.max(wp.max(wp.abs(p[0]), wp.abs(p[1])), wp.abs(p[2])))
    wp.atomic_max(partial, i % _MAG_PARTIALS, m)


@wp.kernel
def _magnitude_final_reset_kernel(partial: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_max(out, 0, partial[i])
    partial[i] = 0.0  # zero again for the next call


def magnitude_zeroed(points: wp.array, out: wp.array, partial: wp.array, stream: wp.Stream | None,
                     launches: LaunchCache, partials_ready: bool = False, final: bool = True) -> None:
    """``out[0] = max |coordinate|`` over ``points`` in two launches and no memsets (each thread folds a
    strided run of points into one of 256 partial maxima, then one launch folds those; no
    ``atomic_max`` of every point on one address): ``partial`` (float32 (256,)) must hold zeros on
    entry (``wp.zeros`` once) and holds zeros again on return; ``out[0]`` is cleared by the first
    launch. ``partials_ready``: the caller has already cleared ``out`` and folded every point into
    ``partial`` (``assemble.place_points`` with ``magnitude``): only the second launch runs.
    ``final=False``: the second launch is left to the caller's next kernel, which folds ``partial`` into
    ``out`` the same way (``wide_refit_tris._tris_fold_kernel``)."""
    if not partials_ready:
        threads = max(1, min(_MAG_THREADS, points.shape[0]))
        launches.launch(_magnitude_partial_reset_kernel, threads, [points, threads, partial, out], points.device,
                        stream)
    if final:
        launches.launch(_magnitude_final_reset_kernel, _MAG_PARTIALS, [partial, out], points.device, stream)


def magnitude_final_command(partial: wp.array, out: wp.array) -> wp.Launch:
    """The second pass of :func:`magnitude_zeroed` (``partial`` folded into ``out[0]`` and zeroed again),
    recorded for replays (``cmd.launch(stream)``): for an owner whose two arrays are fixed for its life,
    a replay without :class:`LaunchCache`'s comparison of the arguments."""
    cmd = wp.launch(_magnitude_final_reset_kernel, _MAG_PARTIALS, [partial, out], device=out.device, record_cmd=True)
    cmd.fwd_args = None  # (kept by Warp for graph-capture replays only)
    return cmd


@wp.func
def _write_box(node_f: wp.array(dtype=float), n: int, lo: wp.vec3, hi: wp.vec3, half: int):
    """Store ``lo`` (half 0: Warp's lower half) or ``hi`` into node ``n``'s xyz, keeping its index word."""
    base = 4 * n
    v = wp.where(half == 0, lo, hi)
    node_f[base] = v[0]
    node_f[base + 1] = v[1]
    node_f[base + 2] = v[2]


@wp.func
def _wide_slot_write(wide_f: wp.array(dtype=float), slot: int, lo: wp.vec4, hi: wp.vec4):
    """Store box ``[lo.xyz, hi.xyz]`` as child ``slot & 3`` of wide node ``slot >> 2`` (``wide_nodes.py``'s
    rows: lo.x, hi.x, lo.y, hi.y, lo.z, hi.z of four children each)."""
    base = 32 * (slot >> 2) + (slot & 3)
    wide_f[base] = lo[0]
    wide_f[base + 4] = hi[0]
    wide_f[base + 8] = lo[1]
    wide_f[base + 12] = hi[1]
    wide_f[base + 16] = lo[2]
    wide_f[base + 20] = hi[2]


@wp.func
def _union_into(
    parent: int,
    lowers: wp.array(dtype=wp.vec4),
    uppers: wp.array(dtype=wp.vec4),
    lower_f: wp.array(dtype=float),
    upper_f: wp.array(dtype=float),
    lower_index: wp.array(dtype=wp.vec4i),
    upper_index: wp.array(dtype=wp.vec4i),
    number: wp.array(dtype=wp.int32),
    boxes: wp.array(dtype=wp.vec4),
    has_pairs: int,
    wide_slots: wp.array(dtype=wp.vec2i),
    wide_f: wp.array(dtype=float),
    has_wide: int,
):
    """Write inner node ``parent``'s box (the union of its children's), (``has_pairs``) its pair node and
    (``has_wide``) each child's box into the 4-wide node slot that holds it (``WideNodes.slots``)."""
    left = lower_index[parent][3]
    right = upper_index[parent][3] & 0x7FFFFFFF
    la = _load_l2(lowers, left)
    lb = _load_l2(uppers, left)
    ra = _load_l2(lowers, right)
    rb = _load_l2(uppers, right)
    if has_pairs != 0:
        k = number[parent]
        boxes[4 * k] = wp.vec4(la[0], la[1], la[2], lb[0])
        boxes[4 * k + 1] = wp.vec4(lb[1], lb[2], ra[0], ra[1])
        boxes[4 * k + 2] = wp.vec4(ra[2], rb[0], rb[1], rb[2])
        if has_wide != 0:
            ws = wide_slots[k]
            if ws[0] >= 0:
                _wide_slot_write(wide_f, ws[0], la, lb)
            if ws[1] >= 0:
                _wide_slot_write(wide_f, ws[1], ra, rb)
    plo = wp.min(wp.vec3(la[0], la[1], la[2]), wp.vec3(ra[0], ra[1], ra[2]))
    phi = wp.max(wp.vec3(lb[0], lb[1], lb[2]), wp.vec3(rb[0], rb[1], rb[2]))
    _write_box(lower_f, parent, plo, phi, 0)
    _write_box(upper_f, parent, plo, phi, 1)


@wp.kernel
def _fused_refit_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    magnitude: wp.array(dtype=float),
    lowers: wp.array(dtype=wp.vec4),
    uppers: wp.array(dtype=wp.vec4),
    lower_f: wp.array(dtype=float),
    upper_f: wp.array(dtype=float),
    lower_index: wp.array(dtype=wp.vec4i),
    upper_index: wp.array(dtype=wp.vec4i),
    parents: wp.array(dtype=wp.int32),
    leaf_nodes: wp.array(dtype=wp.int32),
    primitives: wp.array(dtype=wp.int32),
    counters: wp.array(dtype=wp.int32),
    number: wp.array(dtype=wp.int32),
    item_lowers: wp.array(dtype=wp.vec3),
    item_uppers: wp.array(dtype=wp.vec3),
    has_pairs: int,
    tris: wp.array(dtype=wp.vec4),
    boxes: wp.array(dtype=wp.vec4),
    wide_slots: wp.array(dtype=wp.vec2i),
    wide_f: wp.array(dtype=float),
    has_wide: int,
    climb: int,
    second_fence: int,
):
    n = leaf_nodes[wp.tid()]
    if n < 0:
        return  # an unused entry (trees with leaves of several triangles)
    first = lower_index[n][3] & 0x7FFFFFFF
    end = upper_index[n][3] & 0x7FFFFFFF
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    grow = wp.vec3(pad, pad, pad)
    inf = float(1.0e30)
    lo = wp.vec3(inf, inf, inf)
    hi = wp.vec3(-inf, -inf, -inf)
    for slot in range(first, end):
        f = primitives[slot]
        row = 3 * (face_base + f)
        a = points[indices[row]]
        b = points[indices[row + 1]]
        c = points[indices[row + 2]]
        if has_pairs != 0:
            tris[3 * slot] = wp.vec4(a[0], a[1], a[2], 0.0)
            tris[3 * slot + 1] = wp.vec4(b[0], b[1], b[2], 0.0)
            tris[3 * slot + 2] = wp.vec4(c[0], c[1], c[2], 0.0)
        tlo = wp.min(wp.min(a, b), c) - grow
        thi = wp.max(wp.max(a, b), c) + grow
        item_lowers[f] = tlo
        item_uppers[f] = thi
        lo = wp.min(lo, tlo)
        hi = wp.max(hi, thi)
    _write_box(lower_f, n, lo, hi, 0)
    _write_box(upper_f, n, lo, hi, 1)
    if climb == 0:
        return  # "levels": the inner nodes are refitted level by level by _level_refit_kernel
    node = n
    parent = parents[n]
    while parent >= 0:
        _fence()
        if wp.atomic_add(counters, parent, 1) == 0:
            return  # the sibling's thread finishes the parent
        counters[parent] = 0  # both have arrived: zero again for the next refit (no memset)
        if second_fence != 0:
            _fence()  # and reads what the sibling wrote before its own fence and increment
        _union_into(parent, lowers, uppers, lower_f, upper_f, lower_index, upper_index, number, boxes,
                    has_pairs, wide_slots, wide_f, has_wide)
        node = parent
        parent = parents[node]


@wp.kernel
def _level_refit_kernel(
    order: wp.array(dtype=wp.int32),
    first: int,
    lowers: wp.array(dtype=wp.vec4),
    uppers: wp.array(dtype=wp.vec4),
    lower_f: wp.array(dtype=float),
    upper_f: wp.array(dtype=float),
    lower_index: wp.array(dtype=wp.vec4i),
    upper_index: wp.array(dtype=wp.vec4i),
    number: wp.array(dtype=wp.int32),
    boxes: wp.array(dtype=wp.vec4),
    has_pairs: int,
    wide_slots: wp.array(dtype=wp.vec2i),
    wide_f: wp.array(dtype=float),
    has_wide: int,
):
    # The inner nodes of one level: their children (deeper levels, leaves) were written by earlier launches.
    _union_into(order[first + wp.tid()], lowers, uppers, lower_f, upper_f, lower_index, upper_index, number, boxes,
                has_pairs, wide_slots, wide_f, has_wide)


@wp.kernel
def _depth_kernel(parents: wp.array(dtype=wp.int32), lower_index: wp.array(dtype=wp.vec4i),
                  depth: wp.array(dtype=wp.int32), per_level: wp.array(dtype=wp.int32)):
    n = wp.tid()
    d = int(0)
    p = parents[n]
    while p >= 0:
        d += 1
        p = parents[p]
    depth[n] = d
    if lower_index[n][3] >= 0:  # inner node
        wp.atomic_add(per_level, d, 1)


@wp.kernel
def _level_order_kernel(depth: wp.array(dtype=wp.int32), lower_index: wp.array(dtype=wp.vec4i),
                        cursor: wp.array(dtype=wp.int32), order: wp.array(dtype=wp.int32)):
    n = wp.tid()
    if lower_index[n][3] >= 0:
        order[wp.atomic_add(cursor, depth[n], 1)] = n


@wp.kernel
def _layout_check_kernel(lower_index: wp.array(dtype=wp.vec4i), upper_index: wp.array(dtype=wp.vec4i), f: int,
                         bad: wp.array(dtype=wp.int32)):
    n = wp.tid()
    low = lower_index[n][3]
    ok = True
    if low < 0:
        ok = (upper_index[n][3] & 0x7FFFFFFF) - (low & 0x7FFFFFFF) == 1
        wp.atomic_add(bad, 1, 1)
    else:
        ok = low < lower_index.shape[0] and (upper_index[n][3] & 0x7FFFFFFF) < lower_index.shape[0]
    if not ok:
        wp.atomic_add(bad, 0, 1)


@wp.kernel
def _leaf_flags_kernel(lower_index: wp.array(dtype=wp.vec4i), flags: wp.array(dtype=wp.int32)):
    n = wp.tid()
    flags[n] = wp.where(lower_index[n][3] < 0, 1, 0)


@wp.kernel
def _leaf_list_kernel(lower_index: wp.array(dtype=wp.vec4i), position: wp.array(dtype=wp.int32),
                      leaf_nodes: wp.array(dtype=wp.int32)):
    n = wp.tid()
    if lower_index[n][3] < 0:
        leaf_nodes[position[n]] = n


class FusedRefit:
    """The fused refit of one ``TriangleScene`` (see the module docstring).

    Args:
        nodes: the tree's node views (Warp's packed layout).
        parents: int32 (num_nodes,), parent of each node (``-1`` at the root).
        num_triangles: F.
        leaf_nodes: optional int32, the node of every leaf in node order (its builder's; else
            found here by a scan of leaf flags, padded with ``-1`` to F entries).

    Leaves may hold several triangles (a slot range). For a ``wp.Bvh`` use
    :meth:`from_bvh` after :meth:`applies` (Warp's host-built layout, one triangle per leaf).
    """

    def __init__(self, nodes: BvhNodes, parents: wp.array, num_triangles: int,
                 leaf_nodes: wp.array | None = None) -> None:
        device = nodes.lowers.device
        count = nodes.lowers.shape[0]
        self.parents = parents
        self.lower_f, self.upper_f = alias(nodes.lowers, float, 4 * count), alias(nodes.uppers, float, 4 * count)
        self.counters = wp.zeros(count, dtype=wp.int32, device=device)
        self.num_triangles = num_triangles
        if leaf_nodes is not None:  # the leaves in node order, from the builder (ploc_emit.py)
            self.leaf_nodes = leaf_nodes
        else:
            flags = wp.empty(count, dtype=wp.int32, device=device)
            position = wp.empty(count, dtype=wp.int32, device=device)
            launch_once(_leaf_flags_kernel, count, [nodes.lower_index, flags], device)
            wp.utils.array_scan(flags, position, inclusive=False)
            self.leaf_nodes = wp.full(num_triangles, -1, dtype=wp.int32, device=device)
            launch_once(_leaf_list_kernel, count, [nodes.lower_index, position, self.leaf_nodes], device)
        self.order = refit_order()
        self.levels: list[tuple[int, int]] = []  # (first, count) into self.level_nodes, deepest level first
        self._cmds: list[wp.Launch] | None = None  # the recorded launches (run)
        if self.order == "levels":
            depth = wp.empty(count, dtype=wp.int32, device=device)
            per_level = wp.zeros(count + 1, dtype=wp.int32, device=device)
            wp.launch(_depth_kernel, count, [self.parents, nodes.lower_index], [depth, per_level], device=device)
            sizes = per_level.numpy()  # one host read at build
            levels = [int(d) for d in np.nonzero(sizes)[0]][::-1]
            starts = np.zeros(count + 1, dtype=np.int32)
            at = 0
            for d in levels:
                starts[d] = at
                self.levels.append((at, int(sizes[d])))
                at += int(sizes[d])
            cursor = wp.array(starts, dtype=wp.int32, device=device)
            self.level_nodes = wp.empty(max(at, 1), dtype=wp.int32, device=device)
            wp.launch(_level_order_kernel, count, [depth, nodes.lower_index, cursor], [self.level_nodes],
                      device=device)

    @classmethod
    def from_bvh(cls, bvh: wp.Bvh, nodes: BvhNodes, num_triangles: int) -> FusedRefit:
        """The refit of a ``wp.Bvh`` (its parents array read from Warp's descriptor)."""
        device = nodes.lowers.device
        words = wp.array(ptr=bvh.id, dtype=wp.uint64, shape=(6,), device=device).numpy()
        parents = wp.array(ptr=int(words[2]), dtype=wp.int32, shape=(nodes.lowers.shape[0],), device=device)
        return cls(nodes, parents, num_triangles)

    @staticmethod
    def applies(bvh: wp.Bvh, nodes: BvhNodes, num_triangles: int) -> bool:
        """True for a tree of ``2 F - 1`` nodes (no unused slots), ``F`` leaves of one slot each
        (checked on the device; one small read)."""
        device = nodes.lowers.device
        counts = wp.array(ptr=bvh.id + 40, dtype=wp.int32, shape=(4,), device=device).numpy()
        max_nodes, num_nodes = int(counts[1]), int(counts[2])
        f = num_triangles
        if not (max_nodes == num_nodes == 2 * f - 1 and nodes.lowers.shape[0] == max_nodes):
            return False
        bad = wp.zeros(2, dtype=wp.int32, device=device)
        launch_once(_layout_check_kernel, max_nodes, [nodes.lower_index, nodes.upper_index, f, bad], device)
        bad = bad.numpy()
        return int(bad[0]) == 0 and int(bad[1]) == f

    def run(self, tri, stream: wp.Stream | None) -> None:
        """Refit ``tri`` (its magnitude already measured) in one launch over its leaves (and, where
        ``tri.pairs`` exists, its pair nodes and leaf triangles; where ``tri.wide`` exists, the wide
        nodes' boxes). The launch is recorded at the first call (its arguments are ``tri``'s arrays,
        fixed for its life) and replayed: no argument packing, no memset (the kernel leaves its
        counters zero)."""
        if self._cmds is None:
            self._cmds = self._record(tri)
        for cmd in self._cmds:
            cmd.launch(None if tri.device.is_cpu else stream)

    def _record(self, tri) -> list[wp.Launch]:
        n, p, w = tri.nodes, tri.pairs, tri.wide
        device = tri.device
        none4 = wp.empty(1, dtype=wp.vec4, device=device)  # placeholders for the parts ``tri`` lacks
        number, tris, boxes = (self.counters, none4, none4) if p is None else (p.number, p.tris, p.boxes)
        slots, wide_f = wp.empty(1, dtype=wp.vec2i, device=device), wp.empty(1, dtype=float, device=device)
        has_wide = int(self.writes_wide(tri))
        if has_wide:
            slots = w.slots
            wide_f = wp.array(ptr=w.data.ptr, dtype=float, shape=(4 * w.data.shape[0],), device=device)
        has_pairs = int(p is not None)
        climb = self.order != "levels"
        cmds = [wp.launch(
            _fused_refit_kernel, self.leaf_nodes.shape[0],
            [tri.points, tri.indices, tri.face_base, tri.magnitude, n.lowers, n.uppers, self.lower_f, self.upper_f,
             n.lower_index, n.upper_index, self.parents, self.leaf_nodes, n.primitives, self.counters, number,
             tri.lowers, tri.uppers, has_pairs, tris, boxes, slots, wide_f, has_wide, int(climb),
             int(self.order == "climb")],
            device=device, record_cmd=True)]
        # "levels": the inner nodes level by level, deepest first (a replay costs a few microseconds
        # of host time, a wp.launch about ten)
        cmds += [wp.launch(_level_refit_kernel, size,
                           [self.level_nodes, first, n.lowers, n.uppers, self.lower_f, self.upper_f, n.lower_index,
                            n.upper_index, number, boxes, has_pairs, slots, wide_f, has_wide],
                           device=device, record_cmd=True)
                 for first, size in self.levels]
        self._keep = (none4, slots, wide_f)  # (recorded launches hold pointers only)
        for cmd in cmds:
            cmd.fwd_args = None  # (kept by Warp for graph-capture replays only)
        return cmds

    @staticmethod
    def writes_wide(tri) -> bool:
        """Whether the refit of ``tri`` also writes its wide nodes' boxes (it has pair nodes and wide
        nodes with their slot map), so that ``WideNodes.refresh`` need not run after it."""
        return tri.pairs is not None and tri.wide is not None and tri.wide.slots is not None
