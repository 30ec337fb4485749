"""Refits through ``update_mesh_vertices`` + ``sync()``: after moving every vertex, the fused refit of
SAH and PLOC trees leaves the root box of a fresh build and queries equal to a fresh build's; the
flat scene's edge BVH is refitted at the next edge query, not at sync(). (The refit kernel
variants these tests once compared were measured on the H200 and removed, session 13.)"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import triangles
from rayd.engine.refit import FusedRefit


@contextlib.contextmanager
def _constructor(name: str, layout: str = "auto"):
    was, was_l = triangles.bvh_constructor(), triangles.bvh_layout()
    triangles.set_bvh_constructor(name)
    triangles.set_bvh_layout(layout)
    try:
        yield
    finally:
        triangles.set_bvh_constructor(was)
        triangles.set_bvh_layout(was_l)


def _tri(v, f, face_base, device, constructor, layout="pair"):
    with _constructor(constructor):
        return triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device=device),
                                       wp.array(f.ravel(), dtype=wp.int32, device=device),
                                       num_triangles=len(f) - face_base, face_base=face_base, layout=layout)


def _state(tri, wide: bool = True):
    out = [tri.nodes.lowers.numpy().view(np.int32), tri.nodes.uppers.numpy().view(np.int32), tri.pairs.boxes.numpy()[
        np.arange(tri.pairs.boxes.shape[0]) % 4 != 3], tri.pairs.tris.numpy(), tri.magnitude.numpy(),
        tri.lowers.numpy(), tri.uppers.numpy()]
    if wide and tri.wide is not None:
        out.append(tri.wide.data.numpy())
    return out


@pytest.mark.parametrize("layout", ["pair", "wide4"])
@pytest.mark.parametrize("constructor", ["sah", "ploc"])
@pytest.mark.parametrize("count,face_base", [(1, 0), (2, 0), (300, 0), (300, 17), (5000, 3)])
def test_refit_equals_fresh_build(count, face_base, constructor, layout, device):
    """Two refits of one tree leave the same bits as the same refits of a second copy of the tree, and
    the triangle boxes, magnitude and root box of a fresh build over the moved vertices; the wide nodes'
    boxes written by the climb equal ``WideNodes.refresh``'s copy of the pair nodes."""
    rng = np.random.default_rng(count)
    v = rng.uniform(-1, 1, (3 * count, 3)).astype(np.float32)
    f = rng.permutation(3 * count).reshape(-1, 3).astype(np.int32)
    one = _tri(v, f, face_base, device, constructor, layout)
    two = _tri(v, f, face_base, device, constructor, layout)
    assert one.fused is not None
    moved = (v * rng.uniform(0.5, 3.0, (len(v), 1)) + 7.0).astype(np.float32)
    # On CUDA the wide collapse numbers its nodes through an atomic counter, so two builds of one tree
    # may lay the same wide nodes out in another order (H200, session 13): their bits are compared only
    # when the layouts agree; either way each copy's climb-written boxes must equal its refresh below.
    same_wide = one.wide is None or np.array_equal(one.wide.links.numpy(), two.wide.links.numpy())
    for step in range(2):  # the second refit starts from refitted (not built) boxes
        for tri in (one, two):
            tri.points.assign(moved if step == 0 else moved[::-1].copy())
            tri.refit()
            tri.complete()  # (reads every structure: what a wide-only refit, RAYD_TRI_REFIT=wide, leaves stale)
        for a, b in zip(_state(one, same_wide), _state(two, same_wide)):
            np.testing.assert_array_equal(a, b)
    # the climb left its arrival counters zero (no memset before the next refit) and wrote the wide
    # nodes' boxes as a copy from the refitted pair nodes would
    assert not one.fused.counters.numpy().any()
    for tri in (one, two):
        if tri.wide is not None:
            assert FusedRefit.writes_wide(tri) == (count > 1)
            written = tri.wide.data.numpy().copy()
            tri.wide.refresh()
            np.testing.assert_array_equal(written, tri.wide.data.numpy())
    fresh = _tri(moved[::-1].copy(), f, face_base, device, constructor, layout)
    root = one.nodes.root
    np.testing.assert_array_equal(one.nodes.lowers.numpy()[root, :3], fresh.nodes.lowers.numpy()[fresh.nodes.root, :3])
    np.testing.assert_array_equal(one.nodes.uppers.numpy()[root, :3], fresh.nodes.uppers.numpy()[fresh.nodes.root, :3])
    np.testing.assert_array_equal(one.lowers.numpy(), fresh.lowers.numpy())
    np.testing.assert_array_equal(one.uppers.numpy(), fresh.uppers.numpy())
    np.testing.assert_array_equal(one.magnitude.numpy(), fresh.magnitude.numpy())


def _terrain(n):
    x, y = np.meshgrid(np.linspace(-1, 1, n), np.linspace(-1, 1, n))
    z = 0.2 * np.sin(3 * x) * np.cos(2 * y)
    v = np.stack([x, y, z], -1).reshape(-1, 3).astype(np.float32)
    i = np.arange(n * n).reshape(n, n)
    a, b, c, d = i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, :-1].ravel(), i[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, d], 1), np.stack([a, d, c], 1)]).astype(np.int32)
    return v, f


@pytest.mark.parametrize("constructor", ["sah", "ploc"])
@pytest.mark.parametrize("layout", ["pair", "wide4"])
def test_queries_after_update_equal_fresh_build(constructor, layout, device):
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
    with _constructor(constructor, layout):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
        scene.build()
        scene.update_mesh_vertices(0, torch.tensor(moved, device=device))
        scene.sync()
        fresh = rt.Scene()
        fresh.add_mesh(rt.Mesh(torch.tensor(moved, device=device), torch.tensor(f, device=device)))
        fresh.build()
        a, c = scene.intersect(ray), fresh.intersect(ray)
    assert bool((a.prim_id[:500] >= 0).all())  # vertical rays inside the terrain all hit
    # a fresh build (another tree: ties at shared vertices may pick the other triangle)
    torch.testing.assert_close(a.prim_id >= 0, c.prim_id >= 0)
    torch.testing.assert_close(a.t, c.t)
    ca, cb = scene.closest_point(pts), fresh.closest_point(pts)
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


@pytest.mark.parametrize("move", ["both", "one"])
def test_sync_magnitude_equals_the_placed_points(move, device):
    """The scene magnitude after ``sync()`` is the largest absolute coordinate of the flat points, whether
    the placements fold it (every flat mesh moved) or the refit measures it (one of two meshes moved),
    and the refitted scene answers as a fresh build."""
    v, f = _terrain(10)
    scene = rt.Scene()
    for k in range(2):
        scene.add_mesh(rt.Mesh(torch.tensor(v + 3.0 * k, device=device), torch.tensor(f, device=device)),
                       dynamic=True)
    scene.build()
    new = [torch.tensor(v * 4.0 - 1.0, device=device), torch.tensor(v * 0.5 + 9.0, device=device)]
    for k in range(2 if move == "both" else 1):
        scene.update_mesh_vertices(k, new[k])
    scene.sync()
    core = scene._core
    points = core.points.numpy()
    assert core.flat.magnitude.numpy()[0] == np.abs(points).max()
    assert not core.flat._partial.numpy().any()  # left zero for the next refit
    fresh = rt.Scene()
    for k in range(2):
        vk = new[k] if (move == "both" or k == 0) else torch.tensor(v + 3.0, device=device)
        fresh.add_mesh(rt.Mesh(vk.clone(), torch.tensor(f, device=device)))
    fresh.build()
    o = torch.tensor([[0.1, 0.2, 30.0], [9.3, 9.4, 30.0], [-2.0, -2.0, 30.0]], device=device)
    ray = rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], device=device).expand(3, 3))
    a, b = scene.intersect(ray), fresh.intersect(ray)
    torch.testing.assert_close(a.t, b.t)
    torch.testing.assert_close(a.shape_id, b.shape_id)


def test_non_finite_check_after_clean_and_failed_syncs(device):
    """The finite check's flags are refilled only after a sync that found a bad row: good, bad, bad
    (same row), good, bad (another row) each report what they hold."""
    v, f = _terrain(6)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
    scene.build()
    good = torch.tensor(v, device=device)
    bad5, bad2 = good.clone(), good.clone()
    bad5[5, 1] = float("nan")
    bad2[2, 0] = float("inf")
    for vertices, row in ((good, None), (bad5, 5), (bad5, 5), (good, None), (bad2, 2), (good, None)):
        scene.update_mesh_vertices(0, vertices)
        if row is None:
            scene.sync()
            assert not scene.has_pending_updates()
        else:
            with pytest.raises(ValueError, match=f"first at row {row}"):
                scene.sync()
            assert scene.has_pending_updates()


def test_reused_vertex_memory_is_placed_anew(device):
    """Vertex tensors freed and reallocated (often at the same address, which the frontend's kept
    views are keyed by), updated in place, or given in float64: each sync places what they hold now."""
    v, f = _terrain(8)
    faces = torch.tensor(f, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), faces), dynamic=True)
    scene.build()
    o = torch.tensor(np.concatenate([v[::7, :2], np.full((len(v[::7]), 1), 5.0)], 1).astype(np.float32),
                     device=device)
    ray = rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], device=device).expand(len(o), 3))
    params = torch.tensor(v, device=device)
    for step in range(4):
        if step < 2:
            moved = torch.tensor(v, device=device)
            moved[:, 2] += 0.5 * (step + 1)  # a fresh tensor each step (the last one freed)
        elif step == 2:
            moved = params
            scene.update_mesh_vertices(0, moved)
            scene.sync()
            moved.add_(torch.tensor([0.0, 0.0, 1.25], device=device))  # in place, then updated again
        else:
            moved = torch.tensor(v, dtype=torch.float64, device=device) * 0.5
        scene.update_mesh_vertices(0, moved)
        scene.sync()
        want = moved.to(torch.float32)[:, 2].max().item() if step < 3 else None
        got = scene.intersect(ray)
        fresh = rt.Scene()
        fresh.add_mesh(rt.Mesh(moved.detach().clone(), faces))
        fresh.build()
        torch.testing.assert_close(got.t, fresh.intersect(ray).t)
        assert want is None or bool((got.t >= 5.0 - want - 1e-4).all())
        del moved
