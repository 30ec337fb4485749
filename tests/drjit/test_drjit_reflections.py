"""rayd.drjit Scene.trace_reflections: equal to rayd.torch's (values and gradients), forward = reverse, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

import rayd.torch as rt  # noqa: E402
from drjit_testutil import grad_rtol, rows, vec  # noqa: E402

# The 90-degree corner of tests/torch/test_reflections.py (slightly out of axis alignment),
# plus a ray that leaves without a hit.
CORNER_V = np.array([[0.0, -1.0, -10.0], [0.01, 20.0, -10.0], [-0.01, -1.0, 20.0],
                     [-1.0, 0.0, -10.0], [20.0, 0.01, -10.0], [-1.0, -0.01, 20.0]])
CORNER_F = np.array([[0, 1, 2], [3, 4, 5]])
O = np.array([[3.0, 2.0, 0.2], [2.5, 3.0, -0.3], [3.0, 2.0, 0.2]])
D = np.array([[-1.0, -0.4, 0.05], [-0.8, -0.5, 0.1], [1.0, 0.0, 0.0]])
B = 3
SLOT = ("t", "p", "geo_n", "d_out", "image_source")


def _drjit(m, v_np=CORNER_V):
    v = vec(m.Array3f64, v_np)
    dr.enable_grad(v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u(CORNER_F.T.astype(np.uint32))))
    scene.build()
    o, d = vec(m.Array3f64, O), vec(m.Array3f64, D)
    dr.enable_grad(o, d)
    return scene, v, o, d


def _torch():
    v = torch.tensor(CORNER_V, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(CORNER_F)))
    scene.build()
    o, d = torch.tensor(O, requires_grad=True), torch.tensor(D, requires_grad=True)
    return scene, v, o, d, scene.trace_reflections(rt.Ray(o, d), B)


def _slots(value, width):
    a = rows(value)
    return a.reshape((-1, B) + a.shape[1:]) if width else a


def test_equals_torch(m):
    scene, v, o, d = _drjit(m)
    chain = scene.trace_reflections(rd.Ray(o, d), B)
    assert chain.shape == (3, B)
    _, _, _, _, ref = _torch()
    for name in SLOT + ("prim_id", "shape_id", "global_prim_id"):
        got = _slots(getattr(chain, name), True)
        want = getattr(ref, name).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_array_equal(np.array(chain.num_bounces), ref.num_bounces.numpy())
    np.testing.assert_allclose(np.array(chain.path_length), ref.path_length.detach().numpy(), rtol=1e-12)
    np.testing.assert_array_equal(np.array(chain.is_valid()).reshape(3, B), ref.is_valid().numpy())
    picked = chain[m.Bool([False, True, True])]
    assert picked.shape == (2, B)
    np.testing.assert_allclose(np.array(picked.path_length), ref.path_length.detach().numpy()[1:], rtol=1e-12)
    np.testing.assert_allclose(_slots(picked.p, True), ref.p.detach().numpy()[1:], rtol=1e-12)


def _weights(seed=3):
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=(3, B, 3) if name != "t" else (3, B)) for name in SLOT}, rng.normal(size=3)


def test_gradients_equal_torch_and_forward_equals_reverse(m):
    w, wl = _weights()
    _, tv, to, td, ref = _torch()
    loss = sum((torch.where(ref.is_valid()[..., None] if name != "t" else ref.is_valid(), getattr(ref, name), 0.0)
                * torch.tensor(w[name])).sum() for name in SLOT) + (ref.path_length * torch.tensor(wl)).sum()
    loss.backward()
    scene, v, o, d = _drjit(m)
    chain = scene.trace_reflections(rd.Ray(o, d), B)
    valid = chain.is_valid()
    total = m.Float64(0.0)
    for name in SLOT:
        value = getattr(chain, name)
        if name == "t":
            total += dr.sum(dr.select(valid, value, 0.0) * m.Float64(w[name].reshape(-1)))
        else:
            wv = vec(m.Array3f64, w[name].reshape(-1, 3))
            total += dr.sum(dr.sum(value * wv))
    total += dr.sum(chain.path_length * m.Float64(wl))
    dr.backward(total)
    rtol = grad_rtol(m)
    for mine, theirs in ((v, tv), (o, to), (d, td)):
        # CUDA's approximate rcp/rsqrt errors scale with the largest terms that cancel, not
        # with each component (H200: 1e-6 absolute on 3e-4 components of a 1.0 gradient)
        atol = 1e-9 if ".llvm" in m.__name__ else rtol * float(np.abs(theirs.grad.numpy()).max())
        np.testing.assert_allclose(rows(dr.grad(mine)), theirs.grad.numpy(), rtol=rtol, atol=atol)
    # Forward mode: the directional derivative along a tangent of o equals grad . tangent.
    scene, v, o, d = _drjit(m)
    tangent = np.random.default_rng(5).normal(size=(3, 3))
    dr.set_grad(o, vec(m.Array3f64, tangent))
    chain = scene.trace_reflections(rd.Ray(o, d), B)
    out = dr.forward_to(chain.path_length)
    _, _, to2, _, ref2 = _torch()
    grads = [torch.autograd.grad(ref2.path_length[i], to2, retain_graph=True)[0][i].numpy() for i in range(3)]
    np.testing.assert_allclose(np.array(out), [g @ t for g, t in zip(grads, tangent)], rtol=rtol, atol=1e-12)


def test_errors(m):
    scene, v, o, d = _drjit(m)
    for bad in (0, 17):
        with pytest.raises(ValueError, match=r"rayd\.drjit\.Scene\.trace_reflections\(\): 'max_bounces' must be"):
            scene.trace_reflections(rd.Ray(o, d), bad)
    with pytest.raises(TypeError, match=r"rayd\.drjit\.Scene\.trace_reflections\(\): 'max_bounces' must be"):
        scene.trace_reflections(rd.Ray(o, d), 2.0)
    with pytest.raises(TypeError, match=r"trace_reflections\(\): 'ray'"):
        scene.trace_reflections(None, 2)


def test_empty_batch_and_broadcast_origin(m):
    scene, _, _, _ = _drjit(m)
    chain = scene.trace_reflections(rd.Ray(m.Array3f64(), m.Array3f64()), 4)
    assert chain.shape == (0, 4) and dr.width(chain.t) == 0 and dr.width(chain.num_bounces) == 0
    one = scene.trace_reflections(rd.Ray(m.Array3f64(3.0, 2.0, 0.2), vec(m.Array3f64, D[:2])), B)
    _, _, _, _, ref = _torch()
    np.testing.assert_allclose(np.array(one.path_length)[0], ref.path_length.detach().numpy()[0], rtol=1e-12)
    np.testing.assert_allclose(_slots(one.image_source, True)[0], ref.image_source.detach().numpy()[0], rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("double", [False, True], ids=["f32", "f64"])
def test_reflection_on_the_shared_edge_of_a_planar_quad_bounces_once(m, double):
    """A ray reflected on the diagonal of a planar quad leaves its plane: no second bounce off the
    other triangle at t ~ 1e-9 (the rounded next origin used to lie behind the plane for some rays)."""
    rng = np.random.default_rng(3)
    rot = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    quad = np.array([[-3.0, -3, 0], [3, -3, 0], [3, 3, 0], [-3, 3, 0]]) @ rot.T + [0.3, 0.1, 0.2]
    Array3 = m.Array3f64 if double else m.Array3f
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(Array3, quad), m.Array3u([0, 0], [1, 2], [2, 3])))
    scene.build()
    n = 2000
    target = quad[0] + rng.uniform(size=(n, 1)) * (quad[2] - quad[0])
    normal = np.cross(quad[1] - quad[0], quad[2] - quad[0])
    o = target + 2.0 * normal / np.linalg.norm(normal) + 0.5 * rng.normal(size=(n, 3))
    chain = scene.trace_reflections(rd.Ray(vec(Array3, o), vec(Array3, target - o)), 3)
    assert (rows(chain.num_bounces) == 1).all()
    assert (rows(chain.global_prim_id).reshape(n, 3)[:, 1:] == -1).all()
