"""Refit of the 4-wide nodes alone, the rest of the tree later (issue 18, "update").

The CUDA default search (``wide_walk.py``: PLOC tree, 4-wide nodes) reads only the wide nodes'
boxes and the leaf-ordered triangle corners (``PairNodes.tris``), plus the scene magnitude. The
fused refit (``refit.FusedRefit``) also writes Warp's binary node boxes, the per-face boxes, the
pair nodes, and climbs the binary tree (about twice as many levels, an atomic and a fence per
binary node). :class:`WideRefit` climbs the wide tree instead: one thread per leaf computes its
padded triangle boxes (as ``refit._fused_refit_kernel`` does, same operations, same bits), writes
the leaf's corners into ``tris`` and the leaf's box into its wide parent's slot, then bumps the
parent's arrival counter; the thread that arrives last (the counter reaches the parent's number of
children) unions the children's boxes (read from L2) and writes the result into the grandparent's
slot, and so on up to the root (Karras 2012, sec. 4's bottom-up pass, over a 4-wide tree).

Unions are exact (``min``/``max`` of the same leaf boxes, grouped differently), so every wide row
is bit-equal to the fused refit's. Everything else (binary boxes, per-face boxes, pair nodes) is
left stale: ``TriangleScene.complete`` runs the fused refit when a query that reads them comes
(``accel.SceneAccel.view_for``), which rewrites all of it from the same points and magnitude.

``RAYD_TRI_REFIT`` (or :func:`set_tri_refit`, read at every refit, so one scene can A/B):
``"full"`` (the fused refit of everything at ``sync()``), ``"wide"`` (this module, a
thread per leaf; ``"wide_tris"``, the default, first writes the leaf triangles in a coalesced launch of
its own, ``wide_refit_tris.py``), ``"wide_node"`` (a thread per wide node with leaf children: it computes all of
them, and a node whose children are all leaves needs no atomic) or ``"wide_levels"`` (no atomics
or fences: a launch over the leaves, then one per depth of the wide tree, deepest first); scenes
without wide nodes keep the fused refit.
"""

from __future__ import annotations

import os

import numpy as np
import warp as wp

from rayd.engine.refit import BOX_PADDING, _fence, _load_l2
from rayd.engine.runtime import launch_stream

wp.set_module_options({"enable_backward": False})

#: What ``TriangleScene.refit`` refits at ``sync()`` (see the module docstring). On one H100 (session 17,
#: ``benchmarks/h200/s17g.sh``) update + sync of the CUDA defaults took 0.628 / 0.421 ms with ``"wide"``
#: against 1.026 / 0.683 ms with ``"full"`` (terrain 2 M / sphere 1 M; ``"wide_node"`` 1.048 / 0.607,
#: ``"wide_levels"`` 0.619 / 0.467); on one H200 (session 18, ``benchmarks/results/h200-session18/``)
#: 0.534 / 0.347 ms against 0.857 / 0.563 ms, and the whole CUDA suite of both frontends passed with
#: ``"wide"`` (and with ``"full"``), so ``"wide"`` became the default.
#: ``"wide_v4"``, ``"wide_tris"`` and ``"wide_tris_r"`` (18th session) write the leaf triangles in 16-byte
#: stores, in a coalesced launch of their own, or both and read them back; ``"wide_split"`` writes every
#: leaf (16-byte stores) in a launch without atomics, then climbs from the wide nodes with leaf children
#: (``wide_refit_tris.py``). ``"wide_tris_q64"`` and ``"wide_tris_ql"`` (19th session) are ``"wide_tris"``
#: with the compressed nodes of layout ``"wide4q"`` quantised otherwise (``wide_refit_tris.Q_MODES``).
TRI_REFITS = ("full", "wide", "wide_node", "wide_levels", "wide_v4", "wide_tris", "wide_tris_r", "wide_split",
              "wide_tris_q64", "wide_tris_ql")
#: Later in session 18 (one H100, ``benchmarks/results/h100-session18/tri.txt``, main ``81cf455``): update +
#: sync terrain 2 M / sphere 1 M ``"wide_tris"`` 0.299 / 0.229 ms, ``"wide"`` 0.626 / 0.399, ``"full"`` 1.030 /
#: 0.677, Warp ``wp.Mesh.refit`` 0.348 / 0.287 (0.86x / 0.80x Warp), every structure bit-equal: ``"wide_tris"``
#: is the default. ``RAYD_TRI_REFIT=wide`` or ``full`` gives the earlier ones.
_tri_refit = os.environ.get("RAYD_TRI_REFIT", "wide_tris").strip().lower()
if _tri_refit not in TRI_REFITS:
    raise ValueError(f"rayd.engine: RAYD_TRI_REFIT must be one of {TRI_REFITS}, got {_tri_refit!r}")


def set_tri_refit(name: str) -> None:
    """Choose what refits of triangle BVHs write at ``sync()`` from now on: ``"full"`` (every node
    structure), ``"wide"``, ``"wide_node"`` or ``"wide_levels"`` (the wide nodes and leaf triangles, a
    thread per leaf or per wide node, or level by level; the rest when a query reads it), or
    ``"wide_v4"``, ``"wide_tris"``, ``"wide_tris_r"``, ``"wide_split"`` (``"wide"`` with the leaf triangles
    written otherwise, ``wide_refit_tris.py``; the same bits), or ``"wide_tris_q64"``, ``"wide_tris_ql"``
    (``"wide_tris"`` quantising the compressed nodes of layout ``"wide4q"`` otherwise; the same bits).

    Raises:
        ValueError: for another name.
    """
    global _tri_refit
    if name not in TRI_REFITS:
        raise ValueError(f"rayd.engine.set_tri_refit(): 'name' must be one of {TRI_REFITS}, got {name!r}")
    _tri_refit = name


def tri_refit() -> str:
    """What refits write at ``sync()`` now (one of :data:`TRI_REFITS`)."""
    return _tri_refit


@wp.func
def _slot_write(wide_f: wp.array(dtype=float), slot: int, lo: wp.vec3, hi: wp.vec3):
    """Store box ``[lo, hi]`` as child ``slot & 3`` of wide node ``slot >> 2`` (rows lo.x, hi.x, lo.y, ...)."""
    base = 32 * (slot >> 2) + (slot & 3)
    wide_f[base] = lo[0]
    wide_f[base + 4] = hi[0]
    wide_f[base + 8] = lo[1]
    wide_f[base + 12] = hi[1]
    wide_f[base + 16] = lo[2]
    wide_f[base + 20] = hi[2]


@wp.kernel
def _up_kernel(wlinks: wp.array(dtype=wp.vec4i), up: wp.array(dtype=wp.int32), leaf_at: wp.array(dtype=wp.int32),
               node_at: wp.array(dtype=wp.int32)):
    """Per wide node: ``up[w] = 4 (parent slot + 1) + children - 1`` for its children; per leaf child,
    ``leaf_at[first slot] = 4 w + j``; per wide node with leaf children, ``node_at[least first slot] = w``."""
    w = wp.tid()
    refs = wlinks[8 * w + 6]
    codes = wlinks[8 * w + 7]
    n = int(0)
    for j in range(4):
        if codes[j] >= 0:
            n += 1
    least = int(-1)
    for j in range(4):
        if j < n:
            r = refs[j]
            if r >= 0:
                wp.atomic_add(up, r, 4 * (4 * w + j + 1))  # (the child's own count is added by its thread)
            else:
                first = (-1 - r) >> 3
                leaf_at[first] = 4 * w + j
                if least < 0 or first < least:
                    least = first
    wp.atomic_add(up, w, n - 1)
    if least >= 0:
        node_at[least] = w


@wp.kernel
def _flags_kernel(at: wp.array(dtype=wp.int32), flags: wp.array(dtype=wp.int32)):
    s = wp.tid()
    flags[s] = wp.where(at[s] >= 0, 1, 0)


@wp.kernel
def _compact_kernel(at: wp.array(dtype=wp.int32), position: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int32)):
    s = wp.tid()
    if at[s] >= 0:
        out[position[s]] = at[s]


@wp.func
def _leaf_box(points: wp.array(dtype=wp.vec3), indices: wp.array(dtype=wp.int32), face_base: int,
              primitives: wp.array(dtype=wp.int32), tris: wp.array(dtype=wp.vec4), ref: int,
              grow: wp.vec3) -> tuple[wp.vec3, wp.vec3]:
    """The padded box of leaf ``ref`` (as ``refit._fused_refit_kernel``), its corners written into ``tris``."""
    code = -1 - ref
    first = code >> 3
    inf = float(1.0e30)
    lo = wp.vec3(inf, inf, inf)
    hi = wp.vec3(-inf, -inf, -inf)
    for slot in range(first, first + (code & 7) + 1):
        row = 3 * (face_base + primitives[slot])
        a = points[indices[row]]
        b = points[indices[row + 1]]
        c = points[indices[row + 2]]
        tris[3 * slot] = wp.vec4(a[0], a[1], a[2], 0.0)
        tris[3 * slot + 1] = wp.vec4(b[0], b[1], b[2], 0.0)
        tris[3 * slot + 2] = wp.vec4(c[0], c[1], c[2], 0.0)
        lo = wp.min(lo, wp.min(wp.min(a, b), c) - grow)
        hi = wp.max(hi, wp.max(wp.max(a, b), c) + grow)
    return lo, hi


@wp.func
def _union_rows(data: wp.array(dtype=wp.vec4), w: int, last: int) -> tuple[wp.vec3, wp.vec3]:
    """The union of the boxes of wide node ``w``'s children ``0 .. last`` (its rows read from L2)."""
    base = 8 * w
    lx = _load_l2(data, base)
    hx = _load_l2(data, base + 1)
    ly = _load_l2(data, base + 2)
    hy = _load_l2(data, base + 3)
    lz = _load_l2(data, base + 4)
    hz = _load_l2(data, base + 5)
    lo = wp.vec3(lx[0], ly[0], lz[0])
    hi = wp.vec3(hx[0], hy[0], hz[0])
    for j in range(1, 4):
        if j <= last:
            lo = wp.min(lo, wp.vec3(lx[j], ly[j], lz[j]))
            hi = wp.max(hi, wp.vec3(hx[j], hy[j], hz[j]))
    return lo, hi


@wp.func
def _climb(w: int, up: wp.array(dtype=wp.int32), counters: wp.array(dtype=wp.int32), data: wp.array(dtype=wp.vec4),
           wide_f: wp.array(dtype=float)):
    """Wide node ``w``'s children are all written: union them into its parent's slot, arrive there, and go
    on while this thread is the last to arrive."""
    while True:
        word = up[w]
        parent = (word >> 2) - 1
        if parent < 0:
            return  # the root (its box is no wide row)
        lo, hi = _union_rows(data, w, word & 3)
        _slot_write(wide_f, parent, lo, hi)
        w = parent >> 2
        _fence()
        if wp.atomic_add(counters, w, 1) != (up[w] & 3):
            return  # a sibling's thread finishes w
        counters[w] = 0  # every child has arrived: zero again for the next refit (no memset)


@wp.kernel
def _leaf_boxes_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    magnitude: wp.array(dtype=float),
    primitives: wp.array(dtype=wp.int32),
    items: wp.array(dtype=wp.int32),
    wlinks: wp.array(dtype=wp.vec4i),
    wide_f: wp.array(dtype=float),
    tris: wp.array(dtype=wp.vec4),
):
    # "levels", first launch: every leaf's box into its wide slot (a thread per leaf, no climb)
    s = items[wp.tid()]
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    lo, hi = _leaf_box(points, indices, face_base, primitives, tris, wlinks[8 * (s >> 2) + 6][s & 3],
                       wp.vec3(pad, pad, pad))
    _slot_write(wide_f, s, lo, hi)


@wp.kernel
def _level_kernel(order: wp.array(dtype=wp.int32), first: int, up: wp.array(dtype=wp.int32),
                  data: wp.array(dtype=wp.vec4), wide_f: wp.array(dtype=float)):
    # "levels": the wide nodes of one depth, deepest first (their children were written by earlier launches)
    w = order[first + wp.tid()]
    word = up[w]
    lo, hi = _union_rows(data, w, word & 3)
    _slot_write(wide_f, (word >> 2) - 1, lo, hi)


@wp.kernel
def _wide_depth_kernel(up: wp.array(dtype=wp.int32), depth: wp.array(dtype=wp.int32)):
    w = wp.tid()
    d = int(0)
    x = w
    while (up[x] >> 2) - 1 >= 0:
        x = ((up[x] >> 2) - 1) >> 2
        d += 1
    depth[w] = d


@wp.kernel
def _leaf_climb_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    magnitude: wp.array(dtype=float),
    primitives: wp.array(dtype=wp.int32),
    items: wp.array(dtype=wp.int32),
    up: wp.array(dtype=wp.int32),
    counters: wp.array(dtype=wp.int32),
    data: wp.array(dtype=wp.vec4),
    wlinks: wp.array(dtype=wp.vec4i),
    wide_f: wp.array(dtype=float),
    tris: wp.array(dtype=wp.vec4),
):
    # one thread per leaf (items: 4 w + j in slot order)
    s = items[wp.tid()]
    if s < 0:
        return  # padding past the last leaf
    w = s >> 2
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    lo, hi = _leaf_box(points, indices, face_base, primitives, tris, wlinks[8 * w + 6][s & 3], wp.vec3(pad, pad, pad))
    _slot_write(wide_f, s, lo, hi)
    _fence()
    if wp.atomic_add(counters, w, 1) != (up[w] & 3):
        return  # a sibling's thread finishes w
    counters[w] = 0
    _climb(w, up, counters, data, wide_f)


@wp.kernel
def _node_climb_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    magnitude: wp.array(dtype=float),
    primitives: wp.array(dtype=wp.int32),
    items: wp.array(dtype=wp.int32),
    up: wp.array(dtype=wp.int32),
    counters: wp.array(dtype=wp.int32),
    data: wp.array(dtype=wp.vec4),
    wlinks: wp.array(dtype=wp.vec4i),
    wide_f: wp.array(dtype=float),
    tris: wp.array(dtype=wp.vec4),
):
    # one thread per wide node with leaf children (items: w, in the order of their least leaf slot)
    w = items[wp.tid()]
    if w < 0:
        return
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    grow = wp.vec3(pad, pad, pad)
    refs = wlinks[8 * w + 6]
    last = up[w] & 3
    leaves = int(0)
    for j in range(4):
        if j <= last and refs[j] < 0:
            lo, hi = _leaf_box(points, indices, face_base, primitives, tris, refs[j], grow)
            _slot_write(wide_f, 4 * w + j, lo, hi)
            leaves += 1
    if leaves <= last:  # inner children too: the last of their threads and this one goes on
        _fence()
        if wp.atomic_add(counters, w, leaves) + leaves != last + 1:
            return
        counters[w] = 0
    _climb(w, up, counters, data, wide_f)


class WideRefit:
    """The wide-only refit of one ``TriangleScene`` with wide nodes (see the module docstring).

    Args:
        tri: the scene (its :attr:`wide` nodes made, with a slot map: a tree of two leaves or more).
        per: ``"leaf"`` (a thread per leaf, :data:`TRI_REFITS` ``"wide"``), ``"node"`` (a thread per wide
            node with leaf children, which computes all of them and needs no atomic where every child is
            a leaf: ``"wide_node"``), ``"levels"`` (no atomics: a launch over the leaves, then one per depth
            of the wide tree from the deepest up, replayed from records: ``"wide_levels"``), or
            ``"leaf_v4"``, ``"leaf_tris"``, ``"leaf_tris_r"``, ``"leaf_split"`` (a thread per leaf, as
            ``"wide_v4"`` ... ``"wide_split"`` of ``wide_refit_tris.py``; the last also :attr:`node_items`).
        stream: the stream to prepare on (``None`` on the CPU).
        record: for the ``"leaf_*"`` kinds, ``record(refit, tri) -> launches`` (``wide_refit_tris.recorder``,
            which imports this module's climb): the recorded launches :meth:`run` replays.

    Attributes:
        items: int32, per thread ``4 w + j`` of a leaf child in slot order (``"leaf"``) or a wide node
            ``w`` in the order of its least leaf slot (``"node"``); one thread each.
        up: int32 (W,), ``4 (parent slot + 1) + children - 1`` per wide node (parent slot ``-1`` at the root).
        counters: int32 (W,), arrival counters (zero between refits).
        quantises: whether :meth:`run` also writes the compressed nodes ``tri.wide.q`` (``wide_q.py``; set
            when the launches are recorded, by ``wide_refit_tris.record``); else ``TriangleScene.refit``
            quantises them after it.
        node_items: ``"leaf_split"`` only: int32, the wide nodes with leaf children, as ``items`` of ``"node"``.
    """

    def __init__(self, tri, per: str = "leaf", stream: wp.Stream | None = None, record=None) -> None:
        wide = tri.wide
        self._record = record
        device = tri.device
        f = tri.num_triangles
        count = wide.count
        self.per = per
        with launch_stream(device, stream):  # (the fills and the scan run on the current stream)
            self.up = wp.zeros(count, dtype=wp.int32, device=device)
            self.counters = wp.zeros(count, dtype=wp.int32, device=device)
            leaf_at = wp.full(f, -1, dtype=wp.int32, device=device)
            node_at = wp.full(f, -1, dtype=wp.int32, device=device)
            wp.launch(_up_kernel, count, [wide.links], [self.up, leaf_at, node_at], device=device, stream=stream)
            flags = wp.empty(f, dtype=wp.int32, device=device)
            position = wp.empty(f, dtype=wp.int32, device=device)

            def compact(at: wp.array) -> wp.array:
                wp.launch(_flags_kernel, f, [at], [flags], device=device, stream=stream)
                wp.utils.array_scan(flags, position, inclusive=False)
                if stream is not None:
                    wp.synchronize_stream(stream)  # (once per tree: the number of threads is read)
                size = int(position[f - 1:].numpy()[0] + flags[f - 1:].numpy()[0])
                items = wp.full(max(1, size), -1, dtype=wp.int32, device=device)
                wp.launch(_compact_kernel, f, [at, position], [items], device=device, stream=stream)
                return items

            self.items = compact(node_at if per == "node" else leaf_at)
            if per == "leaf_split":  # (wide_refit_tris.py: the leaves, then the wide nodes with leaf children)
                self.node_items = compact(node_at)
            self.levels: list[tuple[int, int]] = []  # (first, count) into self.order, deepest first
            if per == "levels":
                depth = wp.empty(count, dtype=wp.int32, device=device)
                wp.launch(_wide_depth_kernel, count, [self.up], [depth], device=device, stream=stream)
                if stream is not None:
                    wp.synchronize_stream(stream)
                d = depth.numpy()  # one read when the refit is prepared
                order = np.argsort(d, kind="stable").astype(np.int32)
                sizes = np.bincount(d)
                starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
                self.levels = [(int(starts[k]), int(sizes[k])) for k in range(len(sizes) - 1, 0, -1) if sizes[k]]
                self.order = wp.array(order, dtype=wp.int32, device=device)
            if stream is not None:
                wp.synchronize_stream(stream)  # before the scratch arrays are released
        self._cmds: list | None = None
        self.quantises = False  # the recorded launches also write ``wide.q`` (wide_refit_tris.record)

    def run(self, tri, stream: wp.Stream | None) -> None:
        """Refit ``tri``'s wide boxes and leaf triangles (its magnitude already measured; for ``"leaf_tris"``
        and ``"leaf_tris_r"`` its partial maxima, folded by their first launch): one launch (``"levels"``:
        one plus one per depth; ``"leaf_tris"``, ``"leaf_tris_r"``: two), recorded at the first call and
        replayed."""
        if self._cmds is None:
            wide = tri.wide
            self._wide_f = wp.array(ptr=wide.data.ptr, dtype=float, shape=(4 * wide.data.shape[0],),
                                    device=tri.device)
            if self._record is not None:  # (wide_refit_tris.py's variants)
                self._cmds = self._record(self, tri)
            elif self.per == "levels":
                self._cmds = [wp.launch(
                    _leaf_boxes_kernel, self.items.shape[0],
                    [tri.points, tri.indices, tri.face_base, tri.magnitude, tri.nodes.primitives, self.items,
                     wide.links, self._wide_f, tri.pairs.tris], device=tri.device, record_cmd=True)]
                self._cmds += [wp.launch(_level_kernel, size, [self.order, first, self.up, wide.data, self._wide_f],
                                         device=tri.device, record_cmd=True) for first, size in self.levels]
            else:
                kernel = _leaf_climb_kernel if self.per == "leaf" else _node_climb_kernel
                self._cmds = [wp.launch(
                    kernel, self.items.shape[0],
                    [tri.points, tri.indices, tri.face_base, tri.magnitude, tri.nodes.primitives, self.items,
                     self.up, self.counters, wide.data, wide.links, self._wide_f, tri.pairs.tris],
                    device=tri.device, record_cmd=True)]
            for cmd in self._cmds:
                cmd.fwd_args = None
        for cmd in self._cmds:
            cmd.launch(None if tri.device.is_cpu else stream)

    @staticmethod
    def applies(tri) -> bool:
        """Whether ``tri`` can be refitted this way (a fused refit, pair nodes, wide nodes with a slot map)."""
        return tri.fused is not None and tri.pairs is not None and tri.wide is not None and tri.wide.slots is not None


def per_thread(name: str) -> str | None:
    """What a thread of the wide-only refit ``name`` (:data:`TRI_REFITS`) starts from (``None``: full refit)."""
    return _PER.get(name)


_PER = {"wide": "leaf", "wide_node": "node", "wide_levels": "levels", "wide_v4": "leaf_v4", "wide_tris": "leaf_tris",
        "wide_tris_r": "leaf_tris_r", "wide_split": "leaf_split", "wide_tris_q64": "leaf_tris_q64",
        "wide_tris_ql": "leaf_tris_ql"}
