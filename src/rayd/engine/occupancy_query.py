"""The occupancy grid's queries: the per-point lookup and the segment crossings (see :mod:`rayd.engine.occupancy`).

:func:`decide` answers every point of a decided cell with its ``w_S'``, and a point of
a cell the surface cuts with ``w_S'`` of its partner cell's centre plus the signed
crossings of the segment from that centre to the point (:func:`segment_crossings`);
the rest is left to the hierarchical walk (:mod:`rayd.engine.winding`).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.accel import SceneAccel
from rayd.engine.occupancy import COARSE, CROSS_MARGIN, SPLIT_MIN, UNDECIDED, OccupancyGrid
from rayd.engine.runtime import PerRow, launch_rows, per_row
from rayd.engine.traversal import SceneView

wp.set_module_options({"enable_backward": False})

_UNDECIDED_CODE = wp.constant(UNDECIDED)
_COARSE = wp.constant(COARSE)
_STACK = 64


@wp.func
def segment_crossings(view: SceneView, p0: wp.vec3d, p1: wp.vec3d) -> wp.vec2i:
    """``(sum of crossing signs, 1)`` of the segment ``p0 -> p1`` with the enabled flat faces, ``(0, 0)`` if unsure.

    A crossing counts ``+1`` where the segment passes a face against its normal
    (``(p1 - p0) . n < 0``: the winding number grows by one from ``p0`` to ``p1``),
    ``-1`` along it. Float64 triple products ``u, v, w`` of the segment's direction with
    the corners seen from ``p0`` (the line crosses the face iff they share a strict
    sign): a face where one of them is within ``CROSS_MARGIN (|u| + |v| + |w|)`` of zero
    (the line passes an edge, a vertex, or the face's plane) or whose crossing
    parameter is within ``CROSS_MARGIN`` of 0 or 1 makes the answer unsure. Degenerate
    faces (``u + v + w = 0``) never cross and are unsure only where the line passes them.
    """
    d = p1 - p0
    lo = wp.vec3(wp.float32(wp.min(p0[0], p1[0])), wp.float32(wp.min(p0[1], p1[1])), wp.float32(wp.min(p0[2], p1[2])))
    hi = wp.vec3(wp.float32(wp.max(p0[0], p1[0])), wp.float32(wp.max(p0[1], p1[1])), wp.float32(wp.max(p0[2], p1[2])))
    slack = wp.float32(1.0e-6) * (wp.length(hi - lo) + wp.float32(1.0e-30))
    lo = lo - wp.vec3(slack, slack, slack)
    hi = hi + wp.vec3(slack, slack, slack)
    eps = wp.float64(CROSS_MARGIN)
    total = int(0)
    sure = int(1)
    stack = wp.vector(dtype=wp.int32, length=_STACK)
    count = int(0)
    node = view.flat_root
    while node >= 0 and sure != 0:
        b0 = view.flat_lowers[node]
        b1 = view.flat_uppers[node]
        meets = (b0[0] <= hi[0] and b1[0] >= lo[0] and b0[1] <= hi[1] and b1[1] >= lo[1]
                 and b0[2] <= hi[2] and b1[2] >= lo[2])
        low = view.flat_lower_index[node]
        high = view.flat_upper_index[node][3] & 0x7FFFFFFF
        if meets and low[3] >= 0:
            if count < _STACK:
                stack[count] = high
                count += 1
            else:
                sure = 0
            node = low[3]
            continue
        if meets:
            for slot in range(low[3] & 0x7FFFFFFF, high):
                f = view.flat_primitives[slot]
                on = True
                if view.all_enabled == 0:
                    on = view.shape_enabled[view.flat_shape[f]] != wp.uint8(0)
                if on:
                    a = wp.vec3d(view.flat_points[view.flat_indices[3 * f]]) - p0
                    b = wp.vec3d(view.flat_points[view.flat_indices[3 * f + 1]]) - p0
                    c = wp.vec3d(view.flat_points[view.flat_indices[3 * f + 2]]) - p0
                    u = wp.dot(d, wp.cross(b, c))
                    v = wp.dot(d, wp.cross(c, a))
                    w = wp.dot(d, wp.cross(a, b))
                    scale = eps * (wp.abs(u) + wp.abs(v) + wp.abs(w))
                    pos = u > scale and v > scale and w > scale
                    neg = u < -scale and v < -scale and w < -scale
                    if pos or neg:
                        n = wp.cross(b - a, c - a)
                        t = wp.dot(a, n) / wp.dot(d, n)  # u + v + w = d . n != 0 here
                        if wp.abs(t) <= eps or wp.abs(t - wp.float64(1.0)) <= eps:
                            sure = 0
                        elif t > wp.float64(0.0) and t < wp.float64(1.0):
                            if neg:  # d . n < 0
                                total += 1
                            else:
                                total -= 1
                    else:
                        # a miss, unless a product is near zero while the others do not exclude the face
                        near_u = wp.abs(u) <= scale
                        near_v = wp.abs(v) <= scale
                        near_w = wp.abs(w) <= scale
                        if near_u or near_v or near_w:
                            mixed = (u > scale or v > scale or w > scale) and (u < -scale or v < -scale or w < -scale)
                            if not mixed:
                                sure = 0
        node = int(-1)
        if count > 0:
            count -= 1
            node = stack[count]
    if sure == 0:
        return wp.vec2i(0, 0)
    return wp.vec2i(total, 1)


@wp.func
def _neighbour(x: int, y: int, z: int, code: int) -> wp.vec3i:
    """The partner cell of cell ``(x, y, z)`` for ``code = 4 k + s - 1`` (``s`` steps along ``_OFFSETS[k]``)."""
    k = code // 4
    s = code - 4 * k + 1
    if k == 0:
        return wp.vec3i(x - s, y, z)
    if k == 1:
        return wp.vec3i(x + s, y, z)
    if k == 2:
        return wp.vec3i(x, y - s, z)
    if k == 3:
        return wp.vec3i(x, y + s, z)
    if k == 4:
        return wp.vec3i(x, y, z - s)
    return wp.vec3i(x, y, z + s)


@wp.kernel(enable_backward=False, module="unique")
def _decide_kernel(
    scene: SceneView,
    coarse: wp.array3d(dtype=wp.int8),
    cells: wp.array3d(dtype=wp.int8),
    partner: wp.array3d(dtype=wp.int8),
    lo: wp.vec3d,
    inv_cell: wp.float64,
    dims: wp.vec3i,
    points: wp.array(dtype=wp.vec3),
    points_stride: int,
    active: wp.array(dtype=wp.uint8),
    active_stride: int,
    out: wp.array(dtype=wp.float64),
    undecided: wp.array(dtype=wp.uint8),
):
    i = wp.tid()
    value = wp.float64(0.0)
    unsure = wp.uint8(0)
    p32 = points[i * points_stride]
    if active[i * active_stride] != wp.uint8(0) and wp.isfinite(p32):
        unsure = wp.uint8(1)
        q = wp.vec3d(p32)
        g = (q - lo) * inv_cell
        x = int(wp.floor(g[0]))
        y = int(wp.floor(g[1]))
        z = int(wp.floor(g[2]))
        if x >= 0 and y >= 0 and z >= 0 and x < dims[0] and y < dims[1] and z < dims[2]:
            v = int(coarse[x // _COARSE, y // _COARSE, z // _COARSE])
            if v == _UNDECIDED_CODE:
                v = int(cells[x, y, z])
            if v != _UNDECIDED_CODE:
                value = wp.float64(v)
                unsure = wp.uint8(0)
            else:
                k = int(partner[x, y, z])
                if k >= 0:  # a decided cell along a face direction: its w_S' plus the crossings from its centre to q
                    b = _neighbour(x, y, z, k)
                    half = wp.float64(0.5)
                    centre = lo + wp.vec3d(wp.float64(b[0]) + half, wp.float64(b[1]) + half,
                                           wp.float64(b[2]) + half) / inv_cell
                    r = segment_crossings(scene, centre, q)
                    if r[1] != 0:
                        value = wp.float64(int(cells[b[0], b[1], b[2]]) + r[0])
                        unsure = wp.uint8(0)
    out[i] = value
    undecided[i] = unsure


def decide(accel: SceneAccel, grid: OccupancyGrid, points: wp.array, active: wp.array, out: wp.array,
           n: int) -> wp.array | None:
    """Write ``w_S'`` (see the module docstring) of every point the grid decides into ``out`` (0 for inactive or
    non-finite points); return the int32 rows left undecided (``None`` if none). CPU only."""
    device = accel.device
    flag = wp.empty(n, dtype=wp.uint8, device=device)
    inputs = [accel.view_for(None), grid.coarse, grid.values, grid.partner, grid.lo, grid.inv_cell, grid.dims,
              *per_row(points, n), *per_row(active, n)]
    if n < SPLIT_MIN:  # a lookup costs less than splitting the launch over cores
        wp.launch(_decide_kernel, n, [x.array if isinstance(x, PerRow) else x for x in inputs], [out, flag],
                  device=device)
    else:
        launch_rows(_decide_kernel, n, inputs, [out, flag], device, None)
    rows = np.flatnonzero(flag.numpy()).astype(np.int32)
    if rows.size == 0:
        return None
    return wp.array(rows, dtype=wp.int32, device=device)
