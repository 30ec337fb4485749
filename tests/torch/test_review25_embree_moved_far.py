"""A dynamic mesh moved far from where it was built, on the CPU Embree path (helper review25, session 25).

``sync()`` keeps the search centre chosen at ``build()`` (docs/precision.md), so a mesh updated to
``x ~ 2e4`` is searched by Warp in float32 coordinates of that magnitude, and Warp's start point
``o + tmin d`` is rounded there (``2^-24 * 2e4 ~ 1e-3``, against faces of about ``0.1``). Embree works
in a frame of its own around the mesh, so it found other faces than the Warp path for rays with a
non-zero ``tmin`` -- every float64 query, whose search ``tmin`` is widened below 0: 1,960 of 22,080
rays differed before the fix. The mirror now leaves such a geometry to Warp (``CENTRE_MAX``) until it
comes back within reach of the search centre or the scene is built again.
"""

from __future__ import annotations

import pytest
import torch
from edge_reference import bumpy_sphere

import rayd.torch as rt
from rayd.engine import cpu_embree

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")


def _rays(v: torch.Tensor, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rays from a sphere of 3 radii around the mesh aimed at points of its box, and rays aimed at its vertices."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = v.min(0).values, v.max(0).values
    c, size = 0.5 * (lo + hi), float((hi - lo).max()) * 0.5
    o = c + 3.0 * size * torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=v.dtype), dim=1)
    target = lo + (hi - lo) * torch.rand(n, 3, generator=g, dtype=v.dtype)
    target[n // 2:] = v[torch.randint(0, v.shape[0], (n - n // 2,), generator=g)]
    return o, target - o


def _same_as_warp(scene: rt.Scene, ray: rt.Ray) -> int:
    hit, blocked = scene.intersect(ray), scene.shadow_test(ray)
    cpu_embree.set_enabled(False)
    try:
        want, want_blocked = scene.intersect(ray), scene.shadow_test(ray)
    finally:
        cpu_embree.set_enabled(True)
    assert torch.equal(blocked, want_blocked)
    assert torch.equal(hit.t, want.t)
    return int((hit.prim_id != want.prim_id).sum())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mesh_moved_far_from_its_build_answers_as_the_warp_path(dtype):
    v0, f = bumpy_sphere(24, 48, dtype=torch.float64)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v0.to(dtype), f), dynamic=True)
    scene.build()
    n = 2 * f.shape[0]  # above RAYS_PER_FACE: the first query after each change may use Embree
    scene.intersect(rt.Ray(*(x.to(dtype) for x in _rays(v0, n, 0))))
    far = v0 + torch.tensor([1e4, -2e4, 3e3], dtype=torch.float64)
    scene.update_mesh_vertices(0, far.to(dtype))
    scene.sync()
    for seed in range(1, 6):
        o, d = _rays(far, n, seed)
        # float32: a window whose tmin moves Warp's start (as a float64 query's widened tmin does)
        tmin = (-7.6e-6 * o.norm(dim=1) / d.norm(dim=1)).to(dtype) if dtype == torch.float32 else 0.0
        assert _same_as_warp(scene, rt.Ray(o.to(dtype), d.to(dtype), tmin=tmin)) == 0, seed
    # back near the build's place: Embree again, still the Warp path's answers
    back = v0 + 0.01
    scene.update_mesh_vertices(0, back.to(dtype))
    scene.sync()
    before = cpu_embree.stats["rays"]
    o, d = _rays(back, n, 7)
    assert _same_as_warp(scene, rt.Ray(o.to(dtype), d.to(dtype))) == 0
    assert cpu_embree.stats["rays"] >= before + n
