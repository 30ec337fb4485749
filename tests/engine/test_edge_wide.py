"""Engine ring: the 4-wide edge walk (``edge_wide.py``) against the binary walk and a float64 brute
force, and the search's segment distances rounded alike on every device (CPU <-> CUDA parity)."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine import nearest_edge as search
from rayd.engine import nearest_edge_kernels as kernels
from rayd.engine.edges import EdgeBvh

TREES = [("ploc", 8), ("ploc", 3), ("lbvh", 8), ("lbvh", 1), ("sah", 4)]


def _dev(device: str) -> str:
    return "cuda:0" if device == "cuda" else device


def _grid_edges(n: int = 24, seed: int = 3):
    """A bumpy height field's edges (many equal-length edges meeting at vertices: near ties)."""
    rng = np.random.default_rng(seed)
    x, y = np.meshgrid(np.arange(n, dtype=np.float64), np.arange(n, dtype=np.float64), indexing="ij")
    z = 0.3 * rng.random((n, n))
    v = np.stack([x, y, z], -1).reshape(-1, 3).astype(np.float32) / n
    idx = np.arange(n * n).reshape(n, n)
    ends = np.concatenate([np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1),
                           np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
                           np.stack([idx[:-1, :-1].ravel(), idx[1:, 1:].ravel()], 1)]).astype(np.int32)
    return v, ends


def _arrays(device, v, ends, mask):
    dev = _dev(device)
    return (wp.array(v, dtype=wp.vec3, device=dev), wp.array(ends, dtype=wp.vec2i, device=dev),
            wp.array(mask.astype(np.uint8), dtype=wp.uint8, device=dev))


def _answers(bvh, q, k, device, max_distance=np.inf, counts=False):
    dev = _dev(device)
    qw = wp.array(q, dtype=wp.vec3, device=dev)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    n = len(q)
    c = wp.zeros(n, dtype=wp.vec2i, device=dev) if counts else None
    if k == 1:
        out = wp.empty(n, dtype=wp.int32, device=dev)
        search.nearest_edge_point(bvh, qw, one, max_distance, out, counts=c)
    else:
        out = wp.empty((n, k), dtype=wp.int32, device=dev)
        search.nearest_edges_point(bvh, qw, one, max_distance, out, counts=c)
    return (out.numpy(), c.numpy()) if counts else out.numpy()


def _brute(q, v, ends, mask, k):
    a, b = v[ends[:, 0]].astype(np.float64), v[ends[:, 1]].astype(np.float64)
    ab = b - a
    t = np.clip(((q[:, None] - a) * ab).sum(-1) / (ab * ab).sum(-1), 0, 1)
    d = np.linalg.norm(q[:, None] - (a + t[..., None] * ab), axis=-1)
    d[:, mask == 0] = np.inf
    return np.sort(d, 1)[:, :k], d


@pytest.mark.parametrize("mode", [True, "q", "qs"])
@pytest.mark.parametrize("builder,leaf", TREES)
def test_wide_walk_returns_the_binary_walks_edges(device, builder, leaf, mode):
    v, ends = _grid_edges()
    rng = np.random.default_rng(5)
    mask = (rng.random(len(ends)) > 0.15).astype(np.uint8)
    q = rng.uniform(-0.2, 1.2, (1500, 3)).astype(np.float32)
    arrays = _arrays(device, v, ends, mask)
    binary = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide=False)
    wide = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide=mode)
    assert binary.wide is None and wide.wide is not None
    assert (wide.wide.compressed is not None) == (mode in ("q", "qs"))
    for k in (1, 8):
        ids_b, c_b = _answers(binary, q, k, device, counts=True)
        ids_w, c_w = _answers(wide, q, k, device, counts=True)
        np.testing.assert_array_equal(ids_w, ids_b)
        # a wide node stands for two to three binary levels: far fewer dependent node reads
        assert c_w[:, 0].mean() < 0.6 * c_b[:, 0].mean()
        best, d = _brute(q.astype(np.float64), v, ends, mask, k)
        chosen = np.take_along_axis(d, ids_w.reshape(len(q), k).astype(np.int64), 1)
        np.testing.assert_allclose(chosen, best, rtol=2e-7, atol=1e-9)
    # max_distance: the same misses
    ids_b = _answers(binary, q, 1, device, max_distance=0.05)
    ids_w = _answers(wide, q, 1, device, max_distance=0.05)
    np.testing.assert_array_equal(ids_w, ids_b)
    assert (ids_w == -1).any() and (ids_w >= 0).any()


@pytest.mark.parametrize("mode", [True, "q", "qs"])
def test_wide_walk_follows_refits_and_masks(device, mode):
    v, ends = _grid_edges()
    rng = np.random.default_rng(9)
    mask = np.ones(len(ends), np.uint8)
    pts, ev, m = _arrays(device, v, ends, mask)
    bvh = EdgeBvh(pts, ev, m, builder="ploc", leaf_size=8, wide=mode)
    q = rng.uniform(-0.2, 1.2, (800, 3)).astype(np.float32)
    moved = (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32)
    mask2 = (rng.random(len(ends)) > 0.5).astype(np.uint8)
    pts.assign(moved)
    m.assign(mask2)
    bvh.refit()
    ids = _answers(bvh, q, 1, device)
    best, d = _brute(q.astype(np.float64), moved, ends, mask2, 1)
    np.testing.assert_allclose(d[np.arange(len(q)), ids], best[:, 0], rtol=2e-7, atol=1e-9)
    if mode in ("q", "qs"):
        _check_compressed_boxes(bvh)
    m.assign(np.zeros(len(ends), np.uint8))  # everything masked: no answer
    bvh.refit()
    assert (_answers(bvh, q, 1, device) == -1).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_wide_walks_with_a_non_finite_vertex(device, bad):
    """A vertex at NaN / inf: its edges never win, every walk still finds the nearest finite edge."""
    v, ends = _grid_edges(16)
    v[37] = [bad, 0.5, bad]
    q = np.random.default_rng(1).uniform(-0.2, 1.2, (1000, 3)).astype(np.float32)
    arrays = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    with np.errstate(all="ignore"):
        _, d = _brute(q.astype(np.float64), v, ends, np.ones(len(ends)), 1)
    d[:, ~np.isfinite(v[ends]).all((1, 2))] = np.inf
    for mode in (False, True, "q", "qs"):
        ids = _answers(EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=mode), q, 1, device)
        assert (ids >= 0).all()
        np.testing.assert_allclose(d[np.arange(len(q)), ids], d.min(1), rtol=2e-7)


def test_wide_copy_only_where_it_applies(device):
    v, ends = _grid_edges(6)
    arrays = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    assert EdgeBvh(*arrays, builder="lbvh", leaf_size=16, wide=True).wide is None  # leaves over 8 segments
    few = _arrays(device, v, ends[:3], np.ones(3, np.uint8))
    tiny = EdgeBvh(*few, builder="lbvh", leaf_size=8, wide=True)  # one leaf: nothing to widen
    assert tiny.wide is None
    q = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], np.float32)
    best, d = _brute(q.astype(np.float64), v, ends[:3], np.ones(3), 1)
    np.testing.assert_allclose(d[np.arange(2), _answers(tiny, q, 1, device)], best[:, 0], rtol=1e-7)


def _check_compressed_boxes(bvh):
    """Every decoded child box (host decode of ``edge_wide_q.py``'s rows) holds the child's true box;
    empty children decode empty; the refs are the wide nodes'."""
    q = bvh.wide.compressed.q.numpy().reshape(-1, 4, 4).astype(np.int64) & 0xFFFFFFFF
    links = bvh.wide.nodes.links.numpy().reshape(-1, 8, 4)
    box = bvh.binary_boxes().numpy().reshape(-1, 16)[:, :12].reshape(-1, 2, 2, 3)  # node, child, lo/hi, xyz
    origin = q[:, 0, :3].astype(np.uint32).view(np.float32)
    exps = np.stack([(q[:, 0, 3] >> (8 * k)) & 255 for k in range(3)], 1)
    scale = (exps.astype(np.uint32) << 23).view(np.float32)
    assert not (q[:, 0, 3] >> 24 & 1).any()  # finite boxes: no node opens all its children
    np.testing.assert_array_equal(q[:, 3], links[:, 6].astype(np.int64) & 0xFFFFFFFF)
    rows = [(1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1)]  # lo.x hi.x lo.y hi.y lo.z hi.z
    checked = 0
    for j in range(4):
        byte = np.stack([(q[:, r, c] >> (8 * j)) & 255 for r, c in rows], 1).astype(np.float32)
        lo = origin + byte[:, 0::2] * scale
        hi = origin + byte[:, 1::2] * scale
        code = links[:, 7, j]
        has = code >= 0
        true = box[code[has] >> 1, code[has] & 1]  # (n, lo/hi, xyz)
        empty = true[:, 0, 0] > true[:, 1, 0]
        assert (byte[has][empty, 0] > byte[has][empty, 1]).all()
        assert (lo[has][~empty] <= true[~empty, 0]).all() and (hi[has][~empty] >= true[~empty, 1]).all()
        assert (byte[~has, 0] > byte[~has, 1]).all()
        checked += int((~empty).sum())
    assert checked > 0
    if not bvh.wide.compressed.seg_boxes:
        return
    segq = bvh.wide.compressed.segq.numpy().astype(np.int64) & 0xFFFFFFFF
    seg = bvh.seg.numpy().reshape(-1, 2, 3)
    live = bvh.slot_id.numpy() >= 0
    seen = np.zeros(len(live), bool)
    for w, j in zip(*np.nonzero(links[:, 6] < 0)):
        if links[w, 7, j] < 0:
            continue  # an empty slot repeating child 0's ref
        code = -1 - int(links[w, 6, j])
        for sl in range(code >> 3, (code >> 3) + (code & 7) + 1):
            a, c = segq[sl]
            byte = np.array([a & 255, a >> 8 & 255, a >> 16 & 255, a >> 24 & 255, c & 255, c >> 8 & 255], np.float32)
            lo = origin[w] + byte[0::2] * scale[w]
            hi = origin[w] + byte[1::2] * scale[w]
            if not live[sl]:
                assert byte[0] > byte[1]  # masked out: empty
            else:
                assert not (c >> 16 & 1)  # finite: on the grid
                assert (lo <= seg[sl].min(0)).all() and (hi >= seg[sl].max(0)).all()
            seen[sl] = True
    assert seen.all()  # every slot lies in exactly one wide node's leaf


@wp.kernel
def _dsq_kernel(p: wp.array(dtype=wp.vec3), a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3),
                out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = kernels._point_segment_dsq(p[i], a[i], b[i])


def test_point_segment_distance_is_rounded_as_written(device):
    """Bit for bit the float32 operations in order (no FMA on CUDA): CPU and CUDA then pick the same
    edge among edges at nearly equal distances (H200 session 12: the PLOC tree's point ids differed)."""
    rng = np.random.default_rng(0)
    p, a, b = (rng.standard_normal((20000, 3)).astype(np.float32) for _ in range(3))
    dev = _dev(device)
    out = wp.empty(len(p), dtype=float, device=dev)
    wp.launch(_dsq_kernel, len(p), [wp.array(x, dtype=wp.vec3, device=dev) for x in (p, a, b)], [out], device=dev)

    def dot(x, y):
        return (x[:, 0] * y[:, 0] + x[:, 1] * y[:, 1]) + x[:, 2] * y[:, 2]  # float32 numpy: each op rounded

    ab, pa = b - a, p - a
    t = np.clip(dot(pa, ab) / dot(ab, ab), np.float32(0), np.float32(1))
    q = np.where(t[:, None] >= 1, p - b, pa - t[:, None] * ab)  # the end vertex itself at t = 1 (exact ties)
    np.testing.assert_array_equal(out.numpy(), dot(q, q))


def _ray_answers(bvh, o, d, device):
    dev = _dev(device)
    n = len(o)
    out = wp.empty(n, dtype=wp.int32, device=dev)
    search.nearest_edge_ray(bvh, wp.array(o, dtype=wp.vec3, device=dev), wp.array(d, dtype=wp.vec3, device=dev),
                            wp.array(np.full(n, 0.1, np.float32), dtype=float, device=dev),
                            wp.array(np.full(n, np.inf, np.float32), dtype=float, device=dev),
                            wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev), np.inf, out)
    return out.numpy()


def test_answers_do_not_depend_on_the_tree(device):
    """Every tree and walk returns the same edges, ties included (the float32 minimum of (distance, id)
    over all edges): CPU and CUDA, whose default trees differ, agree once their arithmetic does."""
    v, ends = _grid_edges(20)
    rng = np.random.default_rng(2)
    mask = (rng.random(len(ends)) > 0.1).astype(np.uint8)
    q = np.concatenate([rng.uniform(-0.3, 1.3, (1200, 3)),
                        v[rng.integers(0, len(v), 300)] + [0.0, 0.0, 0.2]]).astype(np.float32)  # above vertices: ties
    o = rng.uniform(-0.5, 1.5, (400, 3)).astype(np.float32)
    d = rng.standard_normal((400, 3)).astype(np.float32)
    arrays = _arrays(device, v, ends, mask)
    got = []
    for builder, leaf, wide in (("sah", 4, False), ("lbvh", 8, False), ("lbvh", 1, False), ("ploc", 8, False),
                                ("ploc", 8, True), ("sah", 4, "q"), ("lbvh", 8, "qs")):
        bvh = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide=wide)
        got.append((_answers(bvh, q, 1, device), _answers(bvh, q, 8, device), _ray_answers(bvh, o, d, device)))
    for other in got[1:]:
        for a, b in zip(got[0], other):
            np.testing.assert_array_equal(a, b)
