"""The Embree CPU path outside Embree's float32 range (break-it t39/t06/t16): rays starting far
from the scene, scenes scaled far up or down, tiny or huge directions answer as on the Warp path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree

needs_embreex = pytest.mark.skipif(not cpu_embree.available(), reason="embreex not installed")


@pytest.fixture
def embree_on():
    """Embree on from the first query on a geometry (restored after)."""
    was, warm = cpu_embree.active(), cpu_embree.WARM_QUERIES
    cpu_embree.set_enabled(True)
    cpu_embree.WARM_QUERIES = 0
    yield
    cpu_embree.set_enabled(was)
    cpu_embree.WARM_QUERIES = warm


def _triangle_scene(scale: float) -> rt.Scene:
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]) * scale
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.float(), torch.tensor([[0, 1, 2]])))
    scene.build()
    return scene


@needs_embreex
def test_far_origins_hit(embree_on):
    # Straight down onto the unit triangle z = 0 from z: the hit is at t = z (float32-exact). Before
    # the fix, the clipping-sphere test cancelled (b^2 - |d|^2 |o|^2 at |o| = 1e8) and dropped the ray.
    z = torch.tensor([1e3, 1e6, 3e7, 1e8, 1e9, 1e10, 1e20])
    o = torch.stack([torch.full_like(z, 0.2), torch.full_like(z, 0.3), z], -1)
    ray = rt.Ray(o, torch.tensor([0.0, 0.0, -1.0]).expand_as(o))
    scene = _triangle_scene(1.0)
    before = cpu_embree.stats["rays"]
    for _ in range(2):
        torch.testing.assert_close(scene.intersect(ray).t, z, rtol=0, atol=0)
        assert scene.shadow_test(ray).all()
    assert cpu_embree.stats["rays"] > before, "the Embree path was not taken"


@needs_embreex
@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e-9, 1.0, 1e12, 1e15, 1e18])
def test_scaled_scene_hits_as_on_the_warp_path(embree_on, scale):
    # Triangle and ray scaled alike: t = scale / |d_z| * 1 along d = (0.05, 0.02, -1) from (0.2, 0.3, 1) s.
    scene = _triangle_scene(scale)
    o = torch.tensor([[0.2, 0.3, 1.0]]) * scale
    ray = rt.Ray(o, torch.tensor([[0.05, 0.02, -1.0]]))
    for _ in range(3):  # the 1st query on a geometry and the later ones
        hit = scene.intersect(ray)
        assert hit.prim_id.item() == 0
        np.testing.assert_allclose(hit.t.item(), scale, rtol=1e-6)
        assert scene.shadow_test(ray).item()


@needs_embreex
@pytest.mark.parametrize("length", [1e-30, 1e-15, 1e15, 1e25])
def test_tiny_and_huge_directions_hit(embree_on, length):
    # d = length * (0, 0, -1) from z = 1: t = 1 / length.
    scene = _triangle_scene(1.0)
    ray = rt.Ray(torch.tensor([[0.2, 0.3, 1.0]]), torch.tensor([[0.0, 0.0, -length]]))
    for _ in range(2):
        hit = scene.intersect(ray)
        assert hit.prim_id.item() == 0
        np.testing.assert_allclose(hit.t.item(), 1.0 / length, rtol=1e-6)
