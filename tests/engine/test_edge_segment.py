"""Engine ring: the segment-test switches of ``edge_segment.py`` (``SEG_TEST``/``SEG_TEST_CPU``, ``SEG_LOAD``)
change no answer.

``point_segment_dsq_within`` must return :func:`point_segment_dsq`'s bits wherever that value is within
the limit (and only ``inf`` or that value elsewhere); every walk (binary, 4-wide, compressed; point and
top-k; masks, ``max_distance``) must return the same edges with the same node visits and segment tests
under every combination of the switches, and agree with a float64 brute force.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine import edge_segment
from rayd.engine.edges import EdgeBvh

from tests.engine.test_edge_wide import _answers, _arrays, _brute, _dev, _grid_edges

wp.set_module_options({"enable_backward": False})


@wp.kernel
def _both_kernel(p: wp.array(dtype=wp.vec3), a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3),
                 limit: wp.array(dtype=float), exact: wp.array(dtype=float), within: wp.array(dtype=float),
                 seg: wp.array(dtype=wp.vec3), loaded: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    exact[i] = edge_segment.point_segment_dsq(p[i], a[i], b[i])
    within[i] = edge_segment.point_segment_dsq_within(p[i], a[i], b[i], limit[i])
    sa, sb = edge_segment.load_segment(seg, i)
    loaded[2 * i] = sa
    loaded[2 * i + 1] = sb


def _cases(rng, n):
    """Points at every scale of distance from their segments, projections inside and beyond both ends,
    exact endpoint ties, degenerate, huge, tiny and non-finite segments; limits around the distance."""
    a = rng.standard_normal((n, 3)) * 10.0 ** rng.integers(-3, 4, (n, 1))
    ab = rng.standard_normal((n, 3)) * 10.0 ** rng.integers(-4, 3, (n, 1))
    b = a + ab
    t = rng.uniform(-1.5, 2.5, (n, 1))
    perp = np.cross(ab, rng.standard_normal((n, 3)))
    perp /= np.linalg.norm(perp, axis=1, keepdims=True) + 1e-300
    dist = np.linalg.norm(ab, axis=1, keepdims=True) * 10.0 ** rng.uniform(-9, 3, (n, 1))
    p = a + t * ab + perp * dist
    kind = rng.integers(0, 12, n)
    p[kind == 0] = a[kind == 0]  # on an endpoint
    p[kind == 1] = b[kind == 1]
    b[kind == 2] = a[kind == 2]  # degenerate
    a[kind == 3, 0] = np.inf
    b[kind == 4, 1] = np.nan
    a[kind == 5] *= 1e19  # squares overflow
    b[kind == 5] *= 1e19
    a[kind == 6] *= 1e-21  # squares underflow
    b[kind == 6] *= 1e-21
    p[kind == 6] *= 1e-21
    b[kind == 7, 2] = -np.inf
    p, a, b = (x.astype(np.float32) for x in (p, a, b))
    return p, a, b


def test_within_is_exact_where_within_the_limit(device):
    rng = np.random.default_rng(11)
    n = 60000
    p, a, b = _cases(rng, n)
    dev = _dev(device)
    arr = [wp.array(x, dtype=wp.vec3, device=dev) for x in (p, a, b)]
    exact = wp.empty(n, dtype=float, device=dev)
    wp.launch(_both_kernel, n, arr + [wp.zeros(n, dtype=float, device=dev), exact, wp.empty(n, dtype=float, device=dev),
                                      arr[0], wp.empty(2 * n, dtype=wp.vec3, device=dev)], device=dev)
    e = exact.numpy()
    scale = rng.choice([0.0, 0.5, 0.999, 1.0, 1.0000001, 1.001, 2.0, np.inf], n).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        limit = np.where(np.isfinite(e), e * scale, rng.uniform(0, 10, n)).astype(np.float32)
    limit[scale == np.inf] = np.inf
    limit[rng.random(n) < 0.05] = 0.0
    seg = np.stack([a, b], 1).reshape(-1, 3)
    within = wp.empty(n, dtype=float, device=dev)
    loaded = wp.empty(2 * n, dtype=wp.vec3, device=dev)
    wp.launch(_both_kernel, n, arr + [wp.array(limit, dtype=float, device=dev), exact, within,
                                      wp.array(seg, dtype=wp.vec3, device=dev), loaded], device=dev)
    w = within.numpy()
    e = exact.numpy()
    take = e <= limit
    assert take.sum() > n // 4
    np.testing.assert_array_equal(w[take].view(np.int32), e[take].view(np.int32))
    other = ~take
    same = w[other].view(np.int32) == e[other].view(np.int32)
    assert np.all(same | (w[other] == np.inf))
    assert (w[other] == np.inf).sum() > n // 20  # the line test does reject
    np.testing.assert_array_equal(loaded.numpy().view(np.int32), seg.view(np.int32))


@pytest.fixture()
def switches():
    saved = edge_segment.SEG_TEST, edge_segment.SEG_TEST_CPU, edge_segment.SEG_LOAD
    yield
    edge_segment.SEG_TEST, edge_segment.SEG_TEST_CPU, edge_segment.SEG_LOAD = saved


def _set(test: str, load: str) -> None:
    edge_segment.SEG_TEST = edge_segment.SEG_TEST_CPU = test
    edge_segment.SEG_LOAD = load


COMBOS = [("pruned", "plain"), ("exact", "v2"), ("pruned", "v2")]


@pytest.mark.parametrize("builder,leaf,wide", [("ploc", 8, "q"), ("ploc", 8, False), ("sah", 4, False),
                                               ("lbvh", 8, "qs"), ("ploc", 4, True)])
@pytest.mark.parametrize("k", [1, 8])
def test_same_edges_visits_and_tests(device, switches, builder, leaf, wide, k):
    v, ends = _grid_edges(28, seed=5)
    rng = np.random.default_rng(3)
    mask = rng.random(len(ends)) > 0.1
    bvh = EdgeBvh(*_arrays(device, v, ends, mask), builder=builder, leaf_size=leaf, wide=wide)
    # box points, points on vertices and edge midpoints (exact ties), and points far above
    q = np.concatenate([rng.uniform(-0.2, 1.2, (1500, 3)), v[rng.integers(0, len(v), 300)],
                        0.5 * (v[ends[:300, 0]] + v[ends[:300, 1]]),
                        rng.uniform(-0.2, 1.2, (200, 3)) + [0.0, 0.0, 3.0]]).astype(np.float32)
    _set("exact", "plain")
    ref, ref_counts = _answers(bvh, q, k, device, counts=True)
    ref_md = _answers(bvh, q, k, device, max_distance=0.02)
    for test, load in COMBOS:
        _set(test, load)
        got, counts = _answers(bvh, q, k, device, counts=True)
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(counts, ref_counts)  # the same walk, step for step
        np.testing.assert_array_equal(_answers(bvh, q, k, device, max_distance=0.02), ref_md)
    _set("pruned", "v2")
    d_ref, _ = _brute(q.astype(np.float64), v, ends, mask, k)
    got = _answers(bvh, q, k, device).reshape(len(q), -1)
    a, b = v[ends[:, 0]].astype(np.float64), v[ends[:, 1]].astype(np.float64)
    qq = q.astype(np.float64)[:, None]
    gid = np.maximum(got, 0)
    ab = b[gid] - a[gid]
    t = np.clip(((qq - a[gid]) * ab).sum(-1) / (ab * ab).sum(-1), 0, 1)
    d = np.linalg.norm(qq - (a[gid] + t[..., None] * ab), axis=-1)
    np.testing.assert_allclose(d, d_ref, rtol=2e-6, atol=1e-7)


def test_seg_modes_are_per_device(switches):
    """``SEG_TEST`` is the CUDA line, ``SEG_TEST_CPU`` the CPU's; ``SEG_LOAD`` serves both (same reads on the CPU)."""
    edge_segment.SEG_TEST, edge_segment.SEG_TEST_CPU, edge_segment.SEG_LOAD = "pruned", "exact", "v2"
    assert edge_segment.seg_modes(wp.get_device("cpu")) == ("exact", "v2")

    class _Cuda:
        is_cuda = True

    assert edge_segment.seg_modes(_Cuda()) == ("pruned", "v2")


@pytest.mark.parametrize("builder,leaf,wide", [("ploc", 8, "q"), ("sah", 4, False)])
def test_ray_walks_read_segments_alike(device, switches, builder, leaf, wide):
    """Rays take ``SEG_LOAD`` (not ``SEG_TEST``): the same edges either way, on the wide and the binary walk."""
    from tests.engine.test_edge_wide import _ray_answers

    v, ends = _grid_edges(20, seed=2)
    rng = np.random.default_rng(4)
    bvh = EdgeBvh(*_arrays(device, v, ends, np.ones(len(ends), bool)), builder=builder, leaf_size=leaf, wide=wide)
    o = rng.uniform(-0.2, 1.2, (800, 3)).astype(np.float32)
    d = rng.standard_normal((800, 3)).astype(np.float32)
    _set("exact", "plain")
    ref = _ray_answers(bvh, o, d, device)
    _set("pruned", "v2")
    np.testing.assert_array_equal(_ray_answers(bvh, o, d, device), ref)
    assert (ref >= 0).all()
