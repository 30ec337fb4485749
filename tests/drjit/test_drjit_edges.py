"""rayd.drjit edge queries: topology, hand-derived values, parity with rayd.torch, top-k,
masks, refits, gradients against finite differences, errors (on every Dr.Jit backend)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import grad_rtol, rows, vec

SQUARE_V = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
SQUARE_F = [[0, 1, 2], [1, 3, 2]]  # edges (0,1) (0,2) (1,2) (1,3) (2,3)


def _square(m, double=False, dynamic=False):
    v = vec(m.Array3f64 if double else m.Array3f, SQUARE_V)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, SQUARE_F)), dynamic=dynamic)
    scene.build()
    return scene, v


def _terrain(n=10, seed=0):
    """A bumpy (n+1)^2 grid over [-1, 1]^2 with a few extra faces (non-manifold, degenerate-free)."""
    rng = np.random.default_rng(seed)
    axis = np.linspace(-1, 1, n + 1)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    v = np.stack([x.ravel(), y.ravel(), 0.2 * rng.normal(size=x.size)], -1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, c], -1), np.stack([b, d, c], -1), [[0, 1, n + 5]]])
    return v, f


def _torch_device(backend):
    return "cpu" if backend == "llvm" else "cuda"


def _pair(backend, m, meshes, instance=None):
    """The same meshes (float32) in a rayd.drjit and a rayd.torch scene; ``instance``: (mesh id, 4x4)."""
    ds, ts = rd.Scene(), rt.Scene()
    dev = _torch_device(backend)
    for v, f, to_world in meshes:
        dm = None if to_world is None else m.Matrix4f(to_world.tolist())
        tm = None if to_world is None else torch.tensor(to_world, dtype=torch.float32, device=dev)
        ds.add_mesh(rd.Mesh(vec(m.Array3f, v), vec(m.Array3u, f.astype(np.uint32)), to_world=dm))
        ts.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32, device=dev), torch.tensor(f, device=dev), to_world=tm))
    if instance is not None:
        ds.add_instance(instance[0], m.Matrix4f(instance[1].tolist()))
        ts.add_instance(instance[0], torch.tensor(instance[1], dtype=torch.float32, device=dev))
    ds.build()
    ts.build()
    return ds, ts


def _t32(x, dev):
    return torch.tensor(x, dtype=torch.float32, device=dev)


def _placement():
    M = np.eye(4)
    M[:3, :3] = [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    M[:3, 3] = [2.5, 0.0, 0.3]
    return M


def _parity_scenes(backend, m):
    v0, f0 = _terrain(10, 0)
    v1, f1 = _terrain(4, 1)
    shift = np.eye(4)
    shift[:3, 3] = [0.0, 0.0, 0.8]
    return _pair(backend, m, [(v0, f0, None), (v1, f1, shift)], instance=(1, _placement()))


# ---------------------------------------------------------------------- topology
def test_topology_equals_rayd_torch(backend, m):
    ds, ts = _parity_scenes(backend, m)
    got, want = ds.edge_topology(), ts.edge_topology()
    assert got.num_edges == len(got) == want.num_edges
    for name in ("v", "faces", "opposite"):
        assert np.array_equal(rows(getattr(got, name)), getattr(want, name).cpu().numpy()), name
    for name in ("is_boundary", "shape_id", "edge_id", "global_edge_id"):
        assert np.array_equal(rows(getattr(got, name)), getattr(want, name).cpu().numpy()), name
    assert type(got.v).__name__ == "Array2i" and type(got.is_boundary).__name__ == "Bool"
    # the instance (shape 2) repeats mesh 1's edges under its own shape id
    sid = rows(got.shape_id)
    assert np.array_equal(rows(got.v)[sid == 2], rows(got.v)[sid == 1])


def test_triangle_topology(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARE_V[:3]), m.Array3i([0], [1], [2])))
    scene.build()
    top = scene.edge_topology()
    assert rows(top.v).tolist() == [[0, 1], [0, 2], [1, 2]]
    assert rows(top.faces).tolist() == [[0, -1]] * 3
    assert rows(top.opposite).tolist() == [[2, -1], [1, -1], [0, -1]]
    assert rows(top.is_boundary).tolist() == [True] * 3


# ---------------------------------------------------------------------- values
def test_points_hand_derived(m):
    scene, _ = _square(m)
    p = vec(m.Array3f, [[0.25, -2.0, 0.0], [0.6, 0.6, 0.3], [-3.0, -4.0, 0.0], [1.0, 0.5, 2.0]])
    hit = scene.nearest_edge(p)
    assert rows(hit.global_edge_id).tolist() == [0, 2, 0, 3]
    assert rows(hit.edge_id).tolist() == [0, 2, 0, 3]
    assert rows(hit.shape_id).tolist() == [0, 0, 0, 0]
    np.testing.assert_allclose(rows(hit.distance), [2.0, math.sqrt(0.11), 5.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(rows(hit.edge_t), [0.25, 0.5, 0.0, 0.5], atol=1e-6)
    np.testing.assert_allclose(rows(hit.edge_point), [[0.25, 0, 0], [0.5, 0.5, 0], [0, 0, 0], [1, 0.5, 0]], atol=1e-6)
    assert rows(hit.is_valid()).all() and hit.shape == (4,)
    assert type(hit.distance) is m.Float and type(hit.edge_point) is m.Array3f and type(hit.edge_id) is m.Int
    with pytest.raises(AttributeError, match="only ray queries"):
        hit.ray_t  # noqa: B018
    double = scene.nearest_edge(vec(m.Array3f64, [[0.3, -0.5, 0.0]]))
    assert type(double.distance) is m.Float64 and type(double.edge_point) is m.Array3f64


def test_misses_active_and_max_distance(m):
    scene, _ = _square(m)
    p = vec(m.Array3f, [[0.5, -1.0, 0.0], [0.5, -3.0, 0.0], [math.nan, 0.0, 0.0], [0.5, -1.0, 0.0]])
    hit = scene.nearest_edge(p, m.Bool([True, True, True, False]), max_distance=2.0)
    assert rows(hit.global_edge_id).tolist() == [0, -1, -1, -1]
    assert rows(hit.edge_id).tolist() == [0, -1, -1, -1] and rows(hit.shape_id).tolist() == [0, -1, -1, -1]
    assert np.isinf(rows(hit.distance)[1:]).all()
    assert (rows(hit.edge_t)[1:] == 0).all() and (rows(hit.edge_point)[1:] == 0).all()
    one = scene.nearest_edge(vec(m.Array3f, [[0.5, -1.0, 0.0]]), m.Bool([True, False]))
    assert rows(one.global_edge_id).tolist() == [0, -1]
    empty = scene.nearest_edge(m.Array3f())
    assert empty.shape == (0,) and dr.width(empty.distance) == 0


def test_rays_hand_derived(m):
    scene, _ = _square(m)
    o = vec(m.Array3f, [[0.5, -1.0, 1.0], [0.25, -2.0, 0.0], [2.0, 0.5, 0.0], [0.25, -2.0, 0.0]])
    d = vec(m.Array3f, [[0.0, 0.0, -1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    hit = scene.nearest_edge(rd.Ray(o, d, tmax=m.Float([math.inf, math.inf, math.inf, 1.0])))
    # down beside edge (0,1): closest at s = 1; away from the square: s = 0; half-line
    # onto edge (1,3) from x = 2: s = 0, distance 1; a bounded ray stopping 1 short of y = 0
    assert rows(hit.global_edge_id).tolist()[:3] == [0, 0, 3]
    np.testing.assert_allclose(rows(hit.distance), [1.0, 2.0, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(rows(hit.ray_t), [1.0, 0.0, 0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(rows(hit.ray_point)[:3], [[0.5, -1, 0], [0.25, -2, 0], [2, 0.5, 0]], atol=1e-6)
    np.testing.assert_allclose(rows(hit.edge_point)[:3], [[0.5, 0, 0], [0.25, 0, 0], [1, 0.5, 0]], atol=1e-6)
    bad = scene.nearest_edge(rd.Ray(vec(m.Array3f, [[0.5, -1.0, 1.0]]), vec(m.Array3f, [[0.0, 0.0, 0.0]])))
    assert rows(bad.global_edge_id).tolist() == [-1] and np.isinf(rows(bad.distance)).all()
    assert rows(bad.ray_t).tolist() == [0.0] and (rows(bad.ray_point) == 0).all()


def test_transform_and_instances(m):
    v = vec(m.Array3f, SQUARE_V)
    faces = vec(m.Array3u, SQUARE_F)
    shift = np.eye(4)
    shift[:3, 3] = [0.0, 0.0, 5.0]
    scene = rd.Scene()
    mesh_id = scene.add_mesh(rd.Mesh(v, faces, to_world=m.Matrix4f(shift.tolist())))
    scene.add_instance(mesh_id, m.Matrix4f(_placement().tolist()))
    scene.build()
    hit = scene.nearest_edge(vec(m.Array3f, [[0.5, -1.0, 5.0], [2.5, 0.5, 5.3 + 1.0]]))
    assert rows(hit.shape_id).tolist() == [0, 1]
    np.testing.assert_allclose(rows(hit.distance), [1.0, 1.0], rtol=1e-6)
    assert rows(hit.global_edge_id)[1] >= 5 and rows(hit.edge_id)[1] < 5


# ---------------------------------------------------------------------- parity
def _assert_parity(got, want):
    d_got, d_want = rows(got.distance).astype(np.float64), want.distance.cpu().numpy().astype(np.float64)
    # rayd.torch evaluates float32 inputs in float32, rayd.drjit in float64 inside:
    # float32 coordinates of magnitude ~1 carry ~1e-7 absolute error in small distances.
    np.testing.assert_allclose(d_got, d_want, rtol=1e-5, atol=1e-6)
    ids_got, ids_want = rows(got.global_edge_id), want.global_edge_id.cpu().numpy()
    assert (ids_got >= 0).sum() == (ids_want >= 0).sum()
    assert (ids_got != ids_want).mean() < 0.01  # ties only: the distances above agree


def test_point_parity_with_rayd_torch(backend, m):
    ds, ts = _parity_scenes(backend, m)
    rng = np.random.default_rng(5)
    p = rng.uniform([-1.5, -1.5, -0.5], [3.5, 1.5, 1.5], (3000, 3))
    got = ds.nearest_edge(vec(m.Array3f, p))
    want = ts.nearest_edge(torch.tensor(p, dtype=torch.float32, device=_torch_device(backend)))
    _assert_parity(got, want)
    for name in ("edge_t", "edge_point"):
        same = rows(got.global_edge_id) == want.global_edge_id.cpu().numpy()
        np.testing.assert_allclose(rows(getattr(got, name))[same], getattr(want, name).cpu().numpy()[same], atol=1e-5)


@pytest.mark.parametrize("bounded", [False, True])
def test_ray_parity_with_rayd_torch(backend, m, bounded):
    ds, ts = _parity_scenes(backend, m)
    rng = np.random.default_rng(6)
    o = rng.uniform([-2, -2, -1], [4, 2, 2], (1500, 3))
    d = rng.normal(size=(1500, 3))
    tmax = rng.uniform(0.1, 2.0, 1500) if bounded else math.inf
    dev = _torch_device(backend)
    got = ds.nearest_edge(rd.Ray(vec(m.Array3f, o), vec(m.Array3f, d), m.Float(tmax) if bounded else tmax))
    tt = torch.tensor(tmax, dtype=torch.float32, device=dev) if bounded else tmax
    want = ts.nearest_edge(rt.Ray(_t32(o, dev), _t32(d, dev), tt))
    _assert_parity(got, want)
    same = rows(got.global_edge_id) == want.global_edge_id.cpu().numpy()
    np.testing.assert_allclose(rows(got.ray_t)[same], want.ray_t.cpu().numpy()[same], rtol=1e-4, atol=1e-4)


def test_silhouette_parity_with_rayd_torch(backend, m):
    ds, ts = _parity_scenes(backend, m)
    for c in ([0.3, -0.2, 3.0], [-4.0, 0.5, 0.2], [2.5, 0.1, 0.0]):
        got = ds.silhouette_edges(m.Array3f(*c))
        want = ts.silhouette_edges(torch.tensor(c, device=_torch_device(backend)))
        assert np.array_equal(rows(got), want.cpu().numpy())


# ---------------------------------------------------------------------- top-k, masks, refit
def test_top_k_order_ties_and_unfilled_slots(backend, m):
    scene, _ = _square(m)
    p = vec(m.Array3f, [[2.0, 2.0, 0.0], [0.5, -1.0, 0.0]])
    hit = scene.nearest_edges(p, 6, max_distance=2.5)
    assert hit.shape == (2, 6)
    ids = rows(hit.global_edge_id).reshape(2, 6)
    dist = rows(hit.distance).reshape(2, 6)
    # (2, 2): edges (1,3) and (2,3) tie at sqrt(2), ids ascending; slot 6 unfilled
    assert ids[0, :2].tolist() == [3, 4] and ids[0, 5] == -1 and np.isinf(dist[0, 5])
    assert (np.diff(dist[0, :5]) >= 0).all() and ids[1, 0] == 0
    ds, ts = _parity_scenes(backend, m)
    q = np.random.default_rng(2).uniform(-1, 1, (200, 3))
    got = ds.nearest_edges(vec(m.Array3f, q), 5)
    want = ts.nearest_edges(torch.tensor(q, dtype=torch.float32, device=_torch_device(backend)), 5)
    np.testing.assert_allclose(rows(got.distance), want.distance.reshape(-1).cpu().numpy(), rtol=1e-5, atol=1e-6)


def test_edge_mask_and_disabled_shapes(m):
    scene, _ = _square(m)
    assert rows(scene.edge_mask()).all()
    p = vec(m.Array3f, [[0.5, -1.0, 0.0]])
    scene.set_edge_mask(m.Bool([False, True, True, True, True]))
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match=r"nearest_edge\(\).*edge mask.*sync"):
        scene.nearest_edge(p)
    scene.sync()
    assert rows(scene.edge_mask()).tolist() == [False, True, True, True, True]
    assert rows(scene.nearest_edge(p).global_edge_id).tolist() != [0]
    scene.set_shape_enabled(0, False)
    scene.sync()
    assert rows(scene.nearest_edge(p).global_edge_id).tolist() == [-1]


def test_edges_follow_a_sync_after_vertex_update(m):
    scene, _ = _square(m, dynamic=True)
    p = vec(m.Array3f, [[0.5, -1.0, 3.0]])
    assert rows(scene.nearest_edge(p).distance)[0] == pytest.approx(math.sqrt(10.0), rel=1e-6)
    moved = vec(m.Array3f, [[x, y, 3.0] for x, y, _ in SQUARE_V])
    scene.update_mesh_vertices(0, moved)
    with pytest.raises(RuntimeError, match="sync"):
        scene.nearest_edge(p)
    scene.sync()
    hit = scene.nearest_edge(p)
    assert rows(hit.distance)[0] == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(rows(hit.edge_point), [[0.5, 0.0, 3.0]], atol=1e-6)


# ---------------------------------------------------------------------- gradients
V64 = np.array([[0.0, 0.0, 0.0], [1.0, 0.1, 0.05], [0.1, 1.0, -0.1], [1.1, 0.9, 0.2]])
POINTS = np.array([[0.3, -0.6, 0.2], [0.7, 0.6, 0.4], [1.6, 0.4, -0.3], [-0.4, 0.5, 0.1]])
O = np.array([[0.4, -0.8, 1.0], [1.7, 0.3, 0.5], [0.2, 0.3, 0.9]])
D = np.array([[0.1, 0.05, -1.0], [-0.05, 0.1, -0.8], [0.3, -0.2, 0.1]])
RNG = np.random.default_rng(11)
W = {name: RNG.normal(size=shape) for name, shape in
     (("distance", 4), ("edge_t", 4), ("edge_point", (4, 3)), ("ray_t", 3), ("ray_point", (3, 3)))}


def _loss(m, hit, n):
    total = m.Float64(0.0)
    for name in ("distance", "edge_t", "ray_t"):
        if name in hit._fields:
            total += dr.sum(dr.select(hit.is_valid(), getattr(hit, name), 0) * m.Float64(W[name][:n]))
    for name in ("edge_point", "ray_point"):
        if name in hit._fields:
            total += dr.sum(dr.sum(getattr(hit, name) * vec(m.Array3f64, W[name][:n])))
    return total


def _value(m, v, q, ray):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, SQUARE_F)))
    scene.build()
    return scene.nearest_edge(rd.Ray(q[0], q[1], 2.0, tmin=0.1) if ray else q)


@pytest.mark.parametrize("ray", [False, True])
def test_gradients_match_finite_differences(m, ray):
    x0 = {"v": V64, "o": O, "d": D} if ray else {"v": V64, "p": POINTS}
    n = 3 if ray else 4

    def evaluate(x, grad=False):
        arrays = {k: vec(m.Array3f64, a) for k, a in x.items()}
        if grad:
            dr.enable_grad(*arrays.values())
        q = (arrays["o"], arrays["d"]) if ray else arrays["p"]
        hit = _value(m, arrays["v"], q, ray)
        assert rows(hit.is_valid()).all()
        return _loss(m, hit, n), arrays

    loss, arrays = evaluate(x0, grad=True)
    dr.backward(loss)
    tangent = {k: RNG.normal(size=a.shape) for k, a in x0.items()}
    reverse = sum(float((rows(dr.grad(arrays[k])) * tangent[k]).sum()) for k in x0)
    h = 1e-6
    plus = evaluate({k: x0[k] + h * tangent[k] for k in x0})[0]
    minus = evaluate({k: x0[k] - h * tangent[k] for k in x0})[0]
    numeric = (float(plus[0]) - float(minus[0])) / (2 * h)
    assert reverse == pytest.approx(numeric, rel=max(grad_rtol(m), 1e-6), abs=1e-7)
    # forward mode along the same tangent
    loss, arrays = evaluate(x0, grad=True)
    for k in x0:
        dr.set_grad(arrays[k], vec(m.Array3f64, tangent[k]))
    dr.forward_to(loss)
    assert float(dr.grad(loss)[0]) == pytest.approx(numeric, rel=max(grad_rtol(m), 1e-6), abs=1e-7)


def test_top_k_gradient_reaches_points_and_vertices(m):
    v = vec(m.Array3f64, V64)
    p = vec(m.Array3f64, POINTS[:2])
    dr.enable_grad(v, p)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, SQUARE_F)))
    scene.build()
    hit = scene.nearest_edges(p, 3)
    dr.backward(dr.sum(hit.distance))
    # d(sum of distances)/dp = sum of unit directions from each edge point
    unit = (rows(p)[:, None] - rows(hit.edge_point).reshape(2, 3, 3))
    unit /= np.linalg.norm(unit, axis=-1, keepdims=True)
    np.testing.assert_allclose(rows(dr.grad(p)), unit.sum(1), rtol=grad_rtol(m), atol=1e-9)
    assert np.abs(rows(dr.grad(v))).sum() > 0


def test_misses_have_zero_gradient_never_nan(m):
    v = vec(m.Array3f, SQUARE_V)
    p = vec(m.Array3f, [[0.5, -9.0, 0.0], [0.5, 0.0, 0.0]])  # far away; exactly on an edge
    dr.enable_grad(v, p)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, SQUARE_F)))
    scene.build()
    hit = scene.nearest_edge(p, max_distance=1.0)
    assert rows(hit.global_edge_id).tolist() == [-1, 0]
    dr.backward(dr.sum(dr.select(hit.is_valid(), hit.distance, 0)) + dr.sum(dr.sum(hit.edge_point)))
    gp, gv = rows(dr.grad(p)), rows(dr.grad(v))
    assert np.isfinite(gp).all() and np.isfinite(gv).all()
    assert (gp[0] == 0).all()


# ---------------------------------------------------------------------- errors
def test_bad_input_names_call_and_argument(m, plain):
    scene, _ = _square(m)
    p = vec(m.Array3f, [[0.0, 0.0, 0.0]])
    with pytest.raises(TypeError, match=r"rayd\.drjit\.Scene\.nearest_edge\(\): 'points_or_ray'.*do not mix"):
        scene.nearest_edge(torch.zeros(1, 3))
    with pytest.raises(TypeError, match=r"nearest_edges\(\): 'points'"):
        scene.nearest_edges(torch.zeros(1, 3), 2)
    with pytest.raises(TypeError, match=r"nearest_edge\(\): 'points'"):
        scene.nearest_edge(vec(m.Array3i, [[0, 0, 0]]))
    with pytest.raises(ValueError, match=r"nearest_edge\(\): 'points' must have shape \(N, 3\)"):
        scene.nearest_edge(m.Array2f(0, 0))
    with pytest.raises(TypeError, match=r"nearest_edge\(\): 'points_or_ray'.*do not mix"):
        scene.nearest_edge(rt.Ray(torch.zeros(3), torch.ones(3)))
    with pytest.raises(TypeError, match=r"nearest_edge\(\): 'active'"):
        scene.nearest_edge(p, m.Float(1.0))
    with pytest.raises(ValueError, match=r"nearest_edge\(\): batch shapes"):
        scene.nearest_edge(vec(m.Array3f, [[0, 0, 0]] * 2), m.Bool([True] * 3))
    with pytest.raises(TypeError, match=r"nearest_edge\(\): 'max_distance'"):
        scene.nearest_edge(p, max_distance="far")
    with pytest.raises(ValueError, match=r"nearest_edge\(\): 'max_distance'"):
        scene.nearest_edge(p, max_distance=-1.0)
    with pytest.raises(TypeError, match=r"nearest_edges\(\): 'k'"):
        scene.nearest_edges(p, 2.0)
    with pytest.raises(ValueError, match=r"nearest_edges\(\): 'k' must be in \[1, 16\]"):
        scene.nearest_edges(p, 17)
    with pytest.raises(TypeError, match=r"set_edge_mask\(\): 'mask'"):
        scene.set_edge_mask(m.Int([1] * 5))
    with pytest.raises(ValueError, match=r"set_edge_mask\(\): 'mask' must have shape \(5,\)"):
        scene.set_edge_mask(m.Bool([True] * 4))
    with pytest.raises(ValueError, match=r"silhouette_edges\(\): 'viewpoint' must have shape \(3,\)"):
        scene.silhouette_edges(vec(m.Array3f, [[0, 0, 1]] * 2))
    with pytest.raises(TypeError, match=r"silhouette_edges\(\): 'viewpoint'"):
        scene.silhouette_edges([0.0, 0.0, 1.0])


def test_unbuilt_scene_errors(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARE_V), vec(m.Array3u, SQUARE_F)))
    p = vec(m.Array3f, [[0.0, 0.0, 0.0]])
    calls = {
        "edge_topology": lambda: scene.edge_topology(),
        "edge_mask": lambda: scene.edge_mask(),
        "set_edge_mask": lambda: scene.set_edge_mask(m.Bool([True] * 5)),
        "nearest_edge": lambda: scene.nearest_edge(p),
        "nearest_edges": lambda: scene.nearest_edges(p, 2),
        "silhouette_edges": lambda: scene.silhouette_edges(m.Array3f(0, 0, 1)),
    }
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match=rf"rayd\.drjit\.Scene\.{name}\(\): the scene is not built"):
            call()


def test_gradient_reaches_transforms_and_edges_follow_them(m):
    M = np.eye(4)
    M[:3, :3] = [[1.1, 0.1, 0.0], [0.0, 0.9, 0.05], [0.02, 0.0, 1.0]]
    M[:3, 3] = [0.01, -0.02, 0.03]
    p = vec(m.Array3f64, POINTS)

    def loss_at(matrix, grad=False):
        to_world = m.Matrix4f64(matrix.tolist())
        if grad:
            dr.enable_grad(to_world)
        scene = rd.Scene()
        scene.add_mesh(rd.Mesh(vec(m.Array3f64, V64), vec(m.Array3u, SQUARE_F), to_world=to_world))
        scene.build()
        return _loss(m, scene.nearest_edge(p), 4), to_world

    loss, to_world = loss_at(M, grad=True)
    dr.backward(loss)
    grad = np.array(dr.grad(to_world), dtype=np.float64).reshape(4, 4)
    tangent = np.zeros((4, 4))
    tangent[:3] = RNG.normal(size=(3, 4))
    h = 1e-6
    numeric = (float(loss_at(M + h * tangent)[0][0]) - float(loss_at(M - h * tangent)[0][0])) / (2 * h)
    assert float((grad * tangent).sum()) == pytest.approx(numeric, rel=max(grad_rtol(m), 1e-6), abs=1e-7)

    # a transform change takes effect at sync(): the edges move with it
    scene, _ = _square(m)
    q = vec(m.Array3f, [[0.5, -1.0, 2.0]])
    lift = np.eye(4)
    lift[2, 3] = 2.0
    scene.set_mesh_transform(0, m.Matrix4f(lift.tolist()))
    scene.sync()
    assert rows(scene.nearest_edge(q).distance)[0] == pytest.approx(1.0, rel=1e-6)


def test_edge_queries_work_without_torch(backend):
    # rayd.drjit computes the topology in the engine: torch is never imported.
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        f"import drjit.{backend}.ad as m\n"
        "import rayd.drjit as rd\n"
        "s = rd.Scene()\n"
        "s.add_mesh(rd.Mesh(m.Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2])))\n"
        "s.build()\n"
        "print(s.edge_topology().num_edges, s.nearest_edge(m.Array3f(0.5, -1, 0)).distance[0])\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["3", "1.0"]


def test_silhouette_edges_skip_masked_edges_and_disabled_shapes(m):
    # shape 0: the unit square ((1,2) interior); shape 1: one triangle at z = 5. Seen from above.
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARE_V), vec(m.Array3u, SQUARE_F)))
    scene.add_mesh(rd.Mesh(vec(m.Array3f, [[0, 0, 5.0], [1, 0, 5], [0, 1, 5]]), vec(m.Array3u, [[0, 1, 2]])))
    scene.build()
    eye = m.Array3f(0.3, 0.3, 10.0)
    assert rows(scene.silhouette_edges(eye)).tolist() == [True, True, False, True, True, True, True, True]
    scene.set_edge_mask(m.Bool([False, True, True, True, True, True, False, True]))
    scene.sync()
    assert rows(scene.silhouette_edges(eye)).tolist() == [False, True, False, True, True, True, False, True]
    scene.set_shape_enabled(1, False)
    scene.sync()
    assert rows(scene.silhouette_edges(eye)).tolist() == [False, True, False, True, True, False, False, False]
    scene.set_edge_mask(m.Bool([True] * 8))
    scene.set_shape_enabled(1, True)
    scene.sync()
    assert rows(scene.silhouette_edges(eye)).tolist() == [True, True, False, True, True, True, True, True]


def test_ray_with_tmax_equal_tmin_is_the_point_at_tmin(m):
    # DESIGN: the ray's segment is s in [tmin, tmax], closed, so tmax == tmin is the point
    # o + tmin d (only tmax < tmin is the malformed-ray miss).
    scene, _ = _square(m)
    o = vec(m.Array3f, [[0.25, -3.0, 0.5], [0.6, 0.6, 4.0]])
    d = vec(m.Array3f, [[0.0, 1.0, 0.0], [0.0, 0.0, -1.0]])
    s = m.Float([2.0, 3.7])
    dr.enable_grad(o)
    hit = scene.nearest_edge(rd.Ray(o, d, tmax=s, tmin=m.Float(s)))
    # ray 0 stops at (0.25, -1, 0.5): edge (0,1) at sqrt(1.25); ray 1 at (0.6, 0.6, 0.3): diagonal, sqrt(0.11)
    assert rows(hit.global_edge_id).tolist() == [0, 2]
    np.testing.assert_allclose(rows(hit.distance), [math.sqrt(1.25), math.sqrt(0.11)], rtol=1e-5)
    np.testing.assert_allclose(rows(hit.ray_t), [2.0, 3.7], rtol=1e-6)
    np.testing.assert_allclose(rows(hit.ray_point), [[0.25, -1.0, 0.5], [0.6, 0.6, 0.3]], atol=1e-6)
    dr.backward(dr.sum(hit.distance))
    grad = [[0, -1 / math.sqrt(1.25), 0.5 / math.sqrt(1.25)],
            [0.1 / math.sqrt(0.11), 0.1 / math.sqrt(0.11), 0.3 / math.sqrt(0.11)]]
    np.testing.assert_allclose(rows(dr.grad(o)), grad, rtol=1e-4, atol=1e-5)
    below = scene.nearest_edge(rd.Ray(dr.detach(o), d, tmax=s, tmin=s + 1e-3))  # tmax < tmin: a miss
    assert rows(below.global_edge_id).tolist() == [-1, -1] and np.isinf(rows(below.distance)).all()


@pytest.mark.parametrize("length", [1e-35, 1e-30, 1e-25, 1e20, 1e25, 1e35])
def test_ray_of_tiny_or_huge_direction(m, length):
    # float32 rays whose |d| squares out of float32's range (break-it 17): the search scales d by
    # powers of two, the float64 evaluation does the rest. Straight down through (0.25, 0.25).
    scene, _ = _square(m)
    o = vec(m.Array3f, [[0.25, 0.25, 1.0], [0.6, 0.3, 2.0]])
    unit = scene.nearest_edge(rd.Ray(o, m.Array3f(0.0, 0.0, -1.0)))
    hit = scene.nearest_edge(rd.Ray(o, m.Array3f(0.0, 0.0, -length)))
    assert rows(hit.global_edge_id).tolist() == rows(unit.global_edge_id).tolist() == [0, 2]
    np.testing.assert_allclose(rows(hit.distance), rows(unit.distance), rtol=1e-6)
    np.testing.assert_allclose(rows(hit.ray_t) * length, rows(unit.ray_t), rtol=1e-6)
