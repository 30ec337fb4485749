"""The instances' trees in rayd's 4-wide layout (issue 18; walked by ``instance_walk._walk_unified``).

:class:`InstanceWide` collapses each bottom-level BVH (BLAS) and, optionally, the top level
over the instance boxes into 4-wide nodes (``wide_nodes.WideNodes``, the SAH collapse of the
flat scenes' wide layout), and keeps them one after another in one array (``data``, the BLAS
first, the top level last), so a walk reads any of them with one base offset. Refs inside
each tree stay local: a wide ref ``r >= 0`` is node ``base + r``; a leaf ref is the pair
layout's (slots of that BLAS, offset per instance by its first primitive slot, or slots of
the top level's primitive list), so the leaves, their triangles and the triangle tests are
the pair walk's.

``table`` holds per instance ``(first wide node of its BLAS, first primitive slot, root ref,
first global_prim_id)``: one 128-bit load per instance entered, as ``InstanceLevel.table``.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.pair_nodes import PairNodes
from rayd.engine.wide_nodes import WideNodes

wp.set_module_options({"enable_backward": False})


@wp.kernel
def _wide_table_kernel(slot: wp.array(dtype=wp.int32), wide_base: wp.array(dtype=wp.int32),
                       wide_root: wp.array(dtype=wp.int32), prim_base: wp.array(dtype=wp.int32),
                       global_base: wp.array(dtype=wp.int32), table: wp.array(dtype=wp.vec4i)):
    i = wp.tid()
    k = slot[i]
    table[i] = wp.vec4i(wide_base[k], prim_base[i], wide_root[k], global_base[i])


class InstanceWide:
    """The 4-wide nodes of every BLAS (and of the top level when ``top`` is given), in one array.

    Args:
        blas_pairs: the pair nodes of each BLAS (``TriangleScene.pairs``).
        blas_depths: each BLAS's depth bound (``BvhNodes.depth``).
        top: the top level's pair nodes (``InstanceLevel.tlas_pairs``) and depth, or ``None``
            (the top level keeps the pair walk).
        stream: the stream to build on (``None`` on the CPU).

    Attributes:
        ok: every tree collapsed within its depth and the wide stack (else the scene keeps a pair walk).
        data: ``wp.array(dtype=wp.vec4)`` (8 W,), all W wide nodes; ``links`` the same memory as ``wp.vec4i``.
        blas_base, blas_root: per BLAS, its first wide node and its root ref (local).
        top_base, top_root: the top level's first wide node and root ref (0, 0 without ``top``).
        blas_stack, top_stack: the most stack entries a wide walk of a BLAS / of the top level pushes.
    """

    def __init__(self, blas_pairs: list[PairNodes], blas_depths: list[int],
                 top: tuple[PairNodes, int] | None, stream: wp.Stream | None = None) -> None:
        self.blas = [WideNodes(p, depth, stream) for p, depth in zip(blas_pairs, blas_depths)]
        self.top = WideNodes(top[0], top[1], stream) if top is not None else None
        trees = self.blas + ([self.top] if self.top is not None else [])
        self.ok = all(w.ok for w in trees)
        counts = [w.count for w in trees]
        bases = [sum(counts[:k]) for k in range(len(trees))]
        self.blas_base = bases[:len(self.blas)]
        self.blas_root = [w.root for w in self.blas]
        self.top_base = bases[-1] if self.top is not None else 0
        self.top_root = self.top.root if self.top is not None else 0
        self.blas_stack = max(w.stack_need for w in self.blas)
        self.top_stack = self.top.stack_need if self.top is not None else 0
        device = blas_pairs[0].boxes.device
        self.data = wp.zeros(8 * max(1, sum(counts)), dtype=wp.vec4, device=device)
        self.links = wp.array(ptr=self.data.ptr, dtype=wp.vec4i, shape=self.data.shape, device=device)
        self._trees, self._bases = trees, bases
        self.copy(stream, refresh=False)

    def copy(self, stream: wp.Stream | None, refresh: bool = True) -> None:
        """Copy every tree's wide nodes into :attr:`data` (after ``refresh``-ing their boxes from the pair
        nodes: a BLAS refit or the top level's refit rewrote those)."""
        for w, base in zip(self._trees, self._bases):
            if refresh:
                w.refresh(stream)
            wp.copy(self.data, w.data, 8 * base, 0, 8 * w.count, stream=stream)

    def refresh_top(self, stream: wp.Stream | None) -> None:
        """The top level's boxes again (after its refit; the BLAS unchanged)."""
        if self.top is not None:
            self.top.refresh(stream)
            wp.copy(self.data, self.top.data, 8 * self.top_base, 0, 8 * self.top.count, stream=stream)

    def table(self, blas_slot: wp.array, inst_prim_base: wp.array, inst_global: wp.array) -> wp.array:
        """Per instance ``(first wide node, first primitive slot, root ref, first global_prim_id)`` of its
        BLAS, ``wp.array(dtype=wp.vec4i)`` (I,).

        Args:
            blas_slot: int32 (I,), each instance's BLAS.
            inst_prim_base: int32 (I,), each instance's first primitive slot.
            inst_global: int32 (I,), each instance's first ``global_prim_id``.
        """
        device = self.data.device
        count = blas_slot.shape[0]
        table = wp.empty(count, dtype=wp.vec4i, device=device)
        wp.launch(_wide_table_kernel, count,
                  [blas_slot, wp.array(self.blas_base, dtype=wp.int32, device=device),
                   wp.array(self.blas_root, dtype=wp.int32, device=device), inst_prim_base, inst_global], [table],
                  device=device)
        return table
