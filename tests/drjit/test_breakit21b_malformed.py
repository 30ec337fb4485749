"""Malformed rays and path end points in the reflection queries (session 21, helper breakit21b).

DESIGN.md: malformed rays (NaN, inf, zero direction) are misses, never NaN; a chain with no hit has
``path_length`` 0 and misses carry zero gradient. Before the fix, a ray whose ``d`` held an inf got
``path_length = 0 * |d| = NaN`` in both frontends (and in the fused float32 kernel of rayd.torch),
Dr.Jit's forward mode gave NaN derivatives there, and rayd.torch's reverse mode gave NaN gradients to
``o``, ``d`` and the vertices for such rays and for ``specular_paths`` with a non-finite source or target.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

import rayd.torch as rt  # noqa: E402
from drjit_testutil import rows, vec  # noqa: E402

# Two mirrors at a right angle (a ray bounces twice) and rays: two good ones, then malformed ones.
MIRROR_V = np.array([[0.0, -1.0, -10.0], [0.01, 20.0, -10.0], [-0.01, -1.0, 20.0],
                     [-1.0, 0.0, -10.0], [20.0, 0.01, -10.0], [-1.0, -0.01, 20.0]])
MIRROR_F = np.array([[0, 1, 2], [3, 4, 5]])
INF, NAN = math.inf, math.nan
O = np.array([[3.0, 2.0, 0.2], [2.5, 3.0, -0.3], [3.0, 2.0, 0.2], [NAN, 2.0, 0.2], [3.0, INF, 0.2], [3.0, 2.0, 0.2]])
D = np.array([[-1.0, -0.4, 0.05], [-0.8, -0.5, 0.1], [-1.0, INF, 0.05], [-1.0, -0.4, 0.05], [-1.0, -0.4, 0.05],
              [NAN, -0.4, 0.05]])
GOOD = 2  # the first two rays bounce twice; the others are malformed


def _drjit_scene(m, double):
    Array3 = m.Array3f64 if double else m.Array3f
    v = vec(Array3, MIRROR_V)
    dr.enable_grad(v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u(MIRROR_F.T.astype(np.uint32))))
    scene.build()
    return scene, v, Array3


def _torch_scene(dtype):
    v = torch.tensor(MIRROR_V, dtype=dtype, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(MIRROR_F)))
    scene.build()
    return scene, v


@pytest.mark.parametrize("double", [False, True])
def test_trace_reflections_of_malformed_rays_is_empty_without_nan(m, double):
    scene, v, Array3 = _drjit_scene(m, double)
    o, d = vec(Array3, O), vec(Array3, D)
    dr.enable_grad(o, d)
    chain = scene.trace_reflections(rd.Ray(o, d), 3)
    length = np.array(chain.path_length)
    assert np.array(chain.num_bounces).tolist() == [2, 2, 0, 0, 0, 0]
    assert np.all(length[GOOD:] == 0.0)  # was NaN for the rays with an inf or NaN in d
    # the good rays' length: their two segments (the third slot is empty), in units of |d|
    t = np.array(chain.t).reshape(len(O), 3)
    np.testing.assert_allclose(length[:GOOD], t[:GOOD, :2].sum(1) * np.linalg.norm(D[:GOOD], axis=1), rtol=1e-6)

    dr.backward(dr.sum(chain.path_length) + dr.sum(dr.sum(chain.p)))
    for x in (o, d, v):
        assert np.all(np.isfinite(np.array(dr.grad(x))))
    assert np.all(rows(dr.grad(o))[GOOD:] == 0) and np.all(rows(dr.grad(d))[GOOD:] == 0)
    assert np.any(rows(dr.grad(d))[:GOOD] != 0)

    # forward mode: a tangent on d reaches path_length finite (was NaN), zero on the malformed rays
    scene, v, Array3 = _drjit_scene(m, double)
    o, d = vec(Array3, O), vec(Array3, D)
    dr.enable_grad(d)
    chain = scene.trace_reflections(rd.Ray(o, d), 3)
    dr.set_grad(d, Array3(1.0, 0.5, -0.25))
    tangent = np.array(dr.forward_to(chain.path_length))
    assert np.all(np.isfinite(tangent)) and np.all(tangent[GOOD:] == 0) and np.all(tangent[:GOOD] != 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_trace_reflections_of_malformed_rays_matches_drjit(m, dtype):
    """rayd.torch (its fused float32 kernel and its float64 evaluation) against rayd.drjit."""
    scene, v = _torch_scene(dtype)
    o = torch.tensor(O, dtype=dtype, requires_grad=True)
    d = torch.tensor(D, dtype=dtype, requires_grad=True)
    chain = scene.trace_reflections(rt.Ray(o, d), 3)
    assert chain.num_bounces.tolist() == [2, 2, 0, 0, 0, 0]
    assert torch.all(chain.path_length[GOOD:] == 0)
    (chain.path_length.sum() + chain.p.sum()).backward()
    for x in (o, d, v):
        assert torch.all(torch.isfinite(x.grad))  # was NaN for the malformed rays (and through them, v)
    assert torch.all(o.grad[GOOD:] == 0) and torch.all(d.grad[GOOD:] == 0)

    ds, _, Array3 = _drjit_scene(m, dtype == torch.float64)
    reference = ds.trace_reflections(rd.Ray(vec(Array3, O), vec(Array3, D)), 3)
    np.testing.assert_allclose(chain.path_length.detach().numpy(), np.array(reference.path_length), rtol=1e-6)


@pytest.mark.parametrize("double", [False, True])
def test_specular_paths_with_non_finite_end_points_have_zero_gradients(m, double):
    """One valid single-bounce path on mirror 0 and four with a NaN or inf end point: both frontends
    report them invalid with zero (never NaN) gradients; the valid one's gradient is the hand-derived one."""
    src = np.array([[3.0, 2.0, 0.0], [NAN, 2.0, 0.0], [3.0, 2.0, 0.0], [3.0, INF, 0.0], [3.0, 2.0, 0.0]])
    dst = np.array([[3.0, 4.0, 0.0], [3.0, 4.0, 0.0], [INF, 4.0, 0.0], [3.0, 4.0, 0.0], [3.0, 4.0, NAN]])
    seq = np.zeros((len(src), 1), dtype=np.int32)  # face 0, the mirror near the plane x = 0
    dtype = torch.float64 if double else torch.float32

    scene, v, Array3 = _drjit_scene(m, double)
    s, t = vec(Array3, src), vec(Array3, dst)
    dr.enable_grad(s, t)
    paths = scene.specular_paths(s, t, m.TensorXi(seq))
    assert np.array(paths.valid).tolist() == [True, False, False, False, False]
    dr.backward(dr.sum(dr.select(paths.valid, paths.length, 0)))

    ts, tv = _torch_scene(dtype)
    s_t = torch.tensor(src, dtype=dtype, requires_grad=True)
    t_t = torch.tensor(dst, dtype=dtype, requires_grad=True)
    tp = ts.specular_paths(s_t, t_t, torch.tensor(seq))
    assert tp.valid.tolist() == [True, False, False, False, False]
    torch.where(tp.valid, tp.length, 0).sum().backward()

    # length = |I - dst| with I the source mirrored across the plane of face 0 (nearly x = 0): dL/dsrc = M (I - dst) / |I - dst|
    expected = np.zeros_like(src)
    image = src[0] * [-1, 1, 1]
    expected[0] = (image - dst[0]) / np.linalg.norm(image - dst[0]) * [-1, 1, 1]
    for grad_d, grad_t in ((rows(dr.grad(s)), s_t.grad.numpy()), (rows(dr.grad(t)), t_t.grad.numpy())):
        assert np.all(np.isfinite(grad_d)) and np.all(np.isfinite(grad_t))  # rayd.torch: NaN before
        assert np.all(grad_d[1:] == 0) and np.all(grad_t[1:] == 0)
        np.testing.assert_allclose(grad_t, grad_d, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rows(dr.grad(s))[0], expected[0], atol=2e-3)  # the mirror is tilted by 0.01/21
    assert np.all(np.isfinite(np.array(dr.grad(v)))) and np.all(np.isfinite(tv.grad.numpy()))
    np.testing.assert_allclose(tv.grad.numpy(), rows(dr.grad(v)), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("double", [False, True])
def test_winding_number_of_non_finite_points_has_zero_gradient_in_both_frontends(m, double):
    """A tetrahedron without its slanted face (open, so the winding number varies smoothly off the surface);
    points inside, outside, and with NaN / inf: 0 for the non-finite ones, with gradient 0 (rayd.torch's
    differentiable exact sum gave NaN to the points and to every vertex)."""
    tet_v = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    tet_f = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2]])  # outward; the face (1, 2, 3) left out
    pts = np.array([[0.2, 0.2, 0.2], [2.0, 0.5, 0.5], [NAN, 0.1, 0.1], [0.1, INF, 0.1], [-INF, -INF, -INF]])
    dtype = torch.float64 if double else torch.float32
    Array3 = m.Array3f64 if double else m.Array3f

    v = vec(Array3, tet_v)
    p = vec(Array3, pts)
    dr.enable_grad(v, p)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3i(tet_f.T.astype(np.int32))))
    scene.build()
    w = scene.winding_number(p)
    dr.backward(dr.sum(w))

    tv = torch.tensor(tet_v, dtype=dtype, requires_grad=True)
    tp = torch.tensor(pts, dtype=dtype, requires_grad=True)
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(tv, torch.tensor(tet_f)))
    ts.build()
    tw = ts.winding_number(tp)
    tw.sum().backward()

    np.testing.assert_allclose(tw.detach().numpy()[:2], [_winding(tet_v[tet_f], q) for q in pts[:2]], atol=1e-6)
    assert torch.all(tw[2:] == 0)
    np.testing.assert_allclose(np.array(w), tw.detach().numpy(), atol=1e-6)
    assert np.all(np.isfinite(tp.grad.numpy())) and np.all(np.isfinite(tv.grad.numpy()))  # NaN before
    assert np.all(tp.grad.numpy()[2:] == 0)
    np.testing.assert_allclose(tp.grad.numpy(), rows(dr.grad(p)), atol=1e-5)
    np.testing.assert_allclose(tv.grad.numpy(), rows(dr.grad(v)), atol=1e-5)
    # the finite points' gradients are the smooth ones: nonzero (and equal across frontends, above)
    assert np.abs(tp.grad.numpy()[:2]).min(1).max() > 1e-3 and np.abs(tv.grad.numpy()).max() > 1e-3


def _winding(tri: np.ndarray, q: np.ndarray) -> float:
    """NumPy float64 winding number of triangles (F, 3, 3) at ``q``: sum of signed solid angles / 4 pi
    (Van Oosterom, Strackee 1983)."""
    a, b, c = (tri[:, k] - q for k in range(3))
    la, lb, lc = (np.linalg.norm(x, axis=1) for x in (a, b, c))
    num = np.einsum("ij,ij->i", a, np.cross(b, c))
    den = la * lb * lc + np.einsum("ij,ij->i", a, b) * lc + np.einsum("ij,ij->i", b, c) * la \
        + np.einsum("ij,ij->i", c, a) * lb
    return float((2 * np.arctan2(num, den)).sum() / (4 * np.pi))
