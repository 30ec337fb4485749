"""The CPU Embree path's 4 x 4 tiles (rayd.engine.cpu_embree.image_width, TILE_MIN_RAYS): a batch laid
out as the rows of an image is traced in 4 x 4 tiles of pixels; the answers equal the batch traced in
runs of 16 along its rows and the Warp path, also for a width that is not a multiple of 4 and a last
band of fewer than 4 rows."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree
from rayd.torch import _convert

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")


def _terrain(cells: int = 40):
    x = torch.linspace(-1.0, 1.0, cells + 1)
    gx, gy = torch.meshgrid(x, x, indexing="ij")
    v = torch.stack([gx, gy, 0.1 * torch.sin(6.0 * gx) * torch.cos(5.0 * gy)], -1).reshape(-1, 3)
    i = torch.arange(cells * (cells + 1)).reshape(cells, cells + 1)[:, :cells].reshape(-1)
    a, b, c, d = i, i + cells + 1, i + cells + 2, i + 1
    f = torch.cat([torch.stack([a, b, c], 1), torch.stack([a, c, d], 1)]).to(torch.int32)
    return v, f


def _batch(ray, n):
    class Batch:
        pass

    b = Batch()
    b.o, b.d = _convert.vec3_view(ray.o.reshape(-1, 3).contiguous()), _convert.vec3_view(ray.d.reshape(-1, 3).contiguous())
    return b


def _hits(scene, ray, tile_min: int, embree: bool = True):
    was, real = cpu_embree.TILE_MIN_RAYS, cpu_embree.image_width
    widths = []
    cpu_embree.image_width = lambda *a: widths.append(real(*a)) or widths[-1]
    cpu_embree.TILE_MIN_RAYS = tile_min
    cpu_embree.set_enabled(embree)
    try:
        scene.intersect(ray)  # the first query on a geometry is Warp's (WARM_QUERIES)
        return scene.intersect(ray), scene.shadow_test(ray), widths
    finally:
        cpu_embree.TILE_MIN_RAYS, cpu_embree.image_width = was, real
        cpu_embree.set_enabled(True)


@pytest.mark.parametrize("width,height,pinhole", [(62, 103, True), (64, 96, False)])
def test_tiles_equal_rows_and_warp(width, height, pinhole):
    v, f = _terrain()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    if pinhole:  # one origin, directions through the pixels (looking down, slightly tilted)
        cam = rt.Camera(width, height, fov_y=50.0, to_world=torch.tensor(
            [[1.0, 0.0, 0.0, 0.1], [0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 2.5], [0.0, 0.0, 0.0, 1.0]]))
        ray = cam.generate_rays()
        o, d = ray.o.reshape(-1, 3), ray.d.reshape(-1, 3)
        o = o.expand(d.shape[0], 3).contiguous() if o.shape[0] != d.shape[0] else o.contiguous()
        ray = rt.Ray(o, d.contiguous())
    else:  # orthographic: origins on a grid, one direction (the benchmark's terrain rays)
        gx, gy = torch.meshgrid(torch.linspace(-1.1, 1.1, height), torch.linspace(-1.1, 1.1, width), indexing="ij")
        o = torch.stack([gx, gy, torch.full_like(gx, 2.0)], -1).reshape(-1, 3)
        ray = rt.Ray(o, torch.tensor([0.05, 0.0, -1.0]).expand(o.shape[0], 3).contiguous())
    n = width * height
    assert n >= 4096
    before = dict(cpu_embree.stats)
    tile_hit, tile_shadow, widths = _hits(scene, ray, 4096)
    assert cpu_embree.stats["rays"] > before["rays"]
    assert widths and widths[-1] == width  # traced in tiles
    row_hit, row_shadow, widths = _hits(scene, ray, 1 << 40)
    assert not widths
    warp_hit, warp_shadow, _ = _hits(scene, ray, 4096, embree=False)
    assert float(tile_hit.is_valid().float().mean()) > 0.3
    for other in (row_hit, warp_hit):
        assert torch.equal(tile_hit.prim_id, other.prim_id)
        assert torch.equal(tile_hit.t, other.t)
    assert torch.equal(tile_shadow, row_shadow) and torch.equal(tile_shadow, warp_shadow)


def test_image_width_rejects_other_layouts():
    g = torch.Generator().manual_seed(3)
    n = 1 << 14
    o = 3.0 * torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    d = torch.rand(n, 3, generator=g) - 0.5 - o
    assert cpu_embree.image_width(_batch(rt.Ray(o, d), n), n) == 0  # random rays
    line = torch.stack([torch.linspace(-1, 1, n), torch.zeros(n), torch.full((n,), 2.0)], 1)
    down = torch.tensor([0.0, 0.0, -1.0]).expand(n, 3).contiguous()
    assert cpu_embree.image_width(_batch(rt.Ray(line, down), n), n) == 0  # one long row: no jumps
    gx, gy = torch.meshgrid(torch.arange(128.0), torch.arange(128.0), indexing="ij")
    grid = torch.stack([gx, gy, torch.full_like(gx, 2.0)], -1).reshape(-1, 3)
    assert cpu_embree.image_width(_batch(rt.Ray(grid, down), n), n) == 128
    shuffled = grid[torch.randperm(n, generator=g)]
    assert cpu_embree.image_width(_batch(rt.Ray(shuffled, down), n), n) == 0
