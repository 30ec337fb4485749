"""The Embree packet's decisions (rayd.engine.cpu_embree_kernels._search16): per-ray ignore ids, inactive
rays and bounds give the Warp path's answers, both where the packet decides branch-free over its 16 lanes
(one mesh, every shape enabled, no degenerate face) and where it reads the per-face tables (a degenerate
face, a disabled mesh)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree

pytestmark = pytest.mark.skipif(not cpu_embree.available(), reason="embreex not installed")


def _triangles(seed: int, n: int, degenerate: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centre = rng.uniform(-1, 1, (n, 1, 3))
    tris = centre + 0.3 * rng.normal(size=(n, 3, 3))
    tris[:degenerate, 2] = tris[:degenerate, 0]  # zero area: a miss in rayd
    return tris.reshape(-1, 3).astype(np.float32), np.arange(3 * n, dtype=np.int64).reshape(n, 3)


def _queries(scene: rt.Scene, ray: rt.Ray, ignore: torch.Tensor, active: torch.Tensor) -> list[torch.Tensor]:
    plain = scene.intersect(ray)
    skipped = scene.intersect(ray, ignore=ignore)
    masked = scene.intersect(ray, active=active, ignore=ignore)
    return [plain.prim_id, plain.shape_id, plain.t, skipped.global_prim_id, skipped.t, masked.global_prim_id,
            masked.t, scene.shadow_test(ray, ignore=ignore), scene.shadow_test(ray, active=active)]


@pytest.mark.parametrize("degenerate, disable", [(0, False), (5, False), (0, True)])
def test_ignore_active_and_bounds_as_on_the_warp_path(degenerate, disable):
    v, f = _triangles(3, 400, degenerate)
    rng = np.random.default_rng(4)
    n = 6000
    target = rng.uniform(v.min(0), v.max(0), (n, 3))
    o = (target + 3.0 * rng.normal(size=(n, 3))).astype(np.float32)
    d = (target - o).astype(np.float32)
    tmax = torch.from_numpy(rng.uniform(0.5, 2.0, n).astype(np.float32))
    ray = rt.Ray(torch.from_numpy(o), torch.from_numpy(d), tmax)
    active = torch.from_numpy(rng.uniform(size=n) < 0.8)

    def build() -> rt.Scene:
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.from_numpy(v), torch.from_numpy(f)))
        if disable:  # a second, disabled mesh: the packet reads the per-shape table
            scene.add_mesh(rt.Mesh(torch.from_numpy(v[::-1].copy()), torch.from_numpy(f)))
        scene.build()
        if disable:
            scene.set_shape_enabled(1, False)
            scene.sync()
        return scene

    was, warm = cpu_embree.active(), cpu_embree.WARM_QUERIES
    try:
        cpu_embree.set_enabled(False)
        scene = build()
        first = scene.intersect(ray).global_prim_id
        # ignore: the face each ray hits first for half of the rays (Warp re-searches them), random ids else
        ignore = torch.where(torch.from_numpy(rng.uniform(size=n) < 0.5), first,
                             torch.from_numpy(rng.integers(-1, len(f), n).astype(np.int32)))
        want = _queries(scene, ray, ignore, active)
        cpu_embree.set_enabled(True)
        cpu_embree.WARM_QUERIES = 0
        before = cpu_embree.stats["rays"]
        got = _queries(build(), ray, ignore, active)
        assert cpu_embree.stats["rays"] > before, "the Embree path was not taken"
    finally:
        cpu_embree.set_enabled(was)
        cpu_embree.WARM_QUERIES = warm
    assert (want[0] >= 0).sum() > n // 4 and (want[3] != want[0]).any()
    for w, g in zip(want, got):
        assert torch.equal(w, g)


def test_strided_ray_arrays_answer_as_contiguous_ones():
    """The packet reads contiguous ray arrays (and writes contiguous outputs) through their data pointers and
    others through ``wp::index``: a batch of strided views (every other row of larger arrays), written into a
    strided output, gets the contiguous batch's winners."""
    import warp as wp

    from rayd import engine

    v, f = _triangles(5, 400, 3)
    rng = np.random.default_rng(6)
    n = 5000
    target = rng.uniform(v.min(0), v.max(0), (n, 3))
    o = (target + 3.0 * rng.normal(size=(n, 3))).astype(np.float32)
    d = (target - o).astype(np.float32)
    tmax = rng.uniform(0.5, 2.0, n).astype(np.float32)
    active = (rng.uniform(size=n) < 0.9).astype(np.uint8)
    ignore = rng.integers(-1, len(f), n).astype(np.int32)
    was, warm = cpu_embree.active(), cpu_embree.WARM_QUERIES
    try:
        cpu_embree.set_enabled(True)
        cpu_embree.WARM_QUERIES = 0
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.from_numpy(v), torch.from_numpy(f)))
        scene.build()
        accel = scene._core.accel

        def batch(strided: bool) -> engine.RayBatch:
            arrays = []
            for x, dtype in ((o, wp.vec3), (d, wp.vec3), (np.zeros(n, np.float32), float), (tmax, float),
                             (active, wp.uint8), (ignore, wp.int32)):
                if strided:  # every other row of an array twice as long
                    wide = np.repeat(x, 2, axis=0)
                    arrays.append(wp.array(wide, dtype=dtype, device="cpu")[::2])
                else:
                    arrays.append(wp.array(x, dtype=dtype, device="cpu"))
            return engine.RayBatch(*arrays)

        out = []
        for strided in (False, True):
            for any_hit in (False, True):
                # (strided: the winners too, into every other entry of a longer array)
                ids = wp.empty(2 * n if strided else n, dtype=wp.int32, device="cpu")[:: 2 if strided else 1]
                before = cpu_embree.stats["rays"]
                engine.search(accel, batch(strided), ids, any_hit)
                assert cpu_embree.stats["rays"] > before, "the Embree path was not taken"
                out.append(ids.numpy().copy())
    finally:
        cpu_embree.set_enabled(was)
        cpu_embree.WARM_QUERIES = warm
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[1], out[3])
    assert (out[0] >= 0).sum() > n // 4
