"""The leaf-triangle write of the wide refits, three other ways (issue 18, "update"; 18th session).

``wide_refit._leaf_climb_kernel`` (``RAYD_TRI_REFIT=wide``) writes the leaf-ordered triangle corners
(``PairNodes.tris``, 48 bytes per triangle, read by the wide walk) from its leaf threads: Warp's
``vec4`` has 4-byte alignment, so each corner is four 32-bit stores, and the 32 lanes of a warp store
at a stride of a whole leaf (about 96 bytes), so one store instruction touches about 32 sectors for
128 bytes of data. On one H200 (session 18) that write alone, a thread per triangle, took 0.230 ms of
the kernel's 0.432 ms on the terrain 2 M. The variants here (:data:`VARIANTS`, chosen by
``RAYD_TRI_REFIT``, see ``wide_refit.py``) write the same bits:

- ``"wide_v4"``: the same leaf climb, each corner one 16-byte store (PTX ``st.global.v4.f32``);
- ``"wide_tris"``: a first launch with a thread per 16-byte row of ``tris`` (three per triangle, in leaf
  order, reading the vertices through ``primitives`` and the index buffer): consecutive lanes store
  consecutive rows, 512 contiguous bytes per warp instruction. Its first 256 threads also fold the
  scene magnitude's 256 partial maxima (the second pass of ``refit.magnitude_zeroed``, one launch
  fewer). Then the leaf climb, which gathers the corners again but stores none;
- ``"wide_tris_r"``: the same first launch, then a climb that reads each leaf's corners back from
  ``tris`` (contiguous, 16-byte loads) instead of through ``primitives``, the indices and the points;
- ``"wide_split"``: a launch with a thread per leaf that writes its corners (16-byte stores) and its box
  into its wide slot, with no fence and no atomic; then a launch with a thread per wide node that has leaf
  children, which arrives for all of them at once (``wide_refit._node_climb_kernel``'s counting, without
  computing the leaves): about one atomic per wide node instead of one per leaf, and none where every
  child is a leaf (266 k of the terrain 2 M's 303 k such nodes, session 17).

With the compressed nodes of layout ``"wide4q"`` (``wide_q.py``), ``"wide_tris"``'s climb also quantises each
wide node it completes (``wide_q.climb_q``, under :data:`Q_MAX_REGISTERS`); ``"wide_tris_q64"`` is the same climb
under 64 registers and ``"wide_tris_ql"`` quantises in a launch after the plain climb (:data:`Q_MODES`).

Boxes are computed by the same operations in the same order as ``wide_refit._leaf_box`` (``min`` /
``max`` and one subtraction / addition of the padding per triangle), so every wide row is bit-equal;
``tris`` holds exact float32 copies of the points either way.

References:
    Karras 2012, "Maximizing parallelism in the construction of BVHs, octrees, and k-d trees", sec. 4
    (the bottom-up pass with arrival counters).
"""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.native import load4
from rayd.engine.refit import BOX_PADDING, _fence
from rayd.engine.wide_q import climb_q
from rayd.engine.wide_refit import _climb, _slot_write

wp.set_module_options({"enable_backward": False})

#: ``RAYD_TRI_REFIT`` names of this module's variants with a leaf climb, and what it does with the corners:
#: 0 gathers them and stores them in 16-byte rows, 1 gathers them (``tris`` written by the first launch),
#: 2 reads them back from ``tris``.
VARIANTS = {"wide_v4": 0, "wide_tris": 1, "wide_tris_r": 2}

#: ``cuda_max_registers`` of the leaf climbs (``wide_refit._leaf_climb_kernel`` compiles to 32 on sm_90; the
#: 16-byte stores and loads would take it to 40 and the kernel is bound by the latency of its gathers).
MAX_REGISTERS = 32

#: ``cuda_max_registers`` of the leaf climbs that also quantise (``wide_q.climb_q``; layout ``"wide4q"``):
#: the quantiser holds a node's 24 planes. ``ptxas`` for sm_90 (``benchmarks/README.md``, 19th session):
#: 32 registers spill 600 B (stores) / 760 B (loads) on the quantising path, 64 spill 104 / 88, none at
#: 88 (uncapped); the leaf part is the same gathers either way. ``RAYD_WIDEQ_REFIT_MAXREG`` (read at
#: import; 0: the compiler's choice). The modes ``"wide_tris_q64"`` (cap 64) and ``"wide_tris_ql"`` (no
#: quantisation in the climb: a launch over the wide nodes after it, ``wide_q.quantise``) are the same
#: refit otherwise, for the H200's A/B (``benchmarks/h200/s19_trav.sh``).
Q_MAX_REGISTERS = int(os.environ.get("RAYD_WIDEQ_REFIT_MAXREG", "32") or 0)
#: The quantising modes of ``"wide_tris"``: name -> register cap of the quantising climb (-1: a launch after).
Q_MODES = {"wide_tris_q64": 64, "wide_tris_ql": -1}

#: Partial maxima of the scene magnitude (``refit._MAG_PARTIALS``) folded by the first launch.
_PARTIALS = 256


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(wp::address(arr, i)),
                 "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
#else
    *wp::address(arr, i) = v;
#endif
""")
def store4(arr: wp.array(dtype=wp.vec4), i: int, v: wp.vec4):
    """``arr[i] = v`` in one 128-bit store on CUDA (Warp's ``vec4`` store is four 32-bit stores; every
    Warp allocation is 16-byte aligned and so is each 16-byte entry)."""
    ...


@wp.kernel
def _tris_fold_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    primitives: wp.array(dtype=wp.int32),
    rows: int,
    partial: wp.array(dtype=float),
    magnitude: wp.array(dtype=float),
    tris: wp.array(dtype=wp.vec4),
):
    # a thread per 16-byte row of tris (row 3 slot + k: corner k of the triangle in leaf slot ``slot``)
    t = wp.tid()
    if t < _PARTIALS:  # the magnitude's second pass (refit._magnitude_final_reset_kernel)
        wp.atomic_max(magnitude, 0, partial[t])
        partial[t] = 0.0  # zero again for the next refit
    if t < rows:
        slot = t / 3
        p = points[indices[3 * (face_base + primitives[slot]) + t - 3 * slot]]
        store4(tris, t, wp.vec4(p[0], p[1], p[2], 0.0))


@wp.func
def _leaf_box_from(points: wp.array(dtype=wp.vec3), indices: wp.array(dtype=wp.int32), face_base: int,
                   primitives: wp.array(dtype=wp.int32), tris: wp.array(dtype=wp.vec4), ref: int, grow: wp.vec3,
                   source: int) -> tuple[wp.vec3, wp.vec3]:
    """The padded box of leaf ``ref`` (as ``wide_refit._leaf_box``); ``source`` as in :data:`VARIANTS`."""
    code = -1 - ref
    first = code >> 3
    inf = float(1.0e30)
    lo = wp.vec3(inf, inf, inf)
    hi = wp.vec3(-inf, -inf, -inf)
    for slot in range(first, first + (code & 7) + 1):
        a = wp.vec3()
        b = wp.vec3()
        c = wp.vec3()
        if source == 2:
            ra = load4(tris, 3 * slot)
            rb = load4(tris, 3 * slot + 1)
            rc = load4(tris, 3 * slot + 2)
            a = wp.vec3(ra[0], ra[1], ra[2])
            b = wp.vec3(rb[0], rb[1], rb[2])
            c = wp.vec3(rc[0], rc[1], rc[2])
        else:
            row = 3 * (face_base + primitives[slot])
            a = points[indices[row]]
            b = points[indices[row + 1]]
            c = points[indices[row + 2]]
            if source == 0:
                store4(tris, 3 * slot, wp.vec4(a[0], a[1], a[2], 0.0))
                store4(tris, 3 * slot + 1, wp.vec4(b[0], b[1], b[2], 0.0))
                store4(tris, 3 * slot + 2, wp.vec4(c[0], c[1], c[2], 0.0))
        lo = wp.min(lo, wp.min(wp.min(a, b), c) - grow)
        hi = wp.max(hi, wp.max(wp.max(a, b), c) + grow)
    return lo, hi


def _leaf_climb_kernel(source: int, quant: int = 0, cap: int = MAX_REGISTERS):
    """``wide_refit._leaf_climb_kernel`` with the corners handled as ``source`` says (:data:`VARIANTS`; a
    constant of the kernel, so each variant compiles without the others' branches); ``quant``: the climb
    also quantises every wide node it completes into ``q`` (``wide_q.climb_q``; else ``q`` is not read);
    ``cap``: its ``cuda_max_registers`` (0: the compiler's choice)."""

    def kernel(
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
        q: wp.array(dtype=wp.vec4i),
        q_from: int,
    ):
        # one thread per leaf (items: 4 w + j in slot order)
        s = items[wp.tid()]
        if s < 0:
            return  # padding past the last leaf
        w = s >> 2
        pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
        lo, hi = _leaf_box_from(points, indices, face_base, primitives, tris, wlinks[8 * w + 6][s & 3],
                                wp.vec3(pad, pad, pad), wp.static(source))
        _slot_write(wide_f, s, lo, hi)
        _fence()
        if wp.atomic_add(counters, w, 1) != (up[w] & 3):
            return  # a sibling's thread finishes w
        counters[w] = 0
        if wp.static(quant != 0):
            climb_q(w, up, counters, data, wide_f, wlinks, q, q_from)
        else:
            _climb(w, up, counters, data, wide_f)

    kernel.__name__ = kernel.__qualname__ = f"_leaf_climb_rows{source}{f'_q{cap}' if quant else ''}_kernel"
    if quant:  # (made on first use, per cap: a module of its own, so the others are not compiled again)
        return wp.kernel(kernel, enable_backward=False, cuda_max_registers=cap or None, module="unique")
    return wp.kernel(kernel, cuda_max_registers=cap)


_CLIMBS = {(source, None): _leaf_climb_kernel(source) for source in sorted(set(VARIANTS.values()))}


def _climb_kernel(source: int, cap: int | None) -> wp.Kernel:
    """The leaf climb of ``source``; ``cap``: ``None`` without quantisation, else the register cap of the
    quantising climb (0: none)."""
    if (source, cap) not in _CLIMBS:
        _CLIMBS[(source, cap)] = _leaf_climb_kernel(source, 1, cap)
    return _CLIMBS[(source, cap)]


@wp.kernel(cuda_max_registers=MAX_REGISTERS)
def _split_leaves_kernel(
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
    # "wide_split", first launch: a thread per leaf, its corners (16-byte stores) and its box into its wide
    # slot; no fence, no atomic (the next launch reads them)
    s = items[wp.tid()]
    if s < 0:
        return
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    lo, hi = _leaf_box_from(points, indices, face_base, primitives, tris, wlinks[8 * (s >> 2) + 6][s & 3],
                            wp.vec3(pad, pad, pad), 0)
    _slot_write(wide_f, s, lo, hi)


@wp.kernel
def _split_climb_kernel(
    items: wp.array(dtype=wp.int32),
    up: wp.array(dtype=wp.int32),
    counters: wp.array(dtype=wp.int32),
    data: wp.array(dtype=wp.vec4),
    wlinks: wp.array(dtype=wp.vec4i),
    wide_f: wp.array(dtype=float),
):
    # "wide_split", second launch: a thread per wide node with leaf children (their boxes written by the
    # first launch) arrives for all of them at once; where every child is a leaf it needs no atomic
    w = items[wp.tid()]
    if w < 0:
        return
    codes = wlinks[8 * w + 6]
    last = up[w] & 3
    leaves = int(0)
    for j in range(4):
        if j <= last and codes[j] < 0:
            leaves += 1
    if leaves <= last:  # inner children too: the last of their threads and this one goes on
        # (no fence: this thread has written nothing; the leaf rows were written by the previous launch)
        if wp.atomic_add(counters, w, leaves) + leaves != last + 1:
            return
        counters[w] = 0
    _climb(w, up, counters, data, wide_f)


#: The variants whose first launch folds the magnitude's partial maxima.
_FOLDING = ("wide_tris", "wide_tris_r", *Q_MODES)


def folds_magnitude(name: str) -> bool:
    """Whether the variant ``name`` folds the magnitude's partial maxima itself (its first launch), so the
    refit launches only the magnitude's first pass before it (``refit.magnitude_zeroed(final=False)``)."""
    return name in _FOLDING


def recorder(per: str):
    """What ``wide_refit.WideRefit(..., record=)`` takes for the kind ``per`` (``wide_refit.per_thread``):
    :func:`record` of its variant for ``"leaf_v4"`` ... ``"leaf_split"``, ``None`` for the others."""
    name = "wide" + per[4:] if per.startswith("leaf_") else None
    if name not in VARIANTS and name not in Q_MODES and name != "wide_split":
        return None
    return lambda refit, tri: record(refit, tri, name)


def record(refit, tri, name: str) -> list:
    """The recorded launches of variant ``name`` (:data:`VARIANTS`) for ``refit`` (a ``wide_refit.WideRefit``
    of ``tri``, its items a thread per leaf), in order; ``refit`` keeps the arrays they point to."""
    if name == "wide_split":
        return [wp.launch(_split_leaves_kernel, refit.items.shape[0],
                          [tri.points, tri.indices, tri.face_base, tri.magnitude, tri.nodes.primitives, refit.items,
                           tri.wide.links, refit._wide_f, tri.pairs.tris], device=tri.device, record_cmd=True),
                wp.launch(_split_climb_kernel, refit.node_items.shape[0],
                          [refit.node_items, refit.up, refit.counters, tri.wide.data, tri.wide.links, refit._wide_f],
                          device=tri.device, record_cmd=True)]
    cap = Q_MODES.get(name, Q_MAX_REGISTERS)
    source = VARIANTS["wide_tris" if name in Q_MODES else name]
    q = getattr(tri.wide, "q", None)
    refit.quantises = q is not None and cap >= 0
    if not refit.quantises:
        q = wp.zeros(1, dtype=wp.vec4i, device=tri.device)
        refit._q_dummy = q  # (kept alive with the records)
    cmds = []
    if source != 0:
        rows = 3 * tri.num_triangles
        cmds.append(wp.launch(
            _tris_fold_kernel, max(rows, _PARTIALS),
            [tri.points, tri.indices, tri.face_base, tri.nodes.primitives, rows, tri._partial, tri.magnitude,
             tri.pairs.tris], device=tri.device, record_cmd=True))
    cmds.append(wp.launch(
        _climb_kernel(source, cap if refit.quantises else None), refit.items.shape[0],
        [tri.points, tri.indices, tri.face_base, tri.magnitude, tri.nodes.primitives, refit.items, refit.up,
         refit.counters, tri.wide.data, tri.wide.links, refit._wide_f, tri.pairs.tris, q,
         getattr(tri.wide, "q_from", 0)],
        device=tri.device, record_cmd=True))
    return cmds
