"""Gradients of Scene.intersect (fixed winner): finite differences, the analytic formula,
gradcheck, forward mode against reverse mode, misses, grazing hits, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import reference
import torch
import torch.autograd.forward_ad as fwAD

import rayd.torch as rt

F64 = torch.float64
FIELDS = ("t", "p", "geo_n", "n", "uv", "barycentric")

# Two triangles in general position (not axis aligned), sharing no vertices.
VERTS = [[0.1, -0.2, 0.05], [1.3, 0.1, -0.2], [0.2, 1.1, 0.3], [2.0, 2.0, 1.0], [3.0, 2.2, 1.1], [2.1, 3.0, 0.8]]
FACES = [[0, 1, 2], [3, 4, 5]]
NORMALS = [[0.1, 0.2, 1.0], [-0.3, 0.1, 0.9], [0.2, -0.2, 1.2], [0.0, 0.0, 1.0], [0.1, 0.0, 1.0], [0.0, 0.3, 1.0]]
UV = [[0.0, 0.0], [1.0, 0.2], [0.3, 1.0], [0.5, 0.5], [0.9, 0.4], [0.1, 0.8]]
# Rays: two hit the interior of face 0, one face 1, one misses.
O = [[0.4, 0.3, 2.0], [0.5, 0.2, -1.5], [2.3, 2.4, 3.0], [9.0, 9.0, 2.0]]
D = [[0.05, 0.02, -1.0], [0.1, 0.1, 0.8], [0.0, 0.1, -1.1], [0.0, 0.0, -1.0]]


def _inputs(device, dtype=F64):
    def t(x):
        return torch.tensor(x, dtype=dtype, device=device, requires_grad=True)

    return t(VERTS), t(O), t(D), t(NORMALS), t(UV)


def _fields(v, o, d, normals=None, uv=None, faces=FACES, fields=FIELDS):
    """Build a scene from the given tensors and intersect: used inside transformed functions."""
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(faces, device=v.device), normals=normals, uv=uv))
    scene.build()
    hit = scene.intersect(rt.Ray(o, d))
    return tuple(getattr(hit, name) for name in fields)


def test_gradcheck_all_fields(device):
    v, o, d, normals, uv = _inputs(device)

    def fn(v, o, d, normals, uv):
        out = _fields(v, o, d, normals, uv)
        # t is +inf on the miss: compare the hits only (the miss row is checked separately).
        return (out[0][:3],) + out[1:]

    assert torch.autograd.gradcheck(fn, (v, o, d, normals, uv), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_without_attributes(device):
    # Without normals/uv, n = geo_n and uv = (w1, w2): both still differentiable.
    v, o, d, _, _ = _inputs(device)

    def fn(v, o, d):
        return tuple(x[:3] for x in _fields(v, o, d))

    assert torch.autograd.gradcheck(fn, (v, o, d), eps=1e-6, atol=1e-6, rtol=1e-5)


def _analytic(v, o, d, faces, prim, w):
    """dt/dv_i = w_i n/(n.d), dt/do = -n/(n.d), dt/dd = -t n/(n.d), n = (v1-v0) x (v2-v0)."""
    tri = v[faces[prim]]
    n = np.cross(tri[1] - tri[0], tri[2] - tri[0])
    nd = n @ d
    t = n @ (tri[0] - o) / nd
    dv = np.zeros_like(v)
    for k in range(3):
        dv[faces[prim][k]] += w[k] * n / nd
    return t, dv, -n / nd, -t * n / nd


# float32 takes the fused Warp kernel and its adjoint; float64 the op-by-op path.
TOL = {torch.float32: dict(rtol=2e-4, atol=2e-5), F64: dict(rtol=1e-10, atol=1e-12)}


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_t_and_p_against_analytic_formula(device, dtype):
    v, o, d, _, _ = _inputs(device, dtype)
    tol = TOL[dtype]
    faces = np.array(FACES)
    for i, prim in ((0, 0), (1, 0), (2, 1)):
        for field in ("t", "p"):
            for k in range(3 if field == "p" else 1):
                for x in (v, o, d):
                    x.grad = None
                t, p = _fields(v, o, d, fields=("t", "p"))
                (t[i] if field == "t" else p[i, k]).backward()
                w = _fields(v, o, d, fields=("barycentric",))[0][i].detach().cpu().numpy()
                plain = (x.detach().cpu().double().numpy() for x in (v, o[i], d[i]))
                tt, dv, do, dd = _analytic(*plain, faces, prim, w)
                assert abs(t[i].item() - tt) < tol["atol"] + tol["rtol"] * abs(tt)
                if field == "p":  # p = o + t d: dp_k = d_k dt + (e_k for o) + (t e_k for d)
                    dk = d[i, k].item()
                    eye = np.eye(3)[k]
                    dv, do, dd = dk * dv, dk * do + eye, dk * dd + tt * eye
                np.testing.assert_allclose(v.grad.cpu().numpy(), dv, **tol)
                want_o = np.zeros((4, 3))
                want_o[i] = do
                want_d = np.zeros((4, 3))
                want_d[i] = dd
                np.testing.assert_allclose(o.grad.cpu().numpy(), want_o, **tol)
                np.testing.assert_allclose(d.grad.cpu().numpy(), want_d, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_broadcast_inputs_sum_their_gradients(device, dtype):
    # One origin (3,) for many directions (N, 3): o.grad is the sum over rays; same for an expanded d.
    v, _, _, _, _ = _inputs(device, dtype)
    o = torch.tensor([0.4, 0.3, 2.0], dtype=dtype, device=device, requires_grad=True)
    d = torch.tensor([[0.05, 0.02, -1.0], [0.0, 0.1, -1.0], [-0.1, 0.0, -1.0], [9.0, 0.0, -1.0]], dtype=dtype,
                     device=device, requires_grad=True)
    t, p = _fields(v, o, d, fields=("t", "p"))
    assert torch.isfinite(t).tolist() == [True, True, True, False]
    (t[:3].sum() + p.sum()).backward()
    o_rows = o.detach().expand(4, 3).clone().requires_grad_()
    t2, p2 = _fields(v.detach(), o_rows, d.detach(), fields=("t", "p"))
    (t2[:3].sum() + p2.sum()).backward()
    torch.testing.assert_close(o.grad, o_rows.grad.sum(0), **TOL[dtype])
    assert (o_rows.grad[3] == 0).all()
    d_one = torch.tensor([0.0, 0.0, -1.0], dtype=dtype, device=device, requires_grad=True)
    origins = torch.tensor([[0.4, 0.3, 2.0], [0.5, 0.2, 3.0]], dtype=dtype, device=device)
    (t3,) = _fields(v.detach(), origins, d_one.expand(2, 3), fields=("t",))
    t3.sum().backward()
    d_rows = d_one.detach().expand(2, 3).clone().requires_grad_()
    (t4,) = _fields(v.detach(), origins, d_rows, fields=("t",))
    t4.sum().backward()
    torch.testing.assert_close(d_one.grad, d_rows.grad.sum(0), **TOL[dtype])


def test_geo_n_gradient_analytic(device):
    # geo_n = m/|m|, m = (v1-v0) x (v2-v0): d geo_n / d v2 = (I - nn^T)/|m| [v1-v0]_x
    v, o, d, _, _ = _inputs(device)
    (geo_n,) = _fields(v, o, d, fields=("geo_n",))
    tri = v.detach().cpu().numpy()[FACES[0]]
    e1 = tri[1] - tri[0]
    m = np.cross(e1, tri[2] - tri[0])
    nrm = m / np.linalg.norm(m)
    cross_e1 = np.array([[0, -e1[2], e1[1]], [e1[2], 0, -e1[0]], [-e1[1], e1[0], 0]])
    jac_v2 = (np.eye(3) - np.outer(nrm, nrm)) @ cross_e1 / np.linalg.norm(m)
    for k in range(3):
        v.grad = None
        geo_n[0, k].backward(retain_graph=True)
        np.testing.assert_allclose(v.grad[2].cpu().numpy(), jac_v2[k], rtol=1e-10, atol=1e-12)
        assert (v.grad[3:] == 0).all()


def test_finite_differences_on_a_sphere(device):
    """Directional derivatives of a scalar loss vs float64 central differences, many rays."""
    rng = np.random.default_rng(0)
    sphere_v, sphere_f = reference.icosphere(2)
    n = 256
    o_np = rng.uniform(-0.3, 0.3, (n, 3))
    d_np = rng.standard_normal((n, 3))
    weights = torch.tensor(rng.standard_normal((n, 9)), dtype=F64, device=device)

    def loss(v, o, d):
        t, p, geo_n = _fields(v, o, d, faces=sphere_f.tolist(), fields=("t", "p", "geo_n"))
        return (weights[:, 0] * t).sum() + (weights[:, 1:4] * p).sum() + (weights[:, 4:7] * geo_n).sum()

    def tensor(x):
        return torch.tensor(x, dtype=F64, device=device, requires_grad=True)

    v, o, d = tensor(sphere_v), tensor(o_np), tensor(d_np)
    # Only rays that hit well inside a face: the winner must not change under perturbation.
    bary = _fields(v, o, d, faces=sphere_f.tolist(), fields=("barycentric",))[0]
    keep = bary.min(-1).values > 1e-3
    assert keep.sum() > 200
    o, d = tensor(o_np[keep.cpu().numpy()]), tensor(d_np[keep.cpu().numpy()])
    weights = weights[keep]
    loss(v, o, d).backward()
    h = 1e-6
    for i, x in enumerate((v, o, d)):
        direction = torch.tensor(rng.standard_normal(tuple(x.shape)), dtype=F64, device=device)
        with torch.no_grad():
            args = [y.detach() for y in (v, o, d)]
            plus = list(args)
            plus[i] = args[i] + h * direction
            minus = list(args)
            minus[i] = args[i] - h * direction
            fd = (loss(*plus) - loss(*minus)) / (2 * h)
        analytic = (x.grad * direction).sum()
        torch.testing.assert_close(analytic, fd, rtol=1e-6, atol=1e-6)


def test_float32_gradients_close_to_float64(device):
    grads = {}
    for dtype in (torch.float32, F64):
        v, o, d, normals, uv = _inputs(device, dtype)
        t, p, n, uvs = _fields(v, o, d, normals, uv, fields=("t", "p", "n", "uv"))
        (t[:3].sum() + p.sum() + n.sum() + uvs.sum()).backward()
        grads[dtype] = [x.grad.double() for x in (v, o, d, normals, uv)]
        assert t.dtype == dtype
    for a, b in zip(grads[torch.float32], grads[F64]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def _jacobian_times(fn, inputs, tangents):
    """J @ tangent from reverse mode (full Jacobian via autograd.functional)."""
    jac = torch.autograd.functional.jacobian(fn, inputs)
    outs = []
    for row in jac:  # one entry per output
        total = 0
        for j, tangent in zip(row, tangents):
            total = total + (j.reshape(j.shape[: j.dim() - tangent.dim()] + (-1,)) @ tangent.reshape(-1))
        outs.append(total)
    return outs


# float32 without vertex attributes: reverse mode takes the fused kernels, forward mode the
# op-by-op path, so these also check the two paths against each other.
MODES = [(torch.float32, False), (F64, False), (F64, True)]
JVP_TOL = {torch.float32: dict(rtol=1e-3, atol=1e-4), F64: dict(rtol=1e-9, atol=1e-10)}


def _mode_inputs(device, dtype, attributes, seed):
    v, o, d, normals, uv = _inputs(device, dtype)
    inputs = tuple(x.detach() for x in (v, o, d) + ((normals, uv) if attributes else ()))
    gen = torch.Generator().manual_seed(seed)
    tangents = tuple(torch.randn(x.shape, generator=gen, dtype=dtype).to(device) for x in inputs)
    return inputs, tangents


@pytest.mark.parametrize("dtype,attributes", MODES)
def test_forward_mode_jvp_equals_reverse_mode(device, dtype, attributes):
    inputs, tangents = _mode_inputs(device, dtype, attributes, 1)

    def fn(*args):  # the scene is built INSIDE the transformed function (functorch wrappers)
        return _fields(*args)

    primals, jvps = torch.func.jvp(fn, inputs, tangents)
    reverse = _jacobian_times(fn, inputs, tangents)
    expected = fn(*inputs)
    tol = JVP_TOL[dtype]
    for name, got, want, value, ref in zip(FIELDS, jvps, reverse, primals, expected):
        torch.testing.assert_close(value, ref, rtol=0 if dtype == F64 else 1e-5, atol=0 if dtype == F64 else 1e-6,
                                   msg=name)
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, want.reshape(got.shape), **tol, msg=name)
    # The miss row: t stays inf, tangents are exactly zero.
    assert torch.isinf(primals[0][3]) and (jvps[0][3] == 0) and (jvps[1][3] == 0).all()


@pytest.mark.parametrize("dtype,attributes", MODES)
def test_forward_ad_dual_tensors_equal_reverse_mode(device, dtype, attributes):
    inputs, tangents = _mode_inputs(device, dtype, attributes, 2)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(x, t) for x, t in zip(inputs, tangents)]
        outs = _fields(*duals)
        forward = [fwAD.unpack_dual(x).tangent for x in outs]
    reverse = _jacobian_times(lambda *a: _fields(*a), inputs, tangents)
    for name, got, want in zip(FIELDS, forward, reverse):
        torch.testing.assert_close(got, want.reshape(got.shape), **JVP_TOL[dtype], msg=name)


def test_jvp_with_scene_built_outside(device):
    # A static scene; only the rays are differentiated (o, d): dt = -(n.do + t n.dd)/(n.d).
    v, o, d, _, _ = _inputs(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.detach(), torch.tensor(FACES, device=device)))
    scene.build()
    to, td = torch.ones_like(o), torch.full_like(d, 0.5)
    _, (dt, dp) = torch.func.jvp(lambda o, d: _fields_of(scene, o, d), (o.detach(), d.detach()), (to, td))
    reverse = _jacobian_times(lambda o, d: _fields_of(scene, o, d), (o.detach(), d.detach()), (to, td))
    torch.testing.assert_close(dt, reverse[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dp, reverse[1].reshape(dp.shape), rtol=1e-10, atol=1e-12)


def _fields_of(scene, o, d):
    hit = scene.intersect(rt.Ray(o, d))
    return hit.t, hit.p


def _maybe(attributes, normals, uv):
    return (normals, uv) if attributes else (None, None)


@pytest.mark.parametrize("dtype,attributes", [(torch.float32, False), (F64, False), (F64, True)])
def test_misses_give_zero_gradient_and_no_nan(device, dtype, attributes):
    v, o, d, normals, uv = _inputs(device, dtype)
    normals, uv = _maybe(attributes, normals, uv)
    out = dict(zip(FIELDS, _fields(v, o, d, normals, uv)))
    for name, value in out.items():
        assert not torch.isnan(value).any(), name
    valid = torch.isfinite(out["t"])
    assert valid.tolist() == [True, True, True, False]
    # The plain sum of t is inf (the miss), but its gradient is finite and zero for the miss.
    for loss in (
        out["t"].sum(),
        torch.where(valid, out["t"], 0.0).sum(),
        sum(out[name].sum() for name in FIELDS[1:]),
    ):
        for x in (v, o, d, normals, uv):
            if x is not None:
                x.grad = None
        loss.backward(retain_graph=True)
        for x in (v, o, d, normals, uv):
            assert x is None or x.grad is None or torch.isfinite(x.grad).all()
        assert (o.grad[3] == 0).all() and (d.grad[3] == 0).all()
    # Only misses: every gradient is exactly zero.
    v, o, d, normals, uv = _inputs(device, dtype)
    normals, uv = _maybe(attributes, normals, uv)
    out = _fields(v, o[3:], d[3:], normals, uv)
    torch.where(torch.isfinite(out[0]), out[0], 0.0).sum().backward(retain_graph=True)
    sum(x.sum() for x in out[1:]).backward()
    for x in (v, o, d, normals, uv):
        assert x is None or x.grad is None or (x.grad == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_grazing_hits_have_finite_gradients(device, dtype):
    # Triangle in z = 0, rays at ever shallower angles hitting (0.2, 0.2, 0) at t = 1.
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=dtype, device=device,
                     requires_grad=True)
    slopes = torch.tensor([1e-1, 1e-3, 1e-5], dtype=dtype, device=device)
    o = torch.stack((torch.full_like(slopes, -1.0), torch.full_like(slopes, 0.2), slopes), -1).requires_grad_()
    d = torch.stack((torch.full_like(slopes, 1.2), torch.zeros_like(slopes), -slopes), -1).requires_grad_()
    t, p, geo_n = _fields(v, o, d, faces=[[0, 1, 2]], fields=("t", "p", "geo_n"))
    rtol = 1e-9 if dtype == F64 else 1e-5
    torch.testing.assert_close(t, torch.ones_like(t), rtol=rtol, atol=0)
    (t.sum() + p.sum() + geo_n.sum()).backward()
    for x in (v, o, d):
        assert torch.isfinite(x.grad).all()
    # dt/do_z = -n_z/(n.d) = 1/slope: large, exact, finite.
    torch.testing.assert_close(_dt_do(v, o, d)[:, 2], 1.0 / slopes, rtol=rtol, atol=0)


def _dt_do(v, o, d):
    o = o.detach().requires_grad_()
    (t,) = _fields(v.detach(), o, d.detach(), faces=[[0, 1, 2]], fields=("t",))
    (grad,) = torch.autograd.grad(t.sum(), o)
    return grad


def test_gradients_bitwise_reproducible_when_deterministic(device):
    rng = np.random.default_rng(5)
    vertices, faces = reference.grid(16)
    n = 20000
    o_np = np.concatenate((rng.uniform(-0.9, 0.9, (n, 2)), np.full((n, 1), 2.0)), 1)
    d_np = np.concatenate((rng.normal(scale=0.1, size=(n, 2)), np.full((n, 1), -1.0)), 1)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for _ in range(3):
            v = torch.tensor(vertices, device=device, requires_grad=True)
            o = torch.tensor(o_np, dtype=torch.float32, device=device, requires_grad=True)
            d = torch.tensor(d_np, dtype=torch.float32, device=device)
            t, p, geo_n = _fields(v, o, d, faces=faces.tolist(), fields=("t", "p", "geo_n"))
            (t.square().sum() + p.sum() + geo_n.sum()).backward()
            grads.append((v.grad.cpu(), o.grad.cpu()))
    finally:
        torch.use_deterministic_algorithms(previous)
    assert (grads[0][0] != 0).any()
    for later in grads[1:]:
        assert torch.equal(grads[0][0], later[0]) and torch.equal(grads[0][1], later[1])


def test_gradient_lands_on_the_users_tensor(device):
    # The very tensor passed to Mesh / update_mesh_vertices receives .grad, also float32.
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], device=device, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)), dynamic=True)
    scene.build()
    hit = scene.intersect(rt.Ray(torch.tensor([0.25, 0.25, 1.0], device=device), torch.tensor([0.0, 0.0, -1.0],
                                                                                                device=device)))
    hit.t.backward()
    # dt/dv_i = w_i n/(n.d) with n = (0,0,1), d = (0,0,-1), w = (0.5, 0.25, 0.25)
    want = torch.tensor([[0, 0, -0.5], [0, 0, -0.25], [0, 0, -0.25]], device=device)
    torch.testing.assert_close(v.grad, want)
    v2 = (v.detach() * 2).requires_grad_()
    scene.update_mesh_vertices(0, v2)
    scene.sync()
    hit = scene.intersect(rt.Ray(torch.tensor([0.5, 0.5, 1.0], device=device), torch.tensor([0.0, 0.0, -1.0],
                                                                                              device=device)))
    hit.t.backward()
    torch.testing.assert_close(v2.grad, want)


def test_to_world_gradients(device):
    v, o, d, normals, uv = _inputs(device)
    angle = 0.3
    m = torch.tensor(
        [[np.cos(angle), -np.sin(angle), 0, 0.2], [np.sin(angle), np.cos(angle), 0, -0.1], [0, 0, 1.5, 0.3],
         [0, 0, 0, 1]],
        dtype=F64,
        device=device,
        requires_grad=True,
    )

    def fn(v, m, o, d, normals):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, torch.tensor(FACES, device=device), normals=normals, to_world=m))
        scene.build()
        hit = scene.intersect(rt.Ray(o, d))
        return hit.t[:3], hit.p, hit.geo_n, hit.n

    o_rays = torch.tensor([[0.3, 0.5, 2.0], [0.4, 0.2, -2.0], [0.2, 0.5, 2.0]], dtype=F64, device=device,
                          requires_grad=True)
    d_rays = torch.tensor([[0.0, 0.0, -1.0], [0.05, 0.0, 1.0], [0.1, -0.1, -1.0], ], dtype=F64, device=device,
                          requires_grad=True)
    assert torch.isfinite(fn(v, m, o_rays, d_rays, normals)[0]).all()
    assert torch.autograd.gradcheck(fn, (v, m, o_rays, d_rays, normals), eps=1e-6, atol=1e-6, rtol=1e-5)
    # A pure translation along z by h moves a horizontal plane: t = (2 - h) for a ray straight down.
    flat = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=F64, device=device)
    shift = torch.eye(4, dtype=F64, device=device).requires_grad_()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(flat, torch.tensor([[0, 1, 2]], device=device), to_world=shift))
    scene.build()
    hit = scene.intersect(rt.Ray(torch.tensor([0.25, 0.25, 2.0], dtype=F64, device=device),
                                 torch.tensor([0.0, 0.0, -1.0], dtype=F64, device=device)))
    hit.t.backward()
    want = torch.zeros(4, 4, dtype=F64, device=device)
    want[2, :] = torch.tensor([-0.25, -0.25, 0.0, -1.0], dtype=F64)  # dt/dM[2, j] = -p_object[j]
    torch.testing.assert_close(shift.grad, want)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_seed_style_height_gradient(device, dtype):
    # The seed's objective: vertical rays on a grid; d t / d z_vertex = -w_vertex.
    vertices, faces = reference.grid(4)
    v = torch.tensor(vertices, dtype=dtype, device=device, requires_grad=True)
    o = torch.tensor([[0.1, 0.2, 2.0], [-0.7, 0.35, 2.0]], dtype=dtype, device=device)
    t, w = _fields(v, o, torch.tensor([0.0, 0.0, -1.0], dtype=dtype, device=device), faces=faces.tolist(),
                   fields=("t", "barycentric"))
    t.sum().backward()
    expected = torch.zeros_like(v)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.detach(), torch.tensor(faces, device=device)))
    scene.build()
    prim = scene.intersect(rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], dtype=dtype, device=device))).prim_id
    for i in range(2):
        for k in range(3):
            expected[faces[prim[i]][k], 2] -= w[i, k].detach()
    torch.testing.assert_close(v.grad, expected)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_torch_func_grad_jacrev_jacfwd(device, dtype):
    # functorch transforms beyond jvp: grad with the scene built inside, jacrev/jacfwd outside.
    faces = [[0, 1, 2]]
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=dtype, device=device)
    o = torch.tensor([[0.25, 0.25, 1.0], [0.5, 0.25, 1.0]], dtype=dtype, device=device)
    d = torch.tensor([0.0, 0.0, -1.0], dtype=dtype, device=device)

    def loss(v):
        (t,) = _fields(v, o, d, faces=faces, fields=("t",))
        return t.sum()

    want = torch.zeros_like(v)
    want[:, 2] = torch.tensor([-0.75, -0.75, -0.5], dtype=dtype)  # -(sum of barycentric weights per vertex)
    torch.testing.assert_close(torch.func.grad(loss)(v), want)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(faces, device=device)))
    scene.build()

    def t_of(o):
        return scene.intersect(rt.Ray(o, d)).t

    jac = torch.zeros(2, 2, 3, dtype=dtype, device=device)
    jac[0, 0, 2] = jac[1, 1, 2] = 1.0  # dt_i/do_i,z = 1 for rays straight down
    torch.testing.assert_close(torch.func.jacrev(t_of)(o), jac)
    torch.testing.assert_close(torch.func.jacfwd(t_of)(o), jac)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_inactive_rays_get_zero_gradient(device, dtype):
    v = torch.tensor(VERTS, dtype=dtype, device=device, requires_grad=True)
    o = torch.tensor(O[:3], dtype=dtype, device=device, requires_grad=True)
    d = torch.tensor(D[:3], dtype=dtype, device=device, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(FACES, device=device)))
    scene.build()
    active = torch.tensor([True, False, True], device=device)
    hit = scene.intersect(rt.Ray(o, d), active)
    assert hit.is_valid().tolist() == [True, False, True]
    (torch.where(hit.is_valid(), hit.t, 0.0).sum() + hit.p.sum() + hit.geo_n.sum()).backward()
    assert (o.grad[1] == 0).all() and (d.grad[1] == 0).all() and (o.grad[0] != 0).any()
    # Ray 1 alone would hit face 0: with it inactive, face 0 gets ray 0's gradient only.
    v_only = v.detach().clone().requires_grad_()
    scene2 = rt.Scene()
    scene2.add_mesh(rt.Mesh(v_only, torch.tensor(FACES, device=device)))
    scene2.build()
    hit2 = scene2.intersect(rt.Ray(o.detach()[[0, 2]], d.detach()[[0, 2]]))
    (hit2.t.sum() + hit2.p.sum() + hit2.geo_n.sum()).backward()
    torch.testing.assert_close(v.grad, v_only.grad)
