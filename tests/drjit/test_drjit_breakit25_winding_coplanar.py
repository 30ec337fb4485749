"""rayd.drjit winding-number derivatives at points in the plane of a face, off the surface
(helper breakit25, session 25).

DESIGN.md ("Surface queries"): ``winding_number`` is differentiable with respect to points and
vertices "as a smooth function away from the surface". A point in the plane of a face but
outside it (every point level with the top of an axis-aligned box, say) is such a point: the
face's solid angle is 0 there, its derivative along the normal is not. rayd.drjit's ``atan2``
(written from arithmetic for LLVM) took ``|y|`` of the solid angle's numerator, and Dr.Jit's
derivative of ``abs`` at 0 is 0, so those faces gave no derivative at all (reverse and forward
mode), where rayd.torch and finite differences give one.
"""

from __future__ import annotations


import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
trimesh = pytest.importorskip("trimesh")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import exact_winding, grad_rtol, rows, vec

#: Level with the top face (z = 0.5), with the side x = 0.5, with y = -0.5 and z = -0.5 at once, and
#: a point in no face's plane; all outside the box.
PTS = np.array([[1.2, 0.3, 0.5], [0.5, -1.1, 0.2], [-0.9, -0.5, -0.5], [0.8, 0.9, 1.3]])


def _open_box():
    """A unit box without its two faces at x = -0.5 (open, so the winding number is not constant outside)."""
    box = trimesh.creation.box(extents=[1.0, 1.0, 1.0])
    keep = np.asarray(box.triangles_center)[:, 0] > -0.49
    return np.asarray(box.vertices, np.float64), np.asarray(box.faces)[keep].astype(np.uint32)


def _fd_rows(f, x, h=1e-6):
    """(N, 3) central differences of the per-row function ``f`` ((N, 3) -> (N,)) along each axis."""
    out = np.zeros_like(x)
    for k in range(3):
        e = np.zeros_like(x)
        e[:, k] = h
        out[:, k] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def _scene(m, verts, faces):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(verts, vec(m.Array3u, faces)))
    scene.build()
    return scene


def test_points_level_with_a_face_get_its_derivative(m):
    verts, faces = _open_box()
    expected = _fd_rows(lambda p: exact_winding(p, verts[faces]), PTS)
    assert np.abs(expected[:3]).max() > 1e-3  # the coplanar points have a real derivative

    # reverse mode, points and vertices
    p, v = vec(m.Array3f64, PTS), vec(m.Array3f64, verts)
    dr.enable_grad(p, v)
    w = _scene(m, v, faces).winding_number(p)
    np.testing.assert_allclose(rows(w), exact_winding(PTS, verts[faces]), rtol=0, atol=1e-13)
    weights = np.linspace(1.0, 2.0, len(PTS))
    dr.backward(dr.sum(w * m.Float64(weights)))
    np.testing.assert_allclose(rows(dr.grad(p)), expected * weights[:, None], rtol=grad_rtol(m), atol=1e-9)
    tv = np.random.default_rng(4).normal(size=verts.shape)
    h = 1e-6
    fd_v = (exact_winding(PTS, (verts + h * tv)[faces]) - exact_winding(PTS, (verts - h * tv)[faces])) / (2 * h) @ weights
    np.testing.assert_allclose(np.sum(rows(dr.grad(v)) * tv), fd_v, rtol=grad_rtol(m), atol=1e-9)

    # forward mode, one axis at a time
    for k in range(3):
        p = vec(m.Array3f64, PTS)
        dr.enable_grad(p)
        tangent = np.zeros_like(PTS)
        tangent[:, k] = 1.0
        dr.set_grad(p, vec(m.Array3f64, tangent))
        w = _scene(m, vec(m.Array3f64, verts), faces).winding_number(p)
        dr.forward_to(w)
        np.testing.assert_allclose(rows(dr.grad(w)), expected[:, k], rtol=grad_rtol(m), atol=1e-9, err_msg=str(k))


def test_equal_to_torch_level_with_a_face(backend, m):
    verts, faces = _open_box()
    p = vec(m.Array3f64, PTS)
    dr.enable_grad(p)
    w = _scene(m, vec(m.Array3f64, verts), faces).winding_number(p)
    dr.backward(dr.sum(w))
    dev = "cpu" if backend == "llvm" else "cuda"
    tp = torch.tensor(PTS, device=dev, requires_grad=True)
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.tensor(verts, device=dev), torch.tensor(faces.astype(np.int64), device=dev)))
    ts.build()
    ts.winding_number(tp).sum().backward()
    np.testing.assert_allclose(rows(dr.grad(p)), tp.grad.cpu().numpy(), rtol=1e-10, atol=1e-12)
