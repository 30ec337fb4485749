"""Nearest-edge searches split over CPU cores (rayd.engine.runtime.launch_offset_rows): every chunk
of a Morton-sorted batch answers its own queries; results equal one launch and brute force."""

from __future__ import annotations

import torch
from edge_reference import bumpy_sphere, point_distances, ray_distances, segments

import rayd.torch as rt
from rayd.engine import runtime

N = 12_000  # above CPU_SPLIT_MIN (8192) and AUTO_SORT_MIN_QUERIES (4096): sorted, then split
CHECK = slice(None, None, 20)  # the queries checked against brute force (every 20th)


def _scene():
    v, f = bumpy_sphere()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    return scene


def _split_and_single(query):
    """``(split, one launch)`` results of the same query (two calls each: the first launch of a
    kernel always runs whole)."""
    was, seen = runtime._WORKERS, []
    real = runtime.run_parallel

    def counting(run, parts):
        seen.append(parts)
        real(run, parts)

    runtime.run_parallel = counting
    try:
        runtime._WORKERS = 2
        query(), query()
        split = query()
        assert seen and max(seen) > 1  # the search really ran in chunks
        runtime._WORKERS = 1
        single = query()
    finally:
        runtime._WORKERS, runtime.run_parallel = was, real
    return split, single


def test_point_queries_split_equal_one_launch_and_brute_force():
    scene = _scene()
    g = torch.Generator().manual_seed(3)
    p = torch.rand(N, 3, generator=g) * 3.0 - 1.5
    split, single = _split_and_single(lambda: scene.nearest_edge(p))
    assert torch.equal(split.global_edge_id, single.global_edge_id)
    assert torch.equal(split.distance, single.distance)
    a, b = segments(scene)
    best = point_distances(p[CHECK], a, b).min(1).values
    torch.testing.assert_close(split.distance[CHECK].double(), best, rtol=1e-5, atol=1e-6)


def test_ray_queries_split_equal_one_launch_and_brute_force():
    scene = _scene()
    g = torch.Generator().manual_seed(4)
    o = torch.rand(N, 3, generator=g) * 4.0 - 2.0
    d = torch.nn.functional.normalize(torch.randn(N, 3, generator=g), dim=1)
    ray = rt.Ray(o, d, 0.5)
    split, single = _split_and_single(lambda: scene.nearest_edge(ray))
    assert torch.equal(split.global_edge_id, single.global_edge_id)
    assert torch.equal(split.distance, single.distance)
    a, b = segments(scene)
    m = o[CHECK].shape[0]
    best = ray_distances(o[CHECK], d[CHECK], torch.zeros(m), torch.full((m,), 0.5), a, b).min(1).values
    torch.testing.assert_close(split.distance[CHECK].double(), best, rtol=1e-5, atol=1e-5)
