"""Engine ring: the fused edge refit (``edge_refit_fused.py``) writes the same boxes, compressed nodes
and segment boxes as the three-launch refit, and the searches after it give a fresh build's answers."""

from __future__ import annotations

import numpy as np
import pytest

from rayd.engine.edges import EdgeBvh

from tests.engine.test_edge_wide import _answers, _arrays, _brute, _grid_edges

TREES = [("ploc", 8), ("ploc", 3), ("lbvh", 8), ("lbvh", 2), ("sah", 4)]


def _state(bvh):
    c = bvh.wide.compressed
    return [bvh.binary_boxes().numpy().view(np.int32), bvh.root_box.numpy(), bvh.seg.numpy(), bvh.slot_id.numpy(),
            c.q.numpy(), c.segq.numpy()]


@pytest.mark.parametrize("wide", ["q", "qs"])
@pytest.mark.parametrize("builder,leaf", TREES)
@pytest.mark.parametrize("refit", ["fused", "fused1", "wide", "wide1", "wide3", "wide3l", "wideg"])
def test_fused_refit_equals_split_refit_and_fresh_build(device, builder, leaf, wide, refit):
    # The split refit to compare with runs on the same tree object (its ``_fused`` set aside): two builds
    # of one tree may number the wide nodes differently on CUDA (the collapse's atomic counter), so only
    # the same tree can be compared array for array.
    v, ends = _grid_edges()
    rng = np.random.default_rng(11)
    mask = np.ones(len(ends), np.uint8)
    fused_arrays = _arrays(device, v, ends, mask)
    fused = EdgeBvh(*fused_arrays, builder=builder, leaf_size=leaf, wide=wide, refit=refit)
    assert fused.refit_mode == (refit if wide == "q" else refit.rstrip("1"))
    q = rng.uniform(-0.2, 1.2, (600, 3)).astype(np.float32)
    for step in range(3):  # moved vertices and new masks, refitted twice in a row (counter parity)
        moved = (v + 0.04 * (step + 1) * rng.standard_normal(v.shape)).astype(np.float32)
        mask2 = (rng.random(len(ends)) > 0.3 * step).astype(np.uint8)
        pts, _, m = fused_arrays
        pts.assign(moved)
        m.assign(mask2)
        hold, fused._fused = fused._fused, None
        for _ in range(2):
            fused.refit()
        expected = [a.copy() for a in _state(fused)]
        fused._fused = hold
        for _ in range(2):
            fused.refit()
        for a, b in zip(expected, _state(fused)):
            np.testing.assert_array_equal(b, a)
        fresh = EdgeBvh(*_arrays(device, moved, ends, mask2), builder=builder, leaf_size=leaf, wide=wide)
        for k in (1, 8):
            ids = _answers(fused, q, k, device)
            np.testing.assert_array_equal(ids, _answers(fresh, q, k, device))
            best, d = _brute(q.astype(np.float64), moved, ends, mask2, k)
            chosen = np.take_along_axis(d, ids.reshape(len(q), k).astype(np.int64), 1)
            np.testing.assert_allclose(chosen, best, rtol=2e-7, atol=1e-9)


def test_fused_refit_applies_only_to_compressed_trees(device):
    v, ends = _grid_edges(8)
    arrays = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    assert EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=True, refit="fused").refit_mode == "split"
    assert EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=False, refit="fused1").refit_mode == "split"
    with pytest.raises(ValueError, match="refit"):
        EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide="q", refit="one")


@pytest.mark.parametrize("refit", ["wide", "wide1", "wide3"])
@pytest.mark.parametrize("builder,leaf", [("ploc", 8), ("lbvh", 4), ("sah", 4)])
def test_wide_refit_refits_the_binary_tree_when_read(device, builder, leaf, refit, monkeypatch):
    # The wide-tree refit leaves the binary boxes behind; the binary walk (ray searches with
    # edge_wide_walk.WIDE_RAYS off) and packed_nodes() refit them first, so they answer as a fresh build and the
    # split refit of the same tree. Ray searches on the wide walk (the default) do not read them.
    from rayd.engine import edge_wide_walk
    from tests.engine.test_edge_wide import _ray_answers

    v, ends = _grid_edges()
    rng = np.random.default_rng(4)
    arrays = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    bvh = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide="q", refit=refit)
    assert bvh.refit_mode == refit
    o = rng.uniform(-0.5, 1.5, (300, 3)).astype(np.float32)
    d = rng.standard_normal((300, 3)).astype(np.float32)
    moved = (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32)
    mask2 = (rng.random(len(ends)) > 0.2).astype(np.uint8)
    arrays[0].assign(moved)
    arrays[2].assign(mask2)
    before = bvh.node_box.numpy().copy()
    bvh.refit()
    np.testing.assert_array_equal(bvh.node_box.numpy(), before)  # not written by the wide climb
    fresh = EdgeBvh(*_arrays(device, moved, ends, mask2), builder=builder, leaf_size=leaf, wide="q")
    monkeypatch.setattr(edge_wide_walk, "WIDE_RAYS", True)
    wide_ids = _ray_answers(bvh, o, d, device)
    np.testing.assert_array_equal(bvh.node_box.numpy(), before)  # the wide ray walk reads no binary box
    assert bvh._binary_stale
    monkeypatch.setattr(edge_wide_walk, "WIDE_RAYS", False)
    np.testing.assert_array_equal(_ray_answers(bvh, o, d, device), _ray_answers(fresh, o, d, device))
    np.testing.assert_array_equal(wide_ids, _ray_answers(fresh, o, d, device))
    lazy = bvh.node_box.numpy().copy()  # refitted by the binary ray walk
    hold, bvh._fused = bvh._fused, None
    bvh.refit()
    np.testing.assert_array_equal(lazy.view(np.int32), bvh.node_box.numpy().view(np.int32))
    np.testing.assert_array_equal(bvh.root_box.numpy(), fresh.root_box.numpy())
    bvh._fused = hold
