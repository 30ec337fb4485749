"""The CPU Embree path's work stealing (``cpu_embree.STEAL``, ``cpu_fields.STEAL``: one launch per core
taking packets from a shared counter) answers bit for bit as the chunked launches do, for rays in turn,
camera rows traced as 4 x 4 tiles, and an incoherent batch traced in Morton order."""

from __future__ import annotations

import pytest
import torch
from edge_reference import bumpy_sphere

import rayd.torch as rt
from rayd.engine import cpu_embree, cpu_fields

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")


def _batches():
    g = torch.Generator().manual_seed(7)
    n = 40_000  # several chunks, above SORT_MIN_RAYS
    o = 3.0 * torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    d = torch.rand(n, 3, generator=g) - 0.5 - o
    d[::5] *= -1.0  # misses too
    w, h = 512, 40  # camera rows (tiles): a pinhole looking at the sphere
    ys, xs = torch.meshgrid(torch.linspace(-0.1, 0.1, h), torch.linspace(-0.4, 0.4, w), indexing="ij")
    dc = torch.stack([xs, ys, -torch.ones_like(xs)], -1).reshape(-1, 3)
    oc = torch.tensor([0.1, 0.05, 3.0]).expand_as(dc).contiguous()
    return [(o, d), (oc, dc), (o[: n // 3 + 5].clone(), d[: n // 3 + 5].clone())]


def _answers(scene, o, d):
    hit = scene.intersect(rt.Ray(o, d))
    return hit.t, hit.prim_id, hit.geo_n, hit.n, scene.shadow_test(rt.Ray(o, d))


@pytest.mark.parametrize("steal", [(1, 0), (0, 1), (1, 1)])
def test_steal_answers_as_chunks(monkeypatch, steal):
    v, f = bumpy_sphere(32, 64)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    batches = _batches()
    scene.intersect(rt.Ray(*batches[0]))  # the first query on a geometry is Warp's (WARM_QUERIES)
    monkeypatch.setattr(cpu_embree, "STEAL", 0)
    monkeypatch.setattr(cpu_fields, "STEAL", 0)
    wants = [_answers(scene, o, d) for o, d in batches]
    monkeypatch.setattr(cpu_embree, "STEAL", steal[0])
    monkeypatch.setattr(cpu_fields, "STEAL", steal[1])
    before = cpu_embree.stats["rays"]
    for _ in range(2):  # the second time with the recorded launches (and the kept order of a sorted batch)
        for (o, d), want in zip(batches, wants):
            for a, b in zip(_answers(scene, o, d), want):
                assert torch.equal(a, b)
    assert cpu_embree.stats["rays"] > before  # the Embree path answered
