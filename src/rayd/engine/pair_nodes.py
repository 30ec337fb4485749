"""rayd's own child-pair node layout of a triangle BVH, derived from a ``wp.Bvh``.

Warp stores each node's own box (32 bytes) and its walk reads a node to decide
whether to enter it. Here each *inner* node holds both children's boxes, so one
fetch of 64 bytes (four 128-bit loads) tests both children:

- ``boxes[4 k + 0]`` = ``(Llo.x, Llo.y, Llo.z, Lhi.x)``
- ``boxes[4 k + 1]`` = ``(Lhi.y, Lhi.z, Rlo.x, Rlo.y)``
- ``boxes[4 k + 2]`` = ``(Rlo.z, Rhi.x, Rhi.y, Rhi.z)``
- ``links[4 k + 3]`` = ``(left ref, right ref, 0, 0)`` (the same memory as int32)

A ref ``r >= 0`` is inner node ``r``; a ref ``r < 0`` is a leaf with primitive slots
``first .. first + count - 1`` where ``-1 - r = 8 first + count - 1`` (1 <= count <= 8).
Inner nodes are numbered by an exclusive scan of Warp's node array (so the order of
Warp's builder, depth-first for its SAH builder, is kept). The boxes are Warp's
(padded, see ``triangles.py``) and are copied again after every refit.

Leaf triangles in slot order (``tris[3 s + k]``, ``k`` = vertex, xyz; w unused) let the
leaf test read a triangle's corners with three loads instead of slot -> face ->
vertex index -> point.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.bvh_nodes import BvhNodes
from rayd.engine.runtime import alias, launch_once

wp.set_module_options({"enable_backward": False})

#: Most primitives per leaf the ref encoding holds.
MAX_LEAF = 8


@wp.kernel
def _inner_flags_kernel(lower_index: wp.array(dtype=wp.vec4i), flags: wp.array(dtype=wp.int32)):
    n = wp.tid()
    flags[n] = wp.where(lower_index[n][3] < 0, 0, 1)


@wp.kernel
def _tail_kernel(number: wp.array(dtype=wp.int32), flags: wp.array(dtype=wp.int32),
                 lower_index: wp.array(dtype=wp.vec4i), upper_index: wp.array(dtype=wp.vec4i), root: int,
                 info: wp.array(dtype=wp.int32)):
    last = number.shape[0] - 1
    info[0] = number[last]
    info[1] = flags[last]
    info[2] = number[root]
    info[3] = lower_index[root][3]
    info[4] = upper_index[root][3]


@wp.func
def _ref(lower_index: wp.array(dtype=wp.vec4i), upper_index: wp.array(dtype=wp.vec4i), number: wp.array(dtype=wp.int32),
         c: int) -> int:
    low = lower_index[c][3]
    if low < 0:
        first = low & 0x7FFFFFFF
        count = (upper_index[c][3] & 0x7FFFFFFF) - first
        return -1 - (first * 8 + wp.clamp(count, 1, 8) - 1)
    return number[c]


@wp.kernel
def _fill_pairs_kernel(
    lowers: wp.array(dtype=wp.vec4),
    uppers: wp.array(dtype=wp.vec4),
    lower_index: wp.array(dtype=wp.vec4i),
    upper_index: wp.array(dtype=wp.vec4i),
    number: wp.array(dtype=wp.int32),
    boxes: wp.array(dtype=wp.vec4),
    links: wp.array(dtype=wp.vec4i),
):
    n = wp.tid()
    low = lower_index[n][3]
    if low < 0:
        return
    left = low
    right = upper_index[n][3] & 0x7FFFFFFF
    count = lowers.shape[0]
    if left >= count or right >= count:
        return  # an unused slot of Warp's node array (never reached from the root)
    k = number[n]
    a = lowers[left]
    b = uppers[left]
    c = lowers[right]
    e = uppers[right]
    boxes[4 * k] = wp.vec4(a[0], a[1], a[2], b[0])
    boxes[4 * k + 1] = wp.vec4(b[1], b[2], c[0], c[1])
    boxes[4 * k + 2] = wp.vec4(c[2], e[0], e[1], e[2])
    links[4 * k + 3] = wp.vec4i(_ref(lower_index, upper_index, number, left),
                                _ref(lower_index, upper_index, number, right), 0, 0)


@wp.kernel
def _leaf_tris_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    primitives: wp.array(dtype=wp.int32),
    tris: wp.array(dtype=wp.vec4),
):
    slot = wp.tid()
    row = 3 * (face_base + primitives[slot])
    for k in range(3):
        p = points[indices[row + k]]
        tris[3 * slot + k] = wp.vec4(p[0], p[1], p[2], 0.0)


class PairNodes:
    """Child-pair nodes of one BVH (see the module docstring).

    Args:
        nodes: the views of the ``wp.Bvh`` (:func:`rayd.engine.bvh_nodes.read_nodes`).
        points, indices, face_base: the triangles (as in ``TriangleScene``), for :attr:`tris`;
            ``points=None`` for a tree over boxes that are not triangles (the instances' top
            level): :attr:`tris` is then one dummy entry and is never refreshed.
        stream: the stream to build on (``None`` on the CPU).

    Attributes:
        boxes: ``wp.array(dtype=wp.vec4)`` (4 M,), M inner nodes (at least one entry).
        links: the same memory as ``wp.vec4i``.
        root: the root's ref (a leaf ref when the tree is a single leaf).
        tris: ``wp.array(dtype=wp.vec4)`` (3 F,), the corners of the triangle in each slot.
    """

    def __init__(self, nodes: BvhNodes, points: wp.array | None, indices: wp.array | None, face_base: int,
                 stream: wp.Stream | None = None) -> None:
        self.nodes = nodes
        self.points, self.indices, self.face_base = points, indices, face_base
        device = nodes.lowers.device
        count = nodes.lowers.shape[0]
        flags = wp.empty(count, dtype=wp.int32, device=device)
        self.number = wp.empty(count, dtype=wp.int32, device=device)
        launch_once(_inner_flags_kernel, count, [nodes.lower_index, flags], device, stream)
        wp.utils.array_scan(flags, self.number, inclusive=False)
        # One small read at build (one host synchronisation): the root's ref and the number of inner nodes.
        info = wp.empty(5, dtype=wp.int32, device=device)
        launch_once(_tail_kernel, 1, [self.number, flags, nodes.lower_index, nodes.upper_index, nodes.root, info],
                    device, stream)
        tail = info.numpy()
        inner = int(tail[0] + tail[1])
        if tail[3] < 0:
            first = int(tail[3]) & 0x7FFFFFFF
            self.root = -1 - (first * 8 + max(1, min(8, (int(tail[4]) & 0x7FFFFFFF) - first)) - 1)
        else:
            self.root = int(tail[2])
        self.boxes = wp.zeros(4 * max(1, inner), dtype=wp.vec4, device=device)
        self.links = alias(self.boxes, wp.vec4i)
        if points is not None:
            self.tris = wp.empty(3 * nodes.primitives.shape[0], dtype=wp.vec4, device=device)
        else:
            self.tris = wp.zeros(1, dtype=wp.vec4, device=device)
        self.refresh(stream)

    @classmethod
    def from_arrays(cls, nodes: BvhNodes, points: wp.array, indices: wp.array, face_base: int, number: wp.array,
                    boxes: wp.array, root: int, tris: wp.array) -> PairNodes:
        """Pair nodes already written by the tree's builder (``ploc_emit.py``: the same arrays this
        class's constructor computes, without its passes and host read)."""
        p = cls.__new__(cls)
        p.nodes, p.points, p.indices, p.face_base = nodes, points, indices, face_base
        p.number, p.boxes, p.root, p.tris = number, boxes, root, tris
        p.links = alias(boxes, wp.vec4i)
        return p

    @property
    def nbytes(self) -> int:
        """Bytes held by the node layout and the leaf triangles."""
        return self.boxes.capacity + self.tris.capacity

    def refresh(self, stream: wp.Stream | None = None) -> None:
        """Copy the children's boxes and the triangles again (after a refit; topology unchanged)."""
        n = self.nodes
        launch_once(_fill_pairs_kernel, n.lowers.shape[0],
                    [n.lowers, n.uppers, n.lower_index, n.upper_index, self.number, self.boxes, self.links],
                    n.lowers.device, stream)
        if self.points is None:
            return
        launch_once(_leaf_tris_kernel, n.primitives.shape[0],
                    [self.points, self.indices, self.face_base, n.primitives, self.tris], n.lowers.device, stream)


def dummy_pairs(device, zeros: tuple[wp.array, wp.array] | None = None) -> PairNodes:
    """A placeholder with one zero node (for a scene built with Warp's layout).

    ``zeros``: the caller's zeroed ``boxes`` (``vec4`` (4,)) and ``tris`` (``vec4`` (3,)) (default: made here).
    """
    p = PairNodes.__new__(PairNodes)
    if zeros is None:
        zeros = (wp.zeros(4, dtype=wp.vec4, device=device), wp.zeros(3, dtype=wp.vec4, device=device))
    p.boxes, p.tris = zeros
    p.links = alias(p.boxes, wp.vec4i)
    p.root = 0
    return p
