"""Engine ring: the seeded wide point search (``edge_wide_walk.SEED_STRIDE``, opt-in) returns the
unseeded search's edges (masks, ``max_distance``, inactive and non-finite queries, after a refit)."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine import edge_wide_walk
from rayd.engine import nearest_edge as search
from rayd.engine.edges import EdgeBvh

from tests.engine.test_edge_wide import _arrays, _brute, _dev, _grid_edges


def _run(bvh, q, active, device, max_distance, stride, counts=False):
    dev = _dev(device)
    saved = edge_wide_walk.SEED_STRIDE
    edge_wide_walk.SEED_STRIDE = stride
    try:
        out = wp.empty(len(q), dtype=wp.int32, device=dev)
        c = wp.zeros(len(q), dtype=wp.vec2i, device=dev)
        search.nearest_edge_point(bvh, wp.array(q, dtype=wp.vec3, device=dev),
                                  wp.array(active, dtype=wp.uint8, device=dev), max_distance, out,
                                  sort_queries=True, counts=c if counts else None)
    finally:
        edge_wide_walk.SEED_STRIDE = saved
    return (out.numpy(), c.numpy()) if counts else out.numpy()


@pytest.mark.parametrize("wide", [True, "q", "qs"])
@pytest.mark.parametrize("builder,leaf", [("ploc", 8), ("lbvh", 4), ("sah", 4)])
def test_seeded_search_returns_the_same_edges(device, builder, leaf, wide):
    v, ends = _grid_edges()
    rng = np.random.default_rng(21)
    mask = (rng.random(len(ends)) > 0.2).astype(np.uint8)
    pts, ev, m = _arrays(device, v, ends, mask)
    bvh = EdgeBvh(pts, ev, m, builder=builder, leaf_size=leaf, wide=wide)
    q = rng.uniform(-0.3, 1.3, (3000, 3)).astype(np.float32)
    q[::97] = np.nan
    active = (rng.random(len(q)) > 0.1).astype(np.uint8)
    for step in range(2):
        for max_distance in (np.inf, 0.04):
            plain = _run(bvh, q, active, device, max_distance, 0)
            for stride in (2, 8, 32):
                np.testing.assert_array_equal(_run(bvh, q, active, device, max_distance, stride), plain)
        ok = np.isfinite(q).all(1) & (active != 0)
        best, d = _brute(q[ok].astype(np.float64), v, ends, mask, 1)
        ids = _run(bvh, q, active, device, np.inf, 8)
        assert (ids[~ok] == -1).all()
        np.testing.assert_allclose(d[np.arange(ok.sum()), ids[ok]], best[:, 0], rtol=2e-7, atol=1e-9)
        v = (v + 0.03 * rng.standard_normal(v.shape)).astype(np.float32)  # then moved vertices, new masks
        mask = (rng.random(len(ends)) > 0.4).astype(np.uint8)
        pts.assign(v)
        m.assign(mask)
        bvh.refit()


def test_seed_cuts_segment_tests_on_a_bumpy_field(device):
    v, ends = _grid_edges(40)
    pts, ev, m = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    bvh = EdgeBvh(pts, ev, m, builder="ploc", leaf_size=8, wide="q")
    rng = np.random.default_rng(4)
    q = rng.uniform(-0.5, 1.5, (8192, 3)).astype(np.float32)  # many far points: a seed helps most there
    one = np.ones(len(q), np.uint8)
    ids0, c0 = _run(bvh, q, one, device, np.inf, 0, counts=True)
    ids8, c8 = _run(bvh, q, one, device, np.inf, 8, counts=True)
    np.testing.assert_array_equal(ids8, ids0)
    assert c8[:, 1].mean() < c0[:, 1].mean()
