"""Segment distances of the nearest-edge walks, and the read of one leaf-ordered segment (Warp).

The walks (``nearest_edge_kernels.py``, ``edge_wide_walk.py``) decide their winners by the float32
squared distances of this module, computed with every product rounded on its own (``mul_rn``: CUDA's
compiler would otherwise fuse products and sums into FMAs, which the CPU build does not), so that CPU
and CUDA pick the same edge among edges at (nearly) equal distances, e.g. the edges around a vertex
nearest to the query. Two switches, read at each search (:func:`seg_modes`; one GPU run A/Bs them;
the answers are the same edges, bit for bit, either way; ``tests/engine/test_edge_segment.py``):

* :data:`SEG_TEST` (CUDA) / :data:`SEG_TEST_CPU` (``RAYD_EDGE_SEG_TEST`` sets both): ``"exact"`` computes
  :func:`point_segment_dsq` for every segment a walk tests; ``"pruned"`` calls
  :func:`point_segment_dsq_within` instead, which returns the same value where it may be within the
  search radius and ``inf`` for a segment whose line already lies beyond it, and skips the division
  where the query projects beyond an end (about 96 % of the tests: the segments are short against the
  radius).
* :data:`SEG_LOAD` (``RAYD_EDGE_SEG_LOAD``): ``"plain"`` reads a segment's two endpoints as Warp's
  ``vec3`` loads (six 32-bit loads on CUDA); ``"v2"`` reads its 24 contiguous bytes in three 64-bit
  read-only loads (:func:`load_segment`; the CPU reads the same values either way).

Defaults since the 20th session (one H200, ``benchmarks/results/h200-session20/``, 1 M sorted points,
``ploc+q:8``, median of 5): ``pruned`` + ``v2`` on CUDA, terrain 2 M 15.23 -> 13.98 ms, sphere 1 M
33.78 -> 30.31 ms against ``exact`` + ``plain``; the CPU keeps ``exact``.

References:
    Ericson 2004, "Real-Time Collision Detection", Morgan Kaufmann, sec. 5.1.2
    (closest point on a segment) and 5.1.9 (closest points of two segments).
"""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.native import mul_rn

wp.set_module_options({"enable_backward": False})

_ENV_TEST = os.environ.get("RAYD_EDGE_SEG_TEST", "").strip().lower()
#: ``"exact"`` or ``"pruned"`` on CUDA (see the module's docstring); read at each search (:func:`seg_modes`).
SEG_TEST = _ENV_TEST or "pruned"
#: The same on the CPU. Measured there (2-core VM, cpu-size terrain / sphere, ``ploc+q:8`` and ``sah:4``, medians of
#: 3 interleaved): ``"pruned"`` 2-9 % slower than ``"exact"`` (within the noise, never faster).
SEG_TEST_CPU = _ENV_TEST or "exact"
#: ``"plain"`` or ``"v2"`` (see the module's docstring; the CPU reads alike either way); read at each search.
SEG_LOAD = os.environ.get("RAYD_EDGE_SEG_LOAD", "v2").strip().lower()

_INF = wp.constant(float("inf"))
# Relative slack of the line test of point_segment_dsq_within, in units of |p - a|^2: 2^-16, about 7 x the
# float32 rounding of either distance (see there).
_LINE_SLACK = wp.constant(1.0 / 65536.0)

vec6f = wp.types.vector(length=6, dtype=wp.float32)


def seg_modes(device) -> tuple[str, str]:
    """``(segment test, segment load)`` of the search kernels for ``device`` (a ``wp.context.Device``)."""
    return (SEG_TEST if device.is_cuda else SEG_TEST_CPU), SEG_LOAD


@wp.func
def _dot_rn(a: wp.vec3, b: wp.vec3) -> float:
    """``a . b`` with every product rounded on its own (no FMA), the same on CPU and CUDA."""
    return mul_rn(a[0], b[0]) + mul_rn(a[1], b[1]) + mul_rn(a[2], b[2])


@wp.func
def _axpy_rn(s: float, x: wp.vec3, y: wp.vec3) -> wp.vec3:
    """``s x + y``, each product rounded on its own (no FMA)."""
    return wp.vec3(mul_rn(s, x[0]) + y[0], mul_rn(s, x[1]) + y[1], mul_rn(s, x[2]) + y[2])


@wp.func
def point_segment_dsq(p: wp.vec3, a: wp.vec3, b: wp.vec3) -> float:
    """Squared distance from ``p`` to the segment ``[a, b]`` (float32, rounded alike on every device)."""
    ab = b - a
    pa = p - a
    den = _dot_rn(ab, ab)
    t = float(0.0)
    if den > 0.0:
        t = wp.clamp(_dot_rn(pa, ab) / den, 0.0, 1.0)
    q = _axpy_rn(-t, ab, pa)
    if t >= 1.0:  # the end vertex itself (not pa - ab): a vertex's edges tie exactly, then by id
        q = p - b
    return _dot_rn(q, q)


@wp.func
def point_segment_dsq_within(p: wp.vec3, a: wp.vec3, b: wp.vec3, limit: float) -> float:
    """:func:`point_segment_dsq`, bit for bit, wherever that value is ``<= limit``; else that value or ``inf``.

    Args:
        p: the query point (finite), float32 ``vec3``, in the walk's coordinates.
        a, b: the segment's endpoints, float32 ``vec3`` (any values, non-finite ones included).
        limit: the walk's squared radius (float32, ``inf`` allowed): a segment is taken when its distance is
            ``<= limit``.

    Returns:
        With ``ab = b - a``, ``pa = p - a``, ``den = ab . ab``, ``c = pa . ab`` (each as in
        :func:`point_segment_dsq`): where ``0 < den < inf`` and ``c <= 0`` the clamped parameter is 0, so
        the value is ``pa . pa`` (no division); where ``c >= den`` it is 1, so ``(p - b) . (p - b)``; between
        them, ``inf`` when ``(pa . pa) den - c^2 > (limit + 2^-16 (pa . pa)) den`` (the squared distance to
        the segment's line, times ``den``, beyond the limit), else the division and clamp of
        :func:`point_segment_dsq`. Every other case (``den`` zero, infinite or NaN) is that function's.

    Concretely, ``inf`` is returned only where :func:`point_segment_dsq` exceeds ``limit``: the line's
    squared distance bounds the segment's from below; the float32 rounding of ``(pa . pa) den - c^2``
    (about 16 ulps of ``(pa . pa) den``) and of the segment distance at the rounded parameter (about 24
    ulps of ``pa . pa``) are both below the slack ``2^-16 (pa . pa)``, and the line test cannot pass with
    ``limit >= pa . pa``. So a walk taking segments with ``dsq <= limit`` takes the same ones, with the same
    values, as with :func:`point_segment_dsq`.
    """
    ab = b - a
    pa = p - a
    den = _dot_rn(ab, ab)
    c = _dot_rn(pa, ab)
    if den > 0.0 and den < _INF:
        paa = _dot_rn(pa, pa)
        if c <= 0.0 or c >= den:  # an end (about 96 % of a walk's tests): selected, not branched on
            pb = p - b
            return wp.where(c <= 0.0, paa, _dot_rn(pb, pb))
        if mul_rn(paa, den) - mul_rn(c, c) > mul_rn(limit + mul_rn(_LINE_SLACK, paa), den):
            return _INF
    t = float(0.0)
    if den > 0.0:
        t = wp.clamp(c / den, 0.0, 1.0)
    q = _axpy_rn(-t, ab, pa)
    if t >= 1.0:
        q = p - b
    return _dot_rn(q, q)


@wp.func
def ray_segment_dsq(o: wp.vec3, d: wp.vec3, s0: float, s1: float, a: wp.vec3, b: wp.vec3) -> float:
    """Squared distance between ``o + s d, s in [s0, s1]`` and the segment ``[a, b]`` (rounded alike everywhere)."""
    e = b - a
    r = o - a
    dd = _dot_rn(d, d)
    ee = _dot_rn(e, e)
    de = _dot_rn(d, e)
    c = _dot_rn(d, r)
    f = _dot_rn(e, r)
    s = s0
    t = float(0.0)
    if ee > 0.0:
        den = mul_rn(dd, ee) - mul_rn(de, de)
        if den > mul_rn(mul_rn(1.0e-12, dd), ee):
            s = wp.clamp((mul_rn(de, f) - mul_rn(c, ee)) / den, s0, s1)
        else:
            s = wp.clamp(-c / dd, s0, s1)
        t = (mul_rn(de, s) + f) / ee
        if t < 0.0:
            t = 0.0
            s = wp.clamp(-c / dd, s0, s1)
        elif t > 1.0:
            t = 1.0
            s = wp.clamp((de - c) / dd, s0, s1)
    else:
        s = wp.clamp(-c / dd, s0, s1)
    q = _axpy_rn(s, d, o) - _axpy_rn(t, e, a)
    return _dot_rn(q, q)


@wp.func_native("""
    wp::vec_t<6, wp::float32> r;
#if defined(__CUDA_ARCH__)
    const float* f = (const float*)wp::address(seg, 2 * s);
    asm("ld.global.nc.v2.f32 {%0, %1}, [%2];" : "=f"(r.c[0]), "=f"(r.c[1]) : "l"(f));
    asm("ld.global.nc.v2.f32 {%0, %1}, [%2+8];" : "=f"(r.c[2]), "=f"(r.c[3]) : "l"(f));
    asm("ld.global.nc.v2.f32 {%0, %1}, [%2+16];" : "=f"(r.c[4]), "=f"(r.c[5]) : "l"(f));
#else
    wp::vec3 a = wp::load(wp::address(seg, 2 * s));
    wp::vec3 b = wp::load(wp::address(seg, 2 * s + 1));
    r.c[0] = a[0]; r.c[1] = a[1]; r.c[2] = a[2]; r.c[3] = b[0]; r.c[4] = b[1]; r.c[5] = b[2];
#endif
    return r;
""")
def _load_segment6(seg: wp.array(dtype=wp.vec3), s: int) -> vec6f:
    """``seg[2 s], seg[2 s + 1]`` as six floats, in three 64-bit read-only loads on CUDA (24 contiguous
    bytes at a multiple of 8 from the array's start; Warp's allocations are 16-byte aligned)."""
    ...


@wp.func
def load_segment(seg: wp.array(dtype=wp.vec3), s: int) -> tuple[wp.vec3, wp.vec3]:
    """The endpoints ``seg[2 s], seg[2 s + 1]`` of leaf slot ``s`` (three 64-bit loads on CUDA)."""
    v = _load_segment6(seg, s)
    return wp.vec3(v[0], v[1], v[2]), wp.vec3(v[3], v[4], v[5])
