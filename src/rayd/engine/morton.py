"""Morton keys of boxes, sorted on the device: the first stage of the linear builders.

:func:`morton_code` quantises a point into a box (``bounds``: 6 floats, lower xyz then
upper xyz) with ``bits`` bits per axis (10: 30-bit keys, 21: 63-bit keys) and
interleaves the bits (x highest). ``cubic``: one scale for all axes (the largest
extent), so that a cell is a cube and a flat scene spends no key bits on splits across
its thin axis early. Used by ``edge_lbvh.py`` (segment midpoints) and ``ploc.py``
(triangle box centres).

:func:`sorted_box_keys` does the whole stage for boxes: centroid bounds by a two-pass
reduction (no single-address atomic per box), keys, a stable radix sort of
``(key, box index)`` pairs. Four launches plus the sort.

References:
    Morton 1966, "A computer oriented geodetic data base and a new technique in file
    sequencing", IBM; Karras 2012, "Maximizing Parallelism in the Construction of BVHs,
    Octrees, and k-d Trees", HPG 2012, sec. 4 (63-bit keys, ties by index).
"""

from __future__ import annotations

import warp as wp

from rayd.engine.runtime import launch_once

wp.set_module_options({"enable_backward": False})

_INF = wp.constant(float("inf"))

#: Threads of the first bounds pass (at most) and partial boxes of the second.
_BOUNDS_THREADS = 65536
_BOUNDS_PARTIALS = wp.constant(256)


@wp.func
def morton_code(c: wp.vec3, bounds: wp.array(dtype=float), bits: int, cubic: int) -> wp.int64:
    """Interleaved key of ``c`` in ``bounds`` (see the module docstring); non-finite coordinates map to 0."""
    code = wp.int64(0)
    scale = float(1 << bits)
    top = (1 << bits) - 1
    big = wp.max(wp.max(bounds[3] - bounds[0], bounds[4] - bounds[1]), bounds[5] - bounds[2])
    for k in range(3):
        lo = bounds[k]
        extent = bounds[3 + k] - lo
        if cubic != 0:
            extent = big
        x = float(0.0)
        if extent > 0.0:
            x = wp.clamp((c[k] - lo) / extent, 0.0, 1.0)
        if not wp.isfinite(x):
            x = 0.0
        q = wp.int64(wp.min(int(x * scale), top))
        for b in range(bits):
            code = code | (((q >> wp.int64(b)) & wp.int64(1)) << wp.int64(3 * b + 2 - k))
    return code


@wp.func
def _centre(lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3), i: int) -> wp.vec3:
    return 0.5 * (lowers[i] + uppers[i])


@wp.kernel
def _bounds_partial_kernel(lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3), threads: int,
                           partial: wp.array(dtype=float)):
    i = wp.tid()
    inf = _INF
    lo = wp.vec3(inf, inf, inf)
    hi = wp.vec3(-inf, -inf, -inf)
    for k in range(i, lowers.shape[0], threads):
        c = _centre(lowers, uppers, k)
        if wp.isfinite(c):
            lo = wp.min(lo, c)
            hi = wp.max(hi, c)
    slot = i % _BOUNDS_PARTIALS
    for k in range(3):
        wp.atomic_min(partial, 6 * slot + k, lo[k])
        wp.atomic_max(partial, 6 * slot + 3 + k, hi[k])


@wp.kernel
def _bounds_final_kernel(partial: wp.array(dtype=float), bounds: wp.array(dtype=float)):
    i = wp.tid()
    for k in range(3):
        wp.atomic_min(bounds, k, partial[6 * i + k])
        wp.atomic_max(bounds, 3 + k, partial[6 * i + 3 + k])


@wp.kernel
def _box_keys_kernel(lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3), bounds: wp.array(dtype=float),
                     bits: int, cubic: int, codes: wp.array(dtype=wp.int64), order: wp.array(dtype=wp.int32)):
    i = wp.tid()
    codes[i] = morton_code(_centre(lowers, uppers, i), bounds, bits, cubic)
    order[i] = wp.int32(i)


@wp.kernel
def _reset_bounds_kernel(partial: wp.array(dtype=float), bounds: wp.array(dtype=float)):
    """Empty boxes (lower +inf, upper -inf) in every partial slot and in ``bounds``."""
    i = wp.tid()
    for k in range(3):
        partial[6 * i + k] = _INF
        partial[6 * i + 3 + k] = -_INF
        if i == 0:
            bounds[k] = _INF
            bounds[3 + k] = -_INF


class BoxKeys:
    """Scratch of :func:`sorted_box_keys` for ``n`` boxes on ``device`` (reusable across builds of that size).

    Attributes:
        codes: int64 (2 n,), the sorted keys in ``codes[:n]`` (the sort needs twice the room).
        order: int32 (2 n,), box index of each sorted key in ``order[:n]``.
        bounds: float32 (6,), the centroid bounds (lower xyz, upper xyz).
    """

    def __init__(self, n: int, device, arrays: list | None = None) -> None:
        self.n = n
        if arrays is not None:  # (the caller's, e.g. carved from one allocation: :meth:`parts` gives their sizes)
            self.codes, self.order, self.partial, self.bounds = arrays
            return
        self.codes = wp.empty(2 * n, dtype=wp.int64, device=device)
        self.order = wp.empty(2 * n, dtype=wp.int32, device=device)
        self.partial = wp.empty(6 * int(_BOUNDS_PARTIALS), dtype=float, device=device)
        self.bounds = wp.empty(6, dtype=float, device=device)

    @staticmethod
    def parts(n: int) -> list[tuple[object, int]]:
        """``(dtype, length)`` of ``codes``, ``order``, ``partial``, ``bounds`` (the ``arrays`` to pass)."""
        return [(wp.int64, 2 * n), (wp.int32, 2 * n), (float, 6 * int(_BOUNDS_PARTIALS)), (float, 6)]


def sorted_box_keys(lowers: wp.array, uppers: wp.array, scratch: BoxKeys, stream: wp.Stream | None = None,
                    key_bits: int = 63, cubic: bool = True) -> int:
    """Morton keys of the box centres ``0.5 (lowers + uppers)``, sorted with their box indices.

    Args:
        lowers, uppers: ``wp.array(dtype=wp.vec3)`` (n,), the boxes.
        scratch: a :class:`BoxKeys` of the same n and device; receives the result.
        stream: the stream to launch on (``None`` on the CPU).
        key_bits: 63 or 30.
        cubic: cubic cells (see the module docstring).

    Returns:
        The number of launches made (the radix sort counted as one).
    """
    n = lowers.shape[0]
    device = lowers.device
    # (a kernel, not uploads: a host-to-device copy may wait for the stream)
    launch_once(_reset_bounds_kernel, _BOUNDS_PARTIALS, [scratch.partial, scratch.bounds], device, stream)
    threads = max(1, min(_BOUNDS_THREADS, n))
    launch_once(_bounds_partial_kernel, threads, [lowers, uppers, threads, scratch.partial], device, stream)
    launch_once(_bounds_final_kernel, _BOUNDS_PARTIALS, [scratch.partial, scratch.bounds], device, stream)
    bits = key_bits // 3
    launch_once(_box_keys_kernel, n, [lowers, uppers, scratch.bounds, bits, int(cubic), scratch.codes, scratch.order],
                device, stream)
    wp.utils.radix_sort_pairs(scratch.codes, scratch.order, n, end_bit=3 * bits)
    return 5  # four kernels, the sort
