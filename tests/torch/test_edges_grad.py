"""Gradients of nearest-edge queries (fixed winner) against finite differences; forward mode."""

from __future__ import annotations

import math

import torch

import rayd.torch as rt

# Two triangles, not coplanar, so points and rays see generic (non-tied) nearest edges.
VERTICES = [[0.0, 0.0, 0.0], [1.0, 0.1, 0.0], [0.1, 1.0, 0.2], [1.2, 1.1, 0.4]]
FACES = [[0, 1, 2], [1, 3, 2]]
POINTS = [[0.3, -0.7, 0.2], [0.62, 0.58, 0.5], [1.5, 0.6, -0.3], [-0.4, 0.45, 0.1]]


def _scene(device, dtype=torch.float64):
    v = torch.tensor(VERTICES, dtype=dtype, device=device, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(FACES, device=device)), dynamic=True)
    scene.build()
    return scene, v


def _points_fn(scene):
    def fn(vertices, points):
        scene.update_mesh_vertices(0, vertices)
        scene.sync()
        hit = scene.nearest_edge(points)
        return hit.distance, hit.edge_t, hit.edge_point
    return fn


def test_point_query_gradcheck(device):
    scene, v = _scene(device)
    p = torch.tensor(POINTS, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(_points_fn(scene), (v, p), eps=1e-6, atol=1e-6)


def test_top_k_gradcheck(device):
    scene, v = _scene(device)
    p = torch.tensor(POINTS, dtype=torch.float64, device=device, requires_grad=True)

    def fn(vertices, points):
        scene.update_mesh_vertices(0, vertices)
        scene.sync()
        top = scene.nearest_edges(points, 3)
        return top.distance, top.edge_point

    assert torch.autograd.gradcheck(fn, (v, p), eps=1e-6, atol=1e-6)


def test_ray_query_gradcheck(device):
    scene, v = _scene(device)
    o = torch.tensor([[0.4, 0.3, 1.0], [0.3, -1.0, 0.5], [1.5, 0.5, 0.8]], dtype=torch.float64, device=device,
                     requires_grad=True)
    d = torch.tensor([[0.1, 0.05, -1.0], [0.05, 1.0, 0.1], [0.3, -0.2, -1.0]], dtype=torch.float64, device=device,
                     requires_grad=True)
    tmax = torch.tensor([math.inf, math.inf, 0.3], dtype=torch.float64, device=device, requires_grad=True)

    def fn(vertices, o, d, tmax):
        scene.update_mesh_vertices(0, vertices)
        scene.sync()
        hit = scene.nearest_edge(rt.Ray(o, d, tmax))
        return hit.distance, hit.edge_t, hit.ray_t, hit.ray_point, hit.edge_point

    assert torch.autograd.gradcheck(fn, (v, o, d, tmax), eps=1e-6, atol=1e-6)


def test_forward_mode_matches_reverse(device):
    scene, v = _scene(device)
    g = torch.Generator().manual_seed(0)
    p = torch.tensor(POINTS, dtype=torch.float64, device=device)
    # torch.func.jvp with respect to the points
    tangent_p = torch.randn(p.shape, dtype=torch.float64, generator=g).to(device)
    _, jvp = torch.func.jvp(lambda q: scene.nearest_edge(q).edge_point, (p,), (tangent_p,))
    jac = torch.autograd.functional.jacobian(lambda q: scene.nearest_edge(q).edge_point, p)
    torch.testing.assert_close(jvp, torch.einsum("nijk,jk->ni", jac, tangent_p))
    # forward-mode dual tensors with respect to the registered vertices
    import torch.autograd.forward_ad as fwAD

    tangent_v = torch.randn(v.shape, dtype=torch.float64, generator=g).to(device)
    with fwAD.dual_level():
        dual = fwAD.make_dual(v.detach(), tangent_v)
        scene.update_mesh_vertices(0, dual)
        scene.sync()
        forward = fwAD.unpack_dual(scene.nearest_edge(p).distance).tangent
    scene.update_mesh_vertices(0, v)
    scene.sync()
    rows = [torch.autograd.grad(scene.nearest_edge(p).distance[i], v)[0] for i in range(len(POINTS))]
    torch.testing.assert_close(forward, torch.stack([(r * tangent_v).sum() for r in rows]))


def test_gradient_reaches_transform(device):
    v = torch.tensor(VERTICES, dtype=torch.float64, device=device)
    m = torch.eye(4, dtype=torch.float64, device=device)
    m[:3, 3] = torch.tensor([0.0, 0.0, 2.0])
    m.requires_grad_(True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(FACES, device=device), to_world=m))
    scene.build()
    p = torch.tensor([[0.3, -0.7, 2.2]], dtype=torch.float64, device=device)
    p.requires_grad_(True)
    grad_m, grad_p = torch.autograd.grad(scene.nearest_edge(p).distance.sum(), (m, p))
    # translating the mesh changes the distance as moving the point the other way
    torch.testing.assert_close(grad_m[:3, 3], -grad_p[0])
    assert float(grad_m.abs().sum()) > 0


def test_misses_have_zero_gradient_never_nan(device):
    scene, v = _scene(device)
    p = torch.tensor([[5.0, 5.0, 5.0], [0.3, -0.7, 0.2]], dtype=torch.float64, device=device, requires_grad=True)
    hit = scene.nearest_edge(p, max_distance=1.0)
    assert hit.is_valid().tolist() == [False, True]
    (hit.edge_t.sum() + hit.edge_point.sum() + torch.where(hit.is_valid(), hit.distance, 0.0).sum()).backward()
    assert bool(torch.isfinite(p.grad).all()) and bool(torch.isfinite(v.grad).all())
    assert p.grad[0].tolist() == [0.0, 0.0, 0.0]
    ray = rt.Ray(torch.tensor([[9.0, 9, 9]], dtype=torch.float64, device=device, requires_grad=True),
                 torch.tensor([[0.0, 0, 1]], dtype=torch.float64, device=device, requires_grad=True))
    miss = scene.nearest_edge(ray, max_distance=0.5)
    (miss.ray_t + miss.edge_t + miss.ray_point.sum(-1)).sum().backward()
    assert ray.o.grad.tolist() == [[0.0, 0.0, 0.0]] and ray.d.grad.tolist() == [[0.0, 0.0, 0.0]]


def test_point_on_edge_has_finite_gradient(device):
    scene, v = _scene(device)
    p = torch.tensor([[0.5, 0.05, 0.0]], dtype=torch.float64, device=device, requires_grad=True)
    hit = scene.nearest_edge(p)
    assert float(hit.distance.detach()) < 1e-12
    hit.distance.sum().backward()
    assert bool(torch.isfinite(p.grad).all()) and bool(torch.isfinite(v.grad).all())


def test_fused_float32_path_matches_float64_reference(device):
    from rayd.torch import _nearest_edge_fused

    v32 = torch.tensor(VERTICES, dtype=torch.float32, device=device, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v32, torch.tensor(FACES, device=device)))
    scene.build()
    p32 = torch.tensor(POINTS + [[9.0, 9.0, 9.0]], dtype=torch.float32, device=device, requires_grad=True)
    assert _nearest_edge_fused.usable(scene._shapes, p32)
    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(shape, generator=g, dtype=torch.float64).to(device) for shape in ((5, 2), (5, 2), (5, 2, 3))]

    def loss(hit):
        valid = hit.is_valid()
        distance = torch.where(valid, hit.distance, 0.0)
        return sum((w * f.double()).sum() for w, f in zip(weights, (distance, hit.edge_t, hit.edge_point)))

    fused = scene.nearest_edges(p32, 2, max_distance=5.0)
    assert fused.global_edge_id[4].tolist() == [-1, -1]
    gp32, gv32 = torch.autograd.grad(loss(fused), (p32, v32))
    # the same query in float64 takes the op-by-op path
    p64 = p32.detach().double().requires_grad_(True)
    v64 = v32.detach().double().requires_grad_(True)
    scene64 = rt.Scene()
    scene64.add_mesh(rt.Mesh(v64, torch.tensor(FACES, device=device)))
    scene64.build()
    reference = scene64.nearest_edges(p64, 2, max_distance=5.0)
    assert reference.global_edge_id.tolist() == fused.global_edge_id.tolist()
    for name in ("distance", "edge_t", "edge_point"):
        torch.testing.assert_close(getattr(fused, name).double(), getattr(reference, name), rtol=1e-5, atol=1e-6)
    gp64, gv64 = torch.autograd.grad(loss(reference), (p64, v64))
    torch.testing.assert_close(gp32.double(), gp64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gv32.double(), gv64, rtol=1e-4, atol=1e-5)
    assert gp32[4].tolist() == [0.0, 0.0, 0.0]
    single = scene.nearest_edge(p32[:4])
    (gs,) = torch.autograd.grad(single.distance.sum(), p32)
    single64 = scene64.nearest_edge(p64[:4])
    (gs64,) = torch.autograd.grad(single64.distance.sum(), p64)
    torch.testing.assert_close(gs.double(), gs64, rtol=1e-4, atol=1e-5)
