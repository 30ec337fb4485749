"""rayd.drjit surface queries: hand-derived values, parity with rayd.torch, closed meshes,
gradients against float64 finite differences, errors, empty batches, lifecycle."""

from __future__ import annotations

import math

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
trimesh = pytest.importorskip("trimesh")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import grad_rtol, rows, vec

TRI_V = [[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]
#: The documented accuracy of the hierarchical winding number (docs/api.md, "Surface queries").
WINDING_BOUND = 1e-2


def _scene(m, verts, faces, double=False, dynamic=False):
    v = vec(m.Array3f64 if double else m.Array3f, np.asarray(verts, np.float64))
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, np.asarray(faces))), dynamic=dynamic)
    scene.build()
    return scene, v


def _torch_device(backend):
    return "cpu" if backend == "llvm" else "cuda"


def test_hand_derived(m):
    scene, _ = _scene(m, TRI_V, [[0, 1, 2]])
    pts = [[0.2, 0.2, 1.0], [0.5, -1.0, 0.0], [1.0, 1.0, 0.0], [-1.0, -1.0, 0.0], [0.0, 3.0, -4.0], [9, 9, 9]]
    cp = scene.closest_point(vec(m.Array3f, pts), max_distance=20.0)
    np.testing.assert_allclose(rows(cp.distance), [1.0, 1.0, math.sqrt(0.5), math.sqrt(2), math.sqrt(20),
                                                   math.sqrt(2 * 8.5**2 + 81)], rtol=1e-6)
    np.testing.assert_allclose(rows(cp.p), [[0.2, 0.2, 0], [0.5, 0, 0], [0.5, 0.5, 0], [0, 0, 0], [0, 1, 0],
                                            [0.5, 0.5, 0]], atol=1e-6)
    np.testing.assert_allclose(rows(cp.barycentric)[:2], [[0.6, 0.2, 0.2], [0.5, 0.5, 0]], atol=1e-6)
    np.testing.assert_allclose(rows(cp.geo_n), [[0, 0, 1]] * 6, atol=1e-7)
    assert rows(cp.global_prim_id).tolist() == [0] * 6
    assert isinstance(cp, rd.ClosestPoint) and cp.shape == (6,)
    far = scene.closest_point(vec(m.Array3f, [[9.0, 9, 9]]), max_distance=1.0)
    assert not bool(far.is_valid()[0]) and math.isinf(far.distance[0]) and int(far.prim_id[0]) == -1


@pytest.mark.parametrize("offset", [0.0, 1.0e5])
def test_parity_with_torch(backend, m, offset):
    rng = np.random.default_rng(5)
    verts = (rng.uniform(-1, 1, (200, 1, 3)) + 0.15 * rng.normal(size=(200, 3, 3))).reshape(-1, 3) + offset
    faces = np.arange(600).reshape(200, 3)
    pts = rng.uniform(-1.5, 1.5, (300, 3)) + offset
    scene, _ = _scene(m, verts, faces, double=True)
    cp = scene.closest_point(vec(m.Array3f64, pts))
    dev = _torch_device(backend)
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.tensor(verts, device=dev), torch.tensor(faces, device=dev)))
    ts.build()
    tcp = ts.closest_point(torch.tensor(pts, device=dev))
    assert rows(cp.global_prim_id).tolist() == tcp.global_prim_id.cpu().tolist()  # same engine search
    # float64 evaluations in two op orders: cancellation of 1e5-sized coordinates (~1e-11 absolute)
    atol = 1e-12 if offset == 0 else 1e-10
    np.testing.assert_allclose(rows(cp.distance), tcp.distance.cpu().numpy(), rtol=1e-12, atol=atol)
    np.testing.assert_allclose(rows(cp.p), tcp.p.cpu().numpy(), rtol=1e-12, atol=atol)
    np.testing.assert_allclose(rows(cp.barycentric), tcp.barycentric.cpu().numpy(), atol=1e-9)
    wd = rows(scene.winding_number(vec(m.Array3f64, pts)))
    np.testing.assert_allclose(wd, ts.winding_number(torch.tensor(pts, device=dev)).cpu().numpy(), atol=1e-12)


def test_icosphere_contains_signed_distance(m):
    sphere = trimesh.creation.icosphere(subdivisions=3)
    scene, _ = _scene(m, sphere.vertices, sphere.faces, double=True)
    rng = np.random.default_rng(1)
    d = rng.normal(size=(200, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    radii = np.concatenate([rng.uniform(0, 0.9, 100), rng.uniform(1.1, 2.0, 100)])
    pts = vec(m.Array3f64, d * radii[:, None])
    np.testing.assert_allclose(rows(scene.winding_number(pts, exact=True)), [1.0] * 100 + [0.0] * 100, atol=1e-6)
    np.testing.assert_allclose(rows(scene.winding_number(pts)), [1.0] * 100 + [0.0] * 100, atol=WINDING_BOUND)
    assert rows(scene.contains(pts)).tolist() == [True] * 100 + [False] * 100
    sd = rows(scene.signed_distance(pts))
    assert np.all(np.abs(sd - (radii - 1)) < 0.02)  # icosphere(3) sag is ~0.012
    assert np.all((sd < 0) == (radii < 1))


def test_gradients_vs_finite_differences(m):
    pts_np = np.array([[0.2, 0.3, 0.7], [0.5, -0.8, 0.2], [-0.6, -0.4, 0.3]])
    v = vec(m.Array3f64, TRI_V)
    dr.enable_grad(v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, [[0, 1, 2]])))
    scene.build()
    p = vec(m.Array3f64, pts_np)
    dr.enable_grad(p)
    cp = scene.closest_point(p)
    dr.backward(dr.sum(cp.distance))
    grad_p = rows(dr.grad(p))
    grad_v = rows(dr.grad(v))

    eps = 1e-6
    ts = rt.Scene()
    tv = torch.tensor(TRI_V, dtype=torch.float64)
    ts.add_mesh(rt.Mesh(tv, torch.tensor([[0, 1, 2]])), dynamic=True)
    ts.build()

    def dist(points, verts):
        ts.update_mesh_vertices(0, torch.tensor(verts))
        ts.sync()
        return ts.closest_point(torch.tensor(points)).distance.sum().item()

    fd_p = np.zeros_like(pts_np)
    for i in range(3):
        for k in range(3):
            hi, lo = pts_np.copy(), pts_np.copy()
            hi[i, k] += eps
            lo[i, k] -= eps
            fd_p[i, k] = (dist(hi, TRI_V) - dist(lo, TRI_V)) / (2 * eps)
    fd_v = np.zeros((3, 3))
    base = np.asarray(TRI_V)
    for i in range(3):
        for k in range(3):
            hi, lo = base.copy(), base.copy()
            hi[i, k] += eps
            lo[i, k] -= eps
            fd_v[i, k] = (dist(pts_np, hi) - dist(pts_np, lo)) / (2 * eps)
    np.testing.assert_allclose(grad_p, fd_p, rtol=grad_rtol(m), atol=1e-7)
    np.testing.assert_allclose(grad_v, fd_v, rtol=grad_rtol(m), atol=1e-7)


def test_errors_empty_lifecycle(m, plain):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, TRI_V), vec(m.Array3u, [[0, 1, 2]])), dynamic=True)
    pts = vec(m.Array3f, [[0.2, 0.2, 1.0]])
    with pytest.raises(RuntimeError, match=r"^rayd\.drjit\.Scene\.closest_point\(\): .*build\(\)"):
        scene.closest_point(pts)
    scene.build()
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Scene\.closest_point\(\): .*'points'"):
        scene.closest_point(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.closest_point\(\): .*'max_distance'"):
        scene.closest_point(pts, max_distance=-1.0)
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.winding_number\(\): .*'points'"):
        scene.winding_number(m.Float(1.0))
    empty = scene.closest_point(m.Array3f())
    assert empty.shape == (0,) and dr.width(scene.winding_number(m.Array3f())) == 0
    assert dr.width(scene.signed_distance(m.Array3f())) == 0
    scene.update_mesh_vertices(0, vec(m.Array3f, np.asarray(TRI_V) + [0, 0, 1.0]))
    for name in ("closest_point", "winding_number", "contains", "signed_distance"):
        with pytest.raises(RuntimeError, match=rf"^rayd\.drjit\.Scene\.{name}\(\): .*sync\(\)"):
            getattr(scene, name)(pts)
    scene.sync()
    assert float(scene.closest_point(pts).distance[0]) == pytest.approx(0.0, abs=1e-6)


def test_instances(backend, m):
    """closest_point and the winding number walk instances (same engine as rayd.torch)."""
    sphere = trimesh.creation.icosphere(subdivisions=1)
    scene = rd.Scene()
    mid = scene.add_mesh(rd.Mesh(vec(m.Array3f64, sphere.vertices), vec(m.Array3u, sphere.faces)))
    scene.add_instance(mid, m.Matrix4f64(2, 0, 0, 5, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1))
    scene.build()
    pts = np.random.default_rng(4).uniform(-2, 8, (100, 3))
    cp = scene.closest_point(vec(m.Array3f64, pts))
    dev = _torch_device(backend)
    ts = rt.Scene()
    tid = ts.add_mesh(rt.Mesh(torch.tensor(sphere.vertices, device=dev), torch.tensor(sphere.faces, device=dev)))
    mt = torch.eye(4, dtype=torch.float64, device=dev)
    mt[0, 0], mt[0, 3] = 2.0, 5.0
    ts.add_instance(tid, mt)
    ts.build()
    tcp = ts.closest_point(torch.tensor(pts, device=dev))
    assert rows(cp.global_prim_id).tolist() == tcp.global_prim_id.cpu().tolist()
    assert rows(cp.shape_id).tolist() == tcp.shape_id.cpu().tolist() and 1 in rows(cp.shape_id).tolist()
    np.testing.assert_allclose(rows(cp.distance), tcp.distance.cpu().numpy(), rtol=1e-12, atol=1e-12)
    for exact in (False, True):
        np.testing.assert_allclose(rows(scene.winding_number(vec(m.Array3f64, pts), exact=exact)),
                                   ts.winding_number(torch.tensor(pts, device=dev), exact=exact).cpu().numpy(),
                                   rtol=0, atol=1e-12)
    inside = rows(scene.contains(vec(m.Array3f, [[5.0, 0, 0], [0.0, 0, 0], [7.5, 0, 0]])))
    assert inside.tolist() == [True, True, False]  # the base mesh at the origin, its instance around x = 5


def test_collinear_slivers_equal_torch(backend, m):
    # degenerate faces are measured on their sides in both frontends, as in the engine
    rng = np.random.default_rng(5)
    a, u = rng.uniform(-1, 1, (40, 3)), rng.normal(size=(40, 3))
    s, t = rng.uniform(-1, 1, (40, 1)), rng.uniform(-1, 1, (40, 1))
    verts = np.concatenate([a, a + s * u, a + t * u, rng.uniform(-1, 1, (6, 3))])
    faces = np.array([[i, 40 + i, 80 + i] for i in range(40)] + [[120, 121, 122], [123, 124, 125]])
    pts = rng.uniform(-1.5, 1.5, (400, 3))
    scene, _ = _scene(m, verts, faces, double=True)
    cp = scene.closest_point(vec(m.Array3f64, pts))
    dev = _torch_device(backend)
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.tensor(verts, device=dev), torch.tensor(faces, device=dev)))
    ts.build()
    tcp = ts.closest_point(torch.tensor(pts, device=dev))
    assert rows(cp.global_prim_id).tolist() == tcp.global_prim_id.cpu().tolist()
    np.testing.assert_allclose(rows(cp.distance), tcp.distance.cpu().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rows(cp.p), tcp.p.cpu().numpy(), atol=1e-12)
    seg = np.minimum.reduce([np.linalg.norm(pts[:, None] - (x + np.clip(((pts[:, None] - x) * (y - x)).sum(-1, keepdims=True)
                             / ((y - x) ** 2).sum(-1, keepdims=True), 0, 1) * (y - x)), axis=-1)
                             for x, y in ((a, a + s * u), (a, a + t * u), (a + s * u, a + t * u))]).min(1)
    rest = np.array(rows(cp.distance))
    assert np.all(rest <= seg + 1e-12)  # never farther than the closest sliver's sides


@pytest.mark.parametrize("double", [False, True])
def test_max_distance_equal_to_the_reported_distance_finds_it(m, double):
    # As in rayd.torch (break-it 17): max_distance set to the distance a query reported finds that
    # triangle / edge (the float32 search radius left it out about half of the time); slightly
    # less finds none.
    rng = np.random.default_rng(1)
    centres = rng.uniform(-1, 1, (40, 1, 3))
    verts = (centres + rng.normal(0, 0.2, (40, 3, 3))).reshape(-1, 3)
    scene, _ = _scene(m, verts, np.arange(120).reshape(-1, 3), double=double)
    Array3 = m.Array3f64 if double else m.Array3f
    points = rng.uniform(-1.5, 1.5, (25, 3))
    dirs = rng.normal(size=(25, 3))
    for i in range(25):
        p = vec(Array3, points[i:i + 1])
        ray = rd.Ray(p, vec(Array3, dirs[i:i + 1]))
        queries = (lambda md: scene.closest_point(p, max_distance=md),
                   lambda md: scene.nearest_edge(p, max_distance=md),
                   lambda md: scene.nearest_edge(ray, max_distance=md))
        for query in queries:
            free = query(math.inf)
            bound = float(rows(free.distance)[0])
            at = query(bound)
            assert rows(at.distance).tolist() == [bound], i
            assert not rows(query(bound * (1 - 1e-3)).is_valid())[0], i
