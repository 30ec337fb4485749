"""A 4-wide copy of an edge BVH, walked by the point / ray / top-k searches of ``edge_wide_walk.py``.

The binary edge tree (:class:`rayd.engine.edges.EdgeBvh`, packed as child pairs) is collapsed
into the 4-wide node layout of the triangle engine (:class:`rayd.engine.wide_nodes.WideNodes`,
reused as it is: its SAH collapse of Ylitie, Karras & Laine 2017, its rows and its refresh).
One wide node is seven 128-bit loads (six rows of the four children's box coordinates and
their refs, 112 bytes): a point query tests four boxes per dependent fetch instead of two.

For the collapse, the edge links ``(code_a, code_b, count_a, count_b)`` are rewritten once, at
build, into the pair-node refs of ``pair_nodes.py`` (``r >= 0`` inner node ``r``; a leaf of
``count`` slots from ``first`` as ``r = -1 - (8 first + count - 1)``, so leaves of at most 8
segments) in a temporary copy of the packed nodes; afterwards the wide nodes take their boxes
from the edge tree's own ``node_box`` (:meth:`EdgeWide.refresh`, one launch after each refit).
Leaf segments are the edge tree's (``seg``, ``slot_id``, same slots).

References:
    Ylitie, Karras, Laine 2017, "Efficient Incoherent Ray Traversal on GPUs Through
    Compressed Wide BVHs", HPG 2017.
"""


import os
import types

import warp as wp

from rayd.engine.edge_wide_q import CompressedWide
from rayd.engine.wide_nodes import WideNodes

wp.set_module_options({"enable_backward": False})

#: Most segments per leaf the pair ref encoding holds (trees with larger leaves stay binary).
MAX_LEAF = 8
#: ``cuda_max_registers`` of the wide search kernels (``edge_wide_walk.py``) of trees built from now
#: on (0: the compiler's choice; ``RAYD_EDGE_WIDE_MAXREG``, default 64 as the binary search's
#: ``nearest_edge_kernels.SEARCH_MAX_REGISTERS``). Not yet timed on a GPU: the wide walk holds more
#: values (six box rows) than the binary one.
WIDE_MAX_REGISTERS = int(os.environ.get("RAYD_EDGE_WIDE_MAXREG", "64") or 0)


@wp.func
def _pair_ref(code: int, count: int) -> int:
    """Edge child ``(code, count)`` as a ``pair_nodes.py`` ref (leaf: count 1..8)."""
    if count == 0:
        return code
    return -1 - (8 * code + count - 1)


@wp.kernel
def _edge_pair_kernel(node_box: wp.array(dtype=wp.vec4), node_link: wp.array(dtype=wp.vec4i),
                      pair_box: wp.array(dtype=wp.vec4), pair_link: wp.array(dtype=wp.vec4i)):
    """Packed edge node ``j`` as a pair node: the same three box rows, the links as refs."""
    j = wp.tid()
    for r in range(3):
        pair_box[4 * j + r] = node_box[4 * j + r]
    ch = node_link[4 * j + 3]
    pair_link[4 * j + 3] = wp.vec4i(_pair_ref(ch[0], ch[2]), _pair_ref(ch[1], ch[3]), 0, 0)


class EdgeWide:
    """The 4-wide nodes of one edge BVH (see the module docstring).

    Args:
        node_box: the edge tree's packed nodes, ``wp.array(dtype=wp.vec4)`` (4 M,), M internal
            nodes, root 0, boxes already refitted.
        node_link: the same memory as ``wp.vec4i``.
        depth: an upper bound of the binary tree's depth (levels collapsed).
        stream: the stream to build on (``None`` on the CPU).
        compressed: also keep the 64-byte compressed nodes (:mod:`rayd.engine.edge_wide_q`), which the
            searches then read instead of the 112-byte ones.
        seg, slot_id, seg_boxes: with ``compressed``, the edge tree's segments and slot ids, and whether
            to keep their quantised boxes (8 bytes a slot), tested before each segment.

    The caller makes sure the root is a real internal node with leaves of at most
    :data:`MAX_LEAF` segments (``EdgeBvh`` builds one only then).

    Attributes:
        nodes: the :class:`WideNodes` (``data``/``links`` rows, ``count``, ``stack_need``).
        ok: the collapse finished and its walk fits the stack (else the search stays binary).
        max_registers: :data:`WIDE_MAX_REGISTERS` at build (the searches of this tree use it).
        compressed: the :class:`~rayd.engine.edge_wide_q.CompressedWide` rows, or None.
    """

    def __init__(self, node_box: wp.array, node_link: wp.array, depth: int, stream: wp.Stream | None = None,
                 compressed: bool = False, seg: wp.array | None = None, slot_id: wp.array | None = None,
                 seg_boxes: bool = False) -> None:
        device = node_box.device
        self.max_registers = WIDE_MAX_REGISTERS
        inner = node_box.shape[0] // 4
        pair_box = wp.zeros(4 * inner, dtype=wp.vec4, device=device)
        pair_link = wp.array(ptr=pair_box.ptr, dtype=wp.vec4i, shape=pair_box.shape, device=device)
        wp.launch(_edge_pair_kernel, inner, [node_box, node_link], [pair_box, pair_link], device=device,
                  stream=stream)
        pairs = types.SimpleNamespace(boxes=pair_box, links=pair_link, root=0)
        self.nodes = WideNodes(pairs, depth, stream)
        # later refreshes read the edge tree's own boxes (the same three rows per node)
        self.nodes.pairs = types.SimpleNamespace(boxes=node_box, links=node_link, root=0)
        self.ok = bool(self.nodes.ok)
        self.compressed = None
        if compressed and self.ok:
            self.compressed = CompressedWide(node_box, self.nodes.links, self.nodes.count, seg, slot_id,
                                             seg_boxes, stream)
        if stream is not None:
            wp.synchronize_stream(stream)  # before the temporary pair copy is released

    @property
    def nbytes(self) -> int:
        """Bytes of the nodes the searches read (the full rows' refs and box codes stay for the refit)."""
        return self.nodes.nbytes if self.compressed is None else self.compressed.nbytes

    def refresh(self, stream: wp.Stream | None = None) -> None:
        """Take the children's boxes again from the edge tree's refitted ``node_box`` (one launch)."""
        if self.compressed is None:
            self.nodes.refresh(stream)
        else:
            self.compressed.refresh(stream)
