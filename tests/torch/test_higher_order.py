"""Second derivatives of rayd.torch queries (issue 19, items 3 and 6).

float32 scenes take fused Warp kernels whose adjoint is a constant; a backward with
``create_graph=True`` must differentiate the op-by-op formulas instead, so Hessians
are never silently zero. Checked against float64 central differences of float64
gradients and against analytic values, reverse-over-reverse
(``torch.autograd.functional.hessian``) and forward-over-reverse (``torch.func.hessian``).
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

F32, F64 = torch.float32, torch.float64
DTYPES = (F32, F64)
# Two triangles in general position; rays hit their interiors (winners stay fixed under
# the finite-difference steps).
VERTS = [[0.1, -0.2, 0.05], [1.3, 0.1, -0.2], [0.2, 1.1, 0.3], [2.0, 2.0, 1.0], [3.0, 2.2, 1.1], [2.1, 3.0, 0.8]]
FACES = [[0, 1, 2], [3, 4, 5]]
O = [[0.4, 0.3, 2.0], [0.5, 0.2, -1.5], [2.3, 2.4, 3.0]]
D = [[0.05, 0.02, -1.0], [0.1, 0.1, 0.8], [0.0, 0.1, -1.1]]
# Query points off the edges (not at distance 0) with well-separated nearest edges.
POINTS = [[0.5, -0.6, 0.3], [0.9, 0.8, -0.3], [2.6, 1.7, 1.4]]
HESSIANS = {
    "reverse-over-reverse": lambda f, x: torch.autograd.functional.hessian(f, x),
    "forward-over-reverse": lambda f, x: torch.func.hessian(f)(x),
}


def _t(x, dtype, device):
    return torch.tensor(x, dtype=dtype, device=device)


def _scene(v, dynamic=False):
    faces = FACES if v.shape[0] == 6 else [[0, 1, 2]]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(faces, device=v.device)), dynamic=dynamic)
    scene.build()
    return scene


def _fd_hessian(f, x, h=1e-5):
    """Central differences of the float64 gradient of scalar ``f`` at ``x`` (float64)."""
    def grad(y):
        y = y.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f(y), y)
        return g.reshape(-1)

    flat = x.detach().reshape(-1)
    cols = []
    for i in range(flat.numel()):
        step = torch.zeros_like(flat)
        step[i] = h
        cols.append((grad((flat + step).reshape(x.shape)) - grad((flat - step).reshape(x.shape))) / (2 * h))
    return torch.stack(cols, dim=1).reshape(x.shape + x.shape)


def _weights(device):
    g = torch.Generator().manual_seed(7)
    return {k: torch.rand(n, generator=g, dtype=F64).to(device) + 0.5 for k, n in (("t", 3), ("p", 9), ("b", 9))}


def _intersect_loss(scene, o, d, w):
    """A scalar mixing t, p and barycentric nonlinearly in the inputs."""
    hit = scene.intersect(rt.Ray(o, d))
    dt = hit.t.dtype
    return ((hit.t * w["t"].to(dt)).sum() + (hit.p.reshape(-1) * w["p"].to(dt)).sum()
            + (hit.barycentric.reshape(-1) ** 2 * w["b"].to(dt)).sum())


@pytest.mark.parametrize("how", list(HESSIANS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wrt", ["o", "d", "vertices"])
def test_intersect_hessian_matches_finite_differences(device, dtype, how, wrt):
    w = _weights(device)

    def make(dt):
        v, o, d = _t(VERTS, dt, device), _t(O, dt, device), _t(D, dt, device)
        if wrt == "vertices":
            return v, lambda x: _intersect_loss(_scene(x), o, d, w)
        scene = _scene(v)
        if wrt == "o":
            return o, lambda x: _intersect_loss(scene, x, d, w)
        return d, lambda x: _intersect_loss(scene, o, x, w)

    x, f = make(dtype)
    x64, f64 = make(F64)
    hessian = HESSIANS[how](f, x)
    expected = _fd_hessian(f64, x64)
    assert expected.abs().max() > 0.1  # a real second derivative
    assert hessian.dtype == dtype
    tol = 2e-3 if dtype == F32 else 1e-6
    torch.testing.assert_close(hessian.double(), expected, rtol=tol, atol=tol * float(expected.abs().max()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_intersect_hessian_analytic(device, dtype):
    # Plane z = 0, o = (0.2, 0.2, 1), d = (0, 0, -1): t = 1 / -d_z, so H[2, 2] = -2 / d_z^3 = 2.
    scene = _scene(_t([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype, device))
    o = _t([0.2, 0.2, 1.0], dtype, device)
    for how, hess in HESSIANS.items():
        h = hess(lambda d: scene.intersect(rt.Ray(o, d)).t, _t([0.0, 0.0, -1.0], dtype, device))
        expected = torch.zeros(3, 3, dtype=dtype, device=device)
        expected[2, 2] = 2.0
        torch.testing.assert_close(h, expected, msg=how)


@pytest.mark.parametrize("dtype", DTYPES)
def test_create_graph_gradient_requires_grad(device, dtype):
    scene = _scene(_t(VERTS, dtype, device))
    o = _t(O, dtype, device)
    d = _t(D, dtype, device).requires_grad_(True)
    (g,) = torch.autograd.grad(scene.intersect(rt.Ray(o, d)).t.sum(), d, create_graph=True)
    assert g.requires_grad
    (gg,) = torch.autograd.grad((g * g).sum(), d)
    assert gg.abs().max() > 0.1


def _edge_loss(kind, scene, x, d64, w):
    if kind == "points":
        e = scene.nearest_edge(x)
        return (e.distance * w["t"].to(x.dtype)).sum() + (e.edge_point.reshape(-1) * w["p"].to(x.dtype)).sum()
    if kind == "nearest_edges":
        e = scene.nearest_edges(x, 2)
        return (e.distance ** 2).sum() + (e.distance * w["b"][:6].reshape(3, 2).to(x.dtype)).sum()
    u = d64.to(x.dtype)
    e = scene.nearest_edge(rt.Ray(x + 0.6 * u, -u))
    return (e.distance * w["t"].to(x.dtype)).sum() + (e.ray_point.reshape(-1) * w["p"].to(x.dtype)).sum()


@pytest.mark.parametrize("how", list(HESSIANS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["points", "nearest_edges", "rays"])
@pytest.mark.parametrize("wrt", ["query", "vertices"])
def test_nearest_edge_hessian_matches_finite_differences(device, dtype, how, kind, wrt):
    w = _weights(device)
    # Rays through the query points (o = q + 0.6 u, d = -u); no closest point lies at a
    # clamping boundary, so the finite-difference steps stay on one smooth branch.
    d = _t([[0.3, 0.1, 0.2], [-0.2, 0.3, 0.25], [0.1, -0.3, 0.3]], F64, device)

    def make(dt):
        v, q = _t(VERTS, dt, device), _t(POINTS, dt, device)
        if wrt == "vertices":
            return v, lambda x: _edge_loss(kind, _scene(x), q, d, w)
        scene = _scene(v)
        return q, lambda x: _edge_loss(kind, scene, x, d, w)

    x, f = make(dtype)
    x64, f64 = make(F64)
    hessian = HESSIANS[how](f, x)
    expected = _fd_hessian(f64, x64)
    assert expected.abs().max() > 0.1
    tol = 2e-3 if dtype == F32 else 1e-6
    torch.testing.assert_close(hessian.double(), expected, rtol=tol, atol=tol * float(expected.abs().max()))


def test_nearest_edge_hessian_analytic(device):
    # Nearest edge of p = (0.3, -0.5, 0.2) is the x axis: distance = sqrt(y^2 + z^2),
    # whose Hessian is [[0, 0, 0], [0, z^2, -yz], [0, -yz, y^2]] / r^3.
    scene = _scene(_t([[0, 0, 0], [1, 0, 0], [0, 1, 0]], F32, device))
    p = _t([0.3, -0.5, 0.2], F32, device)
    y, z = -0.5, 0.2
    r3 = (y * y + z * z) ** 1.5
    expected = _t([[0, 0, 0], [0, z * z / r3, -y * z / r3], [0, -y * z / r3, y * y / r3]], F32, device)
    for how, hess in HESSIANS.items():
        torch.testing.assert_close(hess(lambda q: scene.nearest_edge(q).distance, p), expected, msg=how)
        both = hess(lambda q: scene.nearest_edges(q, 1).distance.sum(), p)
        torch.testing.assert_close(both, expected, msg=how)
