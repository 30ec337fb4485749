"""Compressed 4-wide triangle nodes (``RAYD_BVH_LAYOUT=wide4q``, ``engine/wide_q.py``) against ``wide4``:
the decoded child boxes hold the float ones (after the build and after every kind of refit, which
keeps the compressed rows bit-equal to a fresh quantisation), and the walk over them returns the
same winners and ``t`` on terrain, sphere and a scan, closest and any hit, with ignored faces, after a
vertex update, for SAH and PLOC trees, and in reflection chains, with every node read compressed and with
the top nodes read from their float rows (``wide_q.FLOAT_TOP``).

On the CPU Embree is turned off, so the walks compared are rayd's own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import triangles, wide_q, wide_refit
from tests.engine.test_wide_layout import _hits, _ray, _same, _same_up_to_ties, _scene, _workload, no_embree  # noqa: F401
from tests.engine.test_wide_refit import _settings


def _decoded(wide) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, refs, s) of every child slot of the nodes from ``wide.q_from`` on, decoded from ``wide.q`` as the
    walk decodes them: (W, 4, 3) float32 planes ``origin + q s``, (W, 4) refs and (W, 3) the scales."""
    q = wide.q.numpy().reshape(-1, 4, 4)[wide.q_from: wide.count]
    origin = q[:, 0, :3].copy().view(np.float32)  # (W, 3)
    e = np.stack([(q[:, 0, 3] >> (8 * k)) & 255 for k in range(3)], 1)
    assert not (q[:, 0, 3] & (1 << 24)).any()  # no "open all" flag: every box finite
    s = np.ldexp(np.float32(1.0), e - 127).astype(np.float32)  # (W, 3)
    byte = [lambda w, j=j: (w >> (8 * j)) & 255 for j in range(4)]
    lo_q = np.stack([np.stack([byte[j](q[:, 1, 0]), byte[j](q[:, 1, 2]), byte[j](q[:, 2, 0])], 1) for j in range(4)], 1)
    hi_q = np.stack([np.stack([byte[j](q[:, 1, 1]), byte[j](q[:, 1, 3]), byte[j](q[:, 2, 1])], 1) for j in range(4)], 1)
    lo = origin[:, None, :] + lo_q.astype(np.float32) * s[:, None, :]
    hi = origin[:, None, :] + hi_q.astype(np.float32) * s[:, None, :]
    return lo.astype(np.float32), hi.astype(np.float32), q[:, 3], s


def _check_holds(wide) -> None:
    """Every decoded non-empty box holds its float box; empty slots decode empty; refs as the float rows (the
    nodes from ``wide.q_from`` on; the others are walked from their float rows and have no compressed rows)."""
    assert not wide.q.numpy().reshape(-1, 4, 4)[: wide.q_from].any()
    data = wide.data.numpy().reshape(-1, 8, 4)[wide.q_from: wide.count]
    links = wide.links.numpy().reshape(-1, 8, 4)[wide.q_from: wide.count]
    lo = data[:, [0, 2, 4]].transpose(0, 2, 1)  # (W, 4 children, xyz)
    hi = data[:, [1, 3, 5]].transpose(0, 2, 1)
    used = links[:, 7] >= 0
    dlo, dhi, refs, s = _decoded(wide)
    np.testing.assert_array_equal(refs, links[:, 6])
    assert (dlo[used] <= lo[used]).all() and (dhi[used] >= hi[used]).all()
    assert (dlo[~used][:, 0] > dhi[~used][:, 0]).all()
    # looser by less than two grid steps per plane
    step = np.broadcast_to(s[:, None, :], lo.shape)[used]
    assert ((lo[used] - dlo[used]) < 2 * step).all() and ((dhi[used] - hi[used]) < 2 * step).all()


@pytest.mark.parametrize("mode", ["wide_tris", "full", "wide", "wide_split", "wide_levels", "wide_tris_q64",
                                  "wide_tris_ql"])
@pytest.mark.parametrize("constructor", ["ploc", "sah"])
def test_refits_keep_the_compressed_rows_current(constructor, mode, device, float_top):
    """After the build and after each refit kind: the decoded boxes hold the float ones and ``q`` is bit-equal
    to a fresh quantisation of the float rows (``wide_tris`` writes it in its climb: no launch after)."""
    rng = np.random.default_rng(7)
    count = 3000
    v = rng.uniform(-1, 1, (3 * count, 3)).astype(np.float32)
    f = rng.permutation(3 * count).reshape(-1, 3).astype(np.int32)
    with _settings(constructor, layout="wide4q", refit=mode):
        tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device=device),
                                      wp.array(f.ravel(), dtype=wp.int32, device=device), layout="wide4q")
        assert tri.wide is not None and tri.wide.q is not None
        _check_holds(tri.wide)
        for step in range(2):
            tri.points.assign((v * rng.uniform(0.5, 3.0, (len(v), 1)) + rng.normal(size=3)).astype(np.float32))
            before = tri.wide.q.numpy().copy()
            tri.refit()
            got = tri.wide.q.numpy().copy()
            assert not np.array_equal(got, before)
            _check_holds(tri.wide)
            wide_q.quantise(tri.wide)
            np.testing.assert_array_equal(got, tri.wide.q.numpy())
    refit = tri._wide_refits.get(wide_refit.per_thread(mode) or "")
    if mode in ("wide_tris", "wide_tris_q64"):  # (in their climb; the others by a launch after the refit)
        assert refit is not None and refit.quantises


def test_warp_refit_quantises_too(device, float_top):
    """A SAH tree refitted by Warp's refit plus copies (``RAYD_REFIT=warp``: no fused refit) re-quantises too."""
    rng = np.random.default_rng(8)
    v = rng.uniform(-1, 1, (3000, 3)).astype(np.float32)
    f = rng.permutation(3000).reshape(-1, 3).astype(np.int32)
    was = triangles.refit_kind()
    triangles.set_refit("warp")
    try:
        tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device=device),
                                      wp.array(f.ravel(), dtype=wp.int32, device=device), layout="wide4q",
                                      bvh_constructor="sah")
    finally:
        triangles.set_refit(was)
    assert tri.fused is None and tri.wide is not None
    tri.points.assign((v * 2.5 - 0.3).astype(np.float32))
    tri.refit()
    got = tri.wide.q.numpy().copy()
    _check_holds(tri.wide)
    wide_q.quantise(tri.wide)
    np.testing.assert_array_equal(got, tri.wide.q.numpy())


@pytest.fixture(params=[0, 20])
def float_top(request):
    """``wide_q.FLOAT_TOP`` for the scenes built: every node compressed, or the first 20 read as float rows."""
    was = wide_q.FLOAT_TOP
    wide_q.FLOAT_TOP = request.param
    try:
        yield request.param
    finally:
        wide_q.FLOAT_TOP = was


@pytest.mark.parametrize("constructor", ["sah", "ploc"])
@pytest.mark.parametrize("kind", ["terrain", "sphere", "scan"])
def test_same_winner_and_t_as_wide4(device, kind, constructor, float_top):
    v, f, o, d = _workload(kind)
    ray = _ray(o, d, device)
    with _settings(constructor, layout="wide4", refit=wide_refit.tri_refit()):
        wide = _scene([(v, f)], device, "wide4")
        comp = _scene([(v, f)], device, "wide4q")
    assert comp._core.flat.wide.q_from == float_top < comp._core.flat.wide.count
    assert wide._core.accel.search_walk == "flat_wide" and comp._core.accel.search_walk == "flat_wide_q"
    a, b = _hits(wide, ray), _hits(comp, ray)
    assert (a[0] >= 0).sum() > 0.3 * len(o)
    _same(a, b)
    _same(_hits(wide, ray, ignore=a[4]), _hits(comp, ray, ignore=b[4]))
    moved = ((v - v.mean(0)) * 1.2 + 0.05).astype(np.float32)
    for s in (wide, comp):
        s.update_mesh_vertices(0, torch.tensor(moved, device=device))
        s.sync()
    _same_up_to_ties(_hits(wide, ray), _hits(comp, ray), o, d, moved, f)


def test_reflection_chains_as_wide4(device, float_top):
    v, f, o, d = _workload("sphere")
    ray = _ray(o[:2000], d[:2000], device)
    chains = []
    for name in ("wide4", "wide4q"):
        scene = _scene([(v, f)], device, name)
        c = scene.trace_reflections(ray, 3)
        chains.append((c.global_prim_id.cpu().numpy(), c.t.cpu().numpy()))
    np.testing.assert_array_equal(chains[0][0], chains[1][0])
    np.testing.assert_array_equal(chains[0][1], chains[1][1])
    assert (chains[0][0][:, 0] >= 0).sum() > 500 and (chains[0][0][:, 1] >= 0).sum() > 20


def test_single_leaf_tree(device):
    pts = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), dtype=wp.vec3, device=device)
    idx = wp.array(np.array([0, 1, 2], np.int32), dtype=wp.int32, device=device)
    tri = triangles.TriangleScene(pts, idx, layout="wide4q")
    assert tri.wide.root == tri.pairs.root == -1
    tri.refit()  # (nothing to quantise)
    scene = _scene([(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), np.array([[0, 1, 2]], np.int32))],
                   device, "wide4q")
    hit = scene.intersect(_ray([[0.2, 0.2, 1.0]], [[0.0, 0.0, -1.0]], device))
    assert hit.prim_id.item() == 0 and hit.t.item() == pytest.approx(1.0)
