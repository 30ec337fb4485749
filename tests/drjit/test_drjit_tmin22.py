"""rayd.drjit: ``tmin = -inf`` in ray-hit queries (session 22, helper tmin22).

``(tmin, tmax)`` with ``tmin = -inf`` is every hit with ``t < tmax`` (a backward half-line, or the whole
line). Was: every such ray a miss in ``intersect``, ``shadow_test``, ``intersect_all``,
``count_intersections`` and ``trace_reflections``' first segment. The search now starts just before
the ray enters the scene's box (:func:`rayd.core.rays.search_start`, shared with rayd.torch). Checked
against the float64 brute force, a finite ``tmin`` before the scene, both CPU paths, float32/float64,
transformed meshes and instances; gradients against float64 central differences; parity with rayd.torch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from allhits_reference import all_hits  # noqa: E402
from drjit_testutil import grad_rtol, rows, vec  # noqa: E402
from rayd.engine import cpu_embree  # noqa: E402
from reference import closest_hit, icosphere  # noqa: E402

INF = math.inf


def _matrix(angle, axis, scale, shift):
    c, s = math.cos(angle), math.sin(angle)
    i, j = [k for k in range(3) if k != axis]
    mat = np.eye(4)
    mat[i, i], mat[i, j], mat[j, i], mat[j, j] = c, -s, s, c
    mat[:3, :3] *= scale
    mat[:3, 3] = shift
    return mat


M_MESH = _matrix(0.4, 2, 0.8, (2.5, 0.3, -0.4))
M_INST = _matrix(-0.7, 0, 1.2, (-2.2, 1.0, 0.5))
CENTRES = np.array([[0.0, 0.0, 0.0], M_MESH[:3, 3], (M_INST @ M_MESH)[:3, 3]])


@pytest.fixture(params=["embree", "warp"])
def accel(request, backend):
    """The CPU search path (``RAYD_CPU_ACCEL``); CUDA has one."""
    if backend == "cuda" and request.param == "embree":
        pytest.skip("Embree is a CPU path")
    before = cpu_embree._enabled
    cpu_embree.set_enabled(request.param == "embree")
    yield request.param
    cpu_embree.set_enabled(before)


def _kinds(m, double):
    return (m.Array3f64, m.Float64, m.Matrix4f64) if double else (m.Array3f, m.Float, m.Matrix4f)


def _scene(m, double):
    """A sphere, a transformed sphere, an instance of it; (scene, world vertices, faces, F)."""
    Array3, _, Matrix = _kinds(m, double)
    v, f = icosphere(2)
    scene = rd.Scene()
    dv, df = vec(Array3, v), vec(m.Array3u, f.astype(np.uint32))
    scene.add_mesh(rd.Mesh(dv, df))
    scene.add_mesh(rd.Mesh(dv, df, to_world=Matrix(M_MESH.tolist())))
    scene.add_instance(1, Matrix(M_INST.tolist()))
    scene.build()
    m2 = M_INST @ M_MESH
    world = np.concatenate([v, v @ M_MESH[:3, :3].T + M_MESH[:3, 3], v @ m2[:3, :3].T + m2[:3, 3]])
    faces = np.concatenate([f + k * len(v) for k in range(3)])
    return scene, world, faces, len(f)


def _rays(m, double, n, seed=0):
    rng = np.random.default_rng(seed)
    o = rng.uniform(-4.0, 4.0, (n, 3))
    target = CENTRES[rng.integers(0, 3, n)] + rng.uniform(-1.2, 1.2, (n, 3))
    d = (target - o) * rng.uniform(0.3, 2.0, (n, 1)) * np.where(rng.random((n, 1)) < 0.5, -1.0, 1.0)
    if not double:  # the reference sees the rays the query sees
        o, d = o.astype(np.float32).astype(np.float64), d.astype(np.float32).astype(np.float64)
    Array3 = _kinds(m, double)[0]
    return o, d, vec(Array3, o), vec(Array3, d)


def _before(o, d, world, faces, Float):
    t = closest_hit(o, d, world, faces, -INF, INF)["t"]
    return Float(np.where(np.isfinite(t), t - 0.25, -10.0))


def _tol(double):
    return dict(rtol=1e-11, atol=1e-11) if double else dict(rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("tmax", [INF, 0.0, -0.7])
def test_intersect_and_shadow_behind_origin(m, accel, double, tmax):
    scene, world, faces, nf = _scene(m, double)
    o, d, do, dd = _rays(m, double, 1200)
    Float = _kinds(m, double)[1]
    ray = rd.Ray(do, dd, tmax, tmin=-INF)
    hit = scene.intersect(ray)
    ref = closest_hit(o, d, world, faces, -INF, tmax)
    _, clear = all_hits(o, d, world, faces, -INF, tmax, margin=1e-5)
    valid = rows(hit.is_valid()).astype(bool)
    assert (ref["prim"] >= 0).sum() > 250 and (ref["t"][ref["prim"] >= 0] < 0).sum() > 100
    np.testing.assert_array_equal(valid[clear], ref["prim"][clear] >= 0)
    t = rows(hit.t).astype(np.float64)
    np.testing.assert_allclose(t[clear & valid], ref["t"][clear & valid], **_tol(double))
    finite = scene.intersect(rd.Ray(do, dd, tmax, tmin=_before(o, d, world, faces, Float)))
    np.testing.assert_array_equal(rows(finite.global_prim_id)[clear], rows(hit.global_prim_id)[clear])
    np.testing.assert_array_equal(rows(finite.t)[clear], rows(hit.t)[clear])
    np.testing.assert_array_equal(rows(scene.shadow_test(ray)), valid)


@pytest.mark.parametrize("double", [False, True])
def test_intersect_all_count_and_chain(m, accel, double):
    scene, world, faces, nf = _scene(m, double)
    o, d, do, dd = _rays(m, double, 400, seed=1)
    ray = rd.Ray(do, dd, tmin=-INF)
    hits, clear = all_hits(o, d, world, faces, -INF, INF, margin=1e-5)
    got = scene.intersect_all(ray, 8)
    count = rows(scene.count_intersections(ray))
    t = rows(got.t).reshape(-1, 8).astype(np.float64)
    gid = (rows(got.shape_id) * nf + rows(got.prim_id)).reshape(-1, 8)
    assert sum(len(h) > 1 for h in hits) > 50
    for i in np.nonzero(clear)[0]:
        want = hits[i]
        assert count[i] == len(want) and len(want) % 2 == 0, i
        np.testing.assert_allclose(t[i, :len(want)], [x[0] for x in want[:8]], **_tol(double))
        assert gid[i, :len(want)].tolist() == [x[1] for x in want[:8]], i
    chain = scene.trace_reflections(ray, 3)
    first = scene.intersect(ray)
    np.testing.assert_array_equal(rows(chain.global_prim_id).reshape(-1, 3)[:, 0], rows(first.global_prim_id))
    assert (rows(chain.num_bounces) > 1).any()


def test_tmin_array_nan_and_parity_with_torch(m, backend):
    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    scene, world, faces, _ = _scene(m, True)
    o, d, do, dd = _rays(m, True, 600, seed=5)
    kind = np.arange(600) % 3
    tmin = np.where(kind == 0, -INF, np.where(kind == 1, 0.0, np.nan))
    hit = scene.intersect(rd.Ray(do, dd, tmin=m.Float64(tmin)))
    whole = scene.intersect(rd.Ray(do, dd, tmin=-INF))
    t, tw = rows(hit.t), rows(whole.t)
    np.testing.assert_array_equal(t[kind == 0], tw[kind == 0])
    assert np.isinf(t[kind == 2]).all() and np.isfinite(tw[kind == 2]).any()
    # rayd.torch: the same rule through the same core helper
    v, f = icosphere(2)
    ts = rt.Scene()
    tv, tf = torch.tensor(v), torch.tensor(f)
    ts.add_mesh(rt.Mesh(tv, tf))
    ts.add_mesh(rt.Mesh(tv, tf, to_world=torch.tensor(M_MESH)))
    ts.add_instance(1, torch.tensor(M_INST))
    ts.build()
    th = ts.intersect(rt.Ray(torch.tensor(o), torch.tensor(d), tmin=torch.tensor(tmin)))
    np.testing.assert_array_equal(th.global_prim_id.numpy(), rows(hit.global_prim_id))
    np.testing.assert_allclose(th.t.numpy(), t, rtol=1e-12)


def test_gradients_central_differences(m):
    """``t`` of hits behind ``o`` found with ``tmin = -inf``: reverse and forward mode against float64
    central differences, and equal to those of a finite ``tmin`` before the scene."""
    base = np.array([[0.1, -0.2, 0.05], [1.3, 0.1, -0.2], [0.2, 1.1, 0.3],
                     [0.3, 0.0, -2.0], [1.4, 0.2, -2.3], [0.4, 1.2, -1.9]])
    o = np.array([[0.4, 0.3, 2.0], [0.5, 0.2, 1.0], [0.6, 0.3, -3.0]])
    d = np.array([[0.05, 0.02, 1.0], [-0.1, 0.1, 0.8], [0.02, -0.03, -1.1]])
    weights = m.Float64([1.0, 2.0, -0.5])

    def loss(v, ro, rdir, tmin):
        scene = rd.Scene()
        scene.add_mesh(rd.Mesh(v, m.Array3u([0, 3], [1, 4], [2, 5])))
        scene.build()
        hit = scene.intersect(rd.Ray(ro, rdir, tmin=tmin))
        return dr.sum(hit.t * weights) + dr.sum(dr.sum(hit.p * vec(m.Array3f64, [[0.3, -0.2, 0.1]] * 3)))

    rng = np.random.default_rng(0)
    tv, to, td = rng.normal(size=base.shape), rng.normal(size=o.shape), rng.normal(size=d.shape)
    h = 1e-6

    def at(sign):
        return loss(vec(m.Array3f64, base + sign * h * tv), vec(m.Array3f64, o + sign * h * to),
                    vec(m.Array3f64, d + sign * h * td), -INF)[0]

    expected = (at(1) - at(-1)) / (2 * h)
    grads = {}
    for tmin in (-INF, -10.0):
        xs = [vec(m.Array3f64, x) for x in (base, o, d)]
        dr.enable_grad(*xs)
        value = loss(*xs, tmin)
        assert math.isfinite(value[0])
        dr.backward(value)
        g = [rows(dr.grad(x)) for x in xs]
        grads[tmin] = g
        np.testing.assert_allclose(sum(np.sum(a * b) for a, b in zip(g, (tv, to, td))), expected,
                                   rtol=grad_rtol(m))
        xs = [vec(m.Array3f64, x) for x in (base, o, d)]
        dr.enable_grad(*xs)
        for x, tx in zip(xs, (tv, to, td)):
            dr.set_grad(x, vec(m.Array3f64, tx))
        out = loss(*xs, tmin)
        dr.forward_to(out)
        np.testing.assert_allclose(dr.grad(out)[0], expected, rtol=grad_rtol(m))
    for a, b in zip(grads[-INF], grads[-10.0]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_box_follows_sync(m):
    """A dynamic mesh moved far away by ``sync()``: the search starts before its new place."""
    v, f = icosphere(1)
    dv = vec(m.Array3f64, v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(dv, vec(m.Array3u, f.astype(np.uint32))), dynamic=True)
    scene.build()
    ray = rd.Ray(m.Array3f64(0.1, 0.05, 0.0), m.Array3f64(0.0, 0.0, 1.0), 0.0, tmin=-INF)
    assert -1.0 < scene.intersect(ray).t[0] < -0.9
    scene.update_mesh_vertices(0, vec(m.Array3f64, v + [0.0, 0.0, -500.0]))
    scene.sync()
    assert -501.0 < scene.intersect(ray).t[0] < -500.9
    assert scene.count_intersections(ray)[0] == 2
