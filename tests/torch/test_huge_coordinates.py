"""Very large coordinates (break-it t38): the closest/any-hit search at scales where float32
edge-function products overflow (about 1.8e19) still hits, as intersect_all does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt


@pytest.mark.parametrize("scale", [1e18, 1e20, 1e25, 1e30])
def test_intersect_and_shadow_test_hit_at_huge_scale(scale):
    # The unit triangle z = 0 scaled by s, a ray from (0.2, 0.3, 1) s along (0.05, 0.02, -1): it
    # crosses z = 0 at t = s, at (0.25, 0.32) s, inside the triangle.
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]) * scale
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]])))
    scene.build()
    ray = rt.Ray(torch.tensor([[0.2, 0.3, 1.0]]) * scale, torch.tensor([[0.05, 0.02, -1.0]]))
    for _ in range(2):  # the 1st query on a geometry and a later one (the CPU accelerator's turn)
        hit = scene.intersect(ray)
        assert hit.prim_id.item() == 0
        np.testing.assert_allclose(hit.t.item(), scale, rtol=1e-6)
        np.testing.assert_allclose(hit.barycentric[0].tolist(), [0.43, 0.25, 0.32], rtol=1e-5)
        assert scene.shadow_test(ray).item()
    assert scene.intersect_all(ray, 1).prim_id[0, 0].item() == 0
    assert scene.count_intersections(ray).item() == 1
