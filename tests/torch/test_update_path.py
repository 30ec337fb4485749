"""The update + sync path (issue 18, "update"): the finite check placed in the placement kernel and
read after the refit is enqueued still names the first bad mesh and row and leaves the scene
pending until a good sync(); a vertex-only sync() of matrix-free shapes keeps the transform
table's generation; the memset-free magnitude equals the maximum on every call."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import refit
from rayd.engine.runtime import LaunchCache


def _grid(n, shift):
    x, y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n))
    v = np.stack([x + shift, y, 0.1 * np.sin(5 * x)], -1).reshape(-1, 3).astype(np.float32)
    i = np.arange(n * n).reshape(n, n)
    a, b, c, d = i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, :-1].ravel(), i[1:, 1:].ravel()
    return v, np.concatenate([np.stack([a, b, d], 1), np.stack([a, d, c], 1)]).astype(np.int32)


def _rays(device):
    rng = np.random.default_rng(0)
    o = np.concatenate([rng.uniform(0, 3, (3000, 1)), rng.uniform(0, 1, (3000, 1)), np.full((3000, 1), 2.0)], 1)
    return rt.Ray(torch.tensor(o.astype(np.float32), device=device), torch.tensor([0.0, 0.0, -1.0], device=device))


@pytest.mark.parametrize("value,what", [(math.nan, "non-finite values"), (1e39, "values beyond the float32 range")])
def test_bad_vertices_at_sync_raise_keep_pending_then_recover(device, value, what):
    (v0, f0), (v1, f1) = _grid(9, 0.0), _grid(7, 1.5)
    scene = rt.Scene()
    for v, f in ((v0, f0), (v1, f1)):
        scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
    scene.build()
    moved0 = torch.tensor(v0 + [0.0, 0.0, 0.3], device=device)
    bad1 = torch.tensor(v1, dtype=torch.float64, device=device)
    bad1[5, 1] = value
    bad1[9, 0] = value
    scene.update_mesh_vertices(0, moved0)
    scene.update_mesh_vertices(1, bad1)
    with pytest.raises(ValueError, match=rf"sync\(\): 'vertices of mesh 1' holds {what} \(first at row 5\)"):
        scene.sync()
    assert scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError):
        scene.intersect(_rays(device))
    moved1 = torch.tensor(v1 - [0.0, 0.0, 0.2], device=device)
    scene.update_mesh_vertices(1, moved1)
    scene.sync()
    fresh = rt.Scene()
    for v, f in ((moved0, f0), (moved1, f1)):
        fresh.add_mesh(rt.Mesh(v.clone(), torch.tensor(f, device=device)))
    fresh.build()
    a, b = scene.intersect(_rays(device)), fresh.intersect(_rays(device))
    assert int((a.prim_id >= 0).sum()) > 1000
    torch.testing.assert_close(a.t, b.t)
    torch.testing.assert_close(a.shape_id, b.shape_id)


def test_vertex_only_sync_keeps_the_transform_generation(device):
    v, f = _grid(6, 0.0)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
    scene.build()
    table = scene._core.transforms
    gen = table.generation
    for k in range(3):
        scene.update_mesh_vertices(0, torch.tensor(v * (1.0 + k), device=device))
        scene.sync()
    assert table.generation == gen
    m = torch.eye(4, device=device)
    m[2, 3] = 1.0
    scene.set_mesh_transform(0, m)
    scene.sync()
    assert table.generation == gen + 1
    np.testing.assert_array_equal(table.world[0], m.cpu().numpy())
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(torch.tensor(v * 3.0, device=device), torch.tensor(f, device=device), to_world=m))
    fresh.build()
    ray = rt.Ray(torch.tensor([[0.5, 0.7, 5.0], [2.1, 1.3, 5.0]], device=device),
                 torch.tensor([0.0, 0.0, -1.0], device=device))
    a, b = scene.intersect(ray), fresh.intersect(ray)
    assert bool((a.prim_id >= 0).all())
    torch.testing.assert_close(a.t, b.t)


def test_magnitude_zeroed_equals_the_maximum_on_every_call(device):
    rng = np.random.default_rng(1)
    partial = wp.zeros(256, dtype=float, device=device)
    out = wp.zeros(1, dtype=float, device=device)
    launches = LaunchCache()
    for n, peak in ((200_003, -50.0), (1000, 3.0), (7, 0.5)):  # shrinking: the old maximum must not stay
        pts = (rng.standard_normal((n, 3)) * 0.1).astype(np.float32)
        pts[n // 2, 1] = peak
        refit.magnitude_zeroed(wp.array(pts, dtype=wp.vec3, device=device), out, partial, None, launches)
        assert out.numpy()[0] == np.abs(pts).max()
        assert not partial.numpy().any()
