"""Scene.intersect_all and Scene.count_intersections (rayd.torch): float64 brute force on random
meshes, exact crossing counts of nested closed spheres through vertices and edges, merge rule,
order, padding, cap, interval, ignore, active, instances, disabled shapes, gradients, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rayd.torch as rt
from allhits_reference import all_hits as brute_all_hits
from reference import grid, icosphere

F64 = torch.float64


def _scene(vertices, faces, device, dtype=F64):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(vertices, dtype=dtype, device=device),
                           torch.as_tensor(faces, device=device)))
    scene.build()
    return scene


def _random_mesh(seed, vertices=40, faces=90):
    """A random triangle soup over a shared vertex pool (faces share vertex indices)."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(-1, 1, (vertices, 3))
    f = np.array([rng.choice(vertices, 3, replace=False) for _ in range(faces)])
    return v, f


def _random_rays(seed, n=300):
    rng = np.random.default_rng(seed + 100)
    o = rng.uniform(-1, 1, (n, 3)) * 3
    target = rng.uniform(-0.7, 0.7, (n, 3))
    return o, (target - o) * rng.uniform(0.5, 2.0, (n, 1))


def _nested_spheres(radii, subdivisions=2):
    vs, fs, off = [], [], 0
    for r in radii:
        v, f = icosphere(subdivisions, r)
        vs.append(v)
        fs.append(f + off)
        off += len(v)
    return np.concatenate(vs), np.concatenate(fs)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_mesh_vs_brute_force(device, seed):
    v, f = _random_mesh(seed)
    o, d = _random_rays(seed)
    scene = _scene(v, f, device)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    hits = scene.intersect_all(ray, 64)
    count = scene.count_intersections(ray).cpu().numpy()
    ref, clear = brute_all_hits(o, d, v, f)
    assert clear.sum() > 250
    assert max(len(r) for r in ref) >= 6  # rays with many hits
    t = hits.t.cpu().numpy()
    gid = hits.global_prim_id.cpu().numpy()
    p = hits.p.cpu().numpy()
    for i in np.nonzero(clear)[0]:
        want = ref[i]
        k = len(want)
        assert count[i] == k
        np.testing.assert_array_equal(gid[i, :k], [w[1] for w in want])
        np.testing.assert_allclose(t[i, :k], [w[0] for w in want], rtol=1e-10)
        np.testing.assert_allclose(p[i, :k], o[i] + t[i, :k, None] * d[i], rtol=1e-10, atol=1e-12)
        assert np.all(gid[i, k:] == -1) and np.all(np.isinf(t[i, k:]))
    assert (count == hits.is_valid().sum(-1).cpu().numpy()).all()


def test_fields_equal_intersect_per_slot(device):
    """Slot k's fields are intersect()'s for the ray restarted just past slot k-1's hit."""
    v, f = _random_mesh(3)
    o, d = _random_rays(3, 80)
    scene = _scene(v, f, device)
    o_t, d_t = torch.tensor(o, device=device), torch.tensor(d, device=device)
    hits = scene.intersect_all(rt.Ray(o_t, d_t), 8)
    first = scene.intersect(rt.Ray(o_t, d_t))
    for name in ("t", "p", "n", "geo_n", "barycentric", "uv", "prim_id", "shape_id", "global_prim_id"):
        torch.testing.assert_close(getattr(hits, name)[:, 0], getattr(first, name), rtol=0, atol=0)
    # Slot 1 is the closest hit once slot 0's face is ignored (no shared-edge merges on these rays).
    second = scene.intersect(rt.Ray(o_t, d_t), ignore=first.global_prim_id)
    torch.testing.assert_close(hits.global_prim_id[:, 1], second.global_prim_id)
    torch.testing.assert_close(hits.t[:, 1], second.t)


def _sphere_directions():
    v, f = icosphere(2)
    u = np.concatenate([v, (v[f[:, 0]] + v[f[:, 1]]) / 2, (v[f[:, 1]] + v[f[:, 2]]) / 2,
                        v[f].mean(1), np.random.default_rng(7).normal(size=(64, 3))])
    return u / np.linalg.norm(u, axis=1, keepdims=True), v, f


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_nested_spheres_exact_counts_through_vertices_and_edges(device, dtype):
    """Rays through the centre of n nested closed spheres cross 2n surfaces, also exactly through
    mesh vertices and edge midpoints (where the watertight test reports every incident face)."""
    radii = [1.0, 1.5, 2.0, 2.5, 3.0]  # 10 crossings: more than one counting round
    v, f = _nested_spheres(radii)
    scene = _scene(v, f, device, dtype)
    u, _, _ = _sphere_directions()
    o = torch.tensor(10 * u, dtype=dtype, device=device)
    d = torch.tensor(-u, dtype=dtype, device=device)
    ray = rt.Ray(o, d)
    count = scene.count_intersections(ray)
    assert (count == 2 * len(radii)).all(), count.unique()
    hits = scene.intersect_all(ray, 16)
    assert (hits.is_valid().sum(-1) == 2 * len(radii)).all()
    t = hits.t[:, : 2 * len(radii)].double().cpu().numpy()
    vertex_rays = len(icosphere(2)[0])
    want = np.array([10 - r for r in radii[::-1]] + [10 + r for r in radii])
    tol = 1e-6 if dtype == F64 else 2e-5
    np.testing.assert_allclose(t[:vertex_rays], np.broadcast_to(want, (vertex_rays, want.size)), rtol=tol)
    assert (np.diff(t, axis=1) > 0).all()
    # Without the merge, rays through vertices would list every face of the vertex's fan.
    assert (hits.global_prim_id[:, 10:] == -1).all()


def test_nested_spheres_from_inside(device):
    radii = [1.0, 2.0, 3.0]
    v, f = _nested_spheres(radii)
    scene = _scene(v, f, device)
    u, _, _ = _sphere_directions()
    ray = rt.Ray(torch.zeros(3, dtype=F64, device=device), torch.tensor(u, device=device))
    assert (scene.count_intersections(ray) == 3).all()
    hits = scene.intersect_all(ray, 4)
    np.testing.assert_allclose(hits.t[: len(icosphere(2)[0]), :3].cpu().numpy(),
                               np.broadcast_to(radii, (len(icosphere(2)[0]), 3)), rtol=1e-9)


def test_grid_vertices_and_edges_count_once(device):
    v, f = grid(4)
    scene = _scene(v.astype(np.float64), f, device)
    axis = np.linspace(-1.0, 1.0, 5)[1:-1]
    points = [(x, y) for x in axis for y in axis]  # interior vertices (6 faces each)
    points += [(x + 0.25, y) for x, y in points] + [(x, y + 0.25) for x, y in points]  # edge midpoints
    points += [(x + 0.25, y + 0.25) for x, y in points[: len(axis) ** 2]]  # diagonal midpoints
    xy = np.array(points)
    o = np.concatenate([xy, np.full((len(xy), 1), 1.0)], 1)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor([0.0, 0.0, -1.0], dtype=F64, device=device))
    hits = scene.intersect_all(ray, 8)
    assert (scene.count_intersections(ray) == 1).all()
    assert (hits.is_valid().sum(-1) == 1).all()
    # The crossing keeps the smallest global_prim_id among the faces that hold the point.
    f_xy = v[f][:, :, :2].astype(np.float64)
    for i, (x, y) in enumerate(xy):
        holding = [k for k in range(len(f)) if _in_closed_triangle(f_xy[k], x, y)]
        assert len(holding) >= 2
        assert hits.global_prim_id[i, 0].item() == min(holding)
    torch.testing.assert_close(hits.t[:, 0], torch.ones(len(xy), dtype=F64, device=device))


def _in_closed_triangle(tri, x, y):
    (ax, ay), (bx, by), (cx, cy) = tri
    det = (bx - ax) * (cy - ay) - (cx - ax) * (by - ay)
    u = ((x - ax) * (cy - ay) - (cx - ax) * (y - ay)) / det
    v = ((bx - ax) * (y - ay) - (x - ax) * (by - ay)) / det
    return min(u, v, 1 - u - v) >= -1e-12


def test_grazing_silhouette_edge_counts_once(device):
    """A ray tangent to a convex ridge touches both faces at one point: one crossing."""
    v = np.array([[-1.0, 0.0, 1.0], [1.0, 0.0, 1.0], [0.0, -1.0, 0.0], [0.0, 1.0, 0.0]])
    f = np.array([[0, 1, 2], [0, 1, 3]])
    scene = _scene(v, f, device)
    ray = rt.Ray(torch.tensor([0.25, -5.0, 1.0], dtype=F64, device=device),
                 torch.tensor([0.0, 1.0, 0.0], dtype=F64, device=device))
    hits = scene.intersect_all(ray, 4)
    assert scene.count_intersections(ray).item() == 1
    assert hits.global_prim_id.tolist() == [0, -1, -1, -1]
    assert hits.t[0].item() == pytest.approx(5.0, rel=1e-12)
    # Two separate faces (no shared vertex index) at the same place are two crossings.
    v2 = np.concatenate([v[:3], v[:2], v[3:]])
    scene2 = _scene(v2, np.array([[0, 1, 2], [3, 4, 5]]), device)
    assert scene2.count_intersections(ray).item() == 2
    assert scene2.intersect_all(ray, 4).global_prim_id.tolist() == [0, 1, -1, -1]


def test_order_padding_and_cap(device):
    v, f = _nested_spheres([1.0, 2.0, 3.0])
    scene = _scene(v, f, device)
    u, _, _ = _sphere_directions()
    ray = rt.Ray(torch.tensor(10 * u, device=device), torch.tensor(-u, device=device))
    full = scene.intersect_all(ray, 64)
    assert full.t.shape == (len(u), 64) and full.p.shape == (len(u), 64, 3) and full.uv.shape == (len(u), 64, 2)
    valid = full.is_valid()
    assert valid.shape == (len(u), 64) and (valid.sum(-1) == 6).all()
    pad = ~valid
    assert torch.isinf(full.t[pad]).all() and (full.prim_id[pad] == -1).all() and (full.shape_id[pad] == -1).all()
    assert (full.global_prim_id[pad] == -1).all()
    for name in ("p", "n", "geo_n", "barycentric", "uv"):
        assert (getattr(full, name)[pad] == 0).all(), name
    for k in (1, 2, 5):
        capped = scene.intersect_all(ray, k)
        assert capped.t.shape == (len(u), k)
        torch.testing.assert_close(capped.t, full.t[:, :k], rtol=0, atol=0)
        torch.testing.assert_close(capped.global_prim_id, full.global_prim_id[:, :k])
    assert (scene.count_intersections(ray) == 6).all()  # exact, whatever the cap


def test_interval(device):
    v, f = _random_mesh(4)
    o, d = _random_rays(4, 200)
    scene = _scene(v, f, device)
    rng = np.random.default_rng(1)
    tmin = rng.uniform(-0.5, 0.6, len(o))
    tmax = tmin + rng.uniform(0.05, 0.8, len(o))
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device),
                 torch.tensor(tmax, device=device), tmin=torch.tensor(tmin, device=device))
    hits = scene.intersect_all(ray, 64)
    count = scene.count_intersections(ray).cpu().numpy()
    ref, clear = brute_all_hits(o, d, v, f, tmin, tmax)
    assert clear.sum() > 150
    t = hits.t.cpu().numpy()
    for i in np.nonzero(clear)[0]:
        k = len(ref[i])
        assert count[i] == k
        np.testing.assert_allclose(t[i, :k], [w[0] for w in ref[i]], rtol=1e-10)
        assert np.all(np.isinf(t[i, k:]))
    assert (t[np.isfinite(t)] > np.broadcast_to(tmin[:, None], t.shape)[np.isfinite(t)]).all()
    # Scalar bounds.
    ray2 = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device), 0.7, tmin=0.2)
    t2 = scene.intersect_all(ray2, 64).t.cpu().numpy()
    ref2, clear2 = brute_all_hits(o, d, v, f, 0.2, 0.7)
    for i in np.nonzero(clear2)[0]:
        np.testing.assert_allclose(t2[i, : len(ref2[i])], [w[0] for w in ref2[i]], rtol=1e-10)


def test_ignore_and_active(device):
    v, f = _random_mesh(5)
    o, d = _random_rays(5, 200)
    scene = _scene(v, f, device)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    full = scene.intersect_all(ray, 64)
    skip = full.global_prim_id[:, 0]
    without = scene.intersect_all(ray, 64, ignore=skip)
    torch.testing.assert_close(without.global_prim_id[:, :-1], full.global_prim_id[:, 1:])
    torch.testing.assert_close(without.t[:, :-1], full.t[:, 1:])
    counts = scene.count_intersections(ray)
    torch.testing.assert_close(scene.count_intersections(ray, ignore=skip), counts - (skip >= 0).int())
    assert scene.intersect_all(ray, 64, ignore=-1).global_prim_id.equal(full.global_prim_id)
    active = torch.arange(len(o), device=device) % 3 != 0
    masked = scene.intersect_all(ray, 64, active)
    assert (masked.global_prim_id[~active] == -1).all() and torch.isinf(masked.t[~active]).all()
    torch.testing.assert_close(masked.t[active], full.t[active])
    torch.testing.assert_close(scene.count_intersections(ray, active), torch.where(active, counts, 0))


def test_instances_and_disabled_shapes(device):
    v, f = icosphere(1)
    scene = rt.Scene()
    mesh_id = scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)))
    placements = []
    for k, r in enumerate((2.0, 3.0)):
        m = np.diag([r, r, r, 1.0])
        m[:3, 3] = [0.001 * k, 0.0, 0.0]
        placements.append(m)
        scene.add_instance(mesh_id, torch.tensor(m, device=device))
    scene.build()
    u, _, _ = _sphere_directions()
    u = u[-64:]  # random directions
    o, d = 10 * u, -u
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    hits = scene.intersect_all(ray, 8)
    world = [v] + [v @ m[:3, :3].T + m[:3, 3] for m in placements]
    faces = np.concatenate([f + k * len(v) for k in range(3)])
    ref, clear = brute_all_hits(o, d, np.concatenate(world), faces)
    t = hits.t.cpu().numpy()
    gid = hits.global_prim_id.cpu().numpy()
    for i in np.nonzero(clear)[0]:
        np.testing.assert_array_equal(gid[i, :6], [w[1] for w in ref[i]])
        np.testing.assert_allclose(t[i, :6], [w[0] for w in ref[i]], rtol=1e-9)
    assert set(hits.shape_id[:, :6].unique().tolist()) == {0, 1, 2}
    assert (scene.count_intersections(ray) == 6).all()
    scene.set_shape_enabled(0, False)
    scene.set_shape_enabled(2, False)
    scene.sync()
    only = scene.intersect_all(ray, 8)
    assert (only.is_valid().sum(-1) == 2).all() and (only.shape_id[:, :2] == 1).all()
    assert (scene.count_intersections(ray) == 2).all()
    np.testing.assert_allclose(only.t[:, :2].cpu().numpy(), np.broadcast_to([8.0, 12.0], (64, 2)), rtol=0.05)


def test_instance_vertices_count_once(device):
    """Rays exactly through an instance's vertices (in object space) count each surface once."""
    v, f = icosphere(2)
    scene = rt.Scene()
    mesh_id = scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)))
    scene.add_instance(mesh_id, torch.diag(torch.tensor([2.0, 2.0, 2.0, 1.0], dtype=F64, device=device)))
    scene.build()
    u = np.concatenate([v, (v[f[:, 0]] + v[f[:, 1]]) / 2])
    ray = rt.Ray(torch.tensor(10 * u, device=device), torch.tensor(-u, device=device))
    assert (scene.count_intersections(ray) == 4).all()
    assert (scene.intersect_all(ray, 8).is_valid().sum(-1) == 4).all()


def _slot_fields(v, o, d, valid):
    scene = _scene(v, _GRAD_F, v.device)
    hits = scene.intersect_all(rt.Ray(o, d), 8)
    assert hits.is_valid().equal(valid)
    return hits.t[valid], hits.p[valid], hits.geo_n[valid], hits.barycentric[valid]


_GRAD_V, _GRAD_F = _nested_spheres([1.0, 1.7], subdivisions=1)


def _grad_inputs(device):
    rng = np.random.default_rng(11)
    u = rng.normal(size=(5, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    o = torch.tensor(5 * u + rng.normal(scale=0.2, size=(5, 3)), device=device, requires_grad=True)
    d = torch.tensor(-u, device=device, requires_grad=True)
    v = torch.tensor(_GRAD_V, device=device, requires_grad=True)
    valid = _scene(v.detach(), _GRAD_F, device).intersect_all(rt.Ray(o.detach(), d.detach()), 8).is_valid()
    assert (valid.sum(-1) == 4).all()
    return v, o, d, valid


def test_gradcheck(device):
    v, o, d, valid = _grad_inputs(device)
    assert torch.autograd.gradcheck(lambda v, o, d: _slot_fields(v, o, d, valid), (v, o, d),
                                    eps=1e-6, atol=1e-6, rtol=1e-6)


def test_forward_equals_reverse_and_fused_path(device):
    v, o, d, valid = _grad_inputs(device)
    gen = torch.Generator().manual_seed(3)
    weights = [torch.randn(x.shape, generator=gen, dtype=F64).to(device) for x in _slot_fields(v, o, d, valid)]

    def scalar(v, o, d):
        return sum((w * x).sum() for w, x in zip(weights, _slot_fields(v, o, d, valid)))

    value = scalar(v, o, d)
    grads = torch.autograd.grad(value, (v, o, d))
    tangents = tuple(torch.randn(x.shape, generator=gen, dtype=F64).to(device) for x in (v, o, d))
    _, forward = torch.func.jvp(scalar, tuple(x.detach() for x in (v, o, d)), tangents)
    torch.testing.assert_close(forward, sum((g * t).sum() for g, t in zip(grads, tangents)), rtol=1e-10, atol=1e-12)
    # float32 plain scene: the fused Warp evaluation, same values and gradients to float32 rounding.
    v32, o32, d32 = (x.detach().float().requires_grad_(True) for x in (v, o, d))
    value32 = sum((w.float() * x).sum() for w, x in zip(weights, _slot_fields(v32, o32, d32, valid)))
    grads32 = torch.autograd.grad(value32, (v32, o32, d32))
    for g32, g64 in zip(grads32, grads):
        torch.testing.assert_close(g32.double(), g64, rtol=2e-3, atol=2e-3)


def test_broadcast_and_empty(device):
    v, f = _nested_spheres([1.0])
    scene = _scene(v, f, device)
    d = torch.tensor([[1.0, 0.01, 0.0], [0.0, 1.0, 0.02], [0.03, 0.0, 1.0]], dtype=F64, device=device)
    hits = scene.intersect_all(rt.Ray(torch.zeros(3, dtype=F64, device=device), d.reshape(1, 3, 3)), 3)
    assert hits.t.shape == (1, 3, 3) and hits.p.shape == (1, 3, 3, 3)
    assert (hits.is_valid().sum(-1) == 1).all()
    assert scene.count_intersections(rt.Ray(torch.zeros(3, dtype=F64, device=device), d)).tolist() == [1, 1, 1]
    empty = rt.Ray(torch.zeros((0, 3), dtype=F64, device=device), torch.zeros((0, 3), dtype=F64, device=device))
    e = scene.intersect_all(empty, 4)
    assert e.t.shape == (0, 4) and e.p.shape == (0, 4, 3) and e.is_valid().shape == (0, 4)
    assert scene.count_intersections(empty).shape == (0,)
    assert scene.count_intersections(empty).dtype == torch.int32
    single = scene.intersect_all(rt.Ray(torch.zeros(3, dtype=F64, device=device), d[0]), 2)
    assert single.t.shape == (2,) and single.t[0].item() == pytest.approx(1.0, rel=0.05)
    # Malformed rays are misses, not errors.
    bad = rt.Ray(torch.tensor([[math.nan, 0, 0], [0, 0, 0]], dtype=F64, device=device),
                 torch.tensor([[1.0, 0, 0], [0, 0, 0]], dtype=F64, device=device))
    assert scene.count_intersections(bad).tolist() == [0, 0]
    assert (scene.intersect_all(bad, 2).global_prim_id == -1).all()


def test_flags(device):
    v, f = _nested_spheres([1.0])
    scene = _scene(v, f, device)
    ray = rt.Ray(torch.zeros(3, dtype=F64, device=device), torch.tensor([1.0, 0.1, 0.0], dtype=F64, device=device))
    minimal = scene.intersect_all(ray, 2, flags=rt.RayFlags.Minimal)
    assert minimal.t.shape == (2,)
    with pytest.raises(AttributeError, match="Geometric"):
        minimal.p


@pytest.mark.parametrize("bad, kind", [(True, TypeError), (2.0, TypeError), ("3", TypeError), (None, TypeError),
                                       (0, ValueError), (-1, ValueError), (65, ValueError)])
def test_max_hits_errors(device, bad, kind):
    v, f = _nested_spheres([1.0])
    scene = _scene(v, f, device)
    ray = rt.Ray(torch.zeros(3, dtype=F64, device=device), torch.tensor([1.0, 0.0, 0.0], dtype=F64, device=device))
    with pytest.raises(kind, match=r"^rayd\.torch\.Scene\.intersect_all\(\): 'max_hits' must be an int in \[1, 64\]"):
        scene.intersect_all(ray, bad)


def test_query_errors(device):
    v, f = _nested_spheres([1.0])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)))
    ray = rt.Ray(torch.zeros(3, dtype=F64, device=device), torch.tensor([1.0, 0.0, 0.0], dtype=F64, device=device))
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.count_intersections\(\)"):
        scene.count_intersections(ray)
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.intersect_all\(\)"):
        scene.intersect_all(ray, 2)
    scene.build()
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Scene\.count_intersections\(\): 'ray'"):
        scene.count_intersections("ray")
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Scene\.intersect_all\(\): 'active'"):
        scene.intersect_all(ray, 2, torch.ones(1))
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Scene\.intersect_all\(\): 'flags'"):
        scene.intersect_all(ray, 2, flags="all")


def test_large_batches_split_and_chunked(device, monkeypatch):
    """CPU launches split across cores (>= 8192 rays) and the count's chunked scratch give
    the answers of small launches."""
    from rayd.engine import all_hits as engine_all_hits

    v, f = _nested_spheres([1.0, 2.0, 3.0], subdivisions=1)
    scene = _scene(v, f, device)
    rng = np.random.default_rng(9)
    u = rng.normal(size=(9000, 3))
    o = torch.tensor(5 * u / np.linalg.norm(u, axis=1, keepdims=True) + rng.normal(scale=0.5, size=(9000, 3)),
                     device=device)
    d = torch.tensor(-u + rng.normal(scale=0.3, size=(9000, 3)), device=device)
    big = scene.intersect_all(rt.Ray(o, d), 6)
    big = scene.intersect_all(rt.Ray(o, d), 6)  # the second launch is split across cores on the CPU
    count = scene.count_intersections(rt.Ray(o, d))
    count = scene.count_intersections(rt.Ray(o, d))
    parts = [scene.intersect_all(rt.Ray(o[k:k + 1000], d[k:k + 1000]), 6) for k in range(0, 9000, 1000)]
    torch.testing.assert_close(big.t, torch.cat([p.t for p in parts]), rtol=0, atol=0)
    torch.testing.assert_close(big.global_prim_id, torch.cat([p.global_prim_id for p in parts]))
    assert count.equal(big.is_valid().sum(-1).int())
    assert (count > 2).sum() > 1000
    monkeypatch.setattr(engine_all_hits, "COUNT_CHUNK", 777)
    assert scene.count_intersections(rt.Ray(o, d)).equal(count)
