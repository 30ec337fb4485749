"""Engine ring: the edge BVH's structure and its searches against a NumPy float64 brute force."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine import nearest_edge as search
from rayd.engine.edges import EdgeBvh


def _dev(device: str) -> str:
    return "cuda:0" if device == "cuda" else device


def _segments(seed: int, v: int = 400, e: int = 1500):
    rng = np.random.default_rng(seed)
    points = rng.random((v, 3)).astype(np.float32)
    ends = rng.integers(0, v, (e, 2)).astype(np.int32)
    ends[:, 1] = np.where(ends[:, 0] == ends[:, 1], (ends[:, 1] + 1) % v, ends[:, 1])
    return points, ends


def _build(device, points, ends, mask=None, **options):
    dev = _dev(device)
    mask = np.ones(len(ends), np.uint8) if mask is None else mask.astype(np.uint8)
    arrays = (
        wp.array(points, dtype=wp.vec3, device=dev),
        wp.array(ends, dtype=wp.vec2i, device=dev),
        wp.array(mask, dtype=wp.uint8, device=dev),
    )
    return EdgeBvh(*arrays, **options), arrays


def _point_segment(q, a, b):
    ab = b - a
    t = np.clip(((q[:, None] - a) * ab).sum(-1) / (ab * ab).sum(-1), 0, 1)
    return np.linalg.norm(q[:, None] - (a + t[..., None] * ab), axis=-1)


def _walk_packed(bvh, points, ends, mask):
    """Check the packed tree from the root; return the slots reached, in leaf order."""
    box, child = bvh.packed_nodes()
    box = box.reshape(-1, 4, 3)  # lo_a, hi_a, lo_b, hi_b
    seg = bvh.seg.numpy().reshape(-1, 2, 3)
    slot_id = bvh.slot_id.numpy()
    slot_edge = bvh.slot_edge.numpy()
    slots, visited = [], set()

    def walk(j, depth):
        assert j not in visited and depth <= 64
        visited.add(j)
        for c in (0, 1):
            lo, hi, code, count = box[j, 2 * c], box[j, 2 * c + 1], child[j, c], child[j, 2 + c]
            empty = lo[0] > hi[0]
            if count > 0:
                for s in range(code, code + count):
                    e = slot_edge[s]
                    slots.append(s)
                    np.testing.assert_array_equal(seg[s], points[ends[e]])
                    assert slot_id[s] == (e if mask[e] else -1)
                    if mask[e]:  # every unmasked segment lies in its leaf's box
                        assert not empty and np.all(lo <= seg[s].min(0)) and np.all(seg[s].max(0) <= hi)
            elif not (empty and code == 0):  # (an empty child 0 is "nothing": the root has no parent)
                if not empty:
                    sub = box[code].reshape(2, 2, 3)
                    for cc in (0, 1):
                        if sub[cc, 0, 0] <= sub[cc, 1, 0]:
                            assert np.all(lo <= sub[cc, 0]) and np.all(sub[cc, 1] <= hi)
                walk(code, depth + 1)

    walk(0, 1)
    return slots


@pytest.mark.parametrize("builder,leaf_size", [("sah", 1), ("sah", 4), ("sah", 8), ("lbvh", 1), ("lbvh", 4), ("lbvh", 16),
                                               ("ploc", 1), ("ploc", 4), ("ploc", 8)])
@pytest.mark.parametrize("num_edges", [1, 2, 3, 5, 1500])
def test_hierarchy_is_a_tree_whose_boxes_contain_their_children(device, num_edges, builder, leaf_size):
    points, ends = _segments(0, e=num_edges)
    mask = np.random.default_rng(1).random(num_edges) > 0.25
    bvh, (wp_points, _, wp_mask) = _build(device, points, ends, mask, builder=builder, leaf_size=leaf_size)
    slots = _walk_packed(bvh, points, ends, mask)
    assert sorted(slots) == list(range(num_edges))  # every segment in exactly one leaf
    assert sorted(bvh.slot_edge.numpy().tolist()) == list(range(num_edges))
    assert bvh.depth <= 64
    # refit after moving the vertices and unmasking everything keeps the invariants
    points = (points * np.array([1.5, 0.7, 1.0]) + 0.1).astype(np.float32)
    wp_points.assign(wp.array(points, dtype=wp.vec3, device=_dev(device)))
    wp_mask.fill_(1)
    bvh.refit()
    assert sorted(_walk_packed(bvh, points, ends, np.ones(num_edges, bool))) == list(range(num_edges))


def test_point_search_and_refit_match_brute_force(device):
    points, ends = _segments(1)
    mask = np.random.default_rng(2).random(len(ends)) > 0.3
    bvh, (wp_points, _, _) = _build(device, points, ends, mask)
    queries = np.random.default_rng(3).random((2000, 3)).astype(np.float32) * 1.4 - 0.2
    dev = _dev(device)
    out = wp.empty(2000, dtype=wp.int32, device=dev)
    active = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    for step in range(2):
        search.nearest_edge_point(bvh, wp.array(queries, dtype=wp.vec3, device=dev), active, np.inf, out)
        got = out.numpy()
        dist = _point_segment(queries.astype(np.float64), points[ends[:, 0]].astype(np.float64),
                              points[ends[:, 1]].astype(np.float64))
        dist[:, ~mask] = np.inf
        best = dist.min(1)
        assert np.all(mask[got])
        np.testing.assert_allclose(dist[np.arange(2000), got], best, rtol=1e-5, atol=1e-7)
        # move every vertex, refit, search again
        points = (points * np.array([1.5, 0.7, 1.0]) + 0.1).astype(np.float32)
        wp_points.assign(wp.array(points, dtype=wp.vec3, device=dev))
        bvh.refit()


def test_top_k_sorted_with_id_tie_break(device):
    points, ends = _segments(4)
    bvh, _ = _build(device, points, ends)
    dev = _dev(device)
    queries = np.random.default_rng(5).random((300, 3)).astype(np.float32)
    out = wp.empty((300, 16), dtype=wp.int32, device=dev)
    active = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    search.nearest_edges_point(bvh, wp.array(queries, dtype=wp.vec3, device=dev), active, np.inf, out)
    got = out.numpy()
    dist = _point_segment(queries.astype(np.float64), points[ends[:, 0]].astype(np.float64),
                          points[ends[:, 1]].astype(np.float64))
    chosen = np.take_along_axis(dist, got, 1)
    np.testing.assert_allclose(chosen, np.sort(dist, 1)[:, :16], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="k must be in"):
        search.nearest_edges_point(bvh, wp.array(queries, dtype=wp.vec3, device=dev), active, np.inf,
                                   wp.empty((300, 17), dtype=wp.int32, device=dev))


@pytest.mark.parametrize("query", ["point", "ray", "top_k"])
def test_query_order_does_not_change_results(device, query):
    points, ends = _segments(6)
    bvh, _ = _build(device, points, ends)
    dev = _dev(device)
    rng = np.random.default_rng(7)
    q = wp.array(rng.random((500, 3)).astype(np.float32), dtype=wp.vec3, device=dev)
    d = wp.array(rng.normal(size=(500, 3)).astype(np.float32), dtype=wp.vec3, device=dev)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    t0 = wp.array(np.zeros(1, np.float32), dtype=float, device=dev)
    t1 = wp.array(np.full(1, 0.3, np.float32), dtype=float, device=dev)
    results = []
    for sort in (False, True):
        if query == "top_k":
            out = wp.empty((500, 4), dtype=wp.int32, device=dev)
            search.nearest_edges_point(bvh, q, one, np.inf, out, sort_queries=sort)
        else:
            out = wp.empty(500, dtype=wp.int32, device=dev)
            if query == "point":
                search.nearest_edge_point(bvh, q, one, np.inf, out, sort_queries=sort)
            else:
                search.nearest_edge_ray(bvh, q, d, t0, t1, one, np.inf, out, sort_queries=sort)
        results.append(out.numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_no_edges_is_an_error(device):
    with pytest.raises(ValueError, match="at least one edge"):
        _build(device, np.zeros((3, 3), np.float32), np.zeros((0, 2), np.int32))


def test_edge_modules_import_without_torch():
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['drjit'] = None\n"
        "import rayd.engine.edges, rayd.engine.nearest_edge, rayd.engine.edge_evaluate\n"
        "print('ok')\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize("builder,leaf_size", [("sah", 1), ("sah", 4), ("sah", 16), ("lbvh", 1), ("lbvh", 4), ("lbvh", 16),
                                               ("ploc", 1), ("ploc", 4), ("ploc", 8)])
def test_every_tree_matches_brute_force_and_breaks_ties_by_id(device, builder, leaf_size):
    # each segment three times under shuffled ids: every query has an exact three-way tie
    points, ends = _segments(8, e=300)
    perm = np.random.default_rng(9).permutation(900)
    dup = np.empty((900, 2), np.int32)
    dup[perm] = np.tile(ends, (3, 1))
    mask = np.ones(900, bool)
    mask[perm[:30]] = False  # hide some copies: the tie is then among the others
    bvh, _ = _build(device, points, dup, mask, builder=builder, leaf_size=leaf_size)
    dev = _dev(device)
    queries = np.random.default_rng(10).random((500, 3)).astype(np.float32)
    q = wp.array(queries, dtype=wp.vec3, device=dev)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    dist = _point_segment(queries.astype(np.float64), points[dup[:, 0]].astype(np.float64),
                          points[dup[:, 1]].astype(np.float64))
    dist[:, ~mask] = np.inf
    # expected: sort by (distance rounded to the float32 ties, id)
    order = np.lexsort((np.broadcast_to(np.arange(900), dist.shape), dist.astype(np.float32)), axis=1)
    out = wp.empty(500, dtype=wp.int32, device=dev)
    counts = wp.zeros(500, dtype=wp.vec2i, device=dev)
    search.nearest_edge_point(bvh, q, one, np.inf, out, counts=counts)
    got = out.numpy()
    np.testing.assert_allclose(dist[np.arange(500), got], dist.min(1), rtol=1e-5, atol=1e-7)
    same = dup[got]  # the winner's copies: it must be the smallest unmasked id among them
    for i in range(500):
        copies = np.nonzero(np.all(dup == same[i], axis=1) & mask)[0]
        assert got[i] == copies.min()
    c = counts.numpy()
    assert np.all(c[:, 0] >= 1) and np.all(c[:, 1] >= 1) and np.all(c[:, 1] <= 900)
    top = wp.empty((500, 5), dtype=wp.int32, device=dev)
    search.nearest_edges_point(bvh, q, one, np.inf, top)
    np.testing.assert_allclose(np.take_along_axis(dist, top.numpy(), 1), np.sort(dist, 1)[:, :5], rtol=1e-5,
                               atol=1e-7)
    assert order.shape == dist.shape


@pytest.mark.parametrize("builder,leaf_size", [("lbvh", 8), ("sah", 4), ("ploc", 4), ("ploc", 8)])
def test_ray_search_matches_brute_force_on_every_tree(device, builder, leaf_size):
    points, ends = _segments(12, e=1200)
    mask = np.random.default_rng(13).random(len(ends)) > 0.2
    bvh, _ = _build(device, points, ends, mask, builder=builder, leaf_size=leaf_size)
    dev = _dev(device)
    rng = np.random.default_rng(14)
    o = (rng.random((400, 3)) * 1.6 - 0.3).astype(np.float32)
    d = rng.normal(size=(400, 3)).astype(np.float32)
    t0 = wp.array(np.zeros(1, np.float32), dtype=float, device=dev)
    t1 = wp.array(np.full(1, 0.25, np.float32), dtype=float, device=dev)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    out = wp.empty(400, dtype=wp.int32, device=dev)
    search.nearest_edge_ray(bvh, wp.array(o, dtype=wp.vec3, device=dev), wp.array(d, dtype=wp.vec3, device=dev), t0,
                            t1, one, np.inf, out)
    # float64 brute force: segment-segment distance sampled finely on the ray part, then refined
    a, b = points[ends[:, 0]].astype(np.float64), points[ends[:, 1]].astype(np.float64)
    s = np.linspace(0.0, 0.25, 257)
    best = np.full((400, len(ends)), np.inf)
    for si in s:
        best = np.minimum(best, _point_segment(o + si * d.astype(np.float64), a, b))
    best[:, ~mask] = np.inf
    got = out.numpy()
    assert np.all(mask[got])
    # the chosen edge is within the sampling error (0.25 / 256 * |d|) of the best edge
    slack = 0.25 / 256 * np.linalg.norm(d, axis=1) + 1e-6
    assert np.all(best[np.arange(400), got] <= best.min(1) + slack)


def test_ploc_leaf_size_above_8_is_an_error(device):
    points, ends = _segments(0, e=50)
    with pytest.raises(ValueError, match="1..8"):
        _build(device, points, ends, builder="ploc", leaf_size=16)


@pytest.mark.parametrize("leaf_size", [1, 4, 8])
@pytest.mark.parametrize("num_edges", [2, 5, 9, 1500])
def test_compact_lbvh_is_the_same_tree_with_fewer_rows(device, monkeypatch, leaf_size, num_edges):
    from rayd.engine import edges

    points, ends = _segments(15, e=num_edges)
    mask = np.random.default_rng(16).random(num_edges) > 0.25
    plain, _ = _build(device, points, ends, mask, builder="lbvh", leaf_size=leaf_size)
    monkeypatch.setattr(edges, "LBVH_COMPACT", True)
    compact, (wp_points, _, wp_mask) = _build(device, points, ends, mask, builder="lbvh", leaf_size=leaf_size)
    assert sorted(_walk_packed(compact, points, ends, mask)) == list(range(num_edges))
    if num_edges > leaf_size:
        assert compact.num_inner == len(compact._tree.leaves.numpy()) - 1 <= plain.num_inner
    dev = _dev(device)
    rng = np.random.default_rng(17)
    q = wp.array(rng.random((400, 3)).astype(np.float32), dtype=wp.vec3, device=dev)
    d = wp.array(rng.normal(size=(400, 3)).astype(np.float32), dtype=wp.vec3, device=dev)
    one = wp.array(np.ones(1, np.uint8), dtype=wp.uint8, device=dev)
    t0 = wp.zeros(1, dtype=float, device=dev)
    t1 = wp.array(np.full(1, 0.3, np.float32), dtype=float, device=dev)
    got = []
    for bvh in (plain, compact):
        out = wp.empty(400, dtype=wp.int32, device=dev)
        counts = wp.zeros(400, dtype=wp.vec2i, device=dev)
        search.nearest_edge_point(bvh, q, one, np.inf, out, counts=counts)
        ray = wp.empty(400, dtype=wp.int32, device=dev)
        search.nearest_edge_ray(bvh, q, d, t0, t1, one, np.inf, ray)
        top = wp.empty((400, 4), dtype=wp.int32, device=dev)
        search.nearest_edges_point(bvh, q, one, np.inf, top)
        got.append((out.numpy(), counts.numpy(), ray.numpy(), top.numpy()))
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)  # the same answers after the same node visits
    points = (points * np.array([1.5, 0.7, 1.0]) + 0.1).astype(np.float32)
    wp_points.assign(wp.array(points, dtype=wp.vec3, device=dev))
    wp_mask.fill_(1)
    compact.refit()
    assert sorted(_walk_packed(compact, points, ends, np.ones(num_edges, bool))) == list(range(num_edges))
