"""rayd's 4-wide node layout (rayd.engine.wide_nodes / wide_walk) against the child-pair layout:
the same winning triangle and ``t`` on terrain, sphere and a scan, for closest and any hit,
after refits, with ignored faces, disabled shapes and instances; and the collapsed tree itself
(every leaf once, boxes copied from the pair nodes, empty slots, the single-leaf tree).

On the CPU Embree is turned off, so the walks compared are rayd's own."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import reference
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import cpu_embree, triangles, wide_nodes

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import workloads  # noqa: E402


@pytest.fixture(autouse=True)
def no_embree():
    was = cpu_embree.active()
    cpu_embree.set_enabled(False)
    try:
        yield
    finally:
        cpu_embree.set_enabled(was)


@contextlib.contextmanager
def layout(name):
    was = triangles.bvh_layout()
    triangles.set_bvh_layout(name)
    try:
        yield
    finally:
        triangles.set_bvh_layout(was)


def _scene(meshes, device, name, instances=()):
    with layout(name):
        scene = rt.Scene()
        for v, f in meshes:
            scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
        for mesh_id, m in instances:
            scene.add_instance(mesh_id, torch.tensor(m, dtype=torch.float32, device=device))
        scene.build()
    return scene


def _hits(scene, ray, **kw):
    hit = scene.intersect(ray, flags=rt.RayFlags.Minimal, **kw)
    return (hit.prim_id.cpu().numpy(), hit.shape_id.cpu().numpy(), hit.t.cpu().numpy(),
            scene.shadow_test(ray, **kw).cpu().numpy(), hit.global_prim_id)


def _same(a, b):
    for x, y in zip(a[:4], b[:4]):
        np.testing.assert_array_equal(x, y)


def _same_up_to_ties(a, b, o, d, v, f):
    """:func:`_same`, except that a ray through a shared edge or vertex (two triangles at the same
    ``t``, which the walks' different visiting orders may rank either way) may name either one:
    its ``t`` must agree and the float64 reference must hit the other triangle at that ``t``."""
    np.testing.assert_array_equal(a[2], b[2])
    np.testing.assert_array_equal(a[3], b[3])
    np.testing.assert_array_equal(a[1], b[1])
    bad = np.nonzero(a[0] != b[0])[0]
    assert len(bad) <= 0.03 * len(a[0])
    for i in bad:
        for prim in (a[0][i], b[0][i]):
            ref = reference.closest_hit(np.asarray(o[i:i + 1], np.float64), np.asarray(d[i:i + 1], np.float64),
                                        np.asarray(v, np.float64), f[prim:prim + 1])
            assert abs(ref["t"][0] - a[2][i]) <= 1e-5 * abs(a[2][i]) + 1e-6, (i, prim)


def _ray(o, d, device):
    return rt.Ray(torch.tensor(np.asarray(o, np.float32), device=device),
                  torch.tensor(np.asarray(d, np.float32), device=device))


def _scan():
    for root in (os.environ.get("RAYD_MESHES"), os.environ.get("RAYD_MESH_DIR"),
                 Path(__file__).resolve().parents[2] / ".device" / "meshes", "/work/meshes"):
        if root and (Path(root) / "bunny.npz").exists():
            data = np.load(Path(root) / "bunny.npz")
            return data["vertices"].astype(np.float32), data["faces"].astype(np.int32)
    pytest.skip("bunny.npz not fetched (python examples/get_bunny.py)")


def _workload(kind):
    if kind == "terrain":
        w = workloads.terrain(48, 96)
        return w.vertices, w.faces, w.o, w.d
    if kind == "sphere":
        w = workloads.sphere(33, 64, 6000, seed=3)
        return w.vertices, w.faces, w.o, w.d
    v, f = _scan()
    rng = np.random.default_rng(5)
    c = 0.5 * (v.min(0) + v.max(0))
    r = float(np.linalg.norm(v - c, axis=1).max())
    o = c + 1.5 * r * rng.standard_normal((6000, 3)) / 1.7
    d = c + 0.6 * r * rng.uniform(-1, 1, (6000, 3)) - o
    return v, f, o, d


@pytest.mark.parametrize("kind", ["terrain", "sphere", "scan"])
def test_same_winner_and_t_as_pair_layout(device, kind):
    v, f, o, d = _workload(kind)
    ray = _ray(o, d, device)
    pair = _scene([(v, f)], device, "pair")
    wide = _scene([(v, f)], device, "wide4")
    assert wide._core.accel.search_walk == "flat_wide" and pair._core.accel.search_walk == "flat_pair"
    a, b = _hits(pair, ray), _hits(wide, ray)
    assert (a[0] >= 0).sum() > 0.3 * len(o)
    _same(a, b)
    # every t of the closest hit is also the float64 reference's (up to float32 rounding)
    ref = reference.closest_hit(np.asarray(o, np.float64), np.asarray(d, np.float64), v.astype(np.float64), f)
    hit = b[0] >= 0
    assert (hit == (ref["prim"] >= 0)).mean() > 0.999
    both = hit & (ref["prim"] >= 0)
    np.testing.assert_allclose(b[2][both], ref["t"][both], rtol=1e-5, atol=1e-6)
    # the next face behind each winner (ignore), then a refit to moved vertices
    _same(_hits(pair, ray, ignore=a[4]), _hits(wide, ray, ignore=b[4]))
    moved = ((v - v.mean(0)) * 1.2 + 0.05).astype(np.float32)
    for s in (pair, wide):
        s.update_mesh_vertices(0, torch.tensor(moved, device=device))
        s.sync()
    # the terrain moved puts some rays exactly on grid lines (ties between two triangles)
    _same_up_to_ties(_hits(pair, ray), _hits(wide, ray), o, d, moved, f)


def test_several_meshes_disabled_shapes_and_instances(device):
    v1, f1 = reference.grid(20)
    rng = np.random.default_rng(4)
    c = rng.uniform(-1, 1, (300, 1, 3))
    v2 = (c + 0.2 * rng.standard_normal((300, 3, 3))).reshape(-1, 3).astype(np.float32)
    f2 = np.arange(900, dtype=np.int32).reshape(-1, 3)
    meshes = [(v1.astype(np.float32), f1.astype(np.int32)), (v2, f2)]
    o = 3.0 * rng.standard_normal((4000, 3))
    ray = _ray(o, rng.uniform(-0.8, 0.8, (4000, 3)) - o, device)
    pair, wide = _scene(meshes, device, "pair"), _scene(meshes, device, "wide4")
    _same(_hits(pair, ray), _hits(wide, ray))
    for s in (pair, wide):
        s.set_shape_enabled(0, False)
        s.sync()
    a, b = _hits(pair, ray), _hits(wide, ray)
    _same(a, b)
    assert (b[1] != 0).all() and (b[0] >= 0).sum() > 500
    # with instances the flat part is walked in the wide layout only where there are no instances
    m = np.eye(4, dtype=np.float32)
    m[:3, 3] = (2.5, 0.0, 0.0)
    pair, wide = (_scene(meshes, device, name, instances=[(1, m)]) for name in ("pair", "wide4"))
    assert not wide._core.accel.search_walk.endswith("wide")
    _same(_hits(pair, ray), _hits(wide, ray))


@pytest.mark.parametrize("collapse", ["sah", "greedy"])
def test_collapse_covers_every_leaf_once_and_copies_pair_boxes(collapse):
    v, f = workloads.bumpy_sphere_mesh(17, 32)
    pts = wp.array(v, dtype=wp.vec3, device="cpu")
    was = wide_nodes.COLLAPSE
    wide_nodes.COLLAPSE = collapse
    try:
        tri = triangles.TriangleScene(pts, wp.array(f.ravel(), dtype=wp.int32, device="cpu"), layout="wide4",
                                      bvh_constructor="sah")
    finally:
        wide_nodes.COLLAPSE = was
    wide, pairs = tri.wide, tri.pairs
    assert wide is not None and wide.collapse == collapse and wide.root == 0 and 0 < wide.stack_need <= 64

    def check():
        data = wide.data.numpy().reshape(-1, 8, 4)[: wide.count]
        links = wide.links.numpy().reshape(-1, 8, 4)[: wide.count]
        refs, codes = links[:, 6], links[:, 7]
        used = codes >= 0
        assert used[:, :2].all()  # every wide node has at least two children
        inner = refs[used & (refs >= 0)]
        assert sorted(inner.tolist()) == list(range(1, wide.count))  # each wide node has one parent
        pair_links = pairs.links.numpy()[3::4, :2]
        assert sorted(refs[used & (refs < 0)].tolist()) == sorted(pair_links[pair_links < 0].tolist())
        pb = pairs.boxes.numpy().reshape(-1, 4, 4)[:, :3].reshape(-1, 12)
        child = np.stack([pb[:, 0:6], pb[:, 6:12]], 1).reshape(-1, 6)  # (2 k + side) -> lo xyz, hi xyz
        got = data[:, [0, 2, 4, 1, 3, 5]].transpose(0, 2, 1)  # (w, j, lo xyz hi xyz)
        np.testing.assert_array_equal(got[used], child[codes[used]])
        assert (got[~used][:, :3] > got[~used][:, 3:]).all()  # empty slots: lo > hi on every axis
        np.testing.assert_array_equal(refs[~used], np.broadcast_to(refs[:, :1], refs.shape)[~used])
        assert used.sum() / wide.count > 3.0  # few slots empty (sah: 3.50 children per node, greedy: 3.20)

    check()
    pts.assign((v * 1.5 - 0.25).astype(np.float32))
    tri.refit()
    tri.complete()  # (reads every structure: what a wide-only refit, RAYD_TRI_REFIT=wide, leaves stale)
    check()


def test_sah_collapse_fills_a_balanced_tree():
    """A balanced tree of 128 leaves (depth 7): the cost programme needs the fewest wide nodes,
    ceil(127 / 3) = 43 (170 = 42 + 128 children, all but two slots used); the greedy rule, 85
    (the last level's get two leaves each)."""
    v, f = workloads.terrain_mesh(8)
    tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device="cpu"),
                                  wp.array(f.ravel(), dtype=wp.int32, device="cpu"), layout="pair",
                                  bvh_constructor="sah")
    assert tri.nodes.depth <= 8
    sah = wide_nodes.WideNodes(tri.pairs, tri.nodes.depth, collapse="sah")
    greedy = wide_nodes.WideNodes(tri.pairs, tri.nodes.depth, collapse="greedy")
    assert sah.count == 43 and greedy.count == 85
    assert (sah.links.numpy().reshape(-1, 8, 4)[:43, 7] >= 0).sum() == 42 + 128
    shallow = wide_nodes.WideNodes(tri.pairs, 2)  # fewer levels than the tree has: not used
    assert not shallow.ok
    with pytest.raises(ValueError, match="collapse"):
        wide_nodes.WideNodes(tri.pairs, tri.nodes.depth, collapse="optimal")


def test_single_leaf_tree():
    pts = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), dtype=wp.vec3, device="cpu")
    idx = wp.array(np.array([0, 1, 2], np.int32), dtype=wp.int32, device="cpu")
    tri = triangles.TriangleScene(pts, idx, layout="wide4")
    assert tri.wide.root == tri.pairs.root == -1


def test_set_bvh_layout_rejects_unknown():
    with pytest.raises(ValueError, match="set_bvh_layout"):
        triangles.set_bvh_layout("wide8")
