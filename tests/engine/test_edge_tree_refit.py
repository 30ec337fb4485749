"""Engine ring: the generic tree arrays (``edge_sah.convert``) and the leaf-climb refit
(``tree_refit.TreeRefit``) of both edge builders."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine.edge_sah import convert
from rayd.engine.edges import EdgeBvh

_LEAF = -(1 << 31)  # Warp's leaf flag in lower_index[:, 3] (as int32)


def _dev(device: str) -> str:
    return "cuda:0" if device == "cuda" else device


def test_convert_warp_nodes_with_the_root_not_first():
    # Warp nodes: 0 = leaf [0, 2), 1 = leaf [2, 3), 2 = (0, 1), 3 = root (2, 4), 4 = leaf [3, 5)
    low = np.array([_LEAF + 0, _LEAF + 2, 0, 2, _LEAF + 3], np.int64)
    high = np.array([2, 3, 1, 4, 5], np.int64)
    tree = convert(low, high, root=3, order=np.arange(5, dtype=np.int32))
    # internal: root -> packed 0, node 2 -> packed 1; leaves in slot order get ids 2, 3, 4
    np.testing.assert_array_equal(tree.children, [[1, 4], [2, 3]])
    np.testing.assert_array_equal(tree.links, [[1, 3, 0, 2], [0, 2, 2, 1]])
    np.testing.assert_array_equal(tree.parent, [-1, 0, 1, 1, 0])
    np.testing.assert_array_equal(tree.leaves, [[2, 0, 2, 1], [3, 2, 1, 1], [4, 3, 2, 0]])
    assert tree.depth == 3


def test_convert_skips_unreachable_nodes_and_a_lone_leaf():
    low = np.array([_LEAF + 0, 7, 9], np.int64)  # nodes 1, 2 are garbage never reached from the root
    tree = convert(low, np.array([4, 8, 10], np.int64), root=0, order=np.arange(4, dtype=np.int32))
    np.testing.assert_array_equal(tree.links, [[0, 0, 4, 0]])
    np.testing.assert_array_equal(tree.leaves, [[1, 0, 4, -1]])
    assert tree.depth == 2


def _packed_leaves(bvh: EdgeBvh) -> list[tuple[int, int]]:
    """(first, count) of the leaves reachable from the packed root, by first slot."""
    child = bvh.packed_nodes()[1]
    found, stack = [], [0]
    while stack:
        j = stack.pop()
        for c in (0, 1):
            if child[j, 2 + c] > 0:
                found.append((int(child[j, c]), int(child[j, 2 + c])))
            elif not (j == 0 and c == 1 and child[0, 2] > 0 and child[0, 3] == 0 and child[0, 1] == 0):
                stack.append(int(child[j, c]))
    return sorted(found)


@pytest.mark.parametrize("builder,leaf_size", [("lbvh", 1), ("lbvh", 8), ("sah", 1), ("sah", 4), ("ploc", 1),
                                               ("ploc", 8)])
@pytest.mark.parametrize("num_edges", [2, 3, 700])
def test_one_refit_thread_per_packed_leaf(device, builder, leaf_size, num_edges):
    rng = np.random.default_rng(num_edges)
    points = rng.random((300, 3)).astype(np.float32)
    ends = rng.integers(0, 300, (num_edges, 2)).astype(np.int32)
    ends[:, 1] = (ends[:, 0] + 1 + ends[:, 1] % 299) % 300
    dev = _dev(device)
    bvh = EdgeBvh(wp.array(points, dtype=wp.vec3, device=dev), wp.array(ends, dtype=wp.vec2i, device=dev),
                  wp.array(np.ones(num_edges, np.uint8), dtype=wp.uint8, device=dev), builder=builder,
                  leaf_size=leaf_size)
    leaves = bvh._tree.leaves.numpy()
    assert [tuple(r) for r in leaves[:, 1:3]] == _packed_leaves(bvh)
    assert leaves[:, 2].sum() == num_edges and np.all(leaves[:, 2] <= leaf_size)
    if leaf_size == 1:
        assert len(leaves) == num_edges
    root = bvh.root_box.numpy()  # the climb reached the root: its box is the segments' bounds
    np.testing.assert_array_equal(root, [points[ends].reshape(-1, 3).min(0), points[ends].reshape(-1, 3).max(0)])


@pytest.mark.parametrize("builder", ["lbvh", "sah", "ploc"])
def test_split_and_one_launch_refits_write_the_same_tree(device, builder):
    rng = np.random.default_rng(5)
    points = rng.random((400, 3)).astype(np.float32)
    ends = rng.integers(0, 400, (900, 2)).astype(np.int32)
    ends[:, 1] = (ends[:, 0] + 1 + ends[:, 1] % 399) % 400
    dev = _dev(device)
    mask = (rng.random(900) > 0.2).astype(np.uint8)
    bvh = EdgeBvh(wp.array(points, dtype=wp.vec3, device=dev), wp.array(ends, dtype=wp.vec2i, device=dev),
                  wp.array(mask, dtype=wp.uint8, device=dev), builder=builder, leaf_size=8)
    bvh.points.assign(points + 0.05 * rng.standard_normal(points.shape).astype(np.float32))
    got = []
    for split in (False, True, False):
        bvh.seg.zero_()
        bvh.slot_id.fill_(-7)
        bvh._tree.refit(bvh.points, bvh.edge_v, bvh.mask, bvh.slot_edge, bvh.seg, bvh.slot_id, bvh.node_box,
                        bvh.root_box, split=split)
        got.append((bvh.node_box.numpy().copy(), bvh.seg.numpy().copy(), bvh.slot_id.numpy().copy()))
    for a, b in zip(got[0], got[1]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(got[0], got[2]):
        np.testing.assert_array_equal(a, b)
    slot_edge = bvh.slot_edge.numpy()
    np.testing.assert_array_equal(got[1][2], np.where(mask[slot_edge] != 0, slot_edge, -1))
