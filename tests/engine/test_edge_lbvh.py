"""Engine ring: the ``"lbvh"`` edge BVH (Karras 2012 over 63-bit Morton keys of cubic cells,
subtrees of up to ``leaf_size`` segments collapsed into leaves), checked against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine import edges as edges_module
from rayd.engine import nearest_edge as search
from rayd.engine.edge_lbvh import Lbvh
from rayd.engine.edges import MAX_DEPTH, EdgeBvh


def _dev(device: str) -> str:
    return "cuda:0" if device == "cuda" else device


def _arrays(dev, points, ends):
    return (wp.array(points, dtype=wp.vec3, device=dev), wp.array(ends, dtype=wp.vec2i, device=dev),
            wp.array(np.ones(len(ends), np.uint8), dtype=wp.uint8, device=dev))


def _grid_edges(cells: int):
    """Edges of a ``cells`` x ``cells`` height field z = 0.1 sin(6x) cos(5y) on [-1, 1]^2
    (rows, columns and one diagonal per cell): a flat scene, 10 x thinner in z."""
    x = np.linspace(-1.0, 1.0, cells + 1)
    gx, gy = np.meshgrid(x, x, indexing="ij")
    points = np.stack([gx, gy, 0.1 * np.sin(6 * gx) * np.cos(5 * gy)], -1).reshape(-1, 3).astype(np.float32)
    vid = np.arange((cells + 1) ** 2).reshape(cells + 1, cells + 1)
    ends = np.concatenate([
        np.stack([vid[:-1, :].ravel(), vid[1:, :].ravel()], 1),
        np.stack([vid[:, :-1].ravel(), vid[:, 1:].ravel()], 1),
        np.stack([vid[:-1, :-1].ravel(), vid[1:, 1:].ravel()], 1),
    ]).astype(np.int32)
    return points, ends


def _point_segment(q, a, b):
    ab = b - a
    den = (ab * ab).sum(-1)
    t = np.clip(((q[:, None] - a) * ab).sum(-1) / np.where(den > 0, den, 1.0), 0, 1)
    return np.linalg.norm(q[:, None] - (a + t[..., None] * ab), axis=-1)


def _leaf_counts(bvh: EdgeBvh) -> list[int]:
    """Segment counts of the leaves reachable from the root of the packed tree."""
    child = bvh.packed_nodes()[1]
    counts, stack = [], [0]
    while stack:
        j = stack.pop()
        for c in (0, 1):
            if child[j, 2 + c] > 0:
                counts.append(int(child[j, 2 + c]))
            elif not (c == 1 and child[j, 3] == 0 and child[j, 1] == 0 and j == 0 and bvh.num_edges == 1):
                stack.append(int(child[j, c]))
    return counts


@pytest.mark.parametrize("leaf_size", [1, 3, 4, 8])
def test_lbvh_leaves_hold_up_to_leaf_size_segments(device, leaf_size):
    points, ends = _grid_edges(12)  # 456 edges
    bvh = EdgeBvh(*_arrays(_dev(device), points, ends), builder="lbvh", leaf_size=leaf_size)
    counts = _leaf_counts(bvh)
    assert sum(counts) == len(ends)
    assert max(counts) == leaf_size  # a collapsed subtree of exactly leaf_size exists on a regular grid
    assert bvh.leaf_size == leaf_size and bvh.builder == "lbvh"


def test_lbvh_cubic_keys_visit_fewer_nodes_on_a_flat_scene(device):
    # Per-axis key scaling stretches the thin z axis 10 x and splits it early; cubic cells do
    # not. Counts measured on the CPU (one segment per leaf): 30-bit per-axis keys (the tree of
    # commit 811b89b) 50.1 nodes per query, 63-bit cubic keys 35.2, Warp's SAH builder 33.8.
    points, ends = _grid_edges(48)
    dev = _dev(device)
    arrays = _arrays(dev, points, ends)
    q = np.random.default_rng(3).uniform([-1, -1, -0.1], [1, 1, 0.1], (2000, 3)).astype(np.float32)
    qw = wp.array(q, dtype=wp.vec3, device=dev)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    dist = _point_segment(q.astype(np.float64), points[ends[:, 0]].astype(np.float64),
                          points[ends[:, 1]].astype(np.float64))
    visited = {}
    for bits, cubic in ((30, False), (63, True)):
        saved = edges_module.LBVH_KEY_BITS, edges_module.LBVH_CUBIC
        edges_module.LBVH_KEY_BITS, edges_module.LBVH_CUBIC = bits, cubic
        try:
            bvh = EdgeBvh(*arrays, builder="lbvh", leaf_size=1)
        finally:
            edges_module.LBVH_KEY_BITS, edges_module.LBVH_CUBIC = saved
        out = wp.empty(len(q), dtype=wp.int32, device=dev)
        counts = wp.zeros(len(q), dtype=wp.vec2i, device=dev)
        search.nearest_edge_point(bvh, qw, one, np.inf, out, counts=counts)
        np.testing.assert_allclose(dist[np.arange(len(q)), out.numpy()], dist.min(1), rtol=1e-5, atol=1e-7)
        visited[bits] = counts.numpy()[:, 0].mean()
    assert visited[63] < 0.8 * visited[30]


def test_lbvh_too_deep_for_63_bit_keys_falls_back_to_30_bits(device):
    # Midpoints whose keys each hold one bit, a different one: a chain of 63 levels in the
    # 63-bit tree, deeper than the search stack; the builder then takes 30-bit keys.
    mids = [np.zeros(3), np.ones(3)]
    for k in range(63):
        p = np.zeros(3)
        p[2 - k % 3] = 2.0 ** -(21 - k // 3)
        mids.append(p)
    mids = np.array(mids)
    points = np.concatenate([mids, mids]).astype(np.float32)  # point-like segments: midpoint exact
    ends = np.stack([np.arange(len(mids)), np.arange(len(mids)) + len(mids)], 1).astype(np.int32)
    dev = _dev(device)
    arrays = _arrays(dev, points, ends)
    assert Lbvh(arrays[0], arrays[1], None, key_bits=63).depth >= MAX_DEPTH
    bvh = EdgeBvh(*arrays, builder="lbvh", leaf_size=1)
    assert bvh.depth < MAX_DEPTH and bvh._lbvh.key_bits == 30
    q = np.random.default_rng(4).random((500, 3)).astype(np.float32) * 0.1
    out = wp.empty(len(q), dtype=wp.int32, device=dev)
    search.nearest_edge_point(bvh, wp.array(q, dtype=wp.vec3, device=dev),
                              wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev), np.inf, out)
    dist = _point_segment(q.astype(np.float64), points[ends[:, 0]].astype(np.float64),
                          points[ends[:, 1]].astype(np.float64))
    np.testing.assert_allclose(dist[np.arange(len(q)), out.numpy()], dist.min(1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("leaf_size", [1, 4])
def test_lbvh_repeated_refits_with_moving_points_and_masks(device, leaf_size):
    # The one-launch refit counts arrivals per node across refits (parity): every refit,
    # not just the first, must leave correct boxes, slots and root box.
    points, ends = _grid_edges(16)
    dev = _dev(device)
    wp_points, wp_ends, wp_mask = _arrays(dev, points, ends)
    bvh = EdgeBvh(wp_points, wp_ends, wp_mask, builder="lbvh", leaf_size=leaf_size)
    rng = np.random.default_rng(11)
    q = rng.uniform(-1.2, 1.2, (400, 3)).astype(np.float32)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    for step in range(4):
        mask = rng.random(len(ends)) > 0.5 if step % 2 else np.ones(len(ends), bool)
        points = (points + rng.normal(0, 0.05, points.shape)).astype(np.float32)
        wp_points.assign(wp.array(points, dtype=wp.vec3, device=dev))
        wp_mask.assign(wp.array(mask.astype(np.uint8), dtype=wp.uint8, device=dev))
        bvh.refit()
        root = bvh.root_box.numpy()
        seen = points[ends[mask].ravel()]
        np.testing.assert_array_equal(root, [seen.min(0), seen.max(0)])
        out = wp.empty(len(q), dtype=wp.int32, device=dev)
        search.nearest_edge_point(bvh, wp.array(q, dtype=wp.vec3, device=dev), one, np.inf, out)
        dist = _point_segment(q.astype(np.float64), points[ends[:, 0]].astype(np.float64),
                              points[ends[:, 1]].astype(np.float64))
        dist[:, ~mask] = np.inf
        got = out.numpy()
        assert np.all(mask[got])
        np.testing.assert_allclose(dist[np.arange(len(q)), got], dist.min(1), rtol=1e-5, atol=1e-7)
