"""The wide-only refit (``engine/wide_refit.py``, ``RAYD_TRI_REFIT=wide`` or ``wide_node``): the wide nodes' rows and the
leaf triangles it writes are bit-equal to the fused refit's; the binary, per-face and pair boxes it
leaves stale are bit-equal to the fused refit's once a query that reads them completes them; queries
after ``update_mesh_vertices`` + ``sync()`` answer as a fresh build's."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import cpu_embree, triangles, wide_refit
from tests.engine.test_refit_update import _terrain


@contextlib.contextmanager
def _settings(constructor: str = "ploc", layout: str = "wide4", refit: str = "wide"):
    was = triangles.bvh_constructor(), triangles.bvh_layout(), wide_refit.tri_refit()
    triangles.set_bvh_constructor(constructor)
    triangles.set_bvh_layout(layout)
    wide_refit.set_tri_refit(refit)
    try:
        yield
    finally:
        triangles.set_bvh_constructor(was[0])
        triangles.set_bvh_layout(was[1])
        wide_refit.set_tri_refit(was[2])


def _state(tri) -> dict[str, np.ndarray]:
    """Every structure a refit writes, as bits."""
    boxes = tri.pairs.boxes.numpy()
    return dict(nodes_lo=tri.nodes.lowers.numpy().view(np.int32), nodes_hi=tri.nodes.uppers.numpy().view(np.int32),
                pairs=boxes[np.arange(boxes.shape[0]) % 4 != 3].view(np.int32),
                tris=tri.pairs.tris.numpy().view(np.int32), items_lo=tri.lowers.numpy().view(np.int32),
                items_hi=tri.uppers.numpy().view(np.int32), wide=tri.wide.data.numpy().view(np.int32),
                magnitude=tri.magnitude.numpy().view(np.int32))


EAGER = ("wide", "tris", "magnitude")  # what the wide-only refit writes at once


@pytest.mark.parametrize("mode", ["wide", "wide_node", "wide_levels", "wide_v4", "wide_tris", "wide_tris_r", "wide_split"])
@pytest.mark.parametrize("constructor", ["ploc", "sah"])
@pytest.mark.parametrize("count,face_base", [(2, 0), (3, 0), (300, 0), (300, 17), (5000, 3)])
def test_wide_refit_equals_full_refit(count, face_base, constructor, mode, device):
    """On one tree, for several vertex sets: the full refit's bits, then a refit from other points, then
    the wide-only refit of the first set: wide rows, leaf triangles and magnitude equal at once, the rest
    after ``complete()``; the arrival counters are left zero."""
    rng = np.random.default_rng(count)
    v = rng.uniform(-1, 1, (3 * count, 3)).astype(np.float32)
    f = rng.permutation(3 * count).reshape(-1, 3).astype(np.int32)
    with _settings(constructor, refit="full"):
        tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device=device),
                                      wp.array(f.ravel(), dtype=wp.int32, device=device),
                                      num_triangles=count - face_base, face_base=face_base, layout="wide4")
    assert tri.wide is not None and wide_refit.WideRefit.applies(tri)
    for step in range(3):
        moved = (v * rng.uniform(0.5, 3.0, (len(v), 1)) + rng.normal(size=3)).astype(np.float32)
        with _settings(constructor, refit="full"):
            tri.points.assign(moved)
            tri.refit()
            want = _state(tri)
            tri.points.assign(v)
            tri.refit()
            assert not tri.stale
        with _settings(constructor, refit=mode):
            tri.points.assign(moved)
            tri.refit()
        assert tri.stale
        got = _state(tri)
        for key in EAGER:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        assert not tri._wide_refits[wide_refit.per_thread(mode)].counters.numpy().any()
        tri.complete()
        assert not tri.stale
        got = _state(tri)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # each leaf (or wide node with leaves) is listed once, in the order of its (least) leaf slot
    items = tri._wide_refits[wide_refit.per_thread(mode)].items.numpy()
    links = tri.wide.links.numpy().reshape(-1, 8, 4)
    if mode != "wide_node":
        first = (-1 - links[items >> 2, 6, items & 3]) >> 3
    else:
        refs, used = links[items, 6], links[items, 7] >= 0
        first = np.where(used & (refs < 0), (-1 - refs) >> 3, np.iinfo(np.int32).max).min(1)
    assert len(set(items.tolist())) == len(items) and (np.diff(first) > 0).all()
    leaves = (links[: tri.wide.count, 7] >= 0) & (links[: tri.wide.count, 6] < 0)
    assert len(items) == (leaves.sum() if mode != "wide_node" else leaves.any(1).sum())
    if mode == "wide_split":  # its second launch: each wide node with leaf children once
        nodes = tri._wide_refits["leaf_split"].node_items.numpy()
        assert len(set(nodes.tolist())) == len(nodes) == leaves.any(1).sum()


def test_single_leaf_tree_keeps_the_full_refit(device):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)
    with _settings("ploc", refit="wide"):
        tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device=device),
                                      wp.array(np.arange(3, dtype=np.int32), dtype=wp.int32, device=device),
                                      layout="wide4")
        tri.points.assign(v * 2.0)
        tri.refit()
    assert not tri.stale and not tri._wide_refits


@pytest.mark.parametrize("mode", ["wide", "wide_node", "wide_levels", "wide_v4", "wide_tris", "wide_tris_r", "wide_split"])
@pytest.mark.parametrize("constructor", ["ploc", "sah"])
def test_queries_after_wide_refit_equal_fresh_build(constructor, mode, device):
    """After update + sync: intersect / shadow_test (the wide walk: nothing completed), then closest_point
    and nearest_edge (completed on their own stream, never by the fallback), against a fresh build of
    the moved vertices."""
    v, f = _terrain(24)
    rng = np.random.default_rng(5)
    o = np.concatenate([rng.uniform(-1, 1, (1500, 2)), np.full((1500, 1), 2.0)], 1).astype(np.float32)
    d = np.concatenate([rng.uniform(-0.2, 0.2, (1500, 2)), -np.ones((1500, 1))], 1).astype(np.float32)
    o[:400, :2] = v[rng.integers(0, len(v), 400), :2]  # through shared vertices (watertightness)
    d[:400, :2] = 0.0
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    pts = torch.tensor(rng.uniform(-1, 1, (400, 3)).astype(np.float32), device=device)
    faces = torch.tensor(f, device=device)
    with _settings(constructor, refit=mode):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), faces), dynamic=True)
        scene.build()
        core = scene._core
        if core.flat.wide is None:
            pytest.skip("no wide nodes for this tree")
        for step in range(2):
            moved = v.copy()
            moved[:, 2] = 0.3 * np.cos((4 + step) * v[:, 0]) + 0.1 * v[:, 1]
            scene.update_mesh_vertices(0, torch.tensor(moved, device=device))
            scene.sync()
            # step 0: a wide-only refit; step 1 follows a closest_point (it completed the tree), so its
            # refit is a full one (TriangleScene.refit), whose answers must be the same
            assert core.flat.stale == (step == 0)
            fresh = rt.Scene()
            fresh.add_mesh(rt.Mesh(torch.tensor(moved, device=device), faces))
            fresh.build()
            a, b = scene.intersect(ray), fresh.intersect(ray)
            assert bool((a.prim_id[:400] >= 0).all())
            torch.testing.assert_close(a.prim_id >= 0, b.prim_id >= 0)
            torch.testing.assert_close(a.t, b.t)
            torch.testing.assert_close(scene.shadow_test(ray), fresh.shadow_test(ray))
            if not cpu_embree.usable(core.accel):  # (Embree's search on the CPU completes the tree)
                assert core.flat.stale == (step == 0)  # the wide walk needed nothing else
            ca, cb = scene.closest_point(pts), fresh.closest_point(pts)
            assert not core.flat.stale
            torch.testing.assert_close(ca.distance, cb.distance, rtol=0, atol=0)
            ea, eb = scene.nearest_edge(pts), fresh.nearest_edge(pts)
            torch.testing.assert_close(ea.distance, eb.distance, rtol=0, atol=0)
            torch.testing.assert_close(ea.global_edge_id, eb.global_edge_id, rtol=0, atol=0)
        assert core.accel.completions_by_fallback == 0


@pytest.mark.parametrize("query", ["reflections", "winding", "all_hits"])
def test_other_readers_complete_the_tree(query, device):
    """Each query that walks more than the wide nodes completes a stale tree on its own stream first,
    and answers exactly as the same scene after a full refit of the same vertices."""
    v, f = _terrain(16)
    faces = torch.tensor(f, device=device)
    moved = v.copy()
    moved[:, 2] = 0.25 * np.sin(5 * v[:, 1])
    rng = np.random.default_rng(1)
    o = np.concatenate([rng.uniform(-0.9, 0.9, (300, 2)), np.full((300, 1), 2.0)], 1).astype(np.float32)
    d = np.concatenate([rng.uniform(-0.3, 0.3, (300, 2)), -np.ones((300, 1))], 1).astype(np.float32)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    pts = torch.tensor(rng.uniform(-1, 1, (300, 3)).astype(np.float32), device=device)

    def answer():
        if query == "reflections":
            return scene.trace_reflections(ray, 2).t
        if query == "winding":
            return scene.winding_number(pts)
        return torch.cat([scene.intersect_all(ray, 4).t.ravel(), scene.count_intersections(ray).float()])

    with _settings("ploc"):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), faces), dynamic=True)
        scene.build()
        core = scene._core
        if core.flat.wide is None:
            pytest.skip("no wide nodes for this tree")
        scene.update_mesh_vertices(0, torch.tensor(moved, device=device))
        scene.sync()
        assert core.flat.stale
        got = answer()
        if query == "reflections" and not cpu_embree.usable(core.accel):
            assert core.flat.stale  # the chain walks the wide nodes too
            scene.closest_point(pts)
        assert not core.flat.stale
        assert core.accel.completions_by_fallback == 0
        wide_refit.set_tri_refit("full")
        scene.update_mesh_vertices(0, torch.tensor(moved, device=device))
        scene.sync()
        assert not core.flat.stale
        torch.testing.assert_close(got, answer(), rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["wide", "wide_node", "wide_levels", "wide_v4", "wide_tris", "wide_tris_r", "wide_split"])
def test_scene_with_instances_keeps_the_full_refit(mode, device):
    """With instances every search walks the pair nodes, so the flat BVH is refitted in full (never left
    stale) and the instanced mesh's BLAS too; the answers equal a fresh build's."""
    v, f = _terrain(12)
    faces = torch.tensor(f, device=device)
    m = torch.eye(4, device=device)
    m[2, 3] = -3.0
    moved = v.copy()
    moved[:, 2] += 0.3 * v[:, 0]
    o = torch.tensor([[0.1, 0.2, 5.0], [-0.4, 0.3, 5.0], [0.7, -0.6, 5.0]], device=device)
    ray = rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], device=device).expand(3, 3))
    with _settings("ploc", refit=mode):
        scenes = []
        for verts in (v, moved):
            scene = rt.Scene()
            scene.add_mesh(rt.Mesh(torch.tensor(verts, device=device), faces), dynamic=True)
            base = scene.add_mesh(rt.Mesh(torch.tensor(v * 0.5, device=device), faces), dynamic=True)
            scene.add_instance(base, m)
            scene.build()
            scenes.append(scene)
        scene, fresh = scenes
        scene.update_mesh_vertices(0, torch.tensor(moved, device=device))
        scene.sync()
        assert not scene._core.flat.stale and not scene._core.flat.lazy_refit
        a, b = scene.intersect(ray), fresh.intersect(ray)
        torch.testing.assert_close(a.t, b.t)
        torch.testing.assert_close(a.shape_id, b.shape_id)
        assert scene._core.accel.completions_by_fallback == 0


def test_refit_kind_follows_the_queries_since_the_last_update(device):
    """A refit is wide-only unless a query needed the rest of the tree (closest point here) since the
    previous refit: a scene queried by closest point after every update pays a full refit, not a
    wide refit plus a completion; one queried by rays alone keeps the wide refit."""
    v, f = _terrain(16)
    pts = torch.tensor(np.random.default_rng(3).uniform(-1, 1, (64, 3)).astype(np.float32), device=device)
    ray = rt.Ray(torch.tensor([[0.1, 0.2, 2.0]], device=device), torch.tensor([[0.0, 0.0, -1.0]], device=device))
    with _settings("ploc", refit="wide"):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
        scene.build()
        core = scene._core
        if core.flat.wide is None:
            pytest.skip("no wide nodes for this tree")
        rays_only = not cpu_embree.usable(core.accel)  # (Embree's search on the CPU reads the whole tree)
        expected = []
        for step, query in enumerate(["rays", "rays", "closest", "closest", "rays", "rays"]):
            moved = v.copy()
            moved[:, 2] += 0.01 * (step + 1)
            scene.update_mesh_vertices(0, torch.tensor(moved, device=device))
            scene.sync()
            expected.append(core.flat.stale)
            fresh = rt.Scene()
            fresh.add_mesh(rt.Mesh(torch.tensor(moved, device=device), torch.tensor(f, device=device)))
            fresh.build()
            torch.testing.assert_close(scene.intersect(ray).t, fresh.intersect(ray).t, rtol=0, atol=0)
            if query == "closest":
                near = scene.closest_point(pts)
                torch.testing.assert_close(near.distance, fresh.closest_point(pts).distance, rtol=0, atol=0)
        # wide after build and after intervals of rays; full after an interval with a closest point
        want = [True, rays_only, rays_only, False, False, rays_only]
        assert expected == want
        assert core.accel.completions_by_fallback == 0


def test_sync_refits_of_every_kind_write_the_same_bits(device):
    """Through ``update_mesh_vertices`` + ``sync()`` (the placement folds the magnitude's first pass; the
    ``wide_tris`` refits fold its second in their first launch), one scene switching between every kind
    from one sync to the next: the wide rows, leaf triangles and magnitude equal the full refit's of the
    same vertices, and the partial maxima are left zero."""
    v, f = _terrain(20)
    sets = []
    for step in range(3):
        moved = v.copy()
        moved[:, 2] = 0.2 * np.sin((3 + step) * v[:, 0]) - 0.1 * step * v[:, 1]
        moved *= 1.0 + 0.5 * step
        sets.append(torch.tensor(moved, device=device))
    with _settings("ploc", refit="full"):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
        scene.build()
        flat = scene._core.flat
        if flat.wide is None:
            pytest.skip("no wide nodes for this tree")
        want = []
        for s in sets:
            scene.update_mesh_vertices(0, s)
            scene.sync()
            want.append(_state(flat))
        for k, mode in enumerate(wide_refit.TRI_REFITS[::-1] + wide_refit.TRI_REFITS):
            wide_refit.set_tri_refit(mode)
            scene.update_mesh_vertices(0, sets[k % 3])
            scene.sync()
            got = _state(flat)
            for key in EAGER:
                np.testing.assert_array_equal(got[key], want[k % 3][key], err_msg=f"{mode} {key}")
            assert not flat._partial.numpy().any()
