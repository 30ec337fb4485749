"""The CPU Embree path's recorded launches (a ``LaunchCache`` per chunk of the search and of the
fields, owned by one call at a time): batches that change between calls (other arrays of the same
size, the same arrays changed in place, another size) and calls from several threads at once answer
as the Warp path does."""

from __future__ import annotations

import threading

import pytest
import torch
from edge_reference import bumpy_sphere

import rayd.torch as rt
from rayd.engine import cpu_embree

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")

N = 24_000  # several chunks per call (cpu_embree.MIN_CHUNK rays at least each)


def _scene():
    v, f = bumpy_sphere(32, 64)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    return scene


def _rays(seed: int, n: int = N):
    g = torch.Generator().manual_seed(seed)
    o = 3.0 * torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    d = torch.rand(n, 3, generator=g) - 0.5 - o
    d[::5] *= -1.0  # misses too
    return o, d


def _warp(scene, o, d):
    cpu_embree.set_enabled(False)
    try:
        hit = scene.intersect(rt.Ray(o, d))
        return hit.t, hit.prim_id, hit.geo_n, scene.shadow_test(rt.Ray(o, d))
    finally:
        cpu_embree.set_enabled(True)


def _same(scene, o, d, want) -> None:
    hit = scene.intersect(rt.Ray(o, d))
    got = (hit.t, hit.prim_id, hit.geo_n, scene.shadow_test(rt.Ray(o, d)))
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_changing_batches_answer_as_warp():
    scene = _scene()
    batches = [_rays(1), _rays(2), _rays(3, N // 2 + 16)]
    wants = [_warp(scene, o, d) for o, d in batches]
    scene.intersect(rt.Ray(*batches[0]))  # the first query on a geometry is Warp's (WARM_QUERIES)
    before = cpu_embree.stats["rays"]
    for _ in range(2):
        for (o, d), want in zip(batches, wants):
            _same(scene, o, d, want)
    assert cpu_embree.stats["rays"] > before  # Embree answered
    o, d = batches[0]
    o.copy_(batches[1][0])  # the same arrays, changed in place: the recorded launches read them anew
    d.copy_(batches[1][1])
    _same(scene, o, d, wants[1])


def test_threads_share_a_scene():
    scene = _scene()
    batches = [_rays(10 + k) for k in range(3)]
    wants = [_warp(scene, o, d) for o, d in batches]
    scene.intersect(rt.Ray(*batches[0]))
    errors = []

    def work(k: int) -> None:
        try:
            for _ in range(4):
                _same(scene, *batches[k], wants[k])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
