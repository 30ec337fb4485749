"""Surface queries: the closest triangle to each point (no derivatives; winding numbers: :mod:`rayd.engine.winding`).

The frontends recompute the continuous outputs (closest point, distance) from the
winner's live geometry; :func:`closest_point_search` only picks the winner per
point (DESIGN.md, "Differentiation contract"). It walks the scene's flat triangle
BVH (the node arrays :mod:`rayd.engine.traversal` reads, see
:mod:`rayd.engine.bvh_nodes`) depth first, nearer child first, with a search radius
that shrinks to the best squared distance found so far, so far subtrees are
skipped. Query points are given relative to the search centre, like ray origins
(:mod:`rayd.engine.frame`). Distances in the search are float32; ties (within
float32 rounding) go to the smaller ``global_prim_id``.

Instances: the closest-point search walks the top level over instance boxes and
each instance's object-space BVH (the two levels of :mod:`rayd.engine.traversal`),
measuring faces in world space.

References:
    Ericson 2004, "Real-Time Collision Detection", Morgan Kaufmann, sec. 5.1.5
    (closest point on a triangle to a point).
"""

from __future__ import annotations

import math

import warp as wp

from rayd.engine.accel import SceneAccel
from rayd.engine.runtime import launch_rows, launch_stream, per_row
from rayd.engine.traversal import SceneView

wp.set_module_options({"enable_backward": False})

_INF = wp.constant(float("inf"))
_NO_ID = wp.constant(2147483647)
# A box is opened while its squared distance is within a relative 2^-10 of the best
# (the float32 triangle distance can round below the box distance of the same face).
_OPEN = wp.constant(1.0 + 1.0 / 1024.0)
_STACK = 64


#: A triangle is degenerate (a segment or a point) when ``|ab x ac|^2 <= SLIVER |ab|^2 |ac|^2``
#: (the sine of its angle at ``a`` below 1e-6): its closest point is then taken on its three
#: sides, because the face region's barycentric solve divides by rounding noise there
#: (with FMA contraction on CUDA it put the point anywhere on the supporting line).
SLIVER = 1.0e-12
_SLIVER = wp.constant(SLIVER)


@wp.func
def _on_segment(p: wp.vec3, a: wp.vec3, b: wp.vec3) -> wp.vec3:
    """The point of segment ``ab`` closest to ``p`` (clamped projection; ``a`` if ``a == b``)."""
    ab = b - a
    den = wp.dot(ab, ab)
    if den > 0.0:
        return a + wp.clamp(wp.dot(p - a, ab) / den, 0.0, 1.0) * ab
    return a


@wp.func
def _on_sides(p: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> wp.vec3:
    """The closest point to ``p`` on the sides ab, ac, bc of a degenerate triangle (first on ties)."""
    best = _on_segment(p, a, b)
    q = best - p
    best_dsq = wp.dot(q, q)
    x = _on_segment(p, a, c)
    q = x - p
    if wp.dot(q, q) < best_dsq:
        best = x
        best_dsq = wp.dot(q, q)
    x = _on_segment(p, b, c)
    q = x - p
    if wp.dot(q, q) < best_dsq:
        best = x
    return best


@wp.func
def closest_on_triangle(p: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> wp.vec3:
    """The point of triangle ``abc`` closest to ``p`` (Ericson 2004, 5.1.5, by Voronoi regions).

    Degenerate triangles (see :data:`SLIVER`) are measured on their three sides.
    """
    ab = b - a
    ac = c - a
    n = wp.cross(ab, ac)
    if wp.dot(n, n) <= _SLIVER * wp.dot(ab, ab) * wp.dot(ac, ac):
        return _on_sides(p, a, b, c)
    ap = p - a
    d1 = wp.dot(ab, ap)
    d2 = wp.dot(ac, ap)
    if d1 <= 0.0 and d2 <= 0.0:
        return a
    bp = p - b
    d3 = wp.dot(ab, bp)
    d4 = wp.dot(ac, bp)
    if d3 >= 0.0 and d4 <= d3:
        return b
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        den = d1 - d3
        if den > 0.0:
            return a + (d1 / den) * ab
        return a
    cp = p - c
    d5 = wp.dot(ab, cp)
    d6 = wp.dot(ac, cp)
    if d6 >= 0.0 and d5 <= d6:
        return c
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        den = d2 - d6
        if den > 0.0:
            return a + (d2 / den) * ac
        return a
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        den = (d4 - d3) + (d5 - d6)
        if den > 0.0:
            return b + ((d4 - d3) / den) * (c - b)
        return b
    den = va + vb + vc
    if den > 0.0:
        v = vb / den
        w = vc / den
        return a + v * ab + w * ac
    return a  # degenerate (zero-area) triangle that no edge region claimed


@wp.func
def _box_dsq(p: wp.vec3, lo: wp.vec4, hi: wp.vec4) -> float:
    """Squared distance from ``p`` to the box ``[lo, hi]`` (xyz)."""
    q = wp.max(wp.max(wp.vec3(lo[0], lo[1], lo[2]) - p, wp.vec3(0.0)), p - wp.vec3(hi[0], hi[1], hi[2]))
    return wp.dot(q, q)


@wp.func
def _better(dsq: float, gid: int, best_dsq: float, best_id: int) -> bool:
    if dsq < best_dsq:
        return True
    return dsq == best_dsq and gid < best_id


@wp.func
def _closest_flat(view: SceneView, p: wp.vec3, best: float, best_id: int) -> tuple[float, int]:
    """Improve ``(best, best_id)`` (squared distance, global id) over the enabled flat faces."""
    nodes = wp.vector(dtype=wp.int32, length=_STACK)
    keys = wp.vector(dtype=wp.float32, length=_STACK)
    count = int(0)
    node = view.flat_root
    if _box_dsq(p, view.flat_lowers[node], view.flat_uppers[node]) > best * _OPEN:
        return best, best_id
    done = int(0)
    while done == 0:
        low = view.flat_lower_index[node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.flat_upper_index[node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                f = view.flat_primitives[slot]
                enabled = True
                if view.all_enabled == 0:
                    enabled = view.shape_enabled[view.flat_shape[f]] != wp.uint8(0)
                if enabled:
                    a = view.flat_points[view.flat_indices[3 * f]]
                    b = view.flat_points[view.flat_indices[3 * f + 1]]
                    c = view.flat_points[view.flat_indices[3 * f + 2]]
                    q = closest_on_triangle(p, a, b, c) - p
                    dsq = wp.dot(q, q)
                    gid = int(view.flat_global[f])
                    if dsq <= best and _better(dsq, gid, best, best_id):
                        best = dsq
                        best_id = gid
        else:
            left = low[3]
            right = view.flat_upper_index[node][3] & 0x7FFFFFFF
            k_left = _box_dsq(p, view.flat_lowers[left], view.flat_uppers[left])
            k_right = _box_dsq(p, view.flat_lowers[right], view.flat_uppers[right])
            ok_left = k_left <= best * _OPEN
            ok_right = k_right <= best * _OPEN
            if ok_left and ok_right:
                near = left
                far = right
                k_far = k_right
                if k_right < k_left:
                    near = right
                    far = left
                    k_far = k_left
                if count < _STACK:
                    nodes[count] = far
                    keys[count] = k_far
                    count += 1
                node = near
                continue
            if ok_left:
                node = left
                continue
            if ok_right:
                node = right
                continue
        done = int(1)
        while count > 0:
            count -= 1
            if keys[count] <= best * _OPEN:
                node = nodes[count]
                done = int(0)
                break
    return best, best_id


@wp.func
def _closest_instance(view: SceneView, inst: int, p: wp.vec3, best: float, best_id: int) -> tuple[float, int]:
    """Improve ``(best, best_id)`` (squared world distance, global id) with the faces of instance ``inst``.

    The BLAS is walked in object space: the query is moved there by the float64
    world-to-object matrix ``W``; a world distance ``r`` is at most ``|L|_F r`` in object
    space (``L`` the linear part of ``W``, Frobenius norm >= spectral norm), so an object
    box farther than that is skipped. Faces are measured in world space (their corners
    placed by ``W^-1``), so the distance is Euclidean whatever the transform.
    """
    m = view.inst_to_object[inst]
    inv = wp.inverse(m)
    scale = float(0.0)
    for row in range(3):
        for col in range(3):
            scale += float(m[row, col] * m[row, col])
    q = wp.vec3(wp.transform_point(m, wp.vec3d(p)))
    node_base = view.inst_node_base[inst]
    prim_base = view.inst_prim_base[inst]
    base = view.inst_face_base[inst]
    first_global = view.inst_global[inst]
    nodes = wp.vector(dtype=wp.int32, length=_STACK)
    keys = wp.vector(dtype=wp.float32, length=_STACK)
    count = int(0)
    node = view.inst_root[inst]
    if _box_dsq(q, view.blas_lowers[node_base + node], view.blas_uppers[node_base + node]) > best * scale * _OPEN:
        return best, best_id
    done = int(0)
    while done == 0:
        low = view.blas_lower_index[node_base + node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.blas_upper_index[node_base + node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                f = view.blas_primitives[prim_base + slot]
                k = 3 * (base + f)
                a = wp.vec3(wp.transform_point(inv, wp.vec3d(view.blas_points[view.blas_indices[k]])))
                b = wp.vec3(wp.transform_point(inv, wp.vec3d(view.blas_points[view.blas_indices[k + 1]])))
                c = wp.vec3(wp.transform_point(inv, wp.vec3d(view.blas_points[view.blas_indices[k + 2]])))
                d = closest_on_triangle(p, a, b, c) - p
                dsq = wp.dot(d, d)
                gid = first_global + f
                if dsq <= best and _better(dsq, gid, best, best_id):
                    best = dsq
                    best_id = gid
        else:
            left = low[3]
            right = view.blas_upper_index[node_base + node][3] & 0x7FFFFFFF
            k_left = _box_dsq(q, view.blas_lowers[node_base + left], view.blas_uppers[node_base + left])
            k_right = _box_dsq(q, view.blas_lowers[node_base + right], view.blas_uppers[node_base + right])
            ok_left = k_left <= best * scale * _OPEN
            ok_right = k_right <= best * scale * _OPEN
            if ok_left and ok_right:
                near = left
                far = right
                k_far = k_right
                if k_right < k_left:
                    near = right
                    far = left
                    k_far = k_left
                if count < _STACK:
                    nodes[count] = far
                    keys[count] = k_far
                    count += 1
                node = near
                continue
            if ok_left:
                node = left
                continue
            if ok_right:
                node = right
                continue
        done = int(1)
        while count > 0:
            count -= 1
            if keys[count] <= best * scale * _OPEN:
                node = nodes[count]
                done = int(0)
                break
    return best, best_id


@wp.func
def _closest_top_level(view: SceneView, p: wp.vec3, best: float, best_id: int) -> tuple[float, int]:
    """Improve ``(best, best_id)`` over the enabled instances: near-first walk of the top level (world boxes)."""
    nodes = wp.vector(dtype=wp.int32, length=_STACK)
    keys = wp.vector(dtype=wp.float32, length=_STACK)
    count = int(0)
    node = view.tlas_root
    if _box_dsq(p, view.tlas_lowers[node], view.tlas_uppers[node]) > best * _OPEN:
        return best, best_id
    done = int(0)
    while done == 0:
        low = view.tlas_lower_index[node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.tlas_upper_index[node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                inst = view.tlas_primitives[slot]
                if view.shape_enabled[view.inst_shape[inst]] != wp.uint8(0):
                    best, best_id = _closest_instance(view, inst, p, best, best_id)
        else:
            left = low[3]
            right = view.tlas_upper_index[node][3] & 0x7FFFFFFF
            k_left = _box_dsq(p, view.tlas_lowers[left], view.tlas_uppers[left])
            k_right = _box_dsq(p, view.tlas_lowers[right], view.tlas_uppers[right])
            ok_left = k_left <= best * _OPEN
            ok_right = k_right <= best * _OPEN
            if ok_left and ok_right:
                near = left
                far = right
                k_far = k_right
                if k_right < k_left:
                    near = right
                    far = left
                    k_far = k_left
                if count < _STACK:
                    nodes[count] = far
                    keys[count] = k_far
                    count += 1
                node = near
                continue
            if ok_left:
                node = left
                continue
            if ok_right:
                node = right
                continue
        done = int(1)
        while count > 0:
            count -= 1
            if keys[count] <= best * _OPEN:
                node = nodes[count]
                done = int(0)
                break
    return best, best_id


def _make_closest_point_kernel(flat: bool, instances: bool):
    def closest_point_kernel(
        scene: SceneView,
        points: wp.array(dtype=wp.vec3),
        points_stride: int,
        active: wp.array(dtype=wp.uint8),
        active_stride: int,
        max_distance_sq: float,
        global_prim_id: wp.array(dtype=wp.int32),
    ):
        i = wp.tid()
        winner = int(-1)
        p = points[i * points_stride]
        if active[i * active_stride] != wp.uint8(0) and wp.isfinite(p):
            best = max_distance_sq
            best_id = int(_NO_ID)
            if wp.static(flat):
                if scene.has_flat != 0:
                    best, best_id = _closest_flat(scene, p, best, best_id)
            if wp.static(instances):
                best, best_id = _closest_top_level(scene, p, best, best_id)
            if best_id != _NO_ID:
                winner = best_id
        global_prim_id[i] = wp.int32(winner)

    name = f"closest_point_{'flat' if flat else ''}{'_instances' if instances else ''}"
    return wp.kernel(closest_point_kernel, name=name, enable_backward=False, module="unique")


#: One kernel per combination of parts a scene has (as for intersect: fewer registers for the flat walk).
_CLOSEST_KERNELS = {"flat": _make_closest_point_kernel(True, False),
                    "instances": _make_closest_point_kernel(False, True),
                    "both": _make_closest_point_kernel(True, True)}


def closest_point_search(
    accel: SceneAccel,
    points: wp.array,
    active: wp.array,
    max_distance: float,
    global_prim_id: wp.array,
    stream: wp.Stream | None = None,
) -> None:
    """Write the ``global_prim_id`` of the enabled triangle closest to each point (-1: none).

    Args:
        accel: the scene's acceleration structures (meshes and instances).
        points: ``wp.array(dtype=wp.vec3)`` (N,) or (1,) (broadcast), relative to the
            scene's search centre (:mod:`rayd.engine.frame`).
        active: uint8 (N,) or (1,); 0 marks an inactive query (-1 out).
        max_distance: only triangles within this Euclidean distance count (``inf``: all).
        global_prim_id: int32 output (N,); -1 where no enabled triangle lies within
            ``max_distance``, for inactive queries and non-finite points.
        stream: the CUDA stream to launch on (``None`` on the CPU).

    Concretely, the winner minimises the float32 ``|p - q|^2`` over the closest points
    ``q`` of the enabled triangles (Ericson 2004, 5.1.5), ties to the smaller id;
    an instance's faces are placed in world space (float64 placement, rounded to
    float32) before they are measured.
    """
    n = global_prim_id.shape[0]
    if n == 0:
        return
    bound = math.inf if math.isinf(max_distance) else min(float(max_distance) ** 2, 3.0e38)
    if not accel.flat_enabled and accel.instances is None:
        with launch_stream(accel.device, stream):  # on the caller's stream
            global_prim_id.fill_(-1)
        return
    launch_rows(
        _CLOSEST_KERNELS[accel.walks], n,
        [accel.view, *per_row(points, n), *per_row(active, n), bound],
        [global_prim_id], accel.device, stream,
    )
