"""Per-node data of the hierarchical winding number (Barill et al. 2018); see :mod:`rayd.engine.winding`.

For every BVH node: the area-weighted centroid of its faces, the sum of their area
vectors, their first and second moments about the centroid, a radius bounding the
distance from the centroid to every vertex below, the total area. Computed bottom up,
one launch per tree level (the levels are found once per BVH from its topology, which
refits keep), in float64, on the query's stream, when the BVH was refitted or the
enable flags changed since the last computation.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.accel import SceneAccel
from rayd.engine.bvh_nodes import BvhNodes
from rayd.engine.runtime import launch_stream
from rayd.engine.triangles import TriangleScene

wp.set_module_options({"enable_backward": False})


@wp.struct
class WindingData:
    """Per-node expansion data (float64), indexed like the node arrays it belongs to."""

    centre: wp.array(dtype=wp.vec3d)
    normal: wp.array(dtype=wp.vec3d)  # sum of area vectors A_f n_f
    moment: wp.array(dtype=wp.mat33d)  # sum of (A_f n_f)(c_f - c)^T
    second0: wp.array(dtype=wp.mat33d)  # S_i = sum_f (A_f n_f)_i Q_f, Q_f = mean of (p - c)(p - c)^T over face f
    second1: wp.array(dtype=wp.mat33d)
    second2: wp.array(dtype=wp.mat33d)
    radius: wp.array(dtype=wp.float64)
    area: wp.array(dtype=wp.float64)


@wp.kernel(enable_backward=False, module="unique")
def _node_data_kernel(
    level: wp.array(dtype=wp.int32),
    lower_index: wp.array(dtype=wp.vec4i),
    upper_index: wp.array(dtype=wp.vec4i),
    lowers: wp.array(dtype=wp.vec4),
    uppers: wp.array(dtype=wp.vec4),
    primitives: wp.array(dtype=wp.int32),
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    masked: int,
    face_shape: wp.array(dtype=wp.int32),
    shape_enabled: wp.array(dtype=wp.uint8),
    base: int,
    data: WindingData,
):
    node = level[wp.tid()]
    low = lower_index[node]
    zero = wp.float64(0.0)
    box_c = wp.vec3d(wp.float64(0.5) * (wp.float64(lowers[node][0]) + wp.float64(uppers[node][0])),
                     wp.float64(0.5) * (wp.float64(lowers[node][1]) + wp.float64(uppers[node][1])),
                     wp.float64(0.5) * (wp.float64(lowers[node][2]) + wp.float64(uppers[node][2])))
    total = zero
    weighted = wp.vec3d(zero, zero, zero)
    n_sum = wp.vec3d(zero, zero, zero)
    m_sum = wp.mat33d(zero, zero, zero, zero, zero, zero, zero, zero, zero)
    s0 = m_sum
    s1 = m_sum
    s2 = m_sum
    radius = zero
    centre = box_c
    if low[3] < 0:
        first = low[3] & 0x7FFFFFFF
        last = upper_index[node][3] & 0x7FFFFFFF
        for pass_ in range(2):  # pass 0: centre and dipole; pass 1: moment and radius about the centre
            c = box_c
            if total > zero:
                c = weighted / total
            for slot in range(first, last):
                f = primitives[slot]
                on = True
                if masked != 0:
                    on = shape_enabled[face_shape[f]] != wp.uint8(0)
                if on:
                    k = 3 * (face_base + f)
                    a = wp.vec3d(points[indices[k]])
                    b = wp.vec3d(points[indices[k + 1]])
                    e = wp.vec3d(points[indices[k + 2]])
                    nA = wp.float64(0.5) * wp.cross(b - a, e - a)
                    cf = (a + b + e) / wp.float64(3.0)
                    if pass_ == 0:
                        area = wp.length(nA)
                        total += area
                        weighted += area * cf
                        n_sum += nA
                    else:
                        m_sum += wp.outer(nA, cf - c)
                        da = a - c
                        db = b - c
                        de = e - c
                        dsum = da + db + de
                        q = wp.outer(da, da) + wp.outer(db, db) + wp.outer(de, de) + wp.outer(dsum, dsum)
                        q = q / wp.float64(12.0)
                        s0 += nA[0] * q
                        s1 += nA[1] * q
                        s2 += nA[2] * q
                        radius = wp.max(radius, wp.max(wp.length(a - c), wp.max(wp.length(b - c), wp.length(e - c))))
        if total > zero:
            centre = weighted / total
    else:
        left = base + low[3]
        right = base + (upper_index[node][3] & 0x7FFFFFFF)
        a_l = data.area[left]
        a_r = data.area[right]
        total = a_l + a_r
        if total > zero:
            centre = (a_l * data.centre[left] + a_r * data.centre[right]) / total
        n_sum = data.normal[left] + data.normal[right]
        m_sum = (data.moment[left] + wp.outer(data.normal[left], data.centre[left] - centre)
                 + data.moment[right] + wp.outer(data.normal[right], data.centre[right] - centre))
        for side in range(2):
            child = left
            if side == 1:
                child = right
            sh = data.centre[child] - centre  # shift: (p - c) = (p - c_child) + sh
            mc = data.moment[child]
            nc = data.normal[child]
            ss = wp.outer(sh, sh)
            r0 = wp.vec3d(mc[0, 0], mc[0, 1], mc[0, 2])
            r1 = wp.vec3d(mc[1, 0], mc[1, 1], mc[1, 2])
            r2 = wp.vec3d(mc[2, 0], mc[2, 1], mc[2, 2])
            s0 += data.second0[child] + wp.outer(r0, sh) + wp.outer(sh, r0) + nc[0] * ss
            s1 += data.second1[child] + wp.outer(r1, sh) + wp.outer(sh, r1) + nc[1] * ss
            s2 += data.second2[child] + wp.outer(r2, sh) + wp.outer(sh, r2) + nc[2] * ss
        radius = wp.max(wp.length(data.centre[left] - centre) + data.radius[left],
                        wp.length(data.centre[right] - centre) + data.radius[right])
        # no vertex lies outside the node's (padded) box: its farthest corner bounds the radius too
        lo = wp.vec3d(wp.float64(lowers[node][0]), wp.float64(lowers[node][1]), wp.float64(lowers[node][2]))
        hi = wp.vec3d(wp.float64(uppers[node][0]), wp.float64(uppers[node][1]), wp.float64(uppers[node][2]))
        radius = wp.min(radius, wp.length(wp.max(centre - lo, hi - centre)))
    data.centre[base + node] = centre
    data.normal[base + node] = n_sum
    data.moment[base + node] = m_sum
    data.second0[base + node] = s0
    data.second1[base + node] = s1
    data.second2[base + node] = s2
    data.radius[base + node] = radius
    data.area[base + node] = total


def _levels(nodes: BvhNodes, device) -> list[wp.array]:
    """The reachable nodes of a BVH grouped by depth, deepest first (one host read of the topology)."""
    low = nodes.lower_index.numpy()[:, 3]
    up = nodes.upper_index.numpy()[:, 3] & 0x7FFFFFFF
    levels, frontier = [], np.array([nodes.root], dtype=np.int64)
    while frontier.size:
        levels.append(frontier.astype(np.int32))
        inner = frontier[low[frontier] >= 0]
        frontier = np.concatenate([low[inner], up[inner]]).astype(np.int64)
    return [wp.array(level, dtype=wp.int32, device=device) for level in reversed(levels)]


def _alloc(count: int, device) -> WindingData:
    data = WindingData()
    data.centre = wp.zeros(count, dtype=wp.vec3d, device=device)
    data.normal = wp.zeros(count, dtype=wp.vec3d, device=device)
    data.moment = wp.zeros(count, dtype=wp.mat33d, device=device)
    data.second0 = wp.zeros(count, dtype=wp.mat33d, device=device)
    data.second1 = wp.zeros(count, dtype=wp.mat33d, device=device)
    data.second2 = wp.zeros(count, dtype=wp.mat33d, device=device)
    data.radius = wp.zeros(count, dtype=wp.float64, device=device)
    data.area = wp.zeros(count, dtype=wp.float64, device=device)
    return data


def _fill(tri: TriangleScene, data: WindingData, base: int, masked: int, face_shape: wp.array,
          shape_enabled: wp.array, stream) -> None:
    tri.complete(stream)  # (a flat tree left stale by a wide-only refit)
    levels = getattr(tri, "_winding_levels", None)
    if levels is None:  # the topology is fixed until the next build(); refits only move boxes
        levels = tri._winding_levels = _levels(tri.nodes, tri.device)
    n = tri.nodes
    for level in levels:
        wp.launch(_node_data_kernel, level.shape[0],
                  [level, n.lower_index, n.upper_index, n.lowers, n.uppers, n.primitives, tri.points, tri.indices,
                   tri.face_base, masked, face_shape, shape_enabled, base, data],
                  device=tri.device, stream=stream)


class _Trees:
    """The node data of one :class:`SceneAccel` (flat BVH and every bottom level), refreshed when stale."""

    def __init__(self, accel: SceneAccel) -> None:
        device = accel.device
        self.key = None
        self.flat = _alloc(accel.flat.nodes.lowers.shape[0], device)
        level = accel.instances
        self.blas = _alloc(level.blas_lowers.shape[0] if level is not None else 1, device)

    def refresh(self, accel: SceneAccel, stream) -> None:
        level = accel.instances
        key = (accel.flat.version, accel.enabled_version,
               tuple(t.version for t in level.blas) if level is not None else ())
        if key == self.key:
            return
        view = accel.view_for(stream)
        with launch_stream(accel.device, stream):
            _fill(accel.flat, self.flat, 0, 1 - view.all_enabled, view.flat_shape, view.shape_enabled, stream)
            if level is not None:
                for tri, base in zip(level.blas, level.node_base):
                    _fill(tri, self.blas, base, 0, view.flat_shape, view.shape_enabled, stream)
        self.key = key


def trees(accel: SceneAccel, stream) -> _Trees:
    """The node data of ``accel``, refreshed if stale (cached on ``accel``)."""
    trees = getattr(accel, "_winding_trees", None)
    if trees is None:
        trees = accel._winding_trees = _Trees(accel)
    trees.refresh(accel, stream)
    return trees
