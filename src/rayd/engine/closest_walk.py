"""The closest-point search's pieces: the point-triangle distance and the BVH walks.

:mod:`rayd.engine.closest_point` launches them. Each walk keeps the best squared
distance so far (the search radius) and opens a box only while its squared distance
is within a relative 2^-10 of it (the float32 triangle distance can round below the
box distance of the same face); children are visited nearer first, the farther one
pushed with its box distance and skipped at pop time if the radius has shrunk past it.

Two node layouts (``triangles.bvh_layout()``): Warp's nodes (one box per node, two
loads per child, faces through slot -> face -> vertex index -> point) and rayd's
child-pair nodes (``pair_nodes.py``: one 64-byte fetch tests both children, leaf
triangles read in slot order with three loads). Both visit the same boxes with the
same pruning rule, so they give the same winner.

``make_walks(counting=True)`` builds the same walks with per-query work counters
(``stats[3 row + k]``: k = 0 inner nodes expanded, 1 point-box tests, 2 point-triangle
tests), for ``benchmarks/surface_work.py``; the production walks do not count.

References:
    Ericson 2004, "Real-Time Collision Detection", Morgan Kaufmann, sec. 5.1.5
    (closest point on a triangle to a point).
"""

from __future__ import annotations

from types import SimpleNamespace

import warp as wp

from rayd.engine.native import load4, load4i
from rayd.engine.point_triangle import SLIVER, closest_on_triangle  # noqa: F401 (re-exported)
from rayd.engine.traversal import SceneView

wp.set_module_options({"enable_backward": False})

# A box is opened while its squared distance is within a relative 2^-10 of the best
# (the float32 triangle distance can round below the box distance of the same face).
_OPEN = wp.constant(1.0 + 1.0 / 1024.0)
_STACK = 64


@wp.func
def _box_dsq(p: wp.vec3, lo: wp.vec4, hi: wp.vec4) -> float:
    """Squared distance from ``p`` to the box ``[lo, hi]`` (xyz)."""
    q = wp.max(wp.max(wp.vec3(lo[0], lo[1], lo[2]) - p, wp.vec3(0.0)), p - wp.vec3(hi[0], hi[1], hi[2]))
    return wp.dot(q, q)


@wp.func
def _pair_dsq(p: wp.vec3, lx: float, ly: float, lz: float, hx: float, hy: float, hz: float) -> float:
    """:func:`_box_dsq` of a box given by its six bounds (a child of a pair node)."""
    q = wp.max(wp.max(wp.vec3(lx, ly, lz) - p, wp.vec3(0.0)), p - wp.vec3(hx, hy, hz))
    return wp.dot(q, q)


@wp.func
def _better(dsq: float, gid: int, best_dsq: float, best_id: int) -> bool:
    if dsq < best_dsq:
        return True
    return dsq == best_dsq and gid < best_id


@wp.func
def _corner(tris: wp.array(dtype=wp.vec4), i: int) -> wp.vec3:
    c = load4(tris, i)
    return wp.vec3(c[0], c[1], c[2])


def make_walks(counting: bool) -> SimpleNamespace:
    """The walks (``flat``, ``flat_pair``, ``top_level``, ``top_level_pair``), counting work if ``counting``.

    Each is ``(view, p, best, best_id, stats, row) -> (best, best_id)``: improve the
    squared distance ``best`` and its ``global_prim_id`` over the flat faces or the
    instances; ``stats`` (int32, ``3 N``) is written only when ``counting``.
    """

    @wp.func
    def tally(stats: wp.array(dtype=wp.int32), row: int, k: int, amount: int):
        if wp.static(counting):
            wp.atomic_add(stats, 3 * row + k, amount)

    @wp.func
    def flat(view: SceneView, p: wp.vec3, best: float, best_id: int, stats: wp.array(dtype=wp.int32),
             row: int) -> tuple[float, int]:
        """Over the enabled flat faces, in Warp's node layout."""
        nodes = wp.vector(dtype=wp.int32, length=_STACK)
        keys = wp.vector(dtype=wp.float32, length=_STACK)
        count = int(0)
        node = view.flat_root
        tally(stats, row, 1, 1)
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
                        tally(stats, row, 2, 1)
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
                tally(stats, row, 0, 1)
                tally(stats, row, 1, 2)
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
    def flat_pair(view: SceneView, p: wp.vec3, best: float, best_id: int, stats: wp.array(dtype=wp.int32),
                  row: int) -> tuple[float, int]:
        """Over the enabled flat faces, in the child-pair layout (leaf corners in slot order)."""
        refs = wp.vector(dtype=wp.int32, length=_STACK)
        keys = wp.vector(dtype=wp.float32, length=_STACK)
        count = int(0)
        ref = view.flat_pair_root
        while True:
            if ref >= 0:
                tally(stats, row, 0, 1)
                tally(stats, row, 1, 2)
                b0 = load4(view.flat_pair_boxes, 4 * ref)
                b1 = load4(view.flat_pair_boxes, 4 * ref + 1)
                b2 = load4(view.flat_pair_boxes, 4 * ref + 2)
                k_left = _pair_dsq(p, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1])
                k_right = _pair_dsq(p, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3])
                bound = best * _OPEN
                ok_left = k_left <= bound
                ok_right = k_right <= bound
                if ok_left or ok_right:
                    links = load4i(view.flat_pair_links, 4 * ref + 3)
                    if ok_left and ok_right:
                        if count < _STACK:
                            if k_right < k_left:
                                refs[count] = links[0]
                                keys[count] = k_left
                            else:
                                refs[count] = links[1]
                                keys[count] = k_right
                            count += 1
                        if k_right < k_left:
                            ref = links[1]
                        else:
                            ref = links[0]
                    elif ok_left:
                        ref = links[0]
                    else:
                        ref = links[1]
                    continue
            else:
                code = -1 - ref
                first = code >> 3
                for slot in range(first, first + (code & 7) + 1):
                    tally(stats, row, 2, 1)
                    q = closest_on_triangle(p, _corner(view.flat_tris, 3 * slot), _corner(view.flat_tris, 3 * slot + 1),
                                            _corner(view.flat_tris, 3 * slot + 2)) - p
                    dsq = wp.dot(q, q)
                    if dsq <= best:
                        f = view.flat_primitives[slot]
                        enabled = True
                        if view.all_enabled == 0:
                            enabled = view.shape_enabled[view.flat_shape[f]] != wp.uint8(0)
                        gid = int(view.flat_global[f])
                        if enabled and _better(dsq, gid, best, best_id):
                            best = dsq
                            best_id = gid
            found = int(0)
            while count > 0:
                count -= 1
                if keys[count] <= best * _OPEN:
                    ref = refs[count]
                    found = int(1)
                    break
            if found == 0:
                break
        return best, best_id

    @wp.func
    def instance(view: SceneView, inst: int, p: wp.vec3, best: float, best_id: int, stats: wp.array(dtype=wp.int32),
                 row: int) -> tuple[float, int]:
        """Over the faces of instance ``inst``, its BLAS in Warp's node layout.

        The BLAS is walked in object space: the query is moved there by the float64
        world-to-object matrix ``W``; a world distance ``r`` is at most ``|L|_F r`` in
        object space (``L`` the linear part of ``W``, Frobenius norm >= spectral norm),
        so an object box farther than that is skipped. Faces are measured in world
        space (their corners placed by ``W^-1``), so the distance is Euclidean whatever
        the transform.
        """
        m = view.inst_to_object[inst]
        inv = wp.inverse(m)
        scale = float(0.0)
        for r in range(3):
            for col in range(3):
                scale += float(m[r, col] * m[r, col])
        q = wp.vec3(wp.transform_point(m, wp.vec3d(p)))
        node_base = view.inst_node_base[inst]
        prim_base = view.inst_prim_base[inst]
        base = view.inst_face_base[inst]
        first_global = view.inst_global[inst]
        nodes = wp.vector(dtype=wp.int32, length=_STACK)
        keys = wp.vector(dtype=wp.float32, length=_STACK)
        count = int(0)
        node = view.inst_root[inst]
        tally(stats, row, 1, 1)
        if _box_dsq(q, view.blas_lowers[node_base + node], view.blas_uppers[node_base + node]) > best * scale * _OPEN:
            return best, best_id
        done = int(0)
        while done == 0:
            low = view.blas_lower_index[node_base + node]
            if low[3] < 0:
                first = low[3] & 0x7FFFFFFF
                last = view.blas_upper_index[node_base + node][3] & 0x7FFFFFFF
                for slot in range(first, last):
                    tally(stats, row, 2, 1)
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
                tally(stats, row, 0, 1)
                tally(stats, row, 1, 2)
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
    def instance_pair(view: SceneView, inst: int, p: wp.vec3, best: float, best_id: int,
                      stats: wp.array(dtype=wp.int32), row: int) -> tuple[float, int]:
        """:func:`instance` over the instance's BLAS in the child-pair layout (corners in slot order)."""
        m = view.inst_to_object[inst]
        inv = wp.inverse(m)
        scale = float(0.0)
        for r in range(3):
            for col in range(3):
                scale += float(m[r, col] * m[r, col])
        q = wp.vec3(wp.transform_point(m, wp.vec3d(p)))
        node_base = view.inst_pair_base[inst]
        prim_base = view.inst_prim_base[inst]
        first_global = view.inst_global[inst]
        refs = wp.vector(dtype=wp.int32, length=_STACK)
        keys = wp.vector(dtype=wp.float32, length=_STACK)
        count = int(0)
        ref = view.inst_pair_root[inst]
        while True:
            if ref >= 0:
                tally(stats, row, 0, 1)
                tally(stats, row, 1, 2)
                g = 4 * (node_base + ref)
                b0 = load4(view.blas_pair_boxes, g)
                b1 = load4(view.blas_pair_boxes, g + 1)
                b2 = load4(view.blas_pair_boxes, g + 2)
                k_left = _pair_dsq(q, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1])
                k_right = _pair_dsq(q, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3])
                bound = best * scale * _OPEN
                ok_left = k_left <= bound
                ok_right = k_right <= bound
                if ok_left or ok_right:
                    links = load4i(view.blas_pair_links, g + 3)
                    if ok_left and ok_right:
                        if count < _STACK:
                            if k_right < k_left:
                                refs[count] = links[0]
                                keys[count] = k_left
                            else:
                                refs[count] = links[1]
                                keys[count] = k_right
                            count += 1
                        if k_right < k_left:
                            ref = links[1]
                        else:
                            ref = links[0]
                    elif ok_left:
                        ref = links[0]
                    else:
                        ref = links[1]
                    continue
            else:
                code = -1 - ref
                first = prim_base + (code >> 3)
                for slot in range(first, first + (code & 7) + 1):
                    tally(stats, row, 2, 1)
                    a = wp.vec3(wp.transform_point(inv, wp.vec3d(_corner(view.blas_tris, 3 * slot))))
                    b = wp.vec3(wp.transform_point(inv, wp.vec3d(_corner(view.blas_tris, 3 * slot + 1))))
                    c = wp.vec3(wp.transform_point(inv, wp.vec3d(_corner(view.blas_tris, 3 * slot + 2))))
                    d = closest_on_triangle(p, a, b, c) - p
                    dsq = wp.dot(d, d)
                    if dsq <= best:
                        gid = first_global + view.blas_primitives[slot]
                        if _better(dsq, gid, best, best_id):
                            best = dsq
                            best_id = gid
            found = int(0)
            while count > 0:
                count -= 1
                if keys[count] <= best * scale * _OPEN:
                    ref = refs[count]
                    found = int(1)
                    break
            if found == 0:
                break
        return best, best_id

    def top_level(walk_instance):
        @wp.func
        def walk(view: SceneView, p: wp.vec3, best: float, best_id: int, stats: wp.array(dtype=wp.int32),
                 row: int) -> tuple[float, int]:
            """Over the enabled instances: near-first walk of the top level (world boxes, Warp's nodes)."""
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
                            best, best_id = wp.static(walk_instance)(view, inst, p, best, best_id, stats, row)
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

        return walk

    return SimpleNamespace(flat=flat, flat_pair=flat_pair, top_level=top_level(instance),
                           top_level_pair=top_level(instance_pair))
