"""rayd's PLOC builder (rayd.engine.ploc, ``set_bvh_constructor("ploc")``): the tree is valid
(every primitive in exactly one leaf, boxes contain their children and their triangles,
parents consistent, pre-order numbering, depth), and every query over it answers exactly as
over Warp's host SAH tree (closest hit, any hit, closest point bit for bit; the winding
number within the approximation's error of the exact one), before and after refits, in
both node layouts and as bottom levels of instances."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import reference
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import cpu_embree, triangles
from rayd.engine.ploc import PlocBvh, tree_arrays


@contextlib.contextmanager
def constructor(name, layout=None):
    """Build with ``name`` (and ``layout``); on the CPU with Embree off, so rayd's own walk runs."""
    was, was_layout, was_embree = triangles.bvh_constructor(), triangles.bvh_layout(), cpu_embree.active()
    triangles.set_bvh_constructor(name)
    if layout is not None:
        triangles.set_bvh_layout(layout)
    cpu_embree.set_enabled(False)
    try:
        yield
    finally:
        triangles.set_bvh_constructor(was)
        triangles.set_bvh_layout(was_layout)
        cpu_embree.set_enabled(was_embree)


def check_tree(nodes, parents, item_lo, item_hi, num_items):
    """Assert the invariants of a tree in Warp's layout (see the module docstring)."""
    t = tree_arrays(nodes)
    m = len(t["leaf"])
    parents = parents.numpy()
    assert t["root"] == 0 and parents[0] == -1
    assert sorted(t["primitives"].tolist()) == list(range(num_items))
    covered = np.zeros(num_items, np.int32)
    depth = np.zeros(m, np.int32)
    depth[0] = 1
    reached = np.zeros(m, bool)
    reached[0] = True
    for k in range(m):  # pre-order: a node's children come after it
        assert reached[k]
        lo, hi = t["lo"][k], t["hi"][k]
        if t["leaf"][k]:
            first, end = t["left"][k], t["right"][k]
            assert 0 <= first < end <= num_items and end - first <= 8
            covered[first:end] += 1
            prims = t["primitives"][first:end]
            assert (item_lo[prims] >= lo).all() and (item_hi[prims] <= hi).all()
            np.testing.assert_array_equal(lo, item_lo[prims].min(0))
            np.testing.assert_array_equal(hi, item_hi[prims].max(0))
        else:
            for c in (t["left"][k], t["right"][k]):
                assert k < c < m and parents[c] == k and not reached[c]
                reached[c] = True
                depth[c] = depth[k] + 1
                assert (t["lo"][c] >= lo).all() and (t["hi"][c] <= hi).all()
            a, b = t["left"][k], t["right"][k]
            np.testing.assert_array_equal(lo, np.minimum(t["lo"][a], t["lo"][b]))
            np.testing.assert_array_equal(hi, np.maximum(t["hi"][a], t["hi"][b]))
    assert (covered == 1).all(), "every primitive in exactly one leaf"
    assert nodes.depth == depth.max()


def _boxes(rng, n, spread=1.0, size=0.05):
    c = rng.uniform(-spread, spread, (n, 3)).astype(np.float32)
    e = rng.uniform(0, size, (n, 3)).astype(np.float32)
    return c - e, c + e


@pytest.mark.parametrize("n", [1, 2, 3, 8, 57, 1000])
@pytest.mark.parametrize("max_leaf", [1, 4])
def test_tree_valid_random_boxes(device, n, max_leaf):
    lo, hi = _boxes(np.random.default_rng(n), n)
    bvh = PlocBvh(wp.array(lo, dtype=wp.vec3, device=device), wp.array(hi, dtype=wp.vec3, device=device),
                  max_leaf=max_leaf)
    check_tree(bvh.nodes, bvh.parents, lo, hi, n)
    assert bvh.num_nodes == (2 * n - 1 if max_leaf == 1 else bvh.num_nodes)


@pytest.mark.parametrize("case", ["identical", "coplanar_line", "huge_and_tiny"])
def test_tree_valid_degenerate_boxes(device, case):
    """Equal boxes pair up instead of chaining (depth about log2 n); mixed scales stay valid."""
    n = 4096
    rng = np.random.default_rng(3)
    if case == "identical":
        lo, hi = np.zeros((n, 3), np.float32), np.ones((n, 3), np.float32)
    elif case == "coplanar_line":
        x = np.repeat(np.linspace(0, 1, 64, dtype=np.float32), n // 64)
        lo = np.stack([x, np.zeros(n), np.zeros(n)], 1).astype(np.float32)
        hi = lo + np.float32(1e-3)
    else:
        lo, hi = _boxes(rng, n, spread=1e6, size=1e-3)
        hi[:10] = lo[:10] + np.float32(1e7)
    for max_leaf in (1, 4):
        bvh = PlocBvh(wp.array(lo, dtype=wp.vec3, device=device), wp.array(hi, dtype=wp.vec3, device=device),
                      max_leaf=max_leaf)
        check_tree(bvh.nodes, bvh.parents, lo, hi, n)
        if case == "identical":
            # a perfect binary tree over 4096 equal boxes of area A; with leaves of up to 4 the SAH
            # collapses pairs (2 A < A + A + A) and fours (4 A < A + 2 A + 2 A): two levels fewer
            assert bvh.nodes.depth == (13 if max_leaf == 1 else 11)
        assert bvh.nodes.depth <= 62


def test_bad_arguments():
    lo = wp.zeros(4, dtype=wp.vec3, device="cpu")
    with pytest.raises(ValueError, match="max_leaf"):
        PlocBvh(lo, lo, max_leaf=9)
    with pytest.raises(ValueError, match="radius"):
        PlocBvh(lo, lo, radius=0)
    with pytest.raises(ValueError, match="set_bvh_constructor"):
        triangles.set_bvh_constructor("plocc")


def _soup(seed, count, scale=0.3):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-1, 1, (count, 1, 3))
    v = (centres + scale * rng.standard_normal((count, 3, 3))).reshape(-1, 3).astype(np.float32)
    return v, np.arange(3 * count, dtype=np.int32).reshape(-1, 3)


def _scene(v, f, device, instances=()):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
    for m in instances:
        scene.add_instance(0, torch.tensor(m, dtype=torch.float32, device=device))
    scene.build()
    return scene


def _answers(scene, ray, points):
    hit = scene.intersect(ray)
    cp = scene.closest_point(points)
    return {"prim_id": hit.prim_id, "shape_id": hit.shape_id, "t": hit.t, "p": hit.p,
            "shadow": scene.shadow_test(ray), "cp_distance": cp.distance, "cp_prim": cp.prim_id, "cp_p": cp.p}


@pytest.mark.parametrize("layout", ["pair", "warp"])
@pytest.mark.parametrize("count", [1, 2, 57, 2000])
def test_queries_equal_sah_tree_and_after_refit(device, layout, count):
    v, f = _soup(count, count, 0.3 if count < 1000 else 0.08)
    rng = np.random.default_rng(7)
    o = (3.0 * rng.standard_normal((6000, 3))).astype(np.float32)
    d = (rng.uniform(-1, 1, (6000, 3)) - o).astype(np.float32)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    points = torch.tensor(rng.uniform(-1.5, 1.5, (3000, 3)).astype(np.float32), device=device)
    scenes = {}
    for name in ("sah", "ploc"):
        with constructor(name, layout):
            scenes[name] = _scene(v, f, device)
            assert scenes[name]._core.accel.flat.constructor == name
            assert scenes[name]._core.accel.layout == layout
    tri = scenes["ploc"]._core.accel.flat
    assert tri.bvh is None and tri.fused is not None
    moved = torch.tensor((v * 1.7 + 0.25).astype(np.float32), device=device)
    for step in range(2):
        with constructor("ploc", layout):
            a, b = (_answers(scenes[k], ray, points) for k in ("sah", "ploc"))
        assert (a["prim_id"] >= 0).sum() >= min(count, 100)
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
        check_tree(tri.nodes, tri.tree.parents, tri.lowers.numpy(), tri.uppers.numpy(), tri.num_triangles)
        for s in scenes.values():
            s.update_mesh_vertices(0, moved)
            s.sync()


def test_winding_number_within_approximation_error(device):
    """The hierarchical winding number depends on the tree's grouping: over both trees it is
    within the same small error of the exact (brute-force) winding number."""
    v, f = reference.icosphere(3)
    rng = np.random.default_rng(5)
    p = rng.uniform(-1.5, 1.5, (2000, 3))
    # exact: solid angles of every triangle (van Oosterom & Strackee 1983)
    a = v[f[:, 0]][None] - p[:, None]
    b = v[f[:, 1]][None] - p[:, None]
    c = v[f[:, 2]][None] - p[:, None]
    la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (a, b, c))
    num = np.einsum("nfk,nfk->nf", a, np.cross(b, c))
    den = la * lb * lc + np.einsum("nfk,nfk->nf", a, b) * lc + np.einsum("nfk,nfk->nf", b, c) * la \
        + np.einsum("nfk,nfk->nf", c, a) * lb
    exact = (2.0 * np.arctan2(num, den)).sum(1) / (4.0 * np.pi)
    pts = torch.tensor(p.astype(np.float32), device=device)
    errs = {}
    for name in ("sah", "ploc"):
        with constructor(name):
            s = _scene(v.astype(np.float32), f.astype(np.int32), device)
            w = s.winding_number(pts).cpu().numpy().astype(np.float64)
        errs[name] = np.abs(w - exact).max()
        np.testing.assert_array_equal(w > 0.5, exact > 0.5)
    assert errs["ploc"] < 0.02 and errs["sah"] < 0.02, errs


def test_instances_of_ploc_bottom_levels(device):
    v, f = _soup(11, 300, 0.2)
    mats = []
    for k in range(5):
        m = np.eye(4)
        m[:3, 3] = [3.0 * k, 0.5 * k, 0.0]
        mats.append(m)
    rng = np.random.default_rng(2)
    o = np.stack([rng.uniform(-2, 14, 5000), rng.uniform(-2, 4, 5000), np.full(5000, 5.0)], 1).astype(np.float32)
    d = np.tile(np.array([[0.01, 0.02, -1.0]], np.float32), (5000, 1))
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    out = []
    for name in ("sah", "ploc"):
        with constructor(name):
            s = _scene(v, f, device, mats)
            hit = s.intersect(ray, flags=rt.RayFlags.Minimal)
            out.append((hit.prim_id, hit.shape_id, hit.t, s.shadow_test(ray)))
    assert (out[0][0] >= 0).sum() > 500
    for x, y in zip(*out):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


@pytest.mark.parametrize("max_leaf", [1, 4])
def test_tail_in_one_thread_builds_the_same_tree(device, max_leaf):
    """``tail``: the passes finished by one thread give the tree of the parallel passes, bit for bit."""
    lo, hi = _boxes(np.random.default_rng(9), 3000)
    args = (wp.array(lo, dtype=wp.vec3, device=device), wp.array(hi, dtype=wp.vec3, device=device))
    trees = [PlocBvh(*args, max_leaf=max_leaf, tail=t) for t in (0, 64, 5000)]
    ref = tree_arrays(trees[0].nodes)
    for bvh in trees[1:]:
        check_tree(bvh.nodes, bvh.parents, lo, hi, 3000)
        got = tree_arrays(bvh.nodes)
        for key in ("lo", "hi", "left", "right", "leaf", "primitives"):
            np.testing.assert_array_equal(got[key], ref[key])
        np.testing.assert_array_equal(bvh.parents.numpy(), trees[0].parents.numpy())
        assert bvh.nodes.depth == trees[0].nodes.depth
    assert trees[2].launches < trees[1].launches < trees[0].launches


@pytest.mark.parametrize("max_leaf", [1, 4])
@pytest.mark.parametrize("count", [1, 2, 3, 3000])
def test_fused_keep_builds_the_same_tree(device, max_leaf, count):
    """``fused_keep``: nearest neighbours and survivors in one kernel give the tree of two kernels, bit for
    bit, with one launch per pass fewer."""
    lo, hi = _boxes(np.random.default_rng(count), count)
    args = (wp.array(lo, dtype=wp.vec3, device=device), wp.array(hi, dtype=wp.vec3, device=device))
    # (the blocking pass loop: with passes launched ahead, a CUDA build may launch a few passes more)
    trees = [PlocBvh(*args, max_leaf=max_leaf, fused_keep=k, ahead=0) for k in (False, True)]
    ref, got = (tree_arrays(t.nodes) for t in trees)
    check_tree(trees[1].nodes, trees[1].parents, lo, hi, count)
    for key in ("lo", "hi", "left", "right", "leaf", "primitives"):
        np.testing.assert_array_equal(got[key], ref[key])
    np.testing.assert_array_equal(trees[1].parents.numpy(), trees[0].parents.numpy())
    assert trees[1].iterations == trees[0].iterations
    assert trees[0].launches - trees[1].launches == trees[0].iterations


@contextlib.contextmanager
def pair_walk(name):
    was = triangles.pair_walk()
    triangles.set_pair_walk(name)
    try:
        yield
    finally:
        triangles.set_pair_walk(was)


@pytest.mark.parametrize("walk", ["ww"])
@pytest.mark.parametrize("tree", ["sah", "ploc", "ploc:l1", "ploc:l2"])
def test_while_while_walks_answer_as_the_if_if_walk(device, walk, tree):
    """``pair_walk``'s while-while walk over SAH and PLOC
    trees (leaves of 1, 2, up to 4 triangles) give the
    if-if walk's closest hits (prim, t, p bit for bit) and any-hit answers, before and after a refit,
    for rays from outside, rays starting inside the soup, and rays with a ``tmin``/``tmax`` window."""
    from rayd.engine import ploc

    name, *opts = tree.split(":")
    v, f = _soup(11, 3000, 0.06)
    rng = np.random.default_rng(3)
    o = np.concatenate([3.0 * rng.standard_normal((4000, 3)), rng.uniform(-0.5, 0.5, (2000, 3))]).astype(np.float32)
    d = (rng.uniform(-1, 1, (6000, 3)) - 0.3 * o).astype(np.float32)
    tmin = torch.tensor(rng.uniform(0.0, 0.3, 6000).astype(np.float32), device=device)
    tmax = torch.tensor(rng.uniform(0.5, 4.0, 6000).astype(np.float32), device=device)
    rays = [rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device)),
            rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device), tmax=tmax, tmin=tmin)]
    saved = ploc.MAX_LEAF
    scenes = {}
    try:
        ploc.MAX_LEAF = int(opts[0][1:]) if opts else saved
        for w in ("ifif", walk):
            with constructor(name, "pair"), pair_walk(w):
                scenes[w] = _scene(v, f, device)
                assert scenes[w]._core.accel.flat.walk == w
    finally:
        ploc.MAX_LEAF = saved
    moved = torch.tensor((v * 0.8 - 0.1).astype(np.float32), device=device)
    from rayd.engine import intersect

    for step in range(2):
        for ray in rays:
            with constructor(name, "pair"):  # Embree off: rayd's walks answer
                a, b = (scenes[k].intersect(ray) for k in ("ifif", walk))
                shadow = [scenes[k].shadow_test(ray) for k in ("ifif", walk)]
            assert (a.prim_id >= 0).sum() > 1000
            for key in ("prim_id", "t", "p"):
                torch.testing.assert_close(getattr(a, key), getattr(b, key), rtol=0, atol=0, msg=key)
            torch.testing.assert_close(shadow[0], shadow[1], rtol=0, atol=0)
        assert ("flat_pair" + walk, 0) in intersect._SEARCH_KERNELS  # the walk under test ran
        for s in scenes.values():
            s.update_mesh_vertices(0, moved)
            s.sync()


def test_pair_walk_names():
    with pytest.raises(ValueError, match="set_pair_walk"):
        triangles.set_pair_walk("while")


@pytest.mark.parametrize("max_leaf", [1, 2, 4])
@pytest.mark.parametrize("count", [1, 2, 3, 700])
def test_emitted_pairs_equal_pair_nodes_and_refit_setup(device, max_leaf, count):
    """The pair nodes, leaf corners and refit leaf list the PLOC build emits (``ploc_emit.py``) are,
    bit for bit, what ``PairNodes`` and ``FusedRefit`` compute from the finished tree."""
    from rayd.engine.pair_nodes import PairNodes
    from rayd.engine.refit import FusedRefit

    v, f = _soup(count + 5, count, 0.1)
    points = wp.array(v, dtype=wp.vec3, device=device)
    indices = wp.array(f.ravel(), dtype=wp.int32, device=device)
    from rayd.engine import ploc

    saved = ploc.MAX_LEAF
    ploc.MAX_LEAF = max_leaf
    try:
        tri = triangles.TriangleScene(points, indices, bvh_constructor="ploc", layout="pair")
    finally:
        ploc.MAX_LEAF = saved
    assert tri.tree.pairs is not None
    ref = PairNodes(tri.nodes, points, indices, 0)
    assert tri.pairs.root == ref.root
    np.testing.assert_array_equal(tri.pairs.number.numpy(), ref.number.numpy())
    np.testing.assert_array_equal(tri.pairs.boxes.numpy().view(np.int32), ref.boxes.numpy().view(np.int32))
    np.testing.assert_array_equal(tri.pairs.tris.numpy(), ref.tris.numpy())
    leaves = FusedRefit(tri.nodes, tri.tree.parents, tri.num_triangles).leaf_nodes.numpy()
    mine = tri.fused.leaf_nodes.numpy()
    np.testing.assert_array_equal(mine, leaves[: len(mine)])
    assert (leaves[len(mine):] == -1).all()
