"""Engine ring: ray nearest-edge searches over the 4-wide edge walk (``edge_wide_walk.py``, issue 11, 18th
session) return the binary walk's edges (bit-equal ids, hence distances), match a float64 brute force, and
read no binary box after a wide-tree refit."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine import edge_wide_walk
from rayd.engine import nearest_edge as search
from rayd.engine.edges import EdgeBvh

from test_edge_wide import TREES, _arrays, _dev, _grid_edges


def _rays(n: int, seed: int):
    """Random rays over the grid: finite segments, half-lines, negative ``tmin``, some long directions."""
    rng = np.random.default_rng(seed)
    o = rng.uniform(-0.2, 1.2, (n, 3)).astype(np.float32)
    d = rng.normal(size=(n, 3)).astype(np.float32)
    d[::7] *= 40.0
    tmax = np.where(rng.random(n) < 0.3, np.inf, rng.uniform(0.0, 0.3, n)).astype(np.float32)
    tmin = np.where(rng.random(n) < 0.3, rng.uniform(-0.05, 0.02, n), 0.0).astype(np.float32)
    tmin = np.minimum(tmin, tmax)
    return o, d, tmin, tmax


def _ray_answers(bvh, o, d, tmin, tmax, device, wide_rays, monkeypatch, max_distance=np.inf, active=None,
                 counts=False):
    monkeypatch.setattr(edge_wide_walk, "WIDE_RAYS", wide_rays)
    dev = _dev(device)
    n = max(len(o), len(d))
    act = np.ones(1, np.uint8) if active is None else active.astype(np.uint8)
    c = wp.zeros(n, dtype=wp.vec2i, device=dev) if counts else None
    out = wp.empty(n, dtype=wp.int32, device=dev)
    search.nearest_edge_ray(bvh, wp.array(o, dtype=wp.vec3, device=dev), wp.array(d, dtype=wp.vec3, device=dev),
                            wp.array(tmin, dtype=float, device=dev), wp.array(tmax, dtype=float, device=dev),
                            wp.array(act, dtype=wp.uint8, device=dev), max_distance, out, counts=c)
    return (out.numpy().copy(), c.numpy().copy()) if counts else out.numpy().copy()


def _ray_brute(o, d, tmin, tmax, v, ends, mask):
    """(N, E) float64 distances between the ray segments and the edges (masked: inf), by the minimum of the
    convex quadratic over ``[tmin, tmax] x [0, 1]``: its interior stationary point and the four sides."""
    o, d = o.astype(np.float64)[:, None], d.astype(np.float64)[:, None]
    s0, s1 = tmin.astype(np.float64)[:, None], tmax.astype(np.float64)[:, None]
    a, b = v[ends[:, 0]].astype(np.float64)[None], v[ends[:, 1]].astype(np.float64)[None]
    e = b - a

    def dist(s, t):
        return np.linalg.norm(o + s[..., None] * d - a - t[..., None] * e, axis=-1)

    def proj(x, base, dirn, lo, hi):
        return np.clip(((x - base) * dirn).sum(-1) / (dirn * dirn).sum(-1), lo, hi)

    zero = np.zeros((o.shape[0], a.shape[1]))
    cands = [dist(proj(a, o, d, s0, s1), zero), dist(proj(b, o, d, s0, s1), zero + 1.0)]
    for s in (s0, s1):
        sf = np.broadcast_to(s, zero.shape)
        fin = np.isfinite(sf)
        ss = np.where(fin, sf, 0.0)
        cands.append(np.where(fin, dist(ss, proj(o + ss[..., None] * d, a, e, 0.0, 1.0)), np.inf))
    r = o - a
    dd, ee, de = (d * d).sum(-1), (e * e).sum(-1), (d * e).sum(-1)
    c, f = (d * r).sum(-1), (e * r).sum(-1)
    den = dd * ee - de * de
    ok = den > 1e-12 * dd * ee
    with np.errstate(all="ignore"):
        s = np.where(ok, (de * f - c * ee) / np.where(ok, den, 1.0), 0.0)
        t = np.where(ok, (dd * f - de * c) / np.where(ok, den, 1.0), 0.0)
    inside = ok & (s >= s0) & (s <= s1) & (t >= 0) & (t <= 1)
    cands.append(np.where(inside, dist(s, t), np.inf))
    out = np.min(cands, 0)
    out[:, mask == 0] = np.inf
    return out


@pytest.mark.parametrize("mode", [True, "q", "qs"])
@pytest.mark.parametrize("builder,leaf", TREES)
def test_wide_ray_walk_returns_the_binary_walks_edges(device, builder, leaf, mode, monkeypatch):
    v, ends = _grid_edges()
    rng = np.random.default_rng(5)
    mask = (rng.random(len(ends)) > 0.15).astype(np.uint8)
    o, d, tmin, tmax = _rays(1200, 6)
    arrays = _arrays(device, v, ends, mask)
    binary = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide=False)
    wide = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide=mode)
    assert binary.wide is None and wide.wide is not None
    ids_b, c_b = _ray_answers(binary, o, d, tmin, tmax, device, True, monkeypatch, counts=True)
    ids_o = _ray_answers(wide, o, d, tmin, tmax, device, False, monkeypatch)  # the wide tree's binary walk
    ids_w, c_w = _ray_answers(wide, o, d, tmin, tmax, device, True, monkeypatch, counts=True)
    np.testing.assert_array_equal(ids_o, ids_b)
    np.testing.assert_array_equal(ids_w, ids_b)
    assert c_w[:, 0].mean() < 0.6 * c_b[:, 0].mean()  # far fewer dependent node reads
    dist = _ray_brute(o, d, tmin, tmax, v, ends, mask)
    assert (ids_w >= 0).all()
    np.testing.assert_allclose(dist[np.arange(len(o)), ids_w], dist.min(1), rtol=2e-6, atol=1e-7)
    for md in (0.02, 0.05):  # max_distance: the same misses
        ids_b = _ray_answers(binary, o, d, tmin, tmax, device, True, monkeypatch, max_distance=md)
        ids_w = _ray_answers(wide, o, d, tmin, tmax, device, True, monkeypatch, max_distance=md)
        np.testing.assert_array_equal(ids_w, ids_b)
        assert (ids_w == -1).any() and (ids_w >= 0).any()


@pytest.mark.parametrize("refit", ["split", "wide", "wide1", "wide3"])
@pytest.mark.parametrize("mode", ["q", "qs"])
def test_wide_ray_walk_after_refits_reads_no_binary_box(device, refit, mode, monkeypatch):
    """After moved vertices and a new mask, every refit mode's ray answers equal a fresh binary tree's (and
    the brute force); after a wide-tree refit the binary boxes stay stale: no ray query reads them."""
    v, ends = _grid_edges()
    rng = np.random.default_rng(13)
    pts, ev, m = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    bvh = EdgeBvh(pts, ev, m, builder="ploc", leaf_size=8, wide=mode, refit=refit)
    o, d, tmin, tmax = _rays(700, 14)
    for step in range(2):
        moved = (v + 0.04 * (step + 1) * rng.standard_normal(v.shape)).astype(np.float32)
        mask = (rng.random(len(ends)) > 0.4).astype(np.uint8)
        pts.assign(moved)
        m.assign(mask)
        bvh.refit()
        ids_w = _ray_answers(bvh, o, d, tmin, tmax, device, True, monkeypatch)
        for k in (1, 8):  # point and top-k searches on the same refit do not read them either
            q = wp.array(o, dtype=wp.vec3, device=_dev(device))
            out = wp.empty((len(o), k), dtype=wp.int32, device=_dev(device))
            one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=_dev(device))
            if k == 1:
                search.nearest_edge_point(bvh, q, one, np.inf, out.reshape((len(o),)))
            else:
                search.nearest_edges_point(bvh, q, one, np.inf, out)
        assert bvh._binary_stale == (bvh.refit_mode != "split")
        fresh = EdgeBvh(pts, ev, m, builder="ploc", leaf_size=8, wide=False)
        np.testing.assert_array_equal(ids_w, _ray_answers(fresh, o, d, tmin, tmax, device, True, monkeypatch))
        dist = _ray_brute(o, d, tmin, tmax, moved, ends, mask)
        np.testing.assert_allclose(dist[np.arange(len(o)), ids_w], dist.min(1), rtol=2e-6, atol=1e-7)
        if bvh.refit_mode != "split":  # the binary walk of the same tree still works (it climbs first)
            ids_b = _ray_answers(bvh, o, d, tmin, tmax, device, False, monkeypatch)
            assert not bvh._binary_stale
            np.testing.assert_array_equal(ids_b, ids_w)


def test_wide_ray_walk_malformed_inactive_and_broadcast_rays(device, monkeypatch):
    v, ends = _grid_edges(16)
    arrays = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    bvh = EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide="q")
    binary = EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=False)
    o = np.array([[0.5, 0.5, 0.5]] * 8, np.float32)
    d = np.array([[1, 0, 0], [0, 0, 0], [np.nan, 0, 1], [0, 1, 0], [1e25, 1e25, 0], [3e-25, 0, 1e-25],
                  [0, 0, 1], [np.inf, 0, 0]], np.float32)
    tmin = np.array([0, 0, 0, 0.5, 0, 0, 0, 0], np.float32)
    tmax = np.array([1, 1, 1, 0.2, np.inf, np.inf, 1, 1], np.float32)
    active = np.array([1, 1, 1, 1, 1, 1, 0, 1], np.uint8)
    ids = _ray_answers(bvh, o, d, tmin, tmax, device, True, monkeypatch, active=active)
    ref = _ray_answers(binary, o, d, tmin, tmax, device, True, monkeypatch, active=active)
    np.testing.assert_array_equal(ids, ref)
    assert ids[0] >= 0 and ids[4] >= 0 and ids[5] >= 0
    assert (ids[[1, 2, 3, 6, 7]] == -1).all()  # zero / NaN / inf direction, tmax < tmin, inactive
    one_o = np.array([[0.3, 0.6, 0.4]], np.float32)  # one origin, many directions
    _, dd, t0, t1 = _rays(300, 21)
    ids = _ray_answers(bvh, one_o, dd, t0, t1, device, True, monkeypatch)
    np.testing.assert_array_equal(ids, _ray_answers(binary, one_o, dd, t0, t1, device, True, monkeypatch))
    dist = _ray_brute(np.repeat(one_o, len(dd), 0), dd, t0, t1, v, ends, np.ones(len(ends)))
    np.testing.assert_allclose(dist[np.arange(len(dd)), ids], dist.min(1), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("builder,leaf,mode", [("ploc", 8, "q"), ("sah", 4, True), ("lbvh", 1, "qs")])
def test_ray_keys_agree(device, builder, leaf, mode, monkeypatch):
    """Both prunings of the wide ray walk (``edge_wide_walk.RAY_KEY``) return the binary walk's edges, for short
    and long segments and half-lines; the box bounds test fewer segments."""
    v, ends = _grid_edges()
    mask = (np.random.default_rng(8).random(len(ends)) > 0.1).astype(np.uint8)
    arrays = _arrays(device, v, ends, mask)
    binary = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide=False)
    wide = EdgeBvh(*arrays, builder=builder, leaf_size=leaf, wide=mode)
    o, d, tmin, _ = _rays(800, 31)
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    for length in (0.02, 0.3, np.inf):
        tmax = np.full(len(o), length, np.float32)
        t0 = np.minimum(tmin, tmax)
        ref = _ray_answers(binary, o, d, t0, tmax, device, True, monkeypatch)
        tested = {}
        for key in ("center", "box"):
            monkeypatch.setattr(edge_wide_walk, "RAY_KEY", key)
            ids, c = _ray_answers(wide, o, d, t0, tmax, device, True, monkeypatch, counts=True)
            np.testing.assert_array_equal(ids, ref)
            tested[key] = c[:, 1].mean()
        assert tested["box"] <= tested["center"]
        if length == 0.02:
            assert tested["box"] < 0.7 * tested["center"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_wide_ray_walks_with_a_non_finite_vertex(device, bad, monkeypatch):
    """A vertex at NaN / inf: every walk (binary, wide, compressed) returns the same edges for rays."""
    v, ends = _grid_edges(16)
    v[37] = [bad, 0.5, bad]
    arrays = _arrays(device, v, ends, np.ones(len(ends), np.uint8))
    o, d, tmin, tmax = _rays(600, 17)
    ref = _ray_answers(EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=False), o, d, tmin, tmax, device, True,
                       monkeypatch)
    assert (ref >= 0).all()
    for mode in (True, "q", "qs"):
        ids = _ray_answers(EdgeBvh(*arrays, builder="ploc", leaf_size=8, wide=mode), o, d, tmin, tmax, device, True,
                           monkeypatch)
        np.testing.assert_array_equal(ids, ref)


@pytest.mark.parametrize("builder,leaf", TREES)
def test_binary_ray_walk_bound_pruning_keeps_the_edges(device, builder, leaf, monkeypatch):
    """The binary walk's ray pruning by lower bounds (``nearest_edge_kernels.RAY_BOUND``, the default) returns the
    edges of the walk without it, with fewer tests, for segments, half-lines and ``max_distance``."""
    from rayd.engine import nearest_edge_kernels

    v, ends = _grid_edges()
    mask = (np.random.default_rng(12).random(len(ends)) > 0.15).astype(np.uint8)
    binary = EdgeBvh(*_arrays(device, v, ends, mask), builder=builder, leaf_size=leaf, wide=False)
    o, d, tmin, tmax = _rays(900, 23)
    for md in (np.inf, 0.05):
        got = {}
        for flag in (False, True):
            monkeypatch.setattr(nearest_edge_kernels, "RAY_BOUND", flag)
            got[flag] = _ray_answers(binary, o, d, tmin, tmax, device, False, monkeypatch, max_distance=md,
                                     counts=True)
        np.testing.assert_array_equal(got[True][0], got[False][0])
        assert got[True][1][:, 1].mean() < got[False][1][:, 1].mean()
    dist = _ray_brute(o, d, tmin, tmax, v, ends, mask)
    ids = got[True][0]
    hit = ids >= 0
    np.testing.assert_allclose(dist[np.nonzero(hit)[0], ids[hit]], dist.min(1)[hit], rtol=2e-6, atol=1e-7)
