"""Engine ring: the per-leaf oriented slabs (``edge_leaf_slab.py``) only skip leaves that cannot hold an
answer: point and top-k searches return the edges of the walk without slabs, ties included, with masks,
a finite ``max_distance`` and after refits that move the vertices (directions fixed at build)."""

from __future__ import annotations

import numpy as np
import pytest

from rayd.engine import edge_leaf_slab
from rayd.engine.edges import EdgeBvh

from tests.engine.test_edge_wide import _answers, _arrays, _brute, _grid_edges


def _queries(v, rng):
    return np.concatenate([rng.uniform(-0.2, 1.2, (700, 3)),  # in and around the box
                           v[rng.integers(0, len(v), 150)],  # on vertices: exact ties between edges
                           v[rng.integers(0, len(v), 150)] + [0.0, 0.0, 0.05]]).astype(np.float32)


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("refit", ["split", "wide"])
@pytest.mark.parametrize("builder,leaf", [("ploc", 8), ("ploc", 3), ("lbvh", 8), ("sah", 4)])
def test_slabs_keep_the_answers(device, builder, leaf, refit, ahead, monkeypatch):
    monkeypatch.setattr(edge_leaf_slab, "AHEAD", ahead)  # slabs tested leaf by leaf, or at the node's visit
    v, ends = _grid_edges()
    rng = np.random.default_rng(8)
    mask = (rng.random(len(ends)) > 0.1).astype(np.uint8)
    arrays = _arrays(device, v, ends, mask)
    plain = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide="q", leaf_slab=False)
    slab = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide="q", leaf_slab=True, refit=refit)
    assert plain.leaf_slabs is None and slab.leaf_slabs is not None
    for step in range(3):
        q = _queries(v, rng)
        for k, max_distance in ((1, np.inf), (8, np.inf), (1, 0.02), (8, 0.05)):
            ids_p, c_p = _answers(plain, q, k, device, max_distance, counts=True)
            ids_s, c_s = _answers(slab, q, k, device, max_distance, counts=True)
            np.testing.assert_array_equal(ids_s, ids_p)
            assert (c_s[:, 0] == c_p[:, 0]).all() and (c_s[:, 1] <= c_p[:, 1]).all()
            if max_distance == np.inf:
                best, d = _brute(q.astype(np.float64), v, ends, mask, k)
                chosen = np.take_along_axis(d, ids_s.reshape(len(q), k).astype(np.int64), 1)
                np.testing.assert_allclose(chosen, best, rtol=2e-7, atol=1e-9)
        if step == 0:
            assert c_s[:, 1].sum() < c_p[:, 1].sum()  # the slabs skip something on the unmoved grid
        v = (v + 0.03 * rng.standard_normal(v.shape)).astype(np.float32)  # the directions go stale
        mask = (rng.random(len(ends)) > 0.2).astype(np.uint8)
        arrays[0].assign(v)
        arrays[2].assign(mask)
        plain.refit()
        slab.refit()


def test_slabs_need_a_wide_copy(device):
    v, ends = _grid_edges(8)
    arrays = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    assert EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=False, leaf_slab=True).leaf_slabs is None
    assert EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=True, leaf_slab=True).leaf_slabs is not None
