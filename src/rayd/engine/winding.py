"""Generalised winding numbers: exact sums and the hierarchical (fast) evaluation.

``w(q) = sum_f Omega_f(q) / (4 pi)`` with ``Omega_f`` the signed solid angle of face
``f`` seen from ``q`` (Van Oosterom, Strackee 1983); 1 inside a closed,
outward-oriented mesh, 0 outside, fractional near holes (Jacobson et al. 2013).

Exact: :func:`winding_number_exact` sums every enabled face per point (``O(F)``).

Fast (Barill et al. 2018): every BVH node of the scene's triangle BVHs (the flat
world-space BVH and each instanced mesh's object-space BVH, :mod:`rayd.engine.bvh_nodes`)
stores, in float64, the area-weighted centroid ``c`` of its faces, the sum of their
area vectors ``N = sum_f A_f n_f`` (dipole), the first moment
``M = sum_f (A_f n_f) (c_f - c)^T``, the second moment
``S_i = sum_f (A_f n_f)_i Q_f`` (``Q_f`` the mean of ``(p - c)(p - c)^T`` over face
``f``) and a radius ``r`` bounding the distance from ``c`` to every vertex below. A
point ``q`` farther than ``beta * r`` from ``c`` takes the node's Taylor expansion of
``int (p - q).n / |p - q|^3 dA`` about ``c`` (with ``x = c - q``, ``d = |x|``,
``t_k = sum_i S_i[i, k]``, ``u_i = tr S_i``):

    4 pi w_node ~ x.N / d^3                                         (order 1)
                + tr M / d^3 - 3 x^T M x / d^5                      (order 2)
                - 3/2 (2 t.x + u.x) / d^5 + 15/2 sum_i x_i x^T S_i x / d^7   (order 3),

else the walk descends; leaves are summed exactly. Defaults: ``beta = 2``
(:data:`DEFAULT_BETA`), order 3 (:data:`DEFAULT_ORDER`). The node data is computed
bottom up (one launch per tree level) on first use after ``build()``, after each
refit (``sync()``) of the BVH it belongs to and after the enable flags change; sums
are float64 throughout.

Instances: an instance with object-to-world linear part ``L`` contributes the winding
number of its world-space faces. Its object-space node data are used as they are:
area vectors map by ``det(L) L^-T`` and offsets by ``L``, so with ``x_o`` the
object-space offset and ``d = |L x_o|``,

    4 pi w_node ~ det(L) [x_o.N / d^3 + tr M / d^3 - 3 x_o^T M (L^T L x_o) / d^5],

and the order-3 terms likewise (``t.(G x_o)``, ``sum_i x_o,i S_i : G``,
``sum_i x_o,i (G x_o)^T S_i (G x_o)`` with ``G = L^T L``): exact for any affine
placement (mirrors flip the sign through ``det``); the radius is scaled by
``|L|_F``. Leaves place their faces in world space (float64).

Accuracy (``beta = 2``, order 3, measured with ``benchmarks/winding_error.py``): the
max absolute difference from the exact sum is about 5e-3 (mean about 6e-4) over
random points around the bunny, the dragon and random soups; docs/api.md states the
contract (1e-2). Order 2 gives about 5e-2, order 1 about 5e-2 to 1e-1.

References:
    Barill, Dickson, Schmidt, Levin, Jacobson 2018, "Fast Winding Numbers for Soups
    and Clouds", ACM TOG 37(4).
    Jacobson, Kavan, Sorkine-Hornung 2013, "Robust Inside-Outside Segmentation using
    Generalized Winding Numbers", ACM TOG 32(4).
    Van Oosterom, Strackee 1983, "The Solid Angle of a Plane Triangle", IEEE Trans.
    Biomed. Eng. 30(2).
"""

from __future__ import annotations

import math

import warp as wp

from rayd.engine import occupancy, occupancy_query
from rayd.engine.accel import SceneAccel
from rayd.engine.closest_point import morton_order, sorts
from rayd.engine.runtime import PerRow, launch_rows, launch_stream, per_row
from rayd.engine.traversal import SceneView
from rayd.engine.winding_nodes import WindingData, trees

wp.set_module_options({"enable_backward": False})

#: Default opening parameter: a node is expanded when ``|q - c| > beta * r``.
DEFAULT_BETA = 2.0
#: Default expansion order (1: dipole, 2: + first moment, 3: + second moment; Barill et al. use 3 too).
DEFAULT_ORDER = 3
_STACK = 64
_FOUR_PI = wp.constant(wp.float64(4.0 * math.pi))


@wp.func
def solid_angle(p: wp.vec3d, a: wp.vec3d, b: wp.vec3d, c: wp.vec3d) -> wp.float64:
    """Signed solid angle of triangle ``abc`` seen from ``p`` (Van Oosterom, Strackee 1983), in [-2 pi, 2 pi]."""
    x = a - p
    y = b - p
    z = c - p
    lx = wp.length(x)
    ly = wp.length(y)
    lz = wp.length(z)
    num = wp.dot(x, wp.cross(y, z))
    den = lx * ly * lz + wp.dot(x, y) * lz + wp.dot(y, z) * lx + wp.dot(z, x) * ly
    return wp.float64(2.0) * wp.atan2(num, den)


# ---------------------------------------------------------------------------------- evaluation
@wp.func
def _far(data: WindingData, k: int, x_o: wp.vec3d, lx: wp.vec3d, metric: wp.mat33d, det: wp.float64,
         order: int) -> wp.float64:
    """``4 pi w`` of node ``k`` by its expansion; ``x_o = c - q`` (object space), ``lx = L x_o``."""
    d2 = wp.dot(lx, lx)
    d = wp.sqrt(d2)
    inv3 = wp.float64(1.0) / (d2 * d)
    value = wp.dot(x_o, data.normal[k]) * inv3
    if order >= 2:
        m = data.moment[k]
        gx = metric * x_o
        value += (m[0, 0] + m[1, 1] + m[2, 2]) * inv3 - wp.float64(3.0) * wp.dot(x_o, m * gx) * inv3 / d2
        if order >= 3:
            s0 = data.second0[k]
            s1 = data.second1[k]
            s2 = data.second2[k]
            t = wp.vec3d(s0[0, 0] + s1[1, 0] + s2[2, 0], s0[0, 1] + s1[1, 1] + s2[2, 1], s0[0, 2] + s1[1, 2] + s2[2, 2])
            trace_g = x_o[0] * wp.ddot(s0, metric) + x_o[1] * wp.ddot(s1, metric) + x_o[2] * wp.ddot(s2, metric)
            cubic = x_o[0] * wp.dot(gx, s0 * gx) + x_o[1] * wp.dot(gx, s1 * gx) + x_o[2] * wp.dot(gx, s2 * gx)
            inv5 = inv3 / d2
            value += wp.float64(0.5) * (wp.float64(-3.0) * (wp.float64(2.0) * wp.dot(t, gx) + trace_g) * inv5
                                        + wp.float64(15.0) * cubic * inv5 / d2)
    return det * value


@wp.func
def _walk(view: SceneView, data: WindingData, flat: int, inst: int, q: wp.vec3d, beta2: wp.float64,
          order: int) -> wp.float64:
    """``4 pi w`` of the flat faces (``flat = 1``) or of instance ``inst`` around world point ``q``."""
    zero = wp.float64(0.0)
    one = wp.float64(1.0)
    eye = wp.mat33d(one, zero, zero, zero, one, zero, zero, zero, one)
    lin = eye
    metric = eye
    det = one
    scale = one
    to_world = wp.mat44d(one, zero, zero, zero, zero, one, zero, zero, zero, zero, one, zero, zero, zero, zero, one)
    q_o = q
    node_base = int(0)
    prim_base = int(0)
    face_base = int(0)
    root = view.flat_root
    if flat == 0:
        to_object = view.inst_to_object[inst]
        to_world = wp.inverse(to_object)
        lin = wp.mat33d(to_world[0, 0], to_world[0, 1], to_world[0, 2], to_world[1, 0], to_world[1, 1],
                        to_world[1, 2], to_world[2, 0], to_world[2, 1], to_world[2, 2])
        metric = wp.transpose(lin) * lin
        det = wp.determinant(lin)
        scale = metric[0, 0] + metric[1, 1] + metric[2, 2]  # |L|_F^2 >= |L|_2^2
        q_o = wp.transform_point(to_object, q)
        node_base = view.inst_node_base[inst]
        prim_base = view.inst_prim_base[inst]
        face_base = view.inst_face_base[inst]
        root = view.inst_root[inst]
    total = zero
    stack = wp.vector(dtype=wp.int32, length=_STACK)
    count = int(0)
    node = root
    while node >= 0:
        k = node_base + node
        low = view.flat_lower_index[0]
        high = int(0)
        if flat != 0:
            low = view.flat_lower_index[node]
            high = view.flat_upper_index[node][3] & 0x7FFFFFFF
        else:
            low = view.blas_lower_index[k]
            high = view.blas_upper_index[k][3] & 0x7FFFFFFF
        descend = True
        if low[3] >= 0:  # leaves are summed exactly (a face's solid angle costs about one expansion)
            x_o = data.centre[k] - q_o
            lx = lin * x_o
            r = data.radius[k]
            if wp.dot(lx, lx) > beta2 * scale * r * r:
                total += _far(data, k, x_o, lx, metric, det, order)
                descend = False
        if descend:
            if low[3] < 0:
                for slot in range(low[3] & 0x7FFFFFFF, high):
                    if flat != 0:
                        f = view.flat_primitives[slot]
                        on = True
                        if view.all_enabled == 0:
                            on = view.shape_enabled[view.flat_shape[f]] != wp.uint8(0)
                        if on:
                            total += solid_angle(q, wp.vec3d(view.flat_points[view.flat_indices[3 * f]]),
                                                 wp.vec3d(view.flat_points[view.flat_indices[3 * f + 1]]),
                                                 wp.vec3d(view.flat_points[view.flat_indices[3 * f + 2]]))
                    else:
                        j = 3 * (face_base + view.blas_primitives[prim_base + slot])
                        a = wp.transform_point(to_world, wp.vec3d(view.blas_points[view.blas_indices[j]]))
                        b = wp.transform_point(to_world, wp.vec3d(view.blas_points[view.blas_indices[j + 1]]))
                        c = wp.transform_point(to_world, wp.vec3d(view.blas_points[view.blas_indices[j + 2]]))
                        total += solid_angle(q, a, b, c)
            else:
                if count < _STACK:
                    stack[count] = high
                    count += 1
                node = low[3]
                continue
        node = int(-1)
        if count > 0:
            count -= 1
            node = stack[count]
    return total


@wp.func
def _exact_flat(view: SceneView, num_faces: int, q: wp.vec3d) -> wp.float64:
    total = wp.float64(0.0)
    for f in range(num_faces):
        on = True
        if view.all_enabled == 0:
            on = view.shape_enabled[view.flat_shape[f]] != wp.uint8(0)
        if on:
            total += solid_angle(q, wp.vec3d(view.flat_points[view.flat_indices[3 * f]]),
                                 wp.vec3d(view.flat_points[view.flat_indices[3 * f + 1]]),
                                 wp.vec3d(view.flat_points[view.flat_indices[3 * f + 2]]))
    return total


@wp.func
def _scene_sum(view: SceneView, flat_data: WindingData, blas_data: WindingData, walk_flat: int, num_faces: int,
               q: wp.vec3d, beta2: wp.float64, order: int) -> wp.float64:
    """``4 pi w`` over the enabled flat faces and instances; ``beta2 < 0``: exact."""
    total = wp.float64(0.0)
    if walk_flat != 0:
        if beta2 < wp.float64(0.0):
            total += _exact_flat(view, num_faces, q)
        else:
            total += _walk(view, flat_data, 1, 0, q, beta2, order)
    big = wp.float64(1.0e300)
    for inst in range(view.num_instances):
        if view.shape_enabled[view.inst_shape[inst]] != wp.uint8(0):
            if beta2 < wp.float64(0.0):
                total += _walk(view, blas_data, 0, inst, q, big, order)  # big beta: every leaf exactly
            else:
                total += _walk(view, blas_data, 0, inst, q, beta2, order)
    return total


def _make_winding_kernel(ordered: bool):
    def winding_kernel(
        scene: SceneView,
        flat_data: WindingData,
        blas_data: WindingData,
        walk_flat: int,
        num_faces: int,
        beta2: wp.float64,
        order: int,
        refine: wp.float64,
        rows: wp.array(dtype=wp.int32),
        points: wp.array(dtype=wp.vec3),
        points_stride: int,
        active: wp.array(dtype=wp.uint8),
        active_stride: int,
        out: wp.array(dtype=wp.float64),
    ):
        i = wp.tid()
        if wp.static(ordered):  # row i handles point rows[i] (Morton order, closest_point.morton_order)
            i = rows[i]
        total = wp.float64(0.0)
        p32 = points[i * points_stride]
        if active[i * active_stride] != wp.uint8(0) and wp.isfinite(p32):
            q = wp.vec3d(p32)
            total = _scene_sum(scene, flat_data, blas_data, walk_flat, num_faces, q, beta2, order) / _FOUR_PI
            if beta2 >= wp.float64(0.0) and wp.abs(total - wp.float64(0.5)) < refine:
                # near the contains() threshold: the exact sum decides
                total = _scene_sum(scene, flat_data, blas_data, walk_flat, num_faces, q, wp.float64(-1.0),
                                   order) / _FOUR_PI
        out[i] = total

    winding_kernel.__name__ = winding_kernel.__qualname__ = f"winding_kernel{'_ordered' if ordered else ''}"
    return wp.kernel(winding_kernel, enable_backward=False, module="unique")


#: Input order and Morton order (the same query order as the closest-point search).
_WINDING_KERNELS = {False: _make_winding_kernel(False), True: _make_winding_kernel(True)}


def winding_number(
    accel: SceneAccel,
    num_faces: int,
    points: wp.array,
    active: wp.array,
    out: wp.array,
    stream: wp.Stream | None = None,
    *,
    exact: bool = False,
    beta: float = DEFAULT_BETA,
    order: int = DEFAULT_ORDER,
    refine: float = 0.0,
) -> None:
    """Write the generalised winding number of the enabled triangles and instances around each point.

    Args:
        accel: the scene's acceleration structures.
        num_faces: the number of flat faces (mesh faces in the flat BVH).
        points: ``wp.array(dtype=wp.vec3)`` (N,) or (1,), relative to the search centre.
        active: uint8 (N,) or (1,); 0 marks an inactive query (0 out).
        out: float64 output (N,).
        stream: the CUDA stream to launch on (``None`` on the CPU).
        exact: sum every face exactly (``O(F)`` per point) instead of the hierarchy.
        beta: opening parameter of the hierarchy (> 0): expansions at ``|q - c| > beta r``.
        order: 1 (dipole), 2 (+ first moment) or 3 (+ second moment).
        refine: points whose hierarchical value lies within ``refine`` of 0.5 are
            recomputed exactly (so that ``w > 0.5`` is the exact decision there).
            ``refine > 0`` marks a query for the decision ``w > 0.5`` only
            (``contains``, ``signed_distance``): on the CPU the occupancy grid
            (:mod:`rayd.engine.occupancy`) answers the points it decides, with the
            integer winding number of the closed-up surface (the same decision as the
            exact ``w``; the value itself where the surface is closed), and the walk
            the others.

    Concretely: the exact sum, or the hierarchy of the module docstring; float64
    arithmetic on the float32 search-frame vertices and points, float64 instance
    placements. Non-finite points give 0.
    """
    if not (beta > 0.0) or order not in (1, 2, 3):
        raise ValueError(f"rayd.engine.winding_number(): 'beta' must be > 0 and 'order' 1, 2 or 3, got {beta}, {order}")
    n = out.shape[0]
    if n == 0:
        return
    if not accel.flat_enabled and accel.instances is None:
        with launch_stream(accel.device, stream):
            out.zero_()
        return
    data = trees(accel, stream)
    beta2 = -1.0 if exact else float(beta) ** 2
    head = [accel.view_for(stream), data.flat, data.blas, 1 if accel.flat_enabled else 0, int(num_faces), beta2, int(order),
            float(refine)]
    device = accel.device
    if refine > 0.0 and not exact:
        cells = occupancy.grid(accel, num_faces, stream, n, winding_number_exact)
        if cells is not None:  # contains() on the CPU: the occupancy grid first, the walk for the rest
            rows = occupancy_query.decide(accel, cells, points, active, out, n)
            if rows is not None:
                launch_rows(_WINDING_KERNELS[True], rows.shape[0],
                            [*head, PerRow(rows), points, 0 if points.shape[0] == 1 else 1, active,
                             0 if active.shape[0] == 1 else 1, out], [], device, stream)
            return
    if not exact and sorts(n):  # the exact sum visits every face in the same order: nothing to gain
        with launch_stream(device, stream):
            rows = morton_order(accel, points, n, stream)
            launch_rows(_WINDING_KERNELS[True], n,
                        [*head, PerRow(rows), points, 0 if points.shape[0] == 1 else 1, active,
                         0 if active.shape[0] == 1 else 1, out], [], device, stream)
        return
    launch_rows(_WINDING_KERNELS[False], n, [*head, wp.empty(1, dtype=wp.int32, device=device), *per_row(points, n),
                                             *per_row(active, n)], [out], device, stream)


def winding_number_exact(accel: SceneAccel, num_faces: int, points: wp.array, active: wp.array, out: wp.array,
                         stream: wp.Stream | None = None) -> None:
    """:func:`winding_number` with ``exact=True``."""
    winding_number(accel, num_faces, points, active, out, stream, exact=True)
