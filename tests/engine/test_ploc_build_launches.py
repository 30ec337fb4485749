"""Fewer host waits and launches in a PLOC build (issue 18, "build"; ``rayd.engine.ploc_ahead`` and
``wide_levels.ONE_LAUNCH``): the passes launched ahead of the counts read (``ahead``), stale counts
(``_lag``, as a CUDA host running ahead sees them), the raw scans and the one-launch levels of the wide
collapse build the same trees as the blocking loop and two launches per level; staged reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import warp as wp
from test_ploc import _boxes, check_tree, constructor

import rayd.torch as rt
from rayd.engine import ploc_ahead, wide_levels
from rayd.engine.ploc import PlocBvh, tree_arrays


def _same(a, b) -> None:
    ta, tb = tree_arrays(a.nodes), tree_arrays(b.nodes)
    for key in ("lo", "hi", "left", "right", "leaf", "primitives"):
        np.testing.assert_array_equal(ta[key], tb[key])
    np.testing.assert_array_equal(a.parents.numpy(), b.parents.numpy())
    assert a.nodes.depth == b.nodes.depth


@pytest.mark.parametrize("count", [1, 2, 3, 17, 3000])
@pytest.mark.parametrize("max_leaf", [1, 4])
def test_passes_ahead_build_the_same_tree(device, count, max_leaf):
    lo, hi = _boxes(np.random.default_rng(count + 7), count)
    args = (wp.array(lo, dtype=wp.vec3, device=device), wp.array(hi, dtype=wp.vec3, device=device))
    ref = PlocBvh(*args, max_leaf=max_leaf, ahead=0)
    check_tree(ref.nodes, ref.parents, lo, hi, count)
    for ahead, lag, tail in ((1, 0, 0), (4, 0, 0), (4, 1, 0), (2, 3, 0), (4, 2, 64), (3, 0, 5000)):
        got = PlocBvh(*args, max_leaf=max_leaf, ahead=ahead, _lag=lag, tail=tail)
        _same(got, ref)
        if device == "cpu" and lag == 0 and tail == 0:  # the host reads every count: no pass after the last
            assert got.iterations == ref.iterations if count < 2 else got.iterations <= ref.iterations
        if device == "cpu" and lag > 0 and tail == 0 and count > 1:  # passes that change nothing
            assert got.iterations >= ref.iterations - 3


@pytest.mark.parametrize("raw", [0, 1])
def test_raw_scan_equals_warp_scan(device, raw, monkeypatch):
    monkeypatch.setattr(ploc_ahead, "RAW_SCAN", raw)
    keep = wp.array(np.random.default_rng(3).integers(0, 2, 5000).astype(np.int32), device=device)
    position = wp.zeros(5000, dtype=wp.int32, device=device)
    ploc_ahead.scan_int(keep, position, 4321)
    want = np.concatenate([[0], np.cumsum(keep.numpy()[:4320])]).astype(np.int32)
    np.testing.assert_array_equal(position.numpy()[:4321], want)
    assert not position.numpy()[4321:].any()


def _wide_dfs(wide) -> list:
    """The wide nodes in depth-first order from the root, child wide nodes' numbers left out (the collapse
    numbers them by an atomic counter: on CUDA in any order)."""
    data = wide.data.numpy().reshape(-1, 8, 4)
    links = wide.links.numpy().reshape(-1, 8, 4)
    out, todo = [], [0]
    while todo:
        w = todo.pop()
        refs = links[w, 6]
        out.append((data[w, :6].tobytes(), links[w, 7].tobytes(), tuple(int(r) if r < 0 else -(1 << 30) for r in refs)))
        todo += [int(r) for j, r in reversed(list(enumerate(refs))) if r >= 0 and (j == 0 or r != refs[0])]
    return out


def _wide_of(device, v, f):
    with constructor("ploc", "wide4"):
        s = rt.Scene()
        s.add_mesh(rt.Mesh(torch.from_numpy(v).to(device), torch.from_numpy(f).to(device)))
        s.build()
    return s._core.flat


@pytest.mark.parametrize("threads", [0, 1, 3, 64])
def test_wide_collapse_in_one_launch_a_level(device, threads, monkeypatch):
    """``wide_levels.ONE_LAUNCH``: one launch per level (the last thread to finish sets the next level) builds the
    wide nodes of two launches per level; with ``threads`` threads taking every ``threads``-th node (the CUDA
    launch, here forced on every device) the same nodes up to their numbering, with a consistent slot map."""
    v = np.random.default_rng(5).normal(size=(900, 3)).astype(np.float32)
    f = np.random.default_rng(6).integers(0, 900, (1500, 3)).astype(np.int32)
    monkeypatch.setattr(wide_levels, "ONE_LAUNCH", 0)
    a = _wide_of(device, v, f)
    monkeypatch.setattr(wide_levels, "ONE_LAUNCH", 1)
    if threads:
        monkeypatch.setattr(wide_levels, "_FIXED_ON_CPU", True)
        monkeypatch.setattr(wide_levels, "LEVEL_THREADS", threads)
    b = _wide_of(device, v, f)
    assert a.wide is not None and b.wide is not None
    assert (a.wide.count, a.wide.stack_need, a.wide.root) == (b.wide.count, b.wide.stack_need, b.wide.root)
    if device == "cpu" and not threads:
        np.testing.assert_array_equal(a.wide.data.numpy(), b.wide.data.numpy())
        np.testing.assert_array_equal(a.wide.slots.numpy(), b.wide.slots.numpy())
    assert _wide_dfs(a.wide) == _wide_dfs(b.wide)
    links = b.wide.links.numpy().reshape(-1, 8, 4)
    slots = b.wide.slots.numpy().reshape(-1)
    for w in range(b.wide.count):
        for j, code in enumerate(links[w, 7]):
            if code >= 0:
                assert slots[code] == 4 * w + j
    assert (slots >= 0).sum() == (links[: b.wide.count, 7] >= 0).sum()


@pytest.mark.parametrize("staged", [0, 1])
def test_read_back_on_cuda_equals_numpy(cuda_device, staged, monkeypatch):
    """``runtime.read_back``: small arrays copied on the stream into pinned memory (one wait) read as ``numpy()``."""
    from rayd.engine import runtime

    monkeypatch.setattr(runtime, "STAGED_READS", staged)
    rng = np.random.default_rng(2)
    arrays = [wp.array(rng.integers(-9, 9, 5).astype(np.int32), device=cuda_device),
              wp.array(rng.normal(size=3), dtype=wp.float64, device=cuda_device),
              wp.array(rng.normal(size=(7, 3)).astype(np.float32), dtype=wp.vec3, device=cuda_device),
              wp.array(rng.integers(0, 9, 9).astype(np.int64), device=cuda_device)[4:]]
    stream = wp.Stream(cuda_device)
    with wp.ScopedStream(stream):
        arrays[0].fill_(7)  # queued on the stream: read_back must wait for it
    got = runtime.read_back(stream, *arrays)
    for g, a in zip(got, arrays):
        np.testing.assert_array_equal(g, a.numpy())
    assert (got[0] == 7).all()
    assert runtime.read_back(None, arrays[1])[0].tolist() == arrays[1].numpy().tolist()
