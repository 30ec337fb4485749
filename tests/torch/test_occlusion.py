"""shadow_test and visible: agreement with closest hit, symmetry, self-intersection avoidance."""

from __future__ import annotations

import math

import pytest
import torch

import rayd.torch as rt


def _sphere_scene(device, n_lat=24, n_lon=48, radius=1.0):
    lat = torch.linspace(0, math.pi, n_lat + 1, dtype=torch.float64)[1:-1]
    lon = torch.linspace(0, 2 * math.pi, n_lon + 1, dtype=torch.float64)[:-1]
    la, lo = torch.meshgrid(lat, lon, indexing="ij")
    ring = torch.stack((torch.sin(la) * torch.cos(lo), torch.sin(la) * torch.sin(lo), torch.cos(la)), -1).reshape(-1, 3)
    v = torch.cat((torch.tensor([[0, 0, 1.0]], dtype=torch.float64), ring, torch.tensor([[0, 0, -1.0]],
                                                                                      dtype=torch.float64))) * radius
    faces = []
    for j in range(n_lon):
        faces.append([0, 1 + j, 1 + (j + 1) % n_lon])
    for i in range(n_lat - 2):
        for j in range(n_lon):
            a = 1 + i * n_lon + j
            b = 1 + i * n_lon + (j + 1) % n_lon
            faces += [[a, a + n_lon, b], [b, a + n_lon, b + n_lon]]
    last = len(v) - 1
    base = 1 + (n_lat - 2) * n_lon
    for j in range(n_lon):
        faces.append([base + j, last, base + (j + 1) % n_lon])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.float().to(device), torch.tensor(faces, device=device)))
    scene.add_mesh(rt.Mesh((v.float() * 0.4 + torch.tensor([1.8, 0.0, 0.0])).to(device), torch.tensor(faces,
                                                                                                        device=device)))
    scene.build()
    return scene


def test_shadow_test_equals_closest_hit_below_tmax(device):
    scene = _sphere_scene(device)
    g = torch.Generator().manual_seed(1)
    n = 1 << 20 if device == "cuda" else 1 << 16
    o = ((torch.rand(n, 3, generator=g) - 0.5) * 6).to(device)
    d = ((torch.rand(n, 3, generator=g) - 0.5) * 2).to(device)
    tmax = (torch.rand(n, generator=g) * 3).to(device)
    ray = rt.Ray(o, d, tmax)
    occluded = scene.shadow_test(ray)
    reference = scene.intersect(ray, flags=rt.RayFlags.Minimal).t < tmax
    assert occluded.dtype == torch.bool and occluded.shape == (n,)
    assert 0.01 < occluded.float().mean() < 0.99
    assert torch.equal(occluded, reference)


def test_visible_is_symmetric_and_matches_segments(device):
    scene = _sphere_scene(device)
    g = torch.Generator().manual_seed(2)
    a = ((torch.rand(20000, 3, generator=g) - 0.5) * 6).to(device)
    b = ((torch.rand(20000, 3, generator=g) - 0.5) * 6).to(device)
    ab = scene.visible(a, b)
    ba = scene.visible(b, a)
    assert torch.equal(ab, ba)
    assert 0.05 < ab.float().mean() < 0.95
    blocked = scene.shadow_test(rt.Ray(a, b - a, 1.0 - 1e-4, tmin=1e-4))
    assert torch.equal(ab, ~blocked)
    # Broadcasting: one transmitter, many receivers.
    tx = torch.tensor([0.0, 0.0, 3.0], device=device)
    assert torch.equal(scene.visible(tx, b), scene.visible(tx.expand_as(b), b))


def test_endpoints_on_surfaces_do_not_block_themselves(device):
    scene = _sphere_scene(device)
    # From a point on the unit sphere straight out, to a point far away: visible.
    # Pole to pole runs through the inside: only its endpoints touch the surface.
    start = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [0.0, 0.0, -3.0]], device=device)
    end = torch.tensor([[0.0, 0.0, 5.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]], device=device)
    assert scene.visible(start, end).tolist() == [True, True, False]
    # A point inside the sphere cannot see one outside.
    assert not bool(scene.visible(torch.zeros(3, device=device), torch.tensor([0.0, 0.0, 5.0], device=device)))


def test_self_intersection_avoided_with_ignore_and_tmin(device):
    scene = _sphere_scene(device)
    d = torch.tensor([[0.03, 0.02, -1.0]], device=device)
    first = scene.intersect(rt.Ray(torch.tensor([[0.05, 0.02, 3.0]], device=device), d))
    assert bool(first.is_valid())
    # Continue from the hit point, in the same direction: the leaving face is hit again at t ~ 0
    # unless it is ignored (or tmin excludes it); either way the exit on the far side is next.
    o2 = first.p.detach()
    with_ignore = scene.intersect(rt.Ray(o2, d), ignore=first.global_prim_id)
    with_tmin = scene.intersect(rt.Ray(o2, d, tmin=1e-4))
    assert int(with_ignore.global_prim_id) != int(first.global_prim_id)
    assert bool(with_ignore.is_valid()) and bool(with_tmin.is_valid())
    assert float(with_ignore.t) > 0.5
    torch.testing.assert_close(with_ignore.t, with_tmin.t, rtol=1e-4, atol=1e-4)
    assert int(with_ignore.global_prim_id) == int(with_tmin.global_prim_id)
    # ignore also works on the any-hit queries.
    assert bool(scene.shadow_test(rt.Ray(o2, -d, 0.5), ignore=first.global_prim_id)) is False
    assert torch.equal(scene.shadow_test(rt.Ray(o2, d), ignore=-1), torch.tensor([True], device=device))


def test_active_masks_and_batch_dims(device):
    scene = _sphere_scene(device)
    o = torch.tensor([0.0, 0.0, 3.0], device=device).expand(2, 3, 3)
    d = torch.tensor([0.0, 0.0, -1.0], device=device)
    active = torch.tensor([[True, False, True], [False, True, True]], device=device)
    occluded = scene.shadow_test(rt.Ray(o, d), active)
    assert occluded.shape == (2, 3)
    assert torch.equal(occluded, active)
    vis = scene.visible(o, o + torch.tensor([0.0, 0.0, 1.0], device=device), active)
    assert torch.equal(vis, active)
    empty = scene.shadow_test(rt.Ray(torch.zeros(0, 3, device=device), d))
    assert empty.shape == (0,)


def test_visible_shapes_that_do_not_broadcast_name_the_call(device):
    scene = _sphere_scene(device)
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.visible\(\).*'start'.*'end'"):
        scene.visible(torch.zeros(4, 3, device=device), torch.zeros(5, 3, device=device))
