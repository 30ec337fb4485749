"""The fused refit's variants (rayd.engine.refit_variants): after moving every vertex, each
variant leaves the same node boxes, pair nodes and leaf corners bit for bit as the default
fused kernel and as a fresh build over the moved vertices (Warp's host SAH tree and PLOC
trees with leaves of several triangles); queries after an update match a fresh build; the
flat scene's edge BVH is refitted at the next edge query, not at sync()."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import refit, triangles

VARIANTS = ["sibling", "pairslot", "noitems", "acqrel", "late", "sibling,noitems", "pairslot,noitems", "sibling,late",
            "pairslot,acqrel,noitems", "pairslot,acqrel,late,noitems", "wide", "pairslot,acqrel,late,wide,noitems"]


@contextlib.contextmanager
def _variant(names: str, constructor: str = "sah"):
    was, was_c = refit.refit_variant(), triangles.bvh_constructor()
    refit.set_refit_variant(names)
    triangles.set_bvh_constructor(constructor)
    try:
        yield
    finally:
        refit.set_refit_variant(",".join(sorted(was)))
        triangles.set_bvh_constructor(was_c)


def _tri(v, f, face_base, device, names, constructor, keep_items):
    with _variant(names, constructor):
        tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device=device),
                                      wp.array(f.ravel(), dtype=wp.int32, device=device),
                                      num_triangles=len(f) - face_base, face_base=face_base, layout="pair")
    tri.keep_item_boxes = keep_items
    return tri


def _state(tri, items=True):
    # Warp's node halves as bits: xyz and the index word (which the "wide" variant writes back)
    out = [tri.nodes.lowers.numpy().view(np.int32), tri.nodes.uppers.numpy().view(np.int32), tri.pairs.boxes.numpy()[
        np.arange(tri.pairs.boxes.shape[0]) % 4 != 3], tri.pairs.tris.numpy(), tri.magnitude.numpy()]
    if items:
        out += [tri.lowers.numpy(), tri.uppers.numpy()]
    return out


@pytest.mark.parametrize("names", VARIANTS)
@pytest.mark.parametrize("constructor", ["sah", "ploc"])
@pytest.mark.parametrize("count,face_base", [(1, 0), (2, 0), (300, 0), (300, 17), (5000, 3)])
def test_variant_equals_default_and_fresh_build(count, face_base, names, constructor, device):
    rng = np.random.default_rng(count)
    v = rng.uniform(-1, 1, (3 * count, 3)).astype(np.float32)
    f = rng.permutation(3 * count).reshape(-1, 3).astype(np.int32)
    keep = "noitems" not in names
    var = _tri(v, f, face_base, device, names, constructor, keep_items=keep)
    base = _tri(v, f, face_base, device, "", constructor, keep_items=True)
    assert var.fused is not None and var.fused.variant == refit.parse_variant(names, "test")
    assert base.fused is not None and not base.fused.variant
    moved = (v * rng.uniform(0.5, 3.0, (len(v), 1)) + 7.0).astype(np.float32)
    for step in range(2):  # two refits: the second starts from refitted (not built) boxes
        for tri in (var, base):
            tri.points.assign(moved if step == 0 else moved[::-1].copy())
            tri.refit()
        for a, b in zip(_state(var, keep), _state(base, keep)):
            np.testing.assert_array_equal(a, b)
    # against a fresh build of the same tree's boxes: the default kernel's boxes equal the build's
    # (checked by test_fused_refit for Warp's refit); here the variant's leaves, corners and root.
    fresh = _tri(moved[::-1].copy(), f, face_base, device, "", constructor, keep_items=True)
    root = var.nodes.root
    np.testing.assert_array_equal(var.nodes.lowers.numpy()[root, :3], fresh.nodes.lowers.numpy()[fresh.nodes.root, :3])
    np.testing.assert_array_equal(var.nodes.uppers.numpy()[root, :3], fresh.nodes.uppers.numpy()[fresh.nodes.root, :3])
    if not keep:  # the triangle boxes were left as the build wrote them
        assert not np.array_equal(var.lowers.numpy(), base.lowers.numpy())


def test_variant_names_are_checked():
    with pytest.raises(ValueError, match="set_refit_variant"):
        refit.set_refit_variant("sibling,sideways")
    assert refit.refit_variant() == refit._variant


def test_levels_order_ignores_variant(device):
    was = refit.refit_order()
    refit.set_refit_order("levels")
    try:
        v = np.random.default_rng(1).uniform(-1, 1, (30, 3)).astype(np.float32)
        tri = _tri(v, np.arange(30, dtype=np.int32).reshape(-1, 3), 0, device, "sibling", "sah", True)
    finally:
        refit.set_refit_order(was)
    assert tri.fused.order == "levels" and not tri.fused.variant


def _terrain(n):
    x, y = np.meshgrid(np.linspace(-1, 1, n), np.linspace(-1, 1, n))
    z = 0.2 * np.sin(3 * x) * np.cos(2 * y)
    v = np.stack([x, y, z], -1).reshape(-1, 3).astype(np.float32)
    i = np.arange(n * n).reshape(n, n)
    a, b, c, d = i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, :-1].ravel(), i[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, d], 1), np.stack([a, d, c], 1)]).astype(np.int32)
    return v, f


@pytest.mark.parametrize("names", VARIANTS)
def test_queries_after_update_equal_fresh_build(names, device):
    v, f = _terrain(24)
    rng = np.random.default_rng(3)
    o = np.concatenate([rng.uniform(-1, 1, (2000, 2)), np.full((2000, 1), 2.0)], 1).astype(np.float32)
    d = np.concatenate([rng.uniform(-0.2, 0.2, (2000, 2)), -np.ones((2000, 1))], 1).astype(np.float32)
    # rays through shared vertices and edges (watertightness: none may slip through)
    o[:500, :2] = v[rng.integers(0, len(v), 500), :2]
    d[:500, :2] = 0.0
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    pts = torch.tensor(rng.uniform(-1, 1, (500, 3)).astype(np.float32), device=device)
    moved = v.copy()
    moved[:, 2] = 0.3 * np.cos(4 * v[:, 0]) + 0.1 * v[:, 1]
    scenes = {}
    for key in (names, ""):
        with _variant(key):
            scenes[key] = rt.Scene()
            scenes[key].add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)),
                                 dynamic=True)
            scenes[key].build()
        scenes[key].update_mesh_vertices(0, torch.tensor(moved, device=device))
        scenes[key].sync()
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(torch.tensor(moved, device=device), torch.tensor(f, device=device)))
    fresh.build()
    a, b, c = scenes[names].intersect(ray), scenes[""].intersect(ray), fresh.intersect(ray)
    assert bool((a.prim_id[:500] >= 0).all())  # vertical rays inside the terrain all hit
    for key in ("prim_id", "t"):  # the same tree refitted by the default kernel: the same winners
        torch.testing.assert_close(getattr(a, key), getattr(b, key), rtol=0, atol=0, msg=key)
    # a fresh build (another tree: ties at shared vertices may pick the other triangle)
    torch.testing.assert_close(a.prim_id >= 0, c.prim_id >= 0)
    torch.testing.assert_close(a.t, c.t)
    ca, cb = scenes[names].closest_point(pts), fresh.closest_point(pts)
    torch.testing.assert_close(ca.distance, cb.distance, rtol=0, atol=0)


def test_edge_bvh_refit_waits_for_the_next_edge_query(device):
    v, f = _terrain(12)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
    scene.build()
    pts = torch.tensor(np.random.default_rng(0).uniform(-1, 1, (300, 3)).astype(np.float32), device=device)
    scene.nearest_edge(pts)
    edges = scene._edges
    assert not edges.refit_pending
    moved = torch.tensor(v * 1.5 + 0.25, device=device)
    scene.update_mesh_vertices(0, moved)
    scene.sync()
    assert edges.refit_pending  # sync() left the edge refit to the next edge query
    got = scene.nearest_edge(pts)
    assert not edges.refit_pending
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(moved.clone(), torch.tensor(f, device=device)))
    fresh.build()
    want = fresh.nearest_edge(pts)
    torch.testing.assert_close(got.distance, want.distance, rtol=0, atol=0)
    torch.testing.assert_close(got.global_edge_id, want.global_edge_id, rtol=0, atol=0)
    # two syncs before a query, the last one a mask change only: the points still refresh
    scene.update_mesh_vertices(0, torch.tensor(v, device=device))
    scene.sync()
    mask = torch.ones(scene.edge_topology().num_edges, dtype=torch.bool, device=device)
    mask[::3] = False
    scene.set_edge_mask(mask)
    scene.sync()
    got = scene.nearest_edge(pts)
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)))
    fresh.build()
    fresh.set_edge_mask(mask)
    fresh.sync()
    want = fresh.nearest_edge(pts)
    torch.testing.assert_close(got.distance, want.distance, rtol=0, atol=0)
    torch.testing.assert_close(got.global_edge_id, want.global_edge_id, rtol=0, atol=0)
