"""torch.func.vmap over rays and points: equal to a Python loop, and composed with grad/jvp/jacrev."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt
from sphere_mesh import uv_sphere

F64 = torch.float64


def _scene(device, dtype=F64):
    v, f = uv_sphere(dtype=dtype, device=device)
    v = v.clone().requires_grad_()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    return scene, v


def _data(device, dtype=F64):
    gen = torch.Generator().manual_seed(7)
    o = torch.tensor([0.05, -0.1, -3.0], dtype=dtype, device=device)
    d = (torch.randn(6, 3, generator=gen, dtype=dtype) * 0.2 + torch.tensor([0.0, 0.0, 1.0], dtype=dtype)).to(device)
    pts = (torch.randn(6, 3, generator=gen, dtype=dtype) * 0.9).to(device)
    return o, d, pts


QUERIES = {
    "intersect_over_d": (lambda s, o, x: s.intersect(rt.Ray(o, x)).t, "d"),
    "intersect_over_o": (lambda s, o, x: s.intersect(rt.Ray(o + 0.1 * x, torch.tensor([0.0, 0.0, 1.0], dtype=x.dtype,
                                                                                        device=x.device))).p, "p"),
    "intersect_fields": (lambda s, o, x: torch.cat([s.intersect(rt.Ray(o, x)).geo_n,
                                                    s.intersect(rt.Ray(o, x)).barycentric], -1), "d"),
    "intersect_active_ignore": (lambda s, o, x: s.intersect(rt.Ray(o, x), active=x[..., 0] > -0.1,
                                                            ignore=torch.tensor(3, device=x.device)).t, "d"),
    "shadow_test": (lambda s, o, x: s.shadow_test(rt.Ray(o, x)), "d"),
    "visible": (lambda s, o, x: s.visible(o, x), "p"),
    "nearest_edge_points": (lambda s, o, x: s.nearest_edge(x).distance, "p"),
    "nearest_edge_ray": (lambda s, o, x: s.nearest_edge(rt.Ray(o, x)).ray_point, "d"),
    "nearest_edges": (lambda s, o, x: s.nearest_edges(x, 3).edge_point, "p"),
    "closest_point": (lambda s, o, x: s.closest_point(x).p, "p"),
    "signed_distance": (lambda s, o, x: s.signed_distance(x), "p"),
    "trace_reflections": (lambda s, o, x: s.trace_reflections(rt.Ray(0 * o, x), 2).image_source, "d"),
    "specular_paths": (lambda s, o, x: s.specular_paths(0.3 * x, 0.2 * o, torch.tensor([5], device=x.device)).points,
                       "p"),
    "specular_paths_valid": (lambda s, o, x: s.specular_paths(0.3 * x, 0.2 * o, torch.tensor([5, 9], device=x.device),
                                                              active=x[0] > -0.5).length, "p"),
    "intersect_all": (lambda s, o, x: s.intersect_all(rt.Ray(o, x), 3).t, "d"),
    "intersect_all_ids": (lambda s, o, x: s.intersect_all(rt.Ray(o, x), 2, ignore=7).global_prim_id, "d"),
    "count_intersections": (lambda s, o, x: s.count_intersections(rt.Ray(o + 2.5 * x, x)), "d"),
    "winding_number_fast": (lambda s, o, x: s.winding_number(x, exact=False), "p"),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_vmap_equals_a_loop(device, name):
    scene, _ = _scene(device)
    o, d, pts = _data(device)
    fn, over = QUERIES[name]
    xs = d if over == "d" else pts
    got = torch.func.vmap(lambda x: fn(scene, o, x))(xs)
    want = torch.stack([fn(scene, o, x) for x in xs])
    assert got.shape == want.shape
    if got.device.type == "cpu":
        assert torch.equal(got, want)
    else:  # CUDA's batched kernels (matmul-based dots) may round the last bit differently
        tol = 1e-12 if got.dtype == torch.float64 else 2e-6
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_vmap_of_a_batch_and_nested_vmap(device):
    scene, _ = _scene(device)
    o, d, pts = _data(device)
    grid = pts.reshape(2, 3, 3)
    fn = lambda x: scene.closest_point(x).distance  # noqa: E731
    want = scene.closest_point(grid).distance
    assert torch.equal(torch.func.vmap(fn)(grid), want)  # each call sees a (3, 3) batch
    assert torch.equal(torch.func.vmap(torch.func.vmap(fn))(grid), want)
    assert torch.equal(torch.func.vmap(fn, in_dims=1)(grid), want.t())  # vmapped dim not leading


def test_vmap_composes_with_grad_jvp_jacrev(device):
    scene, v = _scene(device)
    o, d, pts = _data(device)
    t = lambda x: scene.intersect(rt.Ray(o, x)).t  # noqa: E731
    dist = lambda x: scene.nearest_edge(x).distance  # noqa: E731
    closest = lambda x: scene.closest_point(x).distance  # noqa: E731
    for fn, xs in ((t, d[:3]), (dist, pts), (closest, pts)):
        per = torch.stack([torch.func.grad(fn)(x) for x in xs])
        assert torch.allclose(torch.func.vmap(torch.func.grad(fn))(xs), per, rtol=1e-12, atol=1e-14)
        jac = torch.func.jacrev(fn)(xs)  # jacrev vmaps over the output's cotangents
        assert torch.allclose(torch.einsum("iij->ij", jac), per, rtol=1e-12, atol=1e-14)
        jac_fwd = torch.func.jacfwd(fn)(xs)
        assert torch.allclose(torch.einsum("iij->ij", jac_fwd), per, rtol=1e-12, atol=1e-14)
        tangent = torch.ones_like(xs)
        _, jvp = torch.func.jvp(torch.func.vmap(fn), (xs,), (tangent,))
        assert torch.allclose(jvp, (per * tangent).sum(-1), rtol=1e-12, atol=1e-14)
    # reverse mode through a vmapped query reaches the scene's vertices like the loop does
    g1 = torch.autograd.grad(torch.func.vmap(closest)(pts).sum(), v)[0]
    g2 = torch.autograd.grad(sum(closest(x) for x in pts), v)[0]
    assert torch.allclose(g1, g2, rtol=1e-12, atol=1e-14)


def test_vmap_keeps_lifecycle_errors(device):
    scene, v = _scene(device)
    o, d, pts = _data(device)
    with torch.no_grad():
        v.mul_(1.01)
    with pytest.raises(RuntimeError, match=r"rayd.torch.Scene.intersect\(\): .*changed in place.*sync\(\)"):
        torch.func.vmap(lambda x: scene.intersect(rt.Ray(o, x)).t)(d)


def test_vmap_over_geometry_is_refused_by_name(device):
    """A scene holds one geometry: batched vertices/faces/normals, or a batched update, get a
    ValueError naming the call and the argument (was: torch's "Cannot access data pointer" at build)."""
    faces = torch.tensor([[0, 1, 2]], device=device)
    tri = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    batch = torch.stack([tri, tri + 1.0])

    def build(vertices):
        return rt.Mesh(vertices, faces)

    with pytest.raises(ValueError, match=r"rayd.torch.Mesh\(\): 'vertices' is batched by torch.func.vmap"):
        torch.func.vmap(build)(batch)
    with pytest.raises(ValueError, match=r"rayd.torch.Mesh\(\): 'normals' is batched"):
        torch.func.vmap(lambda n: rt.Mesh(tri, faces, normals=n))(batch)
    with pytest.raises(ValueError, match=r"rayd.torch.Mesh\(\): 'faces' is batched"):
        torch.func.vmap(lambda f: rt.Mesh(tri, f))(torch.stack([faces, faces]))
    dyn = rt.Scene()
    mesh_id = dyn.add_mesh(rt.Mesh(tri.clone(), faces), dynamic=True)
    dyn.build()
    with pytest.raises(ValueError, match=r"update_mesh_vertices\(\): 'vertices' is batched"):
        torch.func.vmap(lambda x: dyn.update_mesh_vertices(mesh_id, x))(batch)
    # not batched: grad over a mesh built inside the transform still works
    o = torch.tensor([0.2, 0.2, -1.0], dtype=torch.float64, device=device)
    d = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64, device=device)

    def depth(vertices):
        s = rt.Scene()
        s.add_mesh(rt.Mesh(vertices, faces))
        s.build()
        return s.intersect(rt.Ray(o, d)).t

    lifted = tri.double().clone()
    lifted[:, 2] = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, device=device)
    grad = torch.func.grad(depth)(lifted)
    # t = 1 + z(0.2, 0.2) with z = 0.5 w0 + 1 w1 + 2 w2, barycentrics (0.6, 0.2, 0.2)
    assert torch.allclose(grad[:, 2], torch.tensor([0.6, 0.2, 0.2], dtype=torch.float64, device=device))
    assert torch.allclose(depth(lifted), torch.tensor(1.0 + 0.3 + 0.2 + 0.4, dtype=torch.float64, device=device))
