"""rayd.drjit winding-number gradients (DESIGN.md, "Surface queries": differentiable with
respect to points, vertices and transforms away from the surface), reverse and forward
mode, against float64 finite differences of an independent NumPy sum and against rayd.torch."""

from __future__ import annotations


import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
trimesh = pytest.importorskip("trimesh")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import exact_winding, grad_rtol, rows, vec

PTS = np.array([[0.1, 0.2, -0.4], [0.0, 0.0, 1.7], [0.3, -0.5, 0.45], [1.2, 0.4, 0.1]])
MATRIX = np.array([[1.0, 0.1, 0, 0.2], [0, 0.9, 0, -0.1], [0, 0.05, 1.1, 0.3], [0, 0, 0, 1]])


def _hemisphere():
    sphere = trimesh.creation.icosphere(subdivisions=1)
    faces = np.asarray(sphere.faces)[sphere.vertices[sphere.faces].mean(1)[:, 2] > 0]  # open: w is smooth
    return np.asarray(sphere.vertices, np.float64), faces.astype(np.uint32)


def _weights(n):
    return np.linspace(1.0, 2.0, n)


def _loss(m, v, faces, points, matrix=None, exact=False):
    scene = rd.Scene()
    mid = scene.add_mesh(rd.Mesh(v, vec(m.Array3u, faces)))
    if matrix is not None:
        scene.set_shape_enabled(mid, False)
        scene.add_instance(mid, matrix)
    scene.build()
    w = scene.winding_number(points, exact=exact)
    return w, dr.sum(w * m.Float64(_weights(dr.width(w))))


def _fd(f, x, tangent, h=1e-6):
    return (f(x + h * tangent) - f(x - h * tangent)) / (2 * h)


def test_value_and_gradients_vs_finite_differences(m):
    verts, faces = _hemisphere()
    tri = lambda vv, mat=MATRIX: (vv @ mat[:3, :3].T + mat[:3, 3])[faces]  # noqa: E731
    rng = np.random.default_rng(3)
    tp, tv, tm = rng.normal(size=PTS.shape), rng.normal(size=verts.shape), rng.normal(size=(4, 4))
    tm[3] = 0
    weights = _weights(len(PTS))

    def numpy_loss(p=PTS, vv=verts, mat=MATRIX):
        return float(exact_winding(p, tri(vv, mat)) @ weights)

    expected = {
        "points": _fd(lambda p: numpy_loss(p=p), PTS, tp),
        "vertices": _fd(lambda vv: numpy_loss(vv=vv), verts, tv),
        "matrix": _fd(lambda mat: numpy_loss(mat=mat), MATRIX, tm),
    }
    tangents = {"points": tp, "vertices": tv, "matrix": tm}

    def inputs():
        return {"points": vec(m.Array3f64, PTS), "vertices": vec(m.Array3f64, verts),
                "matrix": m.Matrix4f64(MATRIX.tolist())}

    # reverse mode: one backward pass, every input's gradient
    x = inputs()
    dr.enable_grad(x["points"], x["vertices"], x["matrix"])
    w, loss = _loss(m, x["vertices"], faces, x["points"], x["matrix"])
    np.testing.assert_allclose(rows(w), exact_winding(PTS, tri(verts)), rtol=0, atol=1e-13)  # the float64 sum
    dr.backward(loss)
    grads = {"points": rows(dr.grad(x["points"])), "vertices": rows(dr.grad(x["vertices"])),
             "matrix": np.array([[dr.grad(x["matrix"])[i][j][0] for j in range(4)] for i in range(4)])}
    for name in expected:
        assert abs(expected[name]) > 1e-3, name  # a real signal
        np.testing.assert_allclose(np.sum(grads[name] * tangents[name]), expected[name], rtol=grad_rtol(m),
                                   err_msg=name)

    # forward mode: one input's tangent at a time
    for name in expected:
        x = inputs()
        dr.enable_grad(x[name])
        dr.set_grad(x[name], m.Matrix4f64(tm.tolist()) if name == "matrix" else vec(m.Array3f64, tangents[name]))
        _, loss = _loss(m, x["vertices"], faces, x["points"], x["matrix"])
        dr.forward_to(loss)
        np.testing.assert_allclose(dr.grad(loss)[0], expected[name], rtol=grad_rtol(m), err_msg=name)


def test_gradients_equal_torch(backend, m):
    verts, faces = _hemisphere()
    dev = "cpu" if backend == "llvm" else "cuda"
    p, v = vec(m.Array3f64, PTS), vec(m.Array3f64, verts)
    mat = m.Matrix4f64(MATRIX.tolist())
    dr.enable_grad(p, v, mat)
    w, loss = _loss(m, v, faces, p, mat)
    dr.backward(loss)

    tp = torch.tensor(PTS, device=dev, requires_grad=True)
    tv = torch.tensor(verts, device=dev, requires_grad=True)
    tm = torch.tensor(MATRIX, device=dev, requires_grad=True)
    ts = rt.Scene()
    mid = ts.add_mesh(rt.Mesh(tv, torch.tensor(faces.astype(np.int64), device=dev)))
    ts.set_shape_enabled(mid, False)
    ts.add_instance(mid, tm)
    ts.build()
    tw = ts.winding_number(tp)
    (tw * torch.tensor(_weights(len(PTS)), device=dev)).sum().backward()
    np.testing.assert_allclose(rows(w), tw.detach().cpu().numpy(), rtol=0, atol=1e-13)
    rtol = 1e-10  # CUDA too: rayd.drjit's calls run with exact Dr.Jit arithmetic (FastMath off, session 22)

    def close(actual, desired):
        np.testing.assert_allclose(actual, desired, rtol=rtol, atol=1e-12)

    close(rows(dr.grad(p)), tp.grad.cpu().numpy())
    close(rows(dr.grad(v)), tv.grad.cpu().numpy())
    grad_m = np.array([[dr.grad(mat)[i][j][0] for j in range(4)] for i in range(4)])
    close(grad_m[:3], tm.grad.cpu().numpy()[:3])


def test_active_non_finite_and_float32(m):
    verts, faces = _hemisphere()
    v = vec(m.Array3f, verts)
    dr.enable_grad(v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, faces)))
    scene.build()
    pts = np.concatenate([PTS, [[np.nan, 0, 0]]])
    active = m.Bool([True, False, True, True, True])
    w = scene.winding_number(vec(m.Array3f, pts), active)
    assert type(w) is m.Float  # float32 in, float32 out, AD namespace
    ref = exact_winding(pts[:4], verts.astype(np.float32).astype(np.float64)[faces])
    np.testing.assert_allclose(rows(w), [ref[0], 0, ref[2], ref[3], 0], rtol=0, atol=1e-6)
    dr.backward(dr.sum(w))
    assert np.isfinite(rows(dr.grad(v))).all() and np.abs(rows(dr.grad(v))).max() > 0


def test_chunks_and_many_points(m, monkeypatch):
    """Several chunks of point-face pairs give the same values and gradients as one."""
    from rayd.drjit import _closest_point

    verts, faces = _hemisphere()
    pts = np.random.default_rng(2).uniform(-1.5, 1.5, (37, 3))

    def run():
        p = vec(m.Array3f64, pts)
        dr.enable_grad(p)
        _, loss = _loss(m, vec(m.Array3f64, verts), faces, p)
        dr.backward(loss)
        return rows(dr.grad(p))

    whole = run()
    monkeypatch.setattr(_closest_point, "_CHUNK_PAIRS", 5 * len(faces))  # 5 points per chunk
    np.testing.assert_allclose(run(), whole, rtol=1e-12, atol=1e-15)  # sums in another order


def test_contains_and_signed_distance_use_the_engine(m, monkeypatch):
    """contains()/signed_distance() need no derivative of w: no O(N F) sum even with AD vertices."""
    from rayd.drjit import _closest_point

    sphere = trimesh.creation.icosphere(subdivisions=2)
    v = vec(m.Array3f64, np.asarray(sphere.vertices))
    dr.enable_grad(v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, np.asarray(sphere.faces))))
    scene.build()

    def refuse(*args):
        raise AssertionError("the Dr.Jit solid-angle sum ran")

    monkeypatch.setattr(_closest_point, "_exact_sum", refuse)
    pts = vec(m.Array3f64, [[0.0, 0, 0], [2.0, 0, 0]])
    assert rows(scene.contains(pts)).tolist() == [True, False]
    sd = scene.signed_distance(pts)
    dr.backward(dr.sum(sd))
    assert rows(sd)[0] < 0 < rows(sd)[1] and np.isfinite(rows(dr.grad(v))).all()
