"""Break-it session 20 (helper breakit20b), rayd.drjit: the defects of tests/torch/test_breakit20b.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")

import rayd.drjit as rd  # noqa: E402
import rayd.torch as rt  # noqa: E402

from drjit_testutil import rows, vec  # noqa: E402

INF = math.inf


def _icosphere():
    t = (1 + 5 ** 0.5) / 2
    v = np.array([[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t], [0, -1, -t], [0, 1, -t],
                  [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]], dtype=np.float64) / math.sqrt(1 + t * t)
    f = np.array([[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9], [5, 11, 4], [11, 10, 2],
                  [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5],
                  [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1]], dtype=np.int64)
    return v, f


@pytest.mark.parametrize("double", [False, True])
def test_nearest_edge_of_lines_and_backward_half_lines_like_torch(m, double):
    """``tmin = -inf``: a backward half-line, or the whole line. Was: a miss for every ray."""
    v, f = _icosphere()
    kind = m.Array3f64 if double else m.Array3f
    dtype = torch.float64 if double else torch.float32
    ds = rd.Scene()
    ds.add_mesh(rd.Mesh(vec(kind, v), vec(m.Array3u, f.astype(np.uint32))))
    ds.build()
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype), torch.tensor(f)))
    ts.build()
    rng = np.random.default_rng(4)
    o, d = rng.normal(size=(64, 3)) * 2, rng.normal(size=(64, 3))
    tol = 1e-5 if not double else 1e-9
    for tmin, tmax in [(-INF, INF), (-INF, 0.0), (-INF, 1.5)]:
        got = ds.nearest_edge(rd.Ray(vec(kind, o), vec(kind, d), tmax, tmin=tmin))
        want = ts.nearest_edge(rt.Ray(torch.tensor(o, dtype=dtype), torch.tensor(d, dtype=dtype), tmax, tmin=tmin))
        assert np.all(rows(got.is_valid())) and want.is_valid().all()
        assert np.allclose(rows(got.distance), want.distance.numpy(), rtol=tol, atol=tol)
        assert np.allclose(rows(got.ray_t), want.ray_t.numpy(), rtol=1e-4, atol=1e-4)
        # the backward half-line is the forward half-line of -d from -tmax
        if math.isfinite(tmax):
            flip = ds.nearest_edge(rd.Ray(vec(kind, o), vec(kind, -d), INF, tmin=-tmax))
            assert np.allclose(rows(flip.distance), rows(got.distance), rtol=tol, atol=tol)
            assert np.allclose(rows(flip.ray_t), -rows(got.ray_t), rtol=1e-4, atol=1e-4)


def test_line_query_gradients_are_finite_and_forward_equals_reverse(m):
    """Reverse and forward mode agree with each other and with float64 central differences (rays whose
    winner changes within the step, at a vertex its edges share, are left out)."""
    v, f = _icosphere()
    ds = rd.Scene()
    ds.add_mesh(rd.Mesh(vec(m.Array3f64, v), vec(m.Array3u, f.astype(np.uint32))))
    ds.build()
    rng = np.random.default_rng(5)
    o, d = rng.normal(size=(16, 3)) * 2, rng.normal(size=(16, 3))
    step = rng.normal(size=(16, 3))
    h = 1e-6

    def line(origin):
        return ds.nearest_edge(rd.Ray(origin, vec(m.Array3f64, d), INF, tmin=-INF))

    plus, minus = line(vec(m.Array3f64, o + h * step)), line(vec(m.Array3f64, o - h * step))
    keep = rows(plus.global_edge_id) == rows(minus.global_edge_id)
    assert keep.sum() >= 10
    weight = m.Float64(keep.astype(np.float64))
    fd = (((rows(plus.distance) + rows(plus.ray_t)) - (rows(minus.distance) + rows(minus.ray_t))) * keep).sum() / (2 * h)
    o_ad = vec(m.Array3f64, o)
    dr.enable_grad(o_ad)
    hit = line(o_ad)
    dr.backward(dr.sum((hit.distance + hit.ray_t) * weight))
    assert np.all(np.isfinite(rows(dr.grad(o_ad))))
    reverse = float(np.sum(rows(dr.grad(o_ad)) * step))
    o_fw = vec(m.Array3f64, o)
    dr.enable_grad(o_fw)
    dr.set_grad(o_fw, vec(m.Array3f64, step))
    hit = line(o_fw)
    forward = float(np.sum(rows(dr.forward_to((hit.distance + hit.ray_t) * weight))))
    assert abs(forward - reverse) <= 1e-9 * (1 + abs(reverse))
    assert abs(fd - reverse) <= 1e-5 * (1 + abs(fd))


def test_sample_edges_do_not_depend_on_face_windings_like_torch(m):
    """Some faces wound against their neighbours: the same samples and boundary term as the consistently
    wound mesh (was: creases next to a flipped face sampled, silhouettes there missed), instances too."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from reference import icosphere

    v, f = icosphere(2)
    v = v + np.array([0.2, 0.1, 4.0])
    flipped = f.copy()
    pick = np.random.default_rng(0).random(len(f)) < 0.1
    flipped[pick] = flipped[pick][:, ::-1]
    place = np.eye(4)
    place[:3, 3] = [0.5, 0.0, 1.0]
    out = []
    for faces in (f, flipped):
        vd = vec(m.Array3f64, v)
        dr.enable_grad(vd)
        scene = rd.Scene()
        mesh = scene.add_mesh(rd.Mesh(vd, vec(m.Array3u, faces.astype(np.uint32))))
        scene.add_instance(mesh, m.Matrix4f64(place))
        scene.build()
        samples = rd.Camera(48, 48, fx=30.0).sample_edges(scene, 4000, generator=np.random.default_rng(0))
        inside = m.Float64(dr.select(scene.intersect(samples.ray_inside).is_valid(), 1.0, 0.0))
        outside = m.Float64(dr.select(scene.intersect(samples.ray_outside).is_valid(), 1.0, 0.0))
        dr.backward(dr.sum(samples.boundary_term(inside, outside)))
        out.append((np.array(samples.global_edge_id), rows(samples.xy), float(dr.sum(samples.weight)[0]),
                    rows(dr.grad(vd))))
    (ids_w, xy_w, total_w, grad_w), (ids_g, xy_g, total_g, grad_g) = out
    assert np.array_equal(ids_g, ids_w) and total_g == pytest.approx(total_w, rel=1e-12)
    assert np.allclose(xy_g, xy_w, atol=1e-9) and np.allclose(grad_g, grad_w, rtol=1e-9, atol=1e-9)
