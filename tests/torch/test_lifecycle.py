"""Scene lifecycle: build, dynamic updates, refit, stale-data detection, the seed's loop."""

from __future__ import annotations

import numpy as np
import pytest
import reference
import torch

import rayd.torch as rt

TRI_V = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
TRI_F = [[0, 1, 2]]


def _tri(device, dtype=torch.float32, requires_grad=False):
    v = torch.tensor(TRI_V, dtype=dtype, device=device, requires_grad=requires_grad)
    return v, torch.tensor(TRI_F, device=device)


def _down(device, xy=((0.25, 0.25),), z=1.0):
    o = torch.tensor([[x, y, z] for x, y in xy], device=device)
    return rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], device=device))


def test_query_before_build_raises(device):
    scene = rt.Scene()
    assert scene.device is None and scene.num_meshes == 0 and not scene.is_ready()
    v, f = _tri(device)
    assert scene.add_mesh(rt.Mesh(v, f)) == 0
    assert scene.add_mesh(rt.Mesh(v + 5, f)) == 1
    assert scene.num_meshes == 2 and scene.device.type == torch.device(device).type
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.intersect\(\): .*build\(\)"):
        scene.intersect(_down(device))
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.sync\(\): .*build\(\)"):
        scene.sync()
    scene.build()
    assert scene.is_ready() and not scene.has_pending_updates()
    assert scene.intersect(_down(device)).t.item() == 1.0


def test_add_after_build_requires_build(device):
    v, f = _tri(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    assert scene.add_mesh(rt.Mesh(v + torch.tensor([0.0, 0.0, 0.5], device=device), f)) == 1
    assert not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.intersect\(\): .*build\(\)"):
        scene.intersect(_down(device))
    scene.build()
    hit = scene.intersect(_down(device))
    assert hit.shape_id.item() == 1 and hit.t.item() == 0.5


def test_update_static_mesh_raises(device):
    v, f = _tri(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))  # dynamic=False
    scene.build()
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.update_mesh_vertices\(\): .*dynamic"):
        scene.update_mesh_vertices(0, v + 1)
    assert scene.is_ready()  # the failed call changed nothing


def test_in_place_change_of_dynamic_mesh_without_sync_raises(device):
    v, f = _tri(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    assert not scene.has_pending_updates()
    v[:, 2] += 0.5  # in place, no update_mesh_vertices / sync
    assert scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.intersect\(\): .*sync\(\)"):
        scene.intersect(_down(device))
    scene.sync()  # sync alone picks up the in-place change of a dynamic mesh
    assert not scene.has_pending_updates() and scene.is_ready()
    assert scene.intersect(_down(device)).t.item() == 0.5
    # update_mesh_vertices marks pending until sync, even with the same values.
    scene.update_mesh_vertices(0, v)
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match="sync"):
        scene.intersect(_down(device))
    scene.sync()
    assert scene.intersect(_down(device)).t.item() == 0.5


def test_in_place_change_through_a_view_or_its_base_is_detected(device):
    # Vertices that are a view of a larger parameter: changing the base changes them.
    params = torch.zeros(2, 3, 3, device=device)
    params[0] = torch.tensor(TRI_V, device=device)
    v = params[0]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(TRI_F, device=device)), dynamic=True)
    scene.build()
    params[:, :, 2] += 1.0  # through the base
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError):
        scene.intersect(_down(device, z=3.0))
    scene.sync()
    assert scene.intersect(_down(device, z=3.0)).t.item() == 2.0
    v[0, 0] = 0.0  # through the view itself (same value, still a write)
    assert scene.has_pending_updates()


def test_in_place_change_of_static_mesh_raises_until_build(device):
    v, f = _tri(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    v.mul_(2.0)  # in place on a static mesh
    assert not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.intersect\(\): .*build\(\)"):
        scene.intersect(_down(device))
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.sync\(\): .*build\(\)"):
        scene.sync()
    with pytest.raises(RuntimeError):  # still stale: sync did not make it usable
        scene.intersect(_down(device))
    scene.build()
    hit = scene.intersect(_down(device, xy=((0.25, 0.25), (1.5, 0.25))))
    assert hit.is_valid().tolist() == [True, True]  # the doubled triangle reaches x = 1.5


def test_update_with_new_tensor_and_new_dtype(device):
    v, f = _tri(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    new = torch.tensor(TRI_V, dtype=torch.float64, device=device) + torch.tensor([0, 0, -1.0], dtype=torch.float64,
                                                                                  device=device)
    scene.update_mesh_vertices(0, new)
    scene.sync()
    hit = scene.intersect(_down(device))
    assert hit.t.item() == 2.0 and hit.t.dtype == torch.float64
    # The old tensor is no longer watched; the new one is.
    v.add_(10.0)
    assert scene.is_ready()
    new.add_(0.5)
    assert not scene.is_ready() and scene.has_pending_updates()


@pytest.mark.parametrize("seed", [0, 1])
def test_refit_after_large_deformation_matches_fresh_build(device, seed):
    rng = np.random.default_rng(seed)
    v0, f = reference.icosphere(3)
    v0 = torch.tensor(v0, dtype=torch.float32, device=device)
    faces = torch.tensor(f, device=device)
    v = v0.clone()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, faces), dynamic=True)
    scene.build()
    # Large deformation: stretch, twist, move far away, plus noise.
    x, y, z = v0.unbind(-1)
    angle = 2.0 * z
    deformed = torch.stack(
        (3.0 * (x * torch.cos(angle) - y * torch.sin(angle)) + 10, x * torch.sin(angle) + y * torch.cos(angle),
         0.3 * z),
        -1,
    ) + 0.05 * torch.tensor(rng.standard_normal(v0.shape), dtype=torch.float32, device=device)
    with torch.no_grad():
        v.copy_(deformed)
    scene.sync()
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(deformed, faces))
    fresh.build()
    n = 4000
    o = torch.tensor(rng.uniform([5, -3, -3], [15, 3, 3], (n, 3)), dtype=torch.float32, device=device)
    aim = deformed[torch.tensor(rng.integers(0, len(v0), n), device=device)]
    d = aim + 0.1 * torch.tensor(rng.standard_normal((n, 3)), dtype=torch.float32, device=device) - o
    a, b = scene.intersect(rt.Ray(o, d)), fresh.intersect(rt.Ray(o, d))
    assert a.is_valid().float().mean() > 0.5
    assert torch.equal(a.is_valid(), b.is_valid())
    assert torch.equal(a.prim_id, b.prim_id)
    assert torch.equal(a.t, b.t)
    # And both agree with the reference on where the rays hit.
    ref = reference.closest_hit(o[:500].cpu().numpy(), d[:500].cpu().numpy(), deformed.cpu().numpy(), f)
    np.testing.assert_array_equal(a.is_valid()[:500].cpu().numpy(), ref["prim"] >= 0)


def test_seed_training_loop_pattern(device):
    """Leaf parameter, Adam step in place, update_mesh_vertices(0, same tensor), sync(), one Ray reused."""
    vertices, faces = reference.grid(6)
    v = torch.tensor(vertices, device=device).requires_grad_(True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(faces, device=device)), dynamic=True)
    scene.build()
    gen = torch.Generator().manual_seed(0)
    xy = (torch.rand((512, 2), generator=gen) - 0.5) * 1.8
    o = torch.cat((xy, torch.full((512, 1), 2.0)), 1).to(device)
    d = torch.zeros_like(o)
    d[:, 2] = -1.0
    target = 2.0 - 0.3 * torch.exp(-2.0 * (o[:, 0] ** 2 + o[:, 1] ** 2))
    ray = rt.Ray(o, d)
    optimizer = torch.optim.Adam([v], lr=0.02)
    losses = []
    for _ in range(30):
        optimizer.zero_grad(set_to_none=True)
        hit = scene.intersect(ray)
        assert hit.is_valid().all()
        loss = ((hit.t - target) ** 2).mean()
        loss.backward()
        assert v.grad is not None and torch.isfinite(v.grad).all()
        v.grad[:, :2] = 0.0
        optimizer.step()
        # Between the in-place step and the update, queries must refuse the stale BVH.
        with pytest.raises(RuntimeError):
            scene.intersect(ray)
        scene.update_mesh_vertices(0, v)
        scene.sync()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    # After training, hits follow the moved vertices: compare with a fresh static build.
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(v.detach().clone(), torch.tensor(faces, device=device)))
    fresh.build()
    a, b = scene.intersect(ray), fresh.intersect(ray)
    assert torch.equal(a.prim_id, b.prim_id)
    torch.testing.assert_close(a.t, b.t, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_ray_batch_is_connected_to_vertices(device, dtype):
    # A rank whose shard is empty: loss.backward() must run and give zero gradient.
    v, f = _tri(device, dtype=dtype, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    ray = rt.Ray(torch.zeros((0, 3), dtype=dtype, device=device), torch.zeros((0, 3), dtype=dtype, device=device))
    hit = scene.intersect(ray)
    assert hit.t.shape == (0,) and hit.t.requires_grad and hit.t.dtype == dtype
    loss = ((hit.t - torch.zeros(0, dtype=dtype, device=device)) ** 2).sum() / 1024
    loss.backward()
    assert v.grad is not None and v.grad.shape == v.shape and (v.grad == 0).all()
    for name in ("p", "n", "geo_n", "uv", "barycentric"):
        assert getattr(hit, name).requires_grad, name


def test_one_ray_reused_across_scenes_and_refits(device):
    v, f = _tri(device)
    ray = _down(device, xy=((0.25, 0.25), (0.6, 0.6)))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    assert scene.intersect(ray).is_valid().tolist() == [True, False]
    scene.update_mesh_vertices(0, v * 2)
    scene.sync()
    assert scene.intersect(ray).is_valid().tolist() == [True, True]
    other = rt.Scene()
    other.add_mesh(rt.Mesh(v, f))
    other.build()
    assert other.intersect(ray).is_valid().tolist() == [True, False]


def test_sixteen_million_rays_fit_in_memory(cuda_device):
    """The seed's scale: intersect with RayFlags.All and backward on 16 M rays, a few GB at most."""
    vertices, faces = reference.grid(24)
    v = torch.tensor(vertices, device=cuda_device, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(faces, device=cuda_device)), dynamic=True)
    scene.build()
    n = 1 << 24
    gen = torch.Generator(device=cuda_device).manual_seed(0)
    o = torch.cat(((torch.rand((n, 2), generator=gen, device=cuda_device) - 0.5) * 1.8,
                   torch.full((n, 1), 2.0, device=cuda_device)), 1)
    d = torch.tensor([0.0, 0.0, -1.0], device=cuda_device).expand(n, 3).contiguous()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    hit = scene.intersect(rt.Ray(o, d))
    assert bool(hit.is_valid().all())
    ((hit.t - 1.9) ** 2).sum().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    # Inputs are 400 MB; the record with every field is ~1.1 GB; allow room for autograd.
    assert peak < 6 * 2**30, f"peak {peak / 2**30:.2f} GiB for 16 M rays"
    assert torch.isfinite(v.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_ray_batch_on_the_device_path(device, dtype, monkeypatch):
    """The same on the CUDA code path (no host reads: float64's masked walk-on), forced on the CPU
    too: an empty batch gives an empty record and a zero gradient (it raised on CUDA in float64)."""
    from rayd.torch import _interval

    monkeypatch.setattr(_interval, "host_ok", lambda *arrays: False)
    v, f = _tri(device, dtype=dtype, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    ray = rt.Ray(torch.zeros((0, 3), dtype=dtype, device=device), torch.zeros((0, 3), dtype=dtype, device=device))
    hit = scene.intersect(ray)
    assert hit.t.shape == (0,) and hit.t.dtype == dtype
    assert scene.shadow_test(ray).shape == (0,)
    hit.t.sum().backward()
    assert v.grad is not None and torch.count_nonzero(v.grad) == 0
