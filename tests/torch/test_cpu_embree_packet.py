"""``RAYD_EMBREE_PACKET``: the CPU Embree path splits its 16 prepared rays into Embree calls of 4, 8
or 16 lanes; every width gives the same answers (closest hit, any hit, the rays sent to Warp)."""

from __future__ import annotations

import math

import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree, embree_api

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")


def _sphere(rings: int = 24, segments: int = 48):
    th = torch.linspace(0.0, math.pi, rings + 1)[1:-1]
    ph = torch.linspace(0.0, 2.0 * math.pi, segments + 1)[:-1]
    t, p = torch.meshgrid(th, ph, indexing="ij")
    v = torch.stack([t.sin() * p.cos(), t.sin() * p.sin(), t.cos()], -1).reshape(-1, 3)
    v = torch.cat([v, torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])])
    faces = []
    for r in range(rings - 2):
        for s in range(segments):
            a, b = r * segments + s, r * segments + (s + 1) % segments
            faces += [[a, a + segments, b], [b, a + segments, b + segments]]
    top, bottom, last = len(v) - 2, len(v) - 1, (rings - 2) * segments
    for s in range(segments):
        faces += [[top, (s + 1) % segments, s], [bottom, last + s, last + (s + 1) % segments]]
    return v, torch.tensor(faces, dtype=torch.int32)


@pytest.fixture
def embree_on(monkeypatch):
    """The Embree path on for the test whatever earlier tests left (restored after)."""
    was = cpu_embree.active()
    cpu_embree.set_enabled(True)
    monkeypatch.setattr(cpu_embree, "WARM_QUERIES", 1)
    yield
    cpu_embree.set_enabled(was)


def test_packet_widths_agree(monkeypatch, embree_on):
    v, f = _sphere()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    g = torch.Generator().manual_seed(3)
    n = 5000  # not a multiple of 16: a last, partial packet
    o = torch.randn(n, 3, generator=g) * 0.3
    d = torch.randn(n, 3, generator=g)
    ray = rt.Ray(o, d, tmax=torch.rand(n, generator=g) * 2.0)
    scene.intersect(ray)  # the first query on a geometry is Warp's (WARM_QUERIES)
    got, before = {}, cpu_embree.stats["rays"]
    for width in ("16", "8", "4"):
        monkeypatch.setenv("RAYD_EMBREE_PACKET", width)
        assert embree_api.packet_width() == int(width)
        hit = scene.intersect(ray)
        got[width] = (hit.prim_id.clone(), hit.t.clone(), scene.shadow_test(ray).clone())
    for width in ("8", "4"):
        for a, b in zip(got["16"], got[width]):
            assert torch.equal(a, b), width
    assert (got["16"][0] >= 0).float().mean() > 0.5
    assert cpu_embree.stats["rays"] - before == 6 * n  # all through Embree
    monkeypatch.setenv("RAYD_EMBREE_PACKET", "3")
    with pytest.raises(ValueError):
        embree_api.packet_width()
