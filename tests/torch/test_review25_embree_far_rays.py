"""Rays from far away on the CPU Embree path (helper review25, session 25).

The Warp path tests a ray against corners taken relative to its float32 origin, rounded at ``|o|``: for an origin
``1000 R`` from a unit mesh that is about ``6e-5`` (of faces about ``0.1`` across), far beyond the Embree path's
edge band (``EDGE = 2^-16`` of the barycentric weights), so rays aimed at vertices and edges got other faces (or a
miss) than the Warp path: 377 of 32,000 at ``1000 R``, 2 at ``100 R``, 1,586 at ``1e4 R``. The bands now widen with
the origin's distance (``FAR_SCALE``) and rays from beyond ``FAR_RAYS * R`` go to Warp.
"""

from __future__ import annotations

import pytest
import torch
from edge_reference import bumpy_sphere

import rayd.torch as rt
from rayd.engine import cpu_embree

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")


@pytest.mark.parametrize("distance", [100.0, 1e3, 1e4])
def test_far_rays_at_vertices_and_chords_answer_as_the_warp_path(distance):
    v, f = bumpy_sphere(24, 48)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    g = torch.Generator().manual_seed(0)
    differ = 0
    for _ in range(4):
        n = 8000
        i, j = torch.randint(0, v.shape[0], (2, n), generator=g)
        lam = torch.rand(n, 1, generator=g)
        target = (v[i] * lam + v[j] * (1.0 - lam)).double()  # points on chords
        target[: n // 2] = v[i[: n // 2]].double()  # and vertices
        o = target + distance * torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=torch.float64), dim=1)
        ray = rt.Ray(o.float(), ((target - o) / distance).float())
        scene.intersect(ray)  # (the first query on a geometry is Warp's)
        before = cpu_embree.stats["rays"]
        hit, blocked = scene.intersect(ray), scene.shadow_test(ray)
        assert cpu_embree.stats["rays"] == before + 2 * n  # through the Embree path
        cpu_embree.set_enabled(False)
        try:
            want, want_blocked = scene.intersect(ray), scene.shadow_test(ray)
        finally:
            cpu_embree.set_enabled(True)
        differ += int((hit.prim_id != want.prim_id).sum()) + int((blocked != want_blocked).sum())
        assert torch.equal(hit.t[hit.prim_id == want.prim_id], want.t[hit.prim_id == want.prim_id])
    assert (hit.prim_id >= 0).any()
    assert differ == 0
