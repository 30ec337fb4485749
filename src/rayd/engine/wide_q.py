"""Compressed 4-wide triangle nodes: child boxes on an 8-bit grid, 64 bytes a node (``RAYD_BVH_LAYOUT=wide4q``).

Each wide node of ``wide_nodes.py`` (128 bytes: six float32 rows of child planes, refs, box codes)
gets a compressed copy ``WideNodes.q`` in the format of ``edge_wide_q.py`` (after Ylitie, Karras &
Laine 2017, sec. 3.1), made by its quantiser (``edge_wide_q.quantise_children``, the only one):

- ``q[4 w + 0]`` = ``(origin.x, origin.y, origin.z)`` as float32 bits (the least corner of the
  children's union box) and the biased exponents ``e_x | e_y << 8 | e_z << 16`` of the per-axis
  scales ``s = 2^(e - 127)`` (bit 24: "open every non-empty child", for a non-finite box);
- ``q[4 w + 1]`` = the children's ``lo.x, hi.x, lo.y, hi.y`` as bytes (child ``j`` in byte ``j``);
  ``q[4 w + 2]`` = ``lo.z, hi.z`` (two words unused);
- ``q[4 w + 3]`` = the children's refs (``WideNodes.links`` row 6).

A decoded plane is ``origin + q s``, with ``q s`` exact (``s`` a power of two, ``q < 256``), so its one
rounding is the sum, fused or not; the quantiser rounds ``lo`` down and ``hi`` up and checks the decoded
plane in those operations, so every decoded box holds the exact (padded) box of its child. The walk
(``wide_walk.trace_flat_wide_q``) then computes ``(plane - o) / d`` as the uncompressed walk does; that is
monotone in the plane, so every box the uncompressed walk enters is entered here too (with an entry
distance no larger): the same triangles reach the same watertight test and float64 confirmation, and
the winners and ``t`` are those of ``"wide4"`` (only the visiting order may differ, hence ties on a
shared edge). The walk reads four 16-byte rows a node instead of seven, except for the top levels
(:data:`FLOAT_TOP`), which it reads from the float rows; those stay (the refit climbs through them) and
the nodes cost 64 more bytes each (about 12 bytes a triangle on the terrain 2 M).

Kept current: :func:`quantise` after a build or any refit that wrote the float rows (one launch), and
inside the default wide-only refit's climb (``wide_refit_tris``, ``RAYD_TRI_REFIT=wide_tris``): the thread
that completes a wide node (every child written) reads its rows from L2 for the union it passes up and
quantises the node from the same rows (:func:`climb_q`), in the same launch. Nodes the walk reads from
their float rows (:data:`FLOAT_TOP`) are not quantised.
"""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.edge_wide_q import mat43, quantise_children
from rayd.engine.native import bits_float, load4i
from rayd.engine.refit import _fence, _load_l2
from rayd.engine.watertight import INF
from rayd.engine.wide_refit import _slot_write

wp.set_module_options({"enable_backward": False})

_OPEN_ALL = wp.constant(1 << 24)

#: Wide nodes numbered below this are walked from their float rows (``RAYD_WIDEQ_FLOAT_TOP``, read at import;
#: per scene at :func:`attach`). The collapse numbers the nodes level by level from the root, so these are the
#: top levels: a few hundred kilobytes every ray shares (cache-resident), whose 8-bit grids are the coarsest in
#: absolute terms. On the terrain 2 M (PLOC; rays straight down on a grid of half cells, nodes aligned with the
#: mesh's cells) the padded upper planes sit just above a grid line and round up by a whole step (1/128 of a
#: node), so rays beside a child's boundary also enter its neighbour, and its children, down to the level where
#: a step is under the ray's distance to the boundary: 13.54 inner nodes a ray (xy containment along the walk,
#: CPU count) against 10.57 with float rows; float rows for the first 1,024 nodes: 10.67, 4,096: 10.57.
FLOAT_TOP = int(os.environ.get("RAYD_WIDEQ_FLOAT_TOP", "4096"))


@wp.func
def _store_q(q: wp.array(dtype=wp.vec4i), w: int, lo_m: mat43, hi_m: mat43, codes: wp.vec4i, refs: wp.vec4i):
    """Write the four compressed rows of wide node ``w`` (children with ``codes[j] < 0`` are empty)."""
    header, xy, z, origin, e = quantise_children(lo_m, hi_m, codes)
    q[4 * w] = header
    q[4 * w + 1] = xy
    q[4 * w + 2] = z
    q[4 * w + 3] = refs


@wp.func
def _boxes(lx: wp.vec4, hx: wp.vec4, ly: wp.vec4, hy: wp.vec4, lz: wp.vec4, hz: wp.vec4) -> tuple[mat43, mat43]:
    """The four children's corners ``(lo_m, hi_m)`` from a wide node's six plane rows."""
    lo_m = mat43()
    hi_m = mat43()
    for j in range(4):
        lo_m[j] = wp.vec3(lx[j], ly[j], lz[j])
        hi_m[j] = wp.vec3(hx[j], hy[j], hz[j])
    return lo_m, hi_m


@wp.kernel
def _quantise_kernel(data: wp.array(dtype=wp.vec4), wlinks: wp.array(dtype=wp.vec4i), q_from: int,
                     q: wp.array(dtype=wp.vec4i)):
    """Wide node ``w``'s compressed rows from its float rows (a thread per node; none below ``q_from``, which
    the walk reads from the float rows)."""
    w = wp.tid()
    if w < q_from:
        return
    b = 8 * w
    lo_m, hi_m = _boxes(data[b], data[b + 1], data[b + 2], data[b + 3], data[b + 4], data[b + 5])
    _store_q(q, w, lo_m, hi_m, wlinks[b + 7], wlinks[b + 6])


def attach(wide, stream: wp.Stream | None = None) -> None:
    """Give ``wide`` (a :class:`rayd.engine.wide_nodes.WideNodes`) its compressed rows ``wide.q``
    (``wp.array(dtype=wp.vec4i)`` (4 W,)), quantised from its float rows now (one launch), and ``wide.q_from``
    (:data:`FLOAT_TOP`, at most W): the walk reads the nodes numbered below it from the float rows, so their
    compressed rows are neither written nor read (zeros)."""
    wide.q = wp.zeros(4 * wide.count, dtype=wp.vec4i, device=wide.data.device)
    wide.q_from = min(FLOAT_TOP, wide.count)
    quantise(wide, stream)


def quantise(wide, stream: wp.Stream | None = None) -> None:
    """Quantise ``wide.q`` again from the float rows (after a refit that wrote only those; no-op without
    ``wide.q`` or wide nodes)."""
    if getattr(wide, "q", None) is None or wide.pairs.root < 0:
        return
    wp.launch(_quantise_kernel, wide.count, [wide.data, wide.links, wide.q_from], [wide.q], device=wide.q.device,
              stream=stream)


@wp.func
def climb_q(w: int, up: wp.array(dtype=wp.int32), counters: wp.array(dtype=wp.int32), data: wp.array(dtype=wp.vec4),
            wide_f: wp.array(dtype=float), wlinks: wp.array(dtype=wp.vec4i), q: wp.array(dtype=wp.vec4i),
            q_from: int):
    """``wide_refit._climb`` that also quantises each wide node it completes from ``q_from`` on (the top nodes,
    the climb's last and least parallel steps, are walked from the float rows) from the rows it reads for the
    union (the same bits as :func:`quantise` after the climb)."""
    while True:
        word = up[w]
        last = word & 3
        base = 8 * w
        lx = _load_l2(data, base)
        hx = _load_l2(data, base + 1)
        ly = _load_l2(data, base + 2)
        hy = _load_l2(data, base + 3)
        lz = _load_l2(data, base + 4)
        hz = _load_l2(data, base + 5)
        lo_m, hi_m = _boxes(lx, hx, ly, hy, lz, hz)
        if w >= q_from:
            codes = wp.vec4i(-1)
            for j in range(4):
                if j <= last:
                    codes[j] = j
            _store_q(q, w, lo_m, hi_m, codes, wlinks[base + 6])
        parent = (word >> 2) - 1
        if parent < 0:
            return  # the root (its box is no wide row)
        lo = lo_m[0]
        hi = hi_m[0]
        for j in range(1, 4):  # (wide_refit._union_rows' order: the same bits)
            if j <= last:
                lo = wp.min(lo, lo_m[j])
                hi = wp.max(hi, hi_m[j])
        _slot_write(wide_f, parent, lo, hi)
        w = parent >> 2
        _fence()
        if wp.atomic_add(counters, w, 1) != (up[w] & 3):
            return  # a sibling's thread finishes w
        counters[w] = 0  # every child has arrived: zero again for the next refit (no memset)


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    union { unsigned int i; float f; } u;
    u.i = __byte_perm((unsigned int)w, 0x4B000000u, 0x7540u + (unsigned int)j);
    return u.f - 8388608.0f;
#else
    return (float)((w >> (8 * j)) & 255);
#endif
""")
def byte_float(w: int, j: int) -> float:
    """``float((w >> 8 j) & 255)``, exactly; on CUDA byte ``j`` of ``w`` put below the exponent of ``2^23``
    (one byte permute, ``PRMT``, for sm_90) less ``2^23``: no integer-to-float conversion."""
    ...


@wp.func
def children_q(q: wp.array(dtype=wp.vec4i), node: int, near: wp.vec3i, o: wp.vec3, inv_d: wp.vec3,
               reach: float) -> wp.vec4:
    """Entry distance of the ray into each decoded child box of compressed node ``node`` (+inf: missed or
    empty), as ``wide_walk._children`` computes it for float rows: each axis's near plane by the sign of the
    direction (``near``: ``wide_walk._near_rows``), ``(plane - o) * inv_d``, overlap with ``[0, reach)``."""
    r0 = load4i(q, 4 * node)
    r1 = load4i(q, 4 * node + 1)
    r2 = load4i(q, 4 * node + 2)
    ex = r0[3]
    org = wp.vec3(bits_float(r0[0]), bits_float(r0[1]), bits_float(r0[2]))
    s = wp.vec3(bits_float((ex & 255) << 23), bits_float(((ex >> 8) & 255) << 23),
                bits_float(((ex >> 16) & 255) << 23))
    nx = wp.where(near[0] == 0, r1[0], r1[1])
    fx = wp.where(near[0] == 0, r1[1], r1[0])
    ny = wp.where(near[1] == 0, r1[2], r1[3])
    fy = wp.where(near[1] == 0, r1[3], r1[2])
    nz = wp.where(near[2] == 0, r2[0], r2[1])
    fz = wp.where(near[2] == 0, r2[1], r2[0])
    out = wp.vec4(INF)
    for j in range(4):
        if ((r1[0] >> (8 * j)) & 255) <= ((r1[1] >> (8 * j)) & 255):  # (an empty slot: lo.x = 255 > hi.x = 0)
            ax = org[0] + byte_float(nx, j) * s[0]
            ay = org[1] + byte_float(ny, j) * s[1]
            az = org[2] + byte_float(nz, j) * s[2]
            bx = org[0] + byte_float(fx, j) * s[0]
            by = org[1] + byte_float(fy, j) * s[1]
            bz = org[2] + byte_float(fz, j) * s[2]
            enter = wp.max(wp.max((ax - o[0]) * inv_d[0], (ay - o[1]) * inv_d[1]),
                           wp.max((az - o[2]) * inv_d[2], 0.0))
            leave = wp.min(wp.min((bx - o[0]) * inv_d[0], (by - o[1]) * inv_d[1]), (bz - o[2]) * inv_d[2])
            if leave >= enter and enter < reach:
                out[j] = enter
    if (ex & _OPEN_ALL) != 0:  # (a non-finite child box: never for triangles, whose points are checked)
        for j in range(4):
            if ((r1[0] >> (8 * j)) & 255) <= ((r1[1] >> (8 * j)) & 255):
                out[j] = 0.0
    return out
