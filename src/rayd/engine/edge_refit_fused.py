"""Edge refit with the compressed wide nodes written inside the leaf climb (issue 11, opt-in).

The default refit of a tree with compressed 4-wide nodes (``+q``/``+qs``, :mod:`rayd.engine.edge_wide_q`)
takes three launches: the slots (``tree_refit._tree_slots_kernel``), the leaf climb
(``tree_refit._tree_refit_kernel``), then a thread per wide node re-quantising its children's
boxes (``edge_wide_q._compress_kernel``). Here the climb does the last step itself: when a
climbing thread completes binary node ``p`` (it is the second child to arrive, so every node
below ``p`` is final) and ``p`` is the root of wide node ``wide_of[p]``, it quantises that wide
node's children's boxes at once, reading the packed boxes below ``p`` through L2 (other threads
of this launch wrote them before their fence and counter increment; ``_load_l2`` as the climb's
sibling read). Per-node counters only, no single-address atomics.

Modes (:data:`REFIT_MODE` / :data:`REFIT_MODE_CUDA`, ``RAYD_EDGE_REFIT``; ``EdgeBvh(refit=...)``):

* ``"split"`` (the default): the three launches above (the code of before);
* ``"fused"``: the slots launch, then the climb that also writes the compressed nodes (two launches);
* ``"fused1"``: one launch: each leaf thread gathers its segments from the live endpoints
  (slot -> edge -> vertices, as ``TreeRefit.refit(split=False)``), climbs and quantises. With
  quantised segment boxes (``+qs``) the slots must be final before a wide node quantises its
  leaves' segments, which another thread of the same launch may still be writing, so ``+qs``
  trees refit as ``"fused"`` in this mode.

* ``"wide"`` / ``"wide1"`` / ``"wide3"`` / ``"wide3l"`` / ``"wideg"``: the climb runs on the wide tree itself,
  no binary level
  (:mod:`rayd.engine.edge_refit_wide`; the binary boxes are refitted when read, ``EdgeBvh.binary_boxes``).

Trees without compressed wide nodes (binary, ``+w``) refit as ``"split"`` whatever the mode.
The boxes written are bit-identical in every mode (``tests/engine/test_edge_refit_fused.py``).
"""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.edge_wide_q import compress_node
from rayd.engine.refit import _fence, _load_l2
from rayd.engine.tree_refit import _put_boxes, _tree_slots_kernel, _xyz, leaf_segment_box

wp.set_module_options({"enable_backward": False})

_INF = wp.constant(float("inf"))

REFIT_MODES = ("split", "fused", "fused1", "wide", "wide1", "wide3", "wide3l", "wideg")
_ENV_MODE = os.environ.get("RAYD_EDGE_REFIT", "").strip().lower()
if _ENV_MODE and _ENV_MODE not in REFIT_MODES:
    raise ValueError(f"rayd.engine: RAYD_EDGE_REFIT must be one of {REFIT_MODES}, got {_ENV_MODE!r}")
#: The refit of trees with compressed wide nodes on the CPU (read when an ``EdgeBvh`` is built;
#: ``RAYD_EDGE_REFIT`` sets it and :data:`REFIT_MODE_CUDA`).
REFIT_MODE = _ENV_MODE or "split"
#: The same on CUDA. Since the 18th session no query reads the binary boxes of a tree with a wide copy (ray
#: searches walk the wide tree too, ``edge_wide_walk.WIDE_RAYS``), so a ``"wide*"`` refit (no binary climb)
#: costs no query anything; ``"wide3"`` was the fastest on the H100 (session 17: terrain 2 M 0.359 vs 0.395 ms,
#: sphere 1 M 0.241 vs 0.254). Session 18, one H100 (``benchmarks/results/h100-session18/edge_refit.txt``,
#: ``edge_ray.txt``, main ``81cf455``): ``"wide3"`` 0.360 / 0.239 ms against ``"split"`` 0.393 / 0.253 (two passes
#: each, same boxes), and a refit + 1 M-ray query step on the terrain 220.6 ms with the wide walk against 652.3
#: with the binary one: ``"wide3"`` is the CUDA default. ``RAYD_EDGE_REFIT=split`` gives the earlier one.
#: Session 20, one H200 (``benchmarks/results/h200-session20/``, two passes, median of 20): ``"wide3l"`` 0.284 /
#: 0.195 ms against ``"wide3"`` 0.329 / 0.225 (terrain 2 M / sphere 1 M, same boxes): ``"wide3l"`` is the default.
REFIT_MODE_CUDA = _ENV_MODE or "wide3l"


@wp.kernel
def _wide_of_kernel(node_link: wp.array(dtype=wp.vec4i), wlinks: wp.array(dtype=wp.vec4i),
                    wide_of: wp.array(dtype=wp.int32)):
    """``wide_of[p] = w`` for the binary node ``p`` at the root of wide node ``w`` (root: node 0 = wide 0)."""
    w = wp.tid()
    if w == 0:
        wide_of[0] = 0
    refs = wlinks[8 * w + 6]
    codes = wlinks[8 * w + 7]
    for j in range(4):
        if codes[j] >= 0 and refs[j] >= 0:
            k = codes[j] >> 1
            link = node_link[4 * k + 3]
            wide_of[link[codes[j] & 1]] = refs[j]


@wp.kernel
def _fused_refit_kernel(
    points: wp.array(dtype=wp.vec3),
    edge_v: wp.array(dtype=wp.vec2i),
    mask: wp.array(dtype=wp.uint8),
    order: wp.array(dtype=wp.int32),
    leaves: wp.array(dtype=wp.vec4i),
    parent: wp.array(dtype=wp.int32),
    children: wp.array(dtype=wp.vec2i),
    wide_of: wp.array(dtype=wp.int32),
    wlinks: wp.array(dtype=wp.vec4i),
    seg_boxes: int,
    counters: wp.array(dtype=wp.int32),
    lower: wp.array(dtype=wp.vec4),
    upper: wp.array(dtype=wp.vec4),
    seg: wp.array(dtype=wp.vec3),
    slot_id: wp.array(dtype=wp.int32),
    node_box: wp.array(dtype=wp.vec4),
    root_box: wp.array(dtype=wp.vec3),
    q: wp.array(dtype=wp.vec4i),
    segq: wp.array(dtype=wp.vec2i),
    gathered: int,
):
    """Leaf ``t``: as ``tree_refit._tree_refit_kernel``, plus the compressed wide node rooted at each
    binary node this thread completes. Each refit adds 2 to every counter (no reset launch)."""
    t = wp.tid()
    leaf = leaves[t]
    node = int(leaf[0])
    first = int(leaf[1])
    p = int(leaf[3])
    inf = _INF
    lo, hi = leaf_segment_box(first, int(leaf[2]), 1 - gathered, points, edge_v, mask, order, seg, slot_id)
    if p < 0:  # one leaf (no wide nodes are kept for such a tree)
        _put_boxes(node_box, 0, lo, hi, wp.vec3(inf, inf, inf), wp.vec3(-inf, -inf, -inf))
        root_box[0] = lo
        root_box[1] = hi
        return
    lower[node] = wp.vec4(lo[0], lo[1], lo[2], 0.0)
    upper[node] = wp.vec4(hi[0], hi[1], hi[2], 0.0)
    while p >= 0:
        ch = children[p]
        above = int(parent[p])
        w = int(wide_of[p])
        _fence()
        if (wp.atomic_add(counters, p, 1) & 1) == 0:
            return  # the sibling's thread finishes the parent
        _fence()
        sib = int(ch[0])
        if sib == node:
            sib = int(ch[1])
        lo_s = _xyz(_load_l2(lower, sib))
        hi_s = _xyz(_load_l2(upper, sib))
        if sib == int(ch[1]):
            _put_boxes(node_box, p, lo, hi, lo_s, hi_s)
        else:
            _put_boxes(node_box, p, lo_s, hi_s, lo, hi)
        if w >= 0:  # every node below p is final: quantise the wide node rooted here
            compress_node(node_box, wlinks, seg, slot_id, seg_boxes, q, segq, w, 1)
        lo = wp.min(lo, lo_s)
        hi = wp.max(hi, hi_s)
        if above >= 0:
            lower[p] = wp.vec4(lo[0], lo[1], lo[2], 0.0)
            upper[p] = wp.vec4(hi[0], hi[1], hi[2], 0.0)
        else:
            root_box[0] = lo
            root_box[1] = hi
        node = p
        p = above


class FusedRefit:
    """The fused refit of one ``EdgeBvh`` whose wide copy is compressed (see the module docstring).

    Args:
        tree: the edge tree's :class:`~rayd.engine.tree_refit.TreeRefit`.
        node_link: the packed links (``EdgeBvh.node_link``).
        compressed: the :class:`~rayd.engine.edge_wide_q.CompressedWide` rows.
        mode: ``"fused"`` or ``"fused1"``.

    Attributes:
        writes_binary: True: the binary tree's packed boxes are refitted too.
    """

    writes_binary = True

    def __init__(self, tree, node_link: wp.array, compressed, mode: str, stream: wp.Stream | None = None) -> None:
        if mode not in ("fused", "fused1"):
            raise ValueError(f"rayd.engine.FusedRefit(): 'mode' must be 'fused' or 'fused1', got {mode!r}")
        self.tree = tree
        self.compressed = compressed
        self.gathered = mode == "fused1" and not compressed.seg_boxes
        dev = node_link.device
        self.wide_of = wp.full(node_link.shape[0] // 4, -1, dtype=wp.int32, device=dev)
        wp.launch(_wide_of_kernel, compressed.count, [node_link, compressed.wlinks], [self.wide_of], device=dev,
                  stream=stream)

    def refit(self, points: wp.array, edge_v: wp.array, mask: wp.array, order: wp.array, seg: wp.array,
              slot_id: wp.array, node_box: wp.array, root_box: wp.array) -> None:
        """As ``TreeRefit.refit`` followed by ``CompressedWide.refresh``, in one or two launches."""
        tree, c = self.tree, self.compressed
        if not self.gathered:
            wp.launch(_tree_slots_kernel, dim=order.shape[0], inputs=[points, edge_v, mask, order],
                      outputs=[seg, slot_id], device=points.device)
        wp.launch(_fused_refit_kernel, dim=tree.num_leaves,
                  inputs=[points, edge_v, mask, order, tree.leaves, tree.parent, tree.children, self.wide_of,
                          c.wlinks, int(c.seg_boxes)],
                  outputs=[tree.counters, tree.lower, tree.upper, seg, slot_id, node_box, root_box, c.q, c.segq,
                           int(self.gathered)],
                  device=points.device)
