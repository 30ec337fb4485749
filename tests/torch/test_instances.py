"""Transforms and instances: hits equal pre-transformed copies; gradients reach matrices."""

from __future__ import annotations

import math

import pytest
import torch

import rayd.torch as rt


def _box(device, dtype=torch.float32):
    """A closed unit cube [0, 1]^3 (12 triangles)."""
    v = torch.tensor(
        [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]],
        dtype=dtype,
        device=device,
    )
    f = torch.tensor(
        [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [2, 3, 7], [2, 7, 6],
         [0, 4, 7], [0, 7, 3], [1, 2, 6], [1, 6, 5]],
        device=device,
    )
    return v, f


def _matrix(angle, axis_shift, scale=1.0, device="cpu", dtype=torch.float32):
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor(
        [[scale * c, -scale * s, 0, axis_shift[0]], [scale * s, scale * c, 0, axis_shift[1]], [0, 0, scale, axis_shift[2]],
         [0, 0, 0, 1]],
        dtype=dtype,
        device=device,
    )


def _apply(m, v):
    return v @ m[:3, :3].T + m[:3, 3]


def _rays(device, n=4000, seed=0):
    g = torch.Generator().manual_seed(seed)
    o = (torch.rand(n, 3, generator=g) - 0.5) * 8 + torch.tensor([0.0, 0.0, 6.0])
    target = (torch.rand(n, 3, generator=g) - 0.5) * 6
    return o.to(device), (target - o).to(device)


def test_transformed_and_instanced_equal_pretransformed_copies(device):
    v, f = _box(device)
    m_mesh = _matrix(0.3, (0.5, -0.25, 0.0), 1.5, device)
    m_inst = [_matrix(1.1, (-2.0, 1.0, 0.5), 0.7, device), _matrix(-0.4, (1.5, 1.5, -1.0), 1.0, device)]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f, to_world=m_mesh))
    ids = [scene.add_instance(0, m) for m in m_inst]
    assert ids == [1, 2]
    scene.build()

    copies = rt.Scene()
    copies.add_mesh(rt.Mesh(_apply(m_mesh, v), f))
    for m in m_inst:
        copies.add_mesh(rt.Mesh(_apply(m @ m_mesh, v), f))
    copies.build()

    o, d = _rays(device)
    a = scene.intersect(rt.Ray(o, d))
    b = copies.intersect(rt.Ray(o, d))
    assert bool(a.is_valid().any())
    assert torch.equal(a.is_valid(), b.is_valid())
    assert torch.equal(a.shape_id, b.shape_id)
    torch.testing.assert_close(a.t, b.t, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.p, b.p, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.geo_n, b.geo_n, rtol=1e-4, atol=1e-4)
    # prim_id is local to the mesh; global_prim_id ranges follow shape order.
    hit = a.is_valid()
    assert torch.equal(a.prim_id[hit], b.prim_id[hit])
    assert torch.equal(a.global_prim_id[hit], a.prim_id[hit] + 12 * a.shape_id[hit])


def test_instance_transform_update_refits_top_level(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    inst = scene.add_instance(0, _matrix(0.0, (3.0, 0.0, 0.0), device=device))
    scene.build()
    ray = rt.Ray(torch.tensor([[3.5, 0.5, 5.0], [6.5, 0.5, 5.0]], device=device),
                 torch.tensor([0.0, 0.0, -1.0], device=device))
    hit = scene.intersect(ray)
    assert hit.shape_id.tolist() == [inst, -1]
    torch.testing.assert_close(hit.t, torch.tensor([4.0, math.inf], device=device))
    scene.set_mesh_transform(inst, _matrix(0.0, (6.0, 0.0, -2.0), device=device))
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match="sync"):
        scene.intersect(ray)
    scene.sync()
    hit = scene.intersect(ray)
    assert hit.shape_id.tolist() == [-1, inst]
    torch.testing.assert_close(hit.t, torch.tensor([math.inf, 6.0], device=device))


def test_in_place_batched_transform_update(device):
    """Instances holding rows of one (N, 4, 4) tensor move together on one in-place write + sync()."""
    v, f = _box(device)
    first = torch.stack([_matrix(0.2 * k, (2.0 * k - 3.0, 0.5 * k, 0.0), 0.5 + 0.2 * k, device) for k in range(4)])
    second = torch.stack([_matrix(-0.3 * k, (1.5 - k, 0.25 * k - 1.0, 0.5), 0.8, device) for k in range(4)])
    live = first.clone()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.set_shape_enabled(0, False)
    ids = [scene.add_instance(0, live[k]) for k in range(4)]
    scene.build()
    live.copy_(second)
    assert scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match="sync"):
        scene.intersect(rt.Ray(*_rays(device, n=4)))
    scene.sync()
    assert scene.is_ready()

    copies = rt.Scene()
    for k in range(4):
        copies.add_mesh(rt.Mesh(_apply(second[k], v), f))
    copies.build()
    o, d = _rays(device)
    a = scene.intersect(rt.Ray(o, d))
    b = copies.intersect(rt.Ray(o, d))
    assert int(a.is_valid().sum()) > 100
    assert torch.equal(a.is_valid(), b.is_valid())
    hit = a.is_valid()
    assert torch.equal(a.shape_id[hit], torch.tensor(ids, device=device)[b.shape_id[hit]])
    torch.testing.assert_close(a.t, b.t, rtol=1e-5, atol=1e-5)


def test_dynamic_mesh_moves_its_instances(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    inst = scene.add_instance(0, _matrix(0.0, (3.0, 0.0, 0.0), device=device))
    scene.build()
    scene.update_mesh_vertices(0, v + torch.tensor([0.0, 0.0, 1.0], device=device))
    scene.sync()
    hit = scene.intersect(rt.Ray(torch.tensor([3.5, 0.5, 5.0], device=device), torch.tensor([0.0, 0.0, -1.0],
                                                                                             device=device)))
    assert int(hit.shape_id) == inst
    torch.testing.assert_close(hit.t, torch.tensor(3.0, device=device))


def test_shape_enable_without_rebuild(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.add_mesh(rt.Mesh(v + torch.tensor([0.0, 0.0, -3.0], device=device), f))
    inst = scene.add_instance(0, _matrix(0.0, (0.0, 0.0, -6.0), device=device))
    scene.build()
    ray = rt.Ray(torch.tensor([0.5, 0.5, 5.0], device=device), torch.tensor([0.0, 0.0, -1.0], device=device))
    assert int(scene.intersect(ray).shape_id) == 0
    scene.set_shape_enabled(0, False)
    with pytest.raises(RuntimeError, match="sync"):
        scene.intersect(ray)
    scene.sync()
    assert int(scene.intersect(ray).shape_id) == 1
    scene.set_shape_enabled(1, False)
    scene.sync()
    hit = scene.intersect(ray)
    assert int(hit.shape_id) == inst
    torch.testing.assert_close(hit.t, torch.tensor(10.0, device=device))
    assert bool(scene.shadow_test(ray))
    scene.set_shape_enabled(inst, False)
    scene.sync()
    assert not bool(scene.intersect(ray).is_valid())
    assert not bool(scene.shadow_test(ray))


def test_transform_gradients_match_finite_differences(device):
    v, f = _box(device, torch.float64)
    m_mesh = _matrix(0.2, (0.1, 0.2, 0.0), 1.2, device, torch.float64).requires_grad_(True)
    m_inst = _matrix(0.7, (-2.5, 0.5, 0.3), 0.8, device, torch.float64).requires_grad_(True)
    o, d = _rays(device, 300, seed=3)
    o, d = o.double(), d.double()

    def loss(mm, mi):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, f, to_world=mm))
        scene.add_instance(0, mi)
        scene.build()
        hit = scene.intersect(rt.Ray(o, d))
        valid = hit.is_valid()
        return (torch.where(valid, hit.t, 0.0) ** 2).sum() + torch.where(valid[:, None], hit.p, 0.0).sum()

    value = loss(m_mesh, m_inst)
    value.backward()
    eps = 1e-6
    for m, grad in ((m_mesh, m_mesh.grad), (m_inst, m_inst.grad)):
        assert grad.abs().sum() > 0
        for i in range(3):
            for j in range(4):
                with torch.no_grad():
                    m[i, j] += eps
                    up = loss(m_mesh.detach(), m_inst.detach())
                    m[i, j] -= 2 * eps
                    down = loss(m_mesh.detach(), m_inst.detach())
                    m[i, j] += eps
                fd = (up - down) / (2 * eps)
                torch.testing.assert_close(grad[i, j], fd, rtol=1e-4, atol=1e-5)


def test_add_instance_errors(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.add_instance\(\): 'mesh_id'"):
        scene.add_instance(5, torch.eye(4, device=device))
    with pytest.raises(TypeError, match="'mesh_id'"):
        scene.add_instance("0", torch.eye(4, device=device))
    with pytest.raises(ValueError, match="'to_world' must have shape"):
        scene.add_instance(0, torch.eye(3, device=device))
    inst = scene.add_instance(0, torch.eye(4, device=device))
    with pytest.raises(ValueError, match="is an instance"):
        scene.add_instance(inst, torch.eye(4, device=device))
    scene.build()
    scene.add_instance(0, torch.eye(4, device=device))
    with pytest.raises(RuntimeError, match="build"):
        scene.intersect(rt.Ray(torch.zeros(3, device=device), torch.ones(3, device=device)))
    with pytest.raises(TypeError, match="'flag'"):
        scene.set_shape_enabled(0, 1)


def test_non_finite_or_singular_transforms_are_rejected(device):
    v, f = _box(device)
    bad = torch.eye(4, device=device)
    bad[0, 3] = float("nan")
    flat = torch.eye(4, device=device)
    flat[2, 2] = 0.0
    with pytest.raises(ValueError, match=r"rayd.torch.Mesh\(\): 'to_world' holds non-finite"):
        rt.Mesh(v, f, to_world=bad)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.add_instance\(\): 'to_world' is singular"):
        scene.add_instance(0, flat)
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.set_mesh_transform\(\): 'to_world' holds non-finite"):
        scene.set_mesh_transform(0, bad)


def test_batched_set_mesh_transform(device):
    """K ids + (K, 4, 4) in one call == K single calls; gradients reach the batch tensor."""
    v, f = _box(device)
    first = torch.stack([_matrix(0.3 * k, (2.0 * k - 3.0, 0.0, 0.0), 0.6, device) for k in range(3)])
    second = torch.stack([_matrix(-0.2 * k, (1.0 - k, 0.5 * k, 0.25), 0.9, device) for k in range(3)])
    batched, single = rt.Scene(), rt.Scene()
    for scene in (batched, single):
        scene.add_mesh(rt.Mesh(v, f))
        for k in range(3):
            scene.add_instance(0, first[k])
        scene.build()
    ids = torch.tensor([3, 1, 2], device=device)  # order of ids follows the rows of to_world
    moved = second.clone().requires_grad_(True)
    batched.set_mesh_transform(ids, moved)
    batched.sync()
    for k, shape_id in enumerate(ids.tolist()):
        single.set_mesh_transform(shape_id, second[k])
    single.sync()
    o, d = _rays(device, 3000, seed=5)
    a, b = batched.intersect(rt.Ray(o, d)), single.intersect(rt.Ray(o, d))
    assert int(a.is_valid().sum()) > 100
    assert torch.equal(a.shape_id, b.shape_id) and torch.equal(a.prim_id, b.prim_id)
    torch.testing.assert_close(a.t, b.t, rtol=0, atol=0)
    torch.where(a.is_valid(), a.t, 0.0).sum().backward()
    hit_shapes = set(a.shape_id[a.is_valid()].tolist())
    for k, shape_id in enumerate(ids.tolist()):
        assert (moved.grad[k].abs().sum() > 0) == (shape_id in hit_shapes)


def test_batched_set_mesh_transform_errors(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.add_instance(0, torch.eye(4, device=device))
    scene.build()
    two = torch.eye(4, device=device).repeat(2, 1, 1)
    call = r"rayd.torch.Scene.set_mesh_transform\(\)"
    with pytest.raises(ValueError, match=call + r": 'to_world' must have shape \(2, 4, 4\)"):
        scene.set_mesh_transform([0, 1], torch.eye(4, device=device))
    with pytest.raises(ValueError, match=call + ": 'shape_id' repeats an id"):
        scene.set_mesh_transform([1, 1], two)
    with pytest.raises(ValueError, match=call + r": 'shape_id' must be in \[0, 2\)"):
        scene.set_mesh_transform([0, 2], two)
    with pytest.raises(TypeError, match=call + ": 'shape_id'"):
        scene.set_mesh_transform(torch.zeros(2, device=device), two)
    with pytest.raises(TypeError, match=call + ": 'shape_id'"):
        scene.set_mesh_transform("01", two)
    bad = two.clone()
    bad[1, 2, 2] = 0.0
    with pytest.raises(ValueError, match=call + r": 'to_world\[1\]' is singular"):
        scene.set_mesh_transform([0, 1], bad)
    bad[1, 2, 2] = float("inf")
    with pytest.raises(ValueError, match=call + r": 'to_world\[1\]' holds non-finite"):
        scene.set_mesh_transform([0, 1], bad)
    assert not scene.has_pending_updates()  # nothing was half-applied


def test_coincident_instances(device):
    """Many instances at one place (identical top-level boxes): hits and occlusion stay right."""
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.set_shape_enabled(0, False)
    m = _matrix(0.0, (2.0, 0.0, 0.0), device=device)
    ids = [scene.add_instance(0, m) for _ in range(40)]
    far = scene.add_instance(0, _matrix(0.0, (2.0, 0.0, -3.0), device=device))
    scene.build()
    ray = rt.Ray(torch.tensor([[2.5, 0.5, 5.0], [9.0, 0.5, 5.0]], device=device),
                 torch.tensor([0.0, 0.0, -1.0], device=device))
    hit = scene.intersect(ray)
    torch.testing.assert_close(hit.t, torch.tensor([4.0, math.inf], device=device))
    assert int(hit.shape_id[0]) in ids and int(hit.shape_id[1]) == -1
    assert scene.shadow_test(ray).tolist() == [True, False]
    for shape_id in ids:
        scene.set_shape_enabled(shape_id, False)
    scene.sync()
    hit = scene.intersect(ray)
    assert hit.shape_id.tolist() == [far, -1]
    torch.testing.assert_close(hit.t, torch.tensor([7.0, math.inf], device=device))


def test_distant_origins_hit_instances_like_copies(device):
    """Rays from 1e5 away (1e5 x the instance size) hit instances exactly where they hit copies."""
    v, f = _box(device)
    scene, copies = rt.Scene(), rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.set_shape_enabled(0, False)
    copies.add_mesh(rt.Mesh(v, f))
    copies.set_shape_enabled(0, False)
    for k in range(5):
        m = _matrix(0.3 * k, (2.0 * k, -1.0, 0.5 * k), 0.8, device)
        scene.add_instance(0, m)
        copies.add_mesh(rt.Mesh(_apply(m, v), f))
    scene.build()
    copies.build()
    g = torch.Generator().manual_seed(7)
    target = (torch.rand(4000, 3, generator=g) * torch.tensor([10.0, 2.0, 3.0]) - torch.tensor([1.0, 1.5, 0.5]))
    u = torch.randn(4000, 3, generator=g)
    o = 1e5 * u / u.norm(dim=1, keepdim=True)
    ray = rt.Ray(o.to(device), (target - o).to(device))
    a, b = scene.intersect(ray), copies.intersect(ray)
    assert int(a.is_valid().sum()) > 500
    assert torch.equal(a.is_valid(), b.is_valid())
    assert torch.equal(a.shape_id, b.shape_id)
    torch.testing.assert_close(a.t, b.t, rtol=1e-6, atol=0)
    assert torch.equal(scene.shadow_test(ray), b.is_valid())


def test_transform_last_row_is_ignored_everywhere(device):
    """The last row counts as (0, 0, 0, 1) for meshes, instances, search and evaluation alike; no gradient."""
    v, f = _box(device)
    m = _matrix(0.0, (0.0, 0.0, 1.0), device=device, dtype=torch.float64)
    odd = m.clone()
    odd[3] = torch.tensor([0.0, 0.0, 0.5, 2.0], dtype=torch.float64, device=device)
    odd.requires_grad_(True)
    ray = rt.Ray(torch.tensor([0.25, 0.25, 5.0], dtype=torch.float64, device=device),
                 torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64, device=device), tmax=3.2)
    results = []
    for as_instance in (False, True):
        scene = rt.Scene()
        if as_instance:
            scene.add_mesh(rt.Mesh(v.double(), f))
            scene.set_shape_enabled(0, False)
            scene.add_instance(0, odd)
        else:
            scene.add_mesh(rt.Mesh(v.double(), f, to_world=odd))
        scene.build()
        hit = scene.intersect(ray)
        results.append((float(hit.t.detach()), bool(scene.shadow_test(ray))))
        hit.t.backward()
    # Top of the box at z = 2 after the shift: t = 3 < tmax for both.
    assert results == [(3.0, True), (3.0, True)]
    assert torch.all(odd.grad[3] == 0) and odd.grad[2, 3] != 0


def test_transform_checks_batched_like_single(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.add_instance(0, torch.eye(4, device=device))
    scene.build()
    rank2 = torch.tensor([[1.0, 2, 3, 0], [4, 5, 6, 0], [7, 8, 9, 0], [0, 0, 0, 1]], dtype=torch.float64,
                         device=device)
    huge = torch.diag(torch.tensor([1e39, 1e39, 1e39, 1.0], dtype=torch.float64, device=device))
    eye = torch.eye(4, dtype=torch.float64, device=device)
    call = r"rayd.torch.Scene.set_mesh_transform\(\)"
    with pytest.raises(ValueError, match=call + ": 'to_world' is singular"):
        scene.set_mesh_transform(1, rank2)
    with pytest.raises(ValueError, match=call + r": 'to_world\[1\]' is singular"):
        scene.set_mesh_transform([0, 1], torch.stack((eye, rank2)))
    with pytest.raises(ValueError, match=call + ": 'to_world' holds values outside the float32 range"):
        scene.set_mesh_transform(1, huge)
    with pytest.raises(ValueError, match=call + r": 'to_world\[0\]' holds values outside the float32 range"):
        scene.set_mesh_transform([1, 0], torch.stack((huge, eye)))


def test_ignore_beyond_int32(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    ray = rt.Ray(torch.tensor([[0.25, 0.25, 5.0]], device=device), torch.tensor([0.0, 0.0, -1.0], device=device))
    top = int(scene.intersect(ray).global_prim_id)
    # 2**32 + top would wrap onto `top` in int32: it must match nothing instead.
    hit = scene.intersect(ray, ignore=torch.tensor([2**32 + top], device=device))
    assert int(hit.global_prim_id) == top
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.intersect\(\): 'ignore'"):
        scene.intersect(ray, ignore=2**32)


def test_instance_of_empty_mesh(device):
    v, f = _box(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    empty = scene.add_mesh(rt.Mesh(torch.zeros(0, 3, device=device), torch.zeros(0, 3, dtype=torch.int64,
                                                                                    device=device)))
    ghost = scene.add_instance(empty, torch.eye(4, device=device))
    moved = scene.add_instance(0, _matrix(0.0, (0.0, 0.0, 2.0), device=device))
    scene.build()
    hit = scene.intersect(rt.Ray(torch.tensor([0.25, 0.25, 5.0], device=device),
                                 torch.tensor([0.0, 0.0, -1.0], device=device)))
    assert int(hit.shape_id) == moved and ghost != moved
    torch.testing.assert_close(hit.t, torch.tensor(2.0, device=device))
    assert int(hit.global_prim_id) == 12 + int(hit.prim_id)


def test_float32_transformed_hits_are_evaluated_in_float64(device):
    """A float32 mesh placed far from the origin: t as precise as with float64 inputs."""
    v, f = _box(device)
    far = _matrix(0.3, (12345.0, -5432.0, 12345.0), 0.01, device)
    o = torch.tensor([[12345.004, -5431.997, 12346.0]], device=device)
    d = torch.tensor([0.0, 0.0, -1.0], device=device)
    results = {}
    for dtype in (torch.float32, torch.float64):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v.to(dtype), f, to_world=far.to(dtype)))
        scene.build()
        results[dtype] = scene.intersect(rt.Ray(o.to(dtype), d.to(dtype))).t
    assert bool(torch.isfinite(results[torch.float64]).all())
    torch.testing.assert_close(results[torch.float32].double(), results[torch.float64], rtol=1e-6, atol=0)


def test_instances_inside_torch_func(device):
    v, f = _box(device, torch.float64)
    o = torch.tensor([[2.25, 0.25, 5.0]], dtype=torch.float64, device=device)
    d = torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64, device=device)

    def t_sum(origin):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, f))
        scene.add_instance(0, _matrix(0.0, (2.0, 0.0, 0.0), device=device, dtype=torch.float64))
        scene.build()
        return scene.intersect(rt.Ray(origin, d)).t.sum()

    grad = torch.func.grad(t_sum)(o)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64, device=device))
