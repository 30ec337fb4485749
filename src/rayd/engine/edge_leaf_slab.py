"""Per-leaf oriented slabs for the wide point / top-k edge walks (issue 11, opt-in).

A point query near a surface sees the axis-aligned boxes of the tree's leaves from the side: a leaf
of up to 8 segments on a tilted or bumpy patch has a box much thicker than the patch, so the walk
tests many segments that cannot be nearer than its radius (CPU floors, ``benchmarks/edge_leaf_bounds.py``:
terrain 2 M 92 -> 46 segments per query with a slab along each leaf's plane normal, sphere 1 M 138 -> 102).
Each leaf gets one slab ``lo <= n . x <= hi`` along a direction ``n`` fixed at build (the least-variance
direction of its endpoints, ``wp.eig3`` of their covariance, stored as three 10-bit signed integers in
one int32, so decoding is exact), its bounds recomputed from the live segments at every refit. The
walk, having found a leaf child within its radius, reads the leaf's 16-byte record
``slab[first] = (direction bits, lo, hi, 0)`` (int32 words, the bounds' float bits; indexed by the leaf's first slot) and skips the leaf if
the slab lies beyond the radius: ``(gap - tol)^2 > radius^2 |n|^2``.

Exactness: every point ``c`` of a segment of the leaf has ``n . c`` in ``[min, max]`` of ``n .`` its
endpoints (convexity), so the distance from the query ``p`` to ``c`` is at least the distance from ``n . p``
to that interval over ``|n|``. The float32 rounding of ``n . x`` (at most a few ulps of ``|n|_1 max|x_i|``)
is covered by widening the bounds at refit and shrinking the gap at search by ``2^-18 |n|_1 max|x_i|``
each, so a leaf holding a segment within the walk's opening radius is never skipped and the answers,
ties included, are those of the walk without slabs (tested). A direction that goes stale when the
vertices move only loosens the slab. A leaf whose segments are all masked out gets an empty slab.
"""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.native import bits_float, float_bits

wp.set_module_options({"enable_backward": False})

#: Give trees with a wide copy per-leaf slabs (``RAYD_EDGE_LEAF_SLAB=1``; read when an ``EdgeBvh`` is built).
LEAF_SLAB = os.environ.get("RAYD_EDGE_LEAF_SLAB", "0").strip() == "1"
#: Test the slabs of all leaf children of a wide node at once, at its visit (``RAYD_EDGE_LEAF_SLAB_AHEAD=1``; read
#: at each search), instead of each just before its segments: the loads overlap, the radius is the node's.
AHEAD = os.environ.get("RAYD_EDGE_LEAF_SLAB_AHEAD", "0").strip() == "1"
_TOL = wp.constant(1.0 / 262144.0)  # 2^-18
_INF = wp.constant(float("inf"))


@wp.func
def slab_direction(bits: int) -> wp.vec3:
    """The integer direction ``(a, b, c)``, each in [-511, 511], packed as 10-bit fields of ``bits``."""
    d = wp.vec3(0.0)
    for k in range(3):
        v = (bits >> (10 * k)) & 1023
        if v >= 512:
            v -= 1024
        d[k] = float(v)
    return d


@wp.func
def _pack(n: wp.vec3) -> int:
    m = wp.max(wp.max(wp.abs(n[0]), wp.abs(n[1])), wp.abs(n[2]))
    if not (m > 0.0) or not wp.isfinite(m):
        return int(1)  # (1, 0, 0)
    s = 511.0 / m
    a = int(wp.round(n[0] * s))
    b = int(wp.round(n[1] * s))
    c = int(wp.round(n[2] * s))
    return (a & 1023) | ((b & 1023) << 10) | ((c & 1023) << 20)


@wp.func
def slab_skips(rec: wp.vec4i, p: wp.vec3, open_sq: float) -> bool:
    """True where the leaf of record ``rec`` lies beyond the squared radius ``open_sq`` of point ``p``."""
    n = slab_direction(rec[0])
    x = wp.dot(n, p)
    gap = wp.max(wp.max(bits_float(rec[1]) - x, x - bits_float(rec[2])), 0.0)
    norm1 = wp.abs(n[0]) + wp.abs(n[1]) + wp.abs(n[2])
    gap = gap - _TOL * norm1 * wp.max(wp.max(wp.abs(p[0]), wp.abs(p[1])), wp.abs(p[2]))
    if gap <= 0.0:
        return False
    return gap * gap > open_sq * wp.dot(n, n)


@wp.kernel
def _directions_kernel(leaves: wp.array(dtype=wp.vec4i), seg: wp.array(dtype=wp.vec3),
                       direction: wp.array(dtype=wp.int32)):
    """Leaf ``t``: the least-variance direction of its segments' endpoints, packed."""
    t = wp.tid()
    leaf = leaves[t]
    first = int(leaf[1])
    count = int(leaf[2])
    mean = wp.vec3(0.0)
    for s in range(2 * first, 2 * (first + count)):
        mean += seg[s]
    mean = mean / float(2 * count)
    cov = wp.mat33(0.0)
    for s in range(2 * first, 2 * (first + count)):
        d = seg[s] - mean
        cov += wp.outer(d, d)
    q = wp.mat33()
    e = wp.vec3()
    wp.eig3(cov, q, e)
    j = int(0)
    if e[1] < e[j]:
        j = 1
    if e[2] < e[j]:
        j = 2
    direction[t] = _pack(wp.vec3(q[0, j], q[1, j], q[2, j]))


@wp.func
def slab_record(first: int, count: int, bits: int, seg: wp.array(dtype=wp.vec3),
                slot_id: wp.array(dtype=wp.int32)) -> wp.vec4i:
    """The record ``(direction bits, lo, hi, 0)`` of the leaf of slots ``first .. first + count - 1`` over its
    unmasked segments, widened (empty: ``lo = +inf, hi = -inf``)."""
    n = slab_direction(bits)
    lo = float(_INF)
    hi = float(-_INF)
    big = float(0.0)
    for s in range(first, first + count):
        if slot_id[s] >= 0:
            for end in range(2):
                x = seg[2 * s + end]
                v = wp.dot(n, x)
                lo = wp.min(lo, v)
                hi = wp.max(hi, v)
                big = wp.max(big, wp.max(wp.max(wp.abs(x[0]), wp.abs(x[1])), wp.abs(x[2])))
    tol = _TOL * (wp.abs(n[0]) + wp.abs(n[1]) + wp.abs(n[2])) * big
    return wp.vec4i(bits, float_bits(lo - tol), float_bits(hi + tol), 0)


@wp.kernel
def _slab_kernel(leaves: wp.array(dtype=wp.vec4i), direction: wp.array(dtype=wp.int32), seg: wp.array(dtype=wp.vec3),
                 slot_id: wp.array(dtype=wp.int32), slab: wp.array(dtype=wp.vec4i)):
    """Leaf ``t``: ``slab[first]`` (:func:`slab_record`)."""
    t = wp.tid()
    leaf = leaves[t]
    first = int(leaf[1])
    slab[first] = slab_record(first, int(leaf[2]), int(direction[t]), seg, slot_id)


class LeafSlabs:
    """The per-leaf slabs of one ``EdgeBvh`` (see the module docstring).

    Args:
        leaves: the tree's leaves ``(node id, first, count, parent)`` (``TreeRefit.leaves``).
        seg, slot_id: the tree's refitted segments and slot ids (``EdgeBvh.seg`` / ``slot_id``).
        stream: the stream to build on (``None`` on the CPU).

    Attributes:
        slab: ``wp.array(dtype=wp.vec4i)`` (slots,): the record of each leaf at its first slot (other entries
            unused); what the walk reads.
    """

    def __init__(self, leaves: wp.array, seg: wp.array, slot_id: wp.array, stream: wp.Stream | None = None) -> None:
        dev = seg.device
        self.leaves = leaves
        self.direction = wp.empty(leaves.shape[0], dtype=wp.int32, device=dev)
        self.slab = wp.zeros(slot_id.shape[0], dtype=wp.vec4i, device=dev)
        wp.launch(_directions_kernel, leaves.shape[0], [leaves, seg], [self.direction], device=dev, stream=stream)
        self.refit(seg, slot_id, stream)

    @property
    def nbytes(self) -> int:
        """Bytes of the records (16 a slot)."""
        return 16 * self.slab.shape[0]

    def refit(self, seg: wp.array, slot_id: wp.array, stream: wp.Stream | None = None) -> None:
        """The slabs' bounds from the current segments and mask (one launch; directions kept). The wide-tree
        refit (``edge_refit_wide.WideRefit``) writes them in its leaf threads instead."""
        wp.launch(_slab_kernel, self.leaves.shape[0], [self.leaves, self.direction, seg, slot_id], [self.slab],
                  device=seg.device, stream=stream)
