"""Break-it session 20 (helper breakit20b): edges, reflections, surface queries, cameras.

Each test holds a defect found by an independent user-side check, now fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import edge_wide_walk, edges as engine_edges

from edge_reference import bumpy_sphere, ray_distances

INF = math.inf


def _sphere_scene(dtype, device):
    v, f = bumpy_sphere(8, 16, seed=3, dtype=dtype, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    top = scene.edge_topology()
    a = v.double()[top.v[:, 0].long()]
    b = v.double()[top.v[:, 1].long()]
    return scene, v, f, a, b


def _rays(n, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    o = (torch.randn(n, 3, generator=g, dtype=torch.float64) * 2.0).to(dtype).to(device)
    d = torch.randn(n, 3, generator=g, dtype=torch.float64).to(dtype).to(device)
    return o, d


# ------------------------------------------------------------ nearest_edge(ray), tmin = -inf
@pytest.mark.parametrize("wide,wide_rays", [(False, False), ("q", True), ("q", False), (True, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nearest_edge_of_lines_and_backward_half_lines(device, monkeypatch, dtype, wide, wide_rays):
    """``s in [tmin, tmax]`` with ``tmin = -inf`` is a half-line backwards (or, with ``tmax = inf``, the
    whole line). Was: every such ray a miss (``distance = inf``, ids -1), while ``tmin = -1e30`` worked."""
    monkeypatch.setitem(engine_edges.DEFAULT_WIDE, "cpu", wide)
    monkeypatch.setitem(engine_edges.DEFAULT_WIDE, "cuda", wide)
    monkeypatch.setattr(edge_wide_walk, "WIDE_RAYS", wide_rays)
    scene, _, _, a, b = _sphere_scene(dtype, device)
    o, d = _rays(400, dtype, device)
    tol = 1e-5 if dtype == torch.float32 else 1e-6
    for tmin, tmax in [(-INF, INF), (-INF, 0.0), (-INF, -0.5), (-INF, 1.0)]:
        got = scene.nearest_edge(rt.Ray(o, d, tmax, tmin=tmin))
        want = ray_distances(o.cpu().double(), d.cpu().double(), tmin, tmax, a.cpu(), b.cpu())
        assert got.is_valid().all(), (tmin, tmax)
        assert torch.allclose(got.distance.cpu().double(), want.min(1).values, rtol=tol, atol=tol), (tmin, tmax)
        assert (got.ray_t <= tmax).all() and torch.isfinite(got.ray_t).all()
        # the reported points are where the distance is measured
        assert torch.allclose((got.ray_point - got.edge_point).norm(dim=-1), got.distance, rtol=1e-5, atol=1e-6)
        assert torch.allclose(got.ray_point, o + got.ray_t[:, None] * d, rtol=1e-5, atol=1e-5)
    # per-ray bounds, mixed; and intervals that are no segment stay misses
    tmin = torch.tensor([-INF, -INF, INF, -INF, 0.0], dtype=dtype, device=device)
    tmax = torch.tensor([INF, -INF, INF, 2.0, INF], dtype=dtype, device=device)
    got = scene.nearest_edge(rt.Ray(o[:5], d[:5], tmax, tmin=tmin))
    assert got.is_valid().tolist() == [True, False, False, True, True]
    assert torch.isinf(got.distance[1:3]).all() and (got.global_edge_id[1:3] == -1).all()


def test_line_query_gradients_match_finite_differences(device):
    """Fixed winner, as for finite bounds: reverse mode and ``jvp`` equal float64 central differences
    (rays whose winner changes within the difference step are left out)."""
    v, f = bumpy_sphere(8, 16, seed=3, dtype=torch.float64, device=device)
    o0, d0 = _rays(30, torch.float64, device, seed=1)

    def fields(vertices, o, d):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(vertices, f))
        scene.build()
        hit = scene.nearest_edge(rt.Ray(o, d, INF, tmin=-INF))
        out = torch.cat([hit.distance[:, None], hit.ray_t[:, None], hit.edge_t[:, None], hit.ray_point,
                         hit.edge_point], 1)
        return out, hit.global_edge_id

    g = torch.Generator().manual_seed(2)
    w = torch.randn((30, 9), generator=g, dtype=torch.float64).to(device)
    base = [v, o0, d0]
    for k in range(3):
        args = [x.clone() for x in base]
        args[k].requires_grad_(True)
        out, ids = fields(*args)
        (grad,) = torch.autograd.grad((out * w).sum(), args[k])
        assert torch.isfinite(grad).all()
        step = torch.randn(base[k].shape, generator=g, dtype=torch.float64).to(device)
        h = 1e-6
        (plus, ids_p), (minus, ids_m) = fields(*[x + h * step if j == k else x for j, x in enumerate(base)]), \
            fields(*[x - h * step if j == k else x for j, x in enumerate(base)])
        same = (ids_p == ids) & (ids_m == ids)
        assert same.sum() >= 10  # ties at a shared vertex switch the id (not the distance)
        keep = w * same[:, None]

        def scalar(x, k=k):
            return (fields(*[x if j == k else y for j, y in enumerate(base)])[0] * keep).sum()

        fd = ((plus - minus) * keep).sum() / (2 * h)
        (grad,) = torch.autograd.grad((fields(*args)[0] * keep).sum(), args[k])
        _, jvp = torch.func.jvp(scalar, (base[k],), (step,))
        assert abs((grad * step).sum().item() - fd.item()) <= 1e-5 * (1 + abs(fd.item())), k
        assert abs(jvp.item() - (grad * step).sum().item()) <= 1e-9 * (1 + abs(fd.item())), k


# ------------------------------------------------------------ float64 surface queries, large extent
def _far_small_sphere(device):
    """A unit icosphere at the origin and a 1e-3 one at x = 1e4 (float64): the search frame's float32
    rounding (~1e4 * 2^-24) is comparable to the small sphere's features."""
    from reference import icosphere

    v, f = icosphere(2)
    small = v * 1e-3 + np.array([1e4, 0.0, 0.0])
    vertices = torch.tensor(np.concatenate([v, small]), dtype=torch.float64, device=device)
    faces = torch.tensor(np.concatenate([f, f + len(v)]), device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, faces))
    scene.build()
    # points on the small sphere's vertex directions: 1.3x its radius outside (closest point: that vertex,
    # at distance 0.3e-3) and 0.5x inside
    out = torch.tensor(small[::3] + 0.3 * (small[::3] - [1e4, 0, 0]), dtype=torch.float64, device=device)
    inside = torch.tensor(small[::3] - 0.5 * (small[::3] - [1e4, 0, 0]), dtype=torch.float64, device=device)
    return scene, out, inside


@pytest.mark.xfail(strict=True, reason="docs/known-limitations.md: float64 surface queries rank in the float32 "
                                       "search frame, whose rounding scales with the scene's extent")
def test_float64_closest_point_far_from_the_search_centre(device):
    scene, out, inside = _far_small_sphere(device)
    cp = scene.closest_point(out)
    ne = scene.nearest_edge(out)
    assert torch.allclose(cp.distance, torch.full_like(cp.distance, 0.3e-3), rtol=1e-6, atol=0)
    assert torch.allclose(ne.distance, torch.full_like(ne.distance, 0.3e-3), rtol=1e-6, atol=0)
    assert (scene.signed_distance(out) > 0).all() and (scene.signed_distance(inside) < 0).all()


# ------------------------------------------------------------ sample_edges on inconsistently wound meshes
def _flipped_icosphere(device):
    from reference import icosphere

    v, f = icosphere(2)
    v = v + np.array([0.2, 0.1, 4.0])
    flipped = f.copy()
    pick = np.random.default_rng(0).random(len(f)) < 0.1
    flipped[pick] = flipped[pick][:, ::-1]
    return v, f, np.ascontiguousarray(flipped)


def test_sample_edges_do_not_depend_on_face_windings(device):
    """A mesh with some faces wound against their neighbours (common in scanned and merged meshes) has
    the same outline. Was: the facing rule marked creases next to a flipped face as silhouettes and
    missed true silhouettes there: 192 px of edges sampled instead of 48, and the boundary term's
    derivative of the covered area 19 % low."""
    v, f, flipped = _flipped_icosphere(device)
    cam = rt.Camera(48, 48, fx=30.0)
    results = []
    for faces in (f, flipped):
        vertices = torch.tensor(v, device=device, requires_grad=True)
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(vertices, torch.tensor(faces, device=device)))
        scene.build()
        samples = cam.sample_edges(scene, 4000, generator=torch.Generator().manual_seed(0))
        inside = scene.intersect(samples.ray_inside).is_valid().double()
        outside = scene.intersect(samples.ray_outside).is_valid().double()
        assert (inside - outside).abs().min() == 1  # every sample lies on the outline
        samples.boundary_term(inside, outside).sum().backward()
        results.append((samples, vertices.grad, scene.silhouette_edges(torch.zeros(3, dtype=torch.float64,
                                                                                   device=device))))
    (want, grad_want, sil_want), (got, grad_got, sil_got) = results
    assert torch.equal(got.global_edge_id, want.global_edge_id)
    assert torch.allclose(got.weight, want.weight, rtol=1e-12)
    assert torch.allclose(got.xy, want.xy, atol=1e-9)
    assert torch.allclose(got.normal, want.normal, atol=1e-9)
    assert torch.allclose(grad_got, grad_want, rtol=1e-9, atol=1e-9)
    # silhouette_edges itself keeps DESIGN's per-record facing rule
    assert sil_got.sum() > sil_want.sum()


def test_same_direction_of_hand_made_records():
    from rayd.core.topology import same_direction

    v = np.array([[0, 1], [0, 1], [0, 1], [0, 1], [2, 3]])
    tri0 = np.array([[0, 1, 2], [0, 1, 2], [1, 0, 2], [0, 0, 1], [2, 3, 4]])
    tri1 = np.array([[1, 0, 3], [0, 1, 3], [3, 1, 0], [1, 0, 3], [0, 0, 0]])
    has_second = np.array([True, True, True, True, False])
    assert same_direction(v, tri0, tri1, has_second).tolist() == [False, True, True, False, False]
