"""The shared-stack instance walks (rayd.engine.instance_walk: ``pairtop``, ``unified``, ``wide_blas``,
``wide_both``) against the
nested walk (``pair_walk``) and a float64 brute force: identical winners and ``t`` for closest and
any hit, with ignored faces, disabled instances, a flat part, rays starting behind ``tmin < 0``,
top-level leaves holding several coincident instances, and after transform updates (the top
level's pair nodes are refreshed with its refit)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import reference
import torch

import rayd.torch as rt
from rayd.engine import instances as inst_level

WALKS = ("nested", "pairtop", "unified", "unified_cull", "wide_both", "wide_blas")


@contextlib.contextmanager
def walk(name):
    was = inst_level.instance_walk()
    inst_level.set_instance_walk(name)
    try:
        yield
    finally:
        inst_level.set_instance_walk(was)


def _placements(count, seed, coincident=0):
    """(count, 4, 4) float32: rotations about z, scales 0.3-0.45 on a jittered grid; the first
    ``coincident`` placements are one and the same."""
    rng = np.random.default_rng(seed)
    side = int(np.ceil(count ** (1 / 3)))
    idx = np.arange(count)
    grid = np.stack((idx % side, (idx // side) % side, idx // (side * side)), 1) - (side - 1) / 2
    centre = grid + 0.1 * rng.uniform(size=(count, 3))
    angle = rng.uniform(0, 2 * np.pi, count)
    scale = rng.uniform(0.3, 0.45, count)
    m = np.zeros((count, 4, 4))
    m[:, 0, 0], m[:, 0, 1] = scale * np.cos(angle), -scale * np.sin(angle)
    m[:, 1, 0], m[:, 1, 1] = scale * np.sin(angle), scale * np.cos(angle)
    m[:, 2, 2] = scale
    m[:, :3, 3] = centre
    m[:, 3, 3] = 1
    m[1:coincident] = m[0]
    return m.astype(np.float32), side


def _rays(n, side, seed, tmin=0.0):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, 3))
    o = (1.5 * side * u / np.linalg.norm(u, axis=1, keepdims=True)).astype(np.float32)
    d = ((rng.uniform(size=(n, 3)) - 0.5) * side - o).astype(np.float32)
    return o, d


def _build(device, mats, flat=False, dynamic=False):
    v, f = reference.icosphere(2)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32, device=device),
                           torch.tensor(f, dtype=torch.int32, device=device)), dynamic=dynamic)
    if not flat:
        scene.set_shape_enabled(0, False)
    ids = [scene.add_instance(0, torch.tensor(m, device=device)) for m in mats]
    scene.build()
    return scene, ids, v, f


def _query(scene, ray, **kw):
    hit = scene.intersect(ray, flags=rt.RayFlags.Minimal, **kw)
    return [x.cpu().numpy() for x in (hit.global_prim_id, hit.shape_id, hit.prim_id, hit.t,
                                      scene.shadow_test(ray, **kw))]


def _assert_same(results):
    base = results["nested"]
    for name in WALKS[1:]:
        for a, b in zip(base, results[name]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("flat", [False, True])
def test_walks_match_nested_and_brute_force(device, flat):
    mats, side = _placements(27, 1)
    o, d = _rays(2000, side, 2)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    results, scenes = {}, {}
    for name in WALKS:
        with walk(name):
            scene, ids, v, f = _build(device, mats, flat=flat)
        expect = "nested" if name == "nested" else name
        assert scene._core.accel.search_walk == ("both_" if flat else "instances_") + (
            "pair" if expect == "nested" else expect)
        results[name] = _query(scene, ray)
        scenes[name] = (scene, ids)
    _assert_same(results)
    gid, shape, prim, t, shadow = results["unified"]
    assert (gid >= 0).sum() > 1000
    np.testing.assert_array_equal(shadow, gid >= 0)
    # float64 brute force over every placed triangle
    v64 = np.concatenate([v @ m[:3, :3].T.astype(np.float64) + m[:3, 3] for m in mats.astype(np.float64)]
                         + ([v] if flat else []))
    f_all = np.concatenate([f + k * len(v) for k in range(len(mats) + (1 if flat else 0))])
    ref = reference.closest_hit(o.astype(np.float64), d.astype(np.float64), v64, f_all)
    assert (np.isfinite(ref["t"]) == (gid >= 0)).mean() > 0.999
    both = np.isfinite(ref["t"]) & (gid >= 0)
    assert np.abs(t[both] - ref["t"][both]).max() < 1e-4 * np.abs(ref["t"][both]).max()
    # ignore the winners, disable some instances, move them all (refit of the top level)
    for name in WALKS:
        results[name] = _query(scenes[name][0], ray, ignore=torch.tensor(gid, device=device))
    _assert_same(results)
    moved, _ = _placements(27, 3)
    for name in WALKS:
        scene, ids = scenes[name]
        for k in ids[::4]:
            scene.set_shape_enabled(k, False)
        scene.set_mesh_transform(ids, torch.tensor(moved, device=device))
        scene.sync()
        results[name] = _query(scene, ray)
    _assert_same(results)
    assert not np.isin(results["unified"][1], ids[::4]).any()
    assert (results["unified"][0] >= 0).sum() > 700


@pytest.mark.parametrize("coincident", [3, 6, 12])
def test_coincident_instances_share_a_top_level_leaf(device, coincident):
    """Identical placements: the same ``t`` on several instances, so the winner depends on the
    order of the walk (which must be the nested walk's). Were several instances left in one
    top-level leaf (Warp 1.19's SAH builder with ``leaf_size=1`` splits even identical boxes),
    the ``unified`` walk pushes a continuation ref, and more than 8 fall back to the nested walk."""
    mats, side = _placements(20, 4, coincident=coincident)
    o, d = _rays(1500, side, 5)
    d = d * np.float32(0.5)
    rng = np.random.default_rng(6)
    tmin = torch.tensor(rng.uniform(-1.0, 0.5, len(o)).astype(np.float32), device=device)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device), tmin=tmin)
    results, widths = {}, {}
    for name in WALKS:
        with walk(name):
            scene, ids, v, f = _build(device, mats)
        results[name] = _query(scene, ray)
        low = scene._core.accel.instances.nodes.lower_index.numpy()[:, 3]
        high = scene._core.accel.instances.nodes.upper_index.numpy()[:, 3]
        leaf = low < 0
        widest = int(((high[leaf] & 0x7FFFFFFF) - (low[leaf] & 0x7FFFFFFF)).max())
        walked = scene._core.accel.search_walk
        widths[name] = widest
        if name != "nested":
            assert walked == ("instances_" + name if widest <= 8 else "instances_pair")
    _assert_same(results)
    assert (results["unified"][0] >= 0).sum() > 300
    assert np.isin(results["unified"][1], [-1, *ids]).all()


def test_set_instance_walk_rejects_unknown_names():
    with pytest.raises(ValueError, match="set_instance_walk"):
        inst_level.set_instance_walk("fast")


def test_auto_walk_is_wide_blas_on_cuda_and_nested_on_the_cpu(device):
    """The default ("auto") resolves by device when the scene is built."""
    mats, side = _placements(8, 3)
    with walk("auto"):
        scene = _build(device, mats)[0]
    want = "instances_wide_blas" if str(device).startswith("cuda") else "instances_pair"
    assert scene._core.accel.search_walk == want
    with pytest.raises(ValueError, match="set_instance_walk"):
        inst_level.set_instance_walk("sideways")


def test_wide_walks_follow_a_moved_instanced_mesh(device):
    """``wide_both`` / ``wide_blas`` (4-wide copies of the BLAS and the top level,
    ``engine/instance_wide.py``): after ``update_mesh_vertices`` of the instanced mesh and
    ``sync()`` (BLAS refit, wide boxes copied again), then a transform update, the same winners
    as the nested walk."""
    mats, side = _placements(27, 7)
    o, d = _rays(1500, side, 8)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    names = ("nested", "wide_both", "wide_blas")
    scenes = {}
    for name in names:
        with walk(name):
            scenes[name] = _build(device, mats, dynamic=True)
        assert scenes[name][0]._core.accel.search_walk == (
            "instances_pair" if name == "nested" else "instances_" + name)
    v = scenes["nested"][2]
    grown = torch.tensor(v * np.float32(1.3) + np.float32(0.05), dtype=torch.float32, device=device)
    moved, _ = _placements(27, 9)
    results = {}
    for step in ("vertices", "transforms"):
        for name in names:
            scene, ids, _, _ = scenes[name]
            if step == "vertices":
                scene.update_mesh_vertices(0, grown)
            else:
                scene.set_mesh_transform(ids, torch.tensor(moved, device=device))
            scene.sync()
            results[name] = _query(scene, ray)
        for name in names[1:]:
            for a, b in zip(results["nested"], results[name]):
                np.testing.assert_array_equal(a, b)
        assert (results["nested"][0] >= 0).sum() > 500
