"""Second derivatives of the queries not covered by test_higher_order.py (issue 16, item 4):
closest_point / signed_distance, trace_reflections and specular_paths, against float64
central differences of float64 gradients, reverse-over-reverse and forward-over-reverse.

(``intersect`` and ``nearest_edge(s)`` are in test_higher_order.py.)
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

F32, F64 = torch.float32, torch.float64
HESSIANS = {
    "reverse-over-reverse": lambda f, x: torch.autograd.functional.hessian(f, x),
    "forward-over-reverse": lambda f, x: torch.func.hessian(f)(x),
}
# Two triangles in general position; query points whose closest points lie in the
# interior, on an edge and at a vertex region (fixed under the finite-difference steps).
VERTS = [[0.1, -0.2, 0.05], [1.3, 0.1, -0.2], [0.2, 1.1, 0.3], [2.0, 2.0, 1.0], [3.0, 2.2, 1.1], [2.1, 3.0, 0.8]]
FACES = [[0, 1, 2], [3, 4, 5]]
POINTS = [[0.5, 0.3, 0.9], [0.8, -0.6, 0.2], [3.4, 2.0, 1.6], [2.4, 2.6, 0.1]]
# A 90-degree corner of two large walls, slightly off axis (as in test_reflections.py).
CORNER_V = [[0.0, -1.0, -10.0], [0.01, 20.0, -10.0], [-0.01, -1.0, 20.0],
            [-1.0, 0.0, -10.0], [20.0, 0.01, -10.0], [-1.0, -0.01, 20.0]]
CORNER_O = [[3.0, 2.0, 0.2], [2.5, 3.0, -0.3]]
CORNER_D = [[-1.0, -0.4, 0.05], [-0.8, -0.5, 0.1]]


def _t(x, dtype, device):
    return torch.tensor(x, dtype=dtype, device=device)


def _scene(v):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(FACES, device=v.device)))
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


def _check(how, dtype, make):
    x, f = make(dtype)
    x64, f64 = make(F64)
    hessian = HESSIANS[how](f, x)
    expected = _fd_hessian(f64, x64)
    assert expected.abs().max() > 0.05  # a real second derivative
    assert hessian.dtype == dtype
    tol = 2e-3 if dtype == F32 else 1e-6
    torch.testing.assert_close(hessian.double(), expected, rtol=tol, atol=tol * float(expected.abs().max()))


def _weights(n, device, seed=5):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=g, dtype=F64).to(device) + 0.5


@pytest.mark.parametrize("how", list(HESSIANS))
@pytest.mark.parametrize("dtype", (F32, F64))
@pytest.mark.parametrize("kind", ["closest_point", "signed_distance"])
@pytest.mark.parametrize("wrt", ["points", "vertices"])
def test_closest_point_hessian_matches_finite_differences(device, dtype, how, kind, wrt):
    w = _weights(12, device)

    def loss(scene, q):
        if kind == "signed_distance":
            return (scene.signed_distance(q) ** 2 * w[:4].to(q.dtype)).sum()
        c = scene.closest_point(q)
        return (c.distance * w[:4].to(q.dtype)).sum() + (c.p.reshape(-1) ** 2 * w.to(q.dtype)).sum()

    def make(dt):
        v, q = _t(VERTS, dt, device), _t(POINTS, dt, device)
        if wrt == "vertices":
            return v, lambda x: loss(_scene(x), q)
        scene = _scene(v)
        return q, lambda x: loss(scene, x)

    _check(how, dtype, make)


@pytest.mark.parametrize("how", list(HESSIANS))
@pytest.mark.parametrize("dtype", (F32, F64))
@pytest.mark.parametrize("wrt", ["o", "d", "vertices"])
def test_trace_reflections_hessian_matches_finite_differences(device, dtype, how, wrt):
    w = _weights(2 * 2 * 3, device)

    def loss(scene, o, d):
        chain = scene.trace_reflections(rt.Ray(o, d), 3)
        assert chain.num_bounces.tolist() == [2, 2]
        image = chain.image_source[:, :2].reshape(-1)
        return (chain.path_length ** 2).sum() + (image * w.to(image.dtype)).sum() + (chain.p[:, 1] ** 2).sum()

    def make(dt):
        v, o, d = _t(CORNER_V, dt, device), _t(CORNER_O, dt, device), _t(CORNER_D, dt, device)
        if wrt == "vertices":
            return v, lambda x: loss(_scene(x), o, d)
        scene = _scene(v)
        if wrt == "o":
            return o, lambda x: loss(scene, x, d)
        return d, lambda x: loss(scene, o, x)

    _check(how, dtype, make)


@pytest.mark.parametrize("how", list(HESSIANS))
@pytest.mark.parametrize("wrt", ["source", "target", "vertices"])
def test_specular_paths_hessian_matches_finite_differences(device, how, wrt):
    seq = torch.tensor([[0, 1], [0, 1]], device=device)  # wall A then wall B (the chains of CORNER_O, CORNER_D)
    w = _weights(2 * 2 * 3, device)

    def loss(scene, source, target):
        paths = scene.specular_paths(source, target, seq)
        assert paths.valid.all()
        return (paths.length ** 2).sum() + (paths.points.reshape(-1) * w.to(paths.points.dtype)).sum()

    def make(dt):
        v = _t(CORNER_V, dt, device)
        # targets half a unit along each chain's second reflected ray
        source, target = _t(CORNER_O, dt, device), _t([[2.494, 0.1989, 0.4768], [2.6931, 0.2489, 0.3519]], dt, device)
        if wrt == "vertices":
            return v, lambda x: loss(_scene(x), source, target)
        scene = _scene(v)
        if wrt == "source":
            return source, lambda x: loss(scene, x, target)
        return target, lambda x: loss(scene, source, x)

    _check(how, F64, make)


@pytest.mark.parametrize("dtype", (F32, F64))
def test_nearest_edge_hessian_when_points_depend_on_the_vertices(device, dtype):
    """Query points that are functions of the vertices: the fused float32 path's create_graph backward
    must return partial derivatives (the path through the points is counted once, by autograd)."""
    offsets = _t(POINTS[:3], F64, device)

    def make(dt):
        def f(v):
            q = offsets.to(dt) + 0.3 * v[[0, 3, 4]]
            e = _scene(v).nearest_edge(q)
            return (e.distance ** 2).sum() + (e.edge_point ** 2).sum()

        return _t(VERTS, dt, device), f

    _check("reverse-over-reverse", dtype, make)
