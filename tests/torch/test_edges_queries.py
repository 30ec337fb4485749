"""Nearest-edge queries: hand-derived values, brute-force parity, top-k, masks, refit, errors."""

from __future__ import annotations

import math

import pytest
import torch
from edge_reference import bumpy_sphere, point_distances, ray_distances, segments
from test_edges_topology import octahedron

import rayd.torch as rt


def unit_square(device, dtype=torch.float32, dynamic=False):
    """Quad z = 0 over [0,1]^2 as faces (0,1,2), (1,3,2); edges (0,1) (0,2) (1,2) (1,3) (2,3)."""
    v = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=dtype, device=device)
    f = torch.tensor([[0, 1, 2], [1, 3, 2]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=dynamic)
    scene.build()
    return scene, v


def sphere_scene(device, dynamic=False):
    v, f = bumpy_sphere(device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=dynamic)
    scene.build()
    return scene, v


def assert_parity(distance, ids, reference):
    """Distance within 1e-5 relative of the brute-force minimum; ids equal except near-ties."""
    best, best_id = reference.min(1)
    # float32 coordinates of magnitude ~1 carry ~1e-7 absolute error in small distances.
    torch.testing.assert_close(distance.double(), best, rtol=1e-5, atol=1e-6)
    mismatch = ids.long() != best_id
    if mismatch.any():
        chosen = reference.gather(1, ids.long().clamp_min(0)[:, None])[:, 0]
        assert torch.allclose(chosen[mismatch], best[mismatch], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- points
def test_points_hand_derived(device):
    scene, _ = unit_square(device)
    p = torch.tensor([[0.25, -2.0, 0.0], [0.6, 0.6, 0.3], [-3.0, -4.0, 0.0], [1.0, 0.5, 2.0]], device=device)
    hit = scene.nearest_edge(p)
    # below edge (0,1); above the diagonal (1,2); beyond corner 0; above edge (1,3)
    assert hit.global_edge_id.tolist() == [0, 2, 0, 3]
    assert hit.edge_id.tolist() == [0, 2, 0, 3]
    assert hit.shape_id.tolist() == [0, 0, 0, 0]
    torch.testing.assert_close(hit.distance, torch.tensor([2.0, math.sqrt(0.11), 5.0, 2.0], device=device))
    torch.testing.assert_close(hit.edge_t, torch.tensor([0.25, 0.5, 0.0, 0.5], device=device))
    expected = torch.tensor([[0.25, 0, 0], [0.5, 0.5, 0], [0, 0, 0], [1, 0.5, 0]], device=device)
    torch.testing.assert_close(hit.edge_point, expected)
    assert bool(hit.is_valid().all())
    assert hit.shape == (4,)
    with pytest.raises(AttributeError, match="only ray queries"):
        hit.ray_t


def test_point_batch_shapes_and_broadcast(device):
    scene, _ = unit_square(device)
    one = scene.nearest_edge(torch.tensor([0.5, -1.0, 0.0], device=device))
    assert one.distance.shape == () and one.edge_point.shape == (3,)
    assert float(one.distance) == pytest.approx(1.0)
    grid = scene.nearest_edge(torch.rand(2, 5, 3, device=device))
    assert grid.distance.shape == (2, 5) and grid.edge_point.shape == (2, 5, 3)
    empty = scene.nearest_edge(torch.empty(0, 3, device=device))
    assert empty.distance.shape == (0,)
    active = torch.tensor([True, False], device=device)
    some = scene.nearest_edge(torch.tensor([0.5, -1.0, 0.0], device=device), active)
    assert some.global_edge_id.tolist() == [0, -1]


def test_float64_points_give_float64_fields(device):
    scene, _ = unit_square(device)
    hit = scene.nearest_edge(torch.tensor([[0.3, -0.5, 0.0]], dtype=torch.float64, device=device))
    assert hit.distance.dtype == hit.edge_t.dtype == hit.edge_point.dtype == torch.float64
    assert hit.global_edge_id.dtype == hit.edge_id.dtype == hit.shape_id.dtype == torch.int32


def test_misses_and_max_distance(device):
    scene, _ = unit_square(device)
    p = torch.tensor([[0.5, -1.0, 0.0], [0.5, -0.5, 0.0], [math.nan, 0, 0], [math.inf, 0, 0]], device=device)
    hit = scene.nearest_edge(p, max_distance=0.75)
    assert hit.global_edge_id.tolist() == [-1, 0, -1, -1]
    assert hit.is_valid().tolist() == [False, True, False, False]
    assert hit.distance[[0, 2, 3]].tolist() == [math.inf] * 3
    assert hit.edge_t[[0, 2, 3]].tolist() == [0.0] * 3
    assert bool((hit.edge_point[[0, 2, 3]] == 0).all())
    assert hit.edge_id[0] == -1 and hit.shape_id[0] == -1
    exact = scene.nearest_edge(p[:2], max_distance=1.0)  # within means <=
    assert exact.global_edge_id.tolist() == [0, 0]
    inactive = scene.nearest_edge(p[:2], torch.zeros(2, dtype=torch.bool, device=device))
    assert inactive.global_edge_id.tolist() == [-1, -1]


def test_point_parity_with_brute_force(device):
    scene, _ = sphere_scene(device)
    g = torch.Generator().manual_seed(1)
    p = (torch.rand(3000, 3, generator=g) * 2.8 - 1.4).to(device)
    p[:500] *= 0.02  # many near the centre, where every edge is almost equally far
    hit = scene.nearest_edge(p)
    a, b = segments(scene)
    reference = point_distances(p, a, b)
    assert_parity(hit.distance, hit.global_edge_id, reference)
    k = reference.argmin(1)
    ids_equal = (hit.global_edge_id.long() == k).float().mean()
    assert ids_equal > 0.9


def test_point_parity_close_to_a_terrain(device):
    # points within 0.02 of a height field: small distances, where float32 cancellation
    # would show first (distance within 1e-5 relative, issue 6)
    n = 40
    x = torch.linspace(-1, 1, n + 1, dtype=torch.float64)
    gx, gy = torch.meshgrid(x, x, indexing="ij")
    v = torch.stack((gx, gy, 0.1 * torch.sin(6 * gx) * torch.cos(5 * gy)), -1).reshape(-1, 3)
    r, c = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    a = (r * (n + 1) + c).reshape(-1)
    f = torch.cat([torch.stack((a, a + 1, a + n + 2), 1), torch.stack((a, a + n + 2, a + n + 1), 1)])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.float().to(device), f.to(device)))
    scene.build()
    g = torch.Generator().manual_seed(6)
    xy = torch.rand(5000, 2, generator=g, dtype=torch.float64) * 2 - 1
    z = 0.1 * torch.sin(6 * xy[:, 0]) * torch.cos(5 * xy[:, 1]) + (torch.rand(5000, generator=g) - 0.5) * 0.04
    p = torch.cat((xy, z[:, None]), 1).float().to(device)
    hit = scene.nearest_edge(p)
    a, b = segments(scene)
    assert_parity(hit.distance, hit.global_edge_id, point_distances(p, a, b))


def test_point_parity_on_the_bunny_when_present(device):
    path = __import__("pathlib").Path(__file__).resolve().parents[2] / ".device/meshes/bunny.npz"
    if not path.exists():
        pytest.skip("bunny.npz not downloaded (python examples/get_bunny.py)")
    import numpy as np

    data = np.load(path)
    v = torch.from_numpy(data["vertices"]).to(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.from_numpy(data["faces"]).to(device)))
    scene.build()
    lo, hi = v.min(0).values, v.max(0).values
    g = torch.Generator().manual_seed(2)
    p = (lo - 0.1 * (hi - lo) + torch.rand(1000, 3, generator=g).to(device) * 1.2 * (hi - lo))
    hit = scene.nearest_edge(p)
    a, b = segments(scene)
    assert_parity(hit.distance, hit.global_edge_id, point_distances(p, a, b))


# ---------------------------------------------------------------------- rays
def test_rays_hand_derived(device):
    scene, _ = unit_square(device)
    o = torch.tensor([[0.5, 0.5, 1.0], [0.3, -1.0, 0.5], [2.0, 2.0, 1.0], [0.3, -1.0, 0.5]], device=device)
    d = torch.tensor([[0.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], device=device)
    tmax = torch.tensor([math.inf, math.inf, math.inf, 0.25], device=device)
    hit = scene.nearest_edge(rt.Ray(o, d, tmax))
    # 0: pierces the diagonal at s = 1; 1: passes over edge (0,1) at height 0.5 (s = 1);
    # 2: moving away from corner 3, closest at s = 0; 3: stops short (s = 0.25 -> y = -0.5).
    # Ties go to the smaller id: ray 1 is as far from (0,1) as from (1,2) and (2,3); ray 2's
    # corner 3 is shared by edges 3 = (1,3) and 4 = (2,3).
    assert hit.global_edge_id.tolist() == [2, 0, 3, 0]
    torch.testing.assert_close(hit.distance, torch.tensor([0.0, 0.5, math.sqrt(3.0), math.sqrt(0.5)], device=device))
    torch.testing.assert_close(hit.ray_t, torch.tensor([1.0, 1.0, 0.0, 0.25], device=device))
    torch.testing.assert_close(hit.edge_t, torch.tensor([0.5, 0.3, 1.0, 0.3], device=device))
    torch.testing.assert_close(hit.ray_point, torch.tensor([[0.5, 0.5, 0], [0.3, 0, 0.5], [2, 2, 1], [0.3, -0.5, 0.5]],
                                                           device=device))
    torch.testing.assert_close(hit.edge_point, torch.tensor([[0.5, 0.5, 0], [0.3, 0, 0], [1, 1, 0], [0.3, 0, 0]],
                                                            device=device))


def test_ray_misses_and_tmin(device):
    scene, _ = unit_square(device)
    o = torch.tensor([[0.5, 0.5, 5.0]] * 4, device=device)
    d = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [math.nan, 0.0, 1.0], [0.0, 0.0, -1.0]], device=device)
    hit = scene.nearest_edge(rt.Ray(o, d, tmin=torch.tensor([0.0, 0.0, 0.0, 2.0], device=device)), max_distance=4.0)
    assert hit.global_edge_id.tolist() == [-1, -1, -1, 2]
    assert hit.distance[:3].tolist() == [math.inf] * 3
    assert hit.ray_t[:3].tolist() == [0.0] * 3 and bool((hit.ray_point[:3] == 0).all())
    assert float(hit.ray_t[3]) == pytest.approx(5.0)
    empty_interval = scene.nearest_edge(rt.Ray(o[3], d[3], 1.0, tmin=2.0))  # tmax < tmin: a miss
    assert int(empty_interval.global_edge_id) == -1
    backwards = scene.nearest_edge(rt.Ray(o[:1], -d[3:], tmin=2.0))
    assert float(backwards.distance) == pytest.approx(7.0) and float(backwards.ray_t) == pytest.approx(2.0)


@pytest.mark.parametrize("bounded", [False, True])
def test_ray_parity_with_brute_force(device, bounded):
    scene, _ = sphere_scene(device)
    g = torch.Generator().manual_seed(3)
    o = (torch.rand(800, 3, generator=g) * 6 - 3).to(device)
    d = torch.randn(800, 3, generator=g).to(device)
    tmax = (0.1 + torch.rand(800, generator=g) * 2).to(device) if bounded else math.inf
    hit = scene.nearest_edge(rt.Ray(o, d, tmax, tmin=0.1))
    a, b = segments(scene)
    reference = ray_distances(o, d, 0.1, tmax, a, b)
    assert_parity(hit.distance, hit.global_edge_id, reference)
    expected_point = o.double() + hit.ray_t.double()[:, None] * d.double()
    torch.testing.assert_close(hit.ray_point.double(), expected_point, rtol=1e-5, atol=1e-5)
    assert bool((hit.ray_t >= 0.1 - 1e-6).all())


# ---------------------------------------------------------------------- top-k
def test_top_k_order_and_parity(device):
    scene, _ = sphere_scene(device)
    g = torch.Generator().manual_seed(4)
    p = (torch.rand(500, 3, generator=g) * 2.4 - 1.2).to(device)
    k = 8
    top = scene.nearest_edges(p, k)
    assert top.distance.shape == (500, k) and top.edge_point.shape == (500, k, 3)
    assert bool((top.distance[:, 1:] >= top.distance[:, :-1]).all())
    a, b = segments(scene)
    reference = point_distances(p, a, b)
    ref_sorted = reference.sort(1).values[:, :k]
    torch.testing.assert_close(top.distance.double(), ref_sorted, rtol=1e-5, atol=1e-7)
    chosen = reference.gather(1, top.global_edge_id.long())
    torch.testing.assert_close(chosen, ref_sorted, rtol=1e-5, atol=1e-7)
    assert bool((top.global_edge_id.sort(1).values.diff(dim=1) != 0).all())  # distinct
    first = scene.nearest_edge(p)
    assert bool((top.global_edge_id[:, 0] == first.global_edge_id).all())


def test_top_k_ties_by_id_and_unfilled_slots(device):
    v = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=torch.float32, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    # the corner 0 is shared by edges 0 = (0,1) and 1 = (0,2): an exact tie
    top = scene.nearest_edges(torch.tensor([-1.0, -1.0, 0.0], device=device), 5)
    assert top.global_edge_id.tolist() == [0, 1, 2, -1, -1]
    assert top.is_valid().tolist() == [True, True, True, False, False]
    assert top.distance[3:].tolist() == [math.inf, math.inf]
    assert bool((top.edge_point[3:] == 0).all())
    near = scene.nearest_edges(torch.tensor([[-1.0, -1.0, 0.0]], device=device), 3, max_distance=1.5)
    assert near.global_edge_id.tolist() == [[0, 1, -1]]


# ---------------------------------------------------------------------- masks, refit, silhouettes
def test_edge_mask(device):
    scene, _ = unit_square(device)
    p = torch.tensor([[0.5, -1.0, 0.0], [0.6, 0.6, 0.3]], device=device)
    assert scene.edge_mask().tolist() == [True] * 5
    mask = torch.tensor([False, True, False, True, True], device=device)
    scene.set_edge_mask(mask)
    assert scene.edge_mask().tolist() == mask.tolist()
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match=r"nearest_edge\(\): the edge mask changed .* call sync\(\)"):
        scene.nearest_edge(p)
    scene.sync()
    hit = scene.nearest_edge(p)
    assert 0 not in hit.global_edge_id.tolist() and 2 not in hit.global_edge_id.tolist()
    torch.testing.assert_close(hit.distance[0], torch.tensor(math.sqrt(1.25), device=device))  # corner 0 via edge 1
    top = scene.nearest_edges(p, 5)
    assert bool((top.global_edge_id[:, 3:] == -1).all())
    assert not bool(torch.isin(top.global_edge_id, torch.tensor([0, 2], device=device)).any())
    scene.set_edge_mask(torch.zeros(5, dtype=torch.bool, device=device))
    scene.sync()
    assert scene.nearest_edge(p).global_edge_id.tolist() == [-1, -1]
    scene.build()  # a new build starts from an all-visible mask
    assert scene.nearest_edge(p).global_edge_id.tolist() == [0, 2]


def test_edges_follow_a_refit(device):
    scene, v = unit_square(device, dynamic=True)
    p = torch.tensor([[0.5, -1.0, 0.0], [5.5, -1.0, 0.0]], device=device)
    assert scene.nearest_edge(p).global_edge_id.tolist() == [0, 0]
    moved = v + torch.tensor([5.0, 0.0, 0.0], device=device)
    scene.update_mesh_vertices(0, moved)
    with pytest.raises(RuntimeError, match="sync"):
        scene.nearest_edge(p)
    scene.sync()
    hit = scene.nearest_edge(p)
    torch.testing.assert_close(hit.distance, torch.tensor([math.sqrt(4.5**2 + 1), 1.0], device=device))
    torch.testing.assert_close(hit.edge_point[1], torch.tensor([5.5, 0.0, 0.0], device=device))
    moved.mul_(2.0)  # in-place change of the registered dynamic tensor
    with pytest.raises(RuntimeError, match="sync"):
        scene.nearest_edge(p)
    scene.sync()
    assert float(scene.nearest_edge(p).distance[1]) == pytest.approx(math.sqrt(4.5**2 + 1))


def test_refit_parity_after_deformation(device):
    scene, v = sphere_scene(device, dynamic=True)
    scene.nearest_edge(torch.zeros(3, device=device))  # build the edge BVH before moving
    g = torch.Generator().manual_seed(5)
    warped = v * torch.tensor([2.0, 0.5, 1.0], device=device) + 0.05 * torch.randn(v.shape, generator=g).to(device)
    scene.update_mesh_vertices(0, warped)
    scene.sync()
    p = (torch.rand(1000, 3, generator=g) * 4 - 2).to(device)
    hit = scene.nearest_edge(p)
    a, b = segments(scene)
    assert_parity(hit.distance, hit.global_edge_id, point_distances(p, a, b))


def test_exported_records():
    assert rt.EdgeTopology is not None and rt.NearestEdge is not None


def test_transformed_mesh(device):
    v = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=torch.float32, device=device)
    m = torch.eye(4, device=device)
    m[:3, 3] = torch.tensor([0.0, 0.0, 3.0])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device), to_world=m))
    scene.build()
    hit = scene.nearest_edge(torch.tensor([0.5, -1.0, 3.0], device=device))
    assert int(hit.global_edge_id) == 0 and float(hit.distance) == pytest.approx(1.0)
    torch.testing.assert_close(hit.edge_point, torch.tensor([0.5, 0.0, 3.0], device=device))


def test_instances_repeat_their_mesh_edges(device):
    v = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=torch.float32, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    m = torch.eye(4, device=device)
    m[:3, 3] = torch.tensor([0.0, 0.0, 3.0])
    m.requires_grad_(True)
    assert scene.add_instance(0, m) == 1
    scene.build()
    top = scene.edge_topology()
    assert top.shape_id.tolist() == [0, 0, 0, 1, 1, 1]
    assert top.edge_id.tolist() == [0, 1, 2, 0, 1, 2]
    assert top.v[3:].tolist() == top.v[:3].tolist()
    p = torch.tensor([[0.5, -1.0, 2.9], [0.5, -1.0, 0.2]], device=device)
    hit = scene.nearest_edge(p)
    assert hit.global_edge_id.tolist() == [3, 0] and hit.shape_id.tolist() == [1, 0]
    torch.testing.assert_close(hit.edge_point[0], torch.tensor([0.5, 0.0, 3.0], device=device))
    (grad,) = torch.autograd.grad(hit.distance[0], m)
    assert float(grad[2, 3]) > 0  # moving the instance up moves its edge away from the point below it
    scene.set_shape_enabled(1, False)
    scene.sync()
    assert scene.nearest_edge(p).global_edge_id.tolist() == [0, 0]
    scene.set_shape_enabled(1, True)
    m2 = m.detach().clone()
    m2[2, 3] = 10.0
    scene.set_mesh_transform(1, m2)
    scene.sync()
    hit = scene.nearest_edge(torch.tensor([0.5, -1.0, 9.9], device=device))
    assert int(hit.global_edge_id) == 3 and float(hit.distance) == pytest.approx(math.sqrt(1.01), rel=1e-5)


def test_silhouette_edges(device):
    v, f = octahedron()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32, device=device), torch.tensor(f, device=device)))
    scene.add_mesh(rt.Mesh(torch.tensor([[0, 0, 5.0], [1, 0, 5], [0, 1, 5]], device=device),
                           torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    top = scene.edge_topology()
    sil = scene.silhouette_edges(torch.tensor([0.0, 0.0, 10.0], device=device))
    assert sil.dtype == torch.bool and sil.shape == (15,)
    equator = [sorted(e) in ([0, 2], [1, 2], [1, 3], [0, 3]) for e in top.v[:12].tolist()]
    assert sil[:12].tolist() == equator
    assert sil[12:].tolist() == [True] * 3  # boundary edges always count


# ---------------------------------------------------------------------- bad input
def test_bad_input(device):
    scene, _ = unit_square(device)
    call = r"rayd.torch.Scene.nearest_edge\(\): "
    with pytest.raises(TypeError, match=call + "'points' must have dtype"):
        scene.nearest_edge(torch.zeros(4, 3, dtype=torch.int64, device=device))
    with pytest.raises(TypeError, match=call + "'points' must be a torch.Tensor"):
        scene.nearest_edge([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=call + r"'points' must have shape \(..., 3\)"):
        scene.nearest_edge(torch.zeros(4, 2, device=device))
    with pytest.raises(TypeError, match=call + "'active' must have dtype bool"):
        scene.nearest_edge(torch.zeros(4, 3, device=device), torch.ones(4, device=device))
    with pytest.raises(ValueError, match=call + "batch shapes do not broadcast"):
        scene.nearest_edge(torch.zeros(4, 3, device=device), torch.ones(5, dtype=torch.bool, device=device))
    with pytest.raises(TypeError, match=call + "'max_distance' must be a float"):
        scene.nearest_edge(torch.zeros(4, 3, device=device), max_distance="far")
    with pytest.raises(ValueError, match=call + "'max_distance' must be >= 0"):
        scene.nearest_edge(torch.zeros(4, 3, device=device), max_distance=-1.0)
    with pytest.raises(ValueError, match=call + "'max_distance' must be >= 0"):
        scene.nearest_edge(torch.zeros(4, 3, device=device), max_distance=math.nan)
    call_k = r"rayd.torch.Scene.nearest_edges\(\): "
    for bad in (0, 17):
        with pytest.raises(ValueError, match=call_k + r"'k' must be in \[1, 16\]"):
            scene.nearest_edges(torch.zeros(4, 3, device=device), bad)
    with pytest.raises(TypeError, match=call_k + "'k' must be an int"):
        scene.nearest_edges(torch.zeros(4, 3, device=device), 2.0)
    call_m = r"rayd.torch.Scene.set_edge_mask\(\): "
    with pytest.raises(TypeError, match=call_m + "'mask' must have dtype bool"):
        scene.set_edge_mask(torch.ones(5, device=device))
    with pytest.raises(ValueError, match=call_m + r"'mask' must have shape \(5,\)"):
        scene.set_edge_mask(torch.ones(4, dtype=torch.bool, device=device))
    call_s = r"rayd.torch.Scene.silhouette_edges\(\): "
    with pytest.raises(ValueError, match=call_s + "'viewpoint' must have shape"):
        scene.silhouette_edges(torch.zeros(2, 3, device=device))
    with pytest.raises(TypeError, match=call_s + "'viewpoint' must be a torch.Tensor"):
        scene.silhouette_edges((0.0, 0.0, 1.0))
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(torch.rand(3, 3, device=device), torch.tensor([[0, 1, 2]], device=device)))
    for method, args in (("nearest_edge", (torch.zeros(3, device=device),)),
                         ("nearest_edges", (torch.zeros(3, device=device), 2)),
                         ("set_edge_mask", (torch.ones(3, dtype=torch.bool, device=device),)),
                         ("edge_mask", ()), ("silhouette_edges", (torch.zeros(3, device=device),))):
        with pytest.raises(RuntimeError, match=rf"rayd.torch.Scene.{method}\(\): the scene is not built"):
            getattr(fresh, method)(*args)


def test_bad_input_on_other_device(cuda_device):
    scene, _ = unit_square("cpu")
    with pytest.raises(ValueError, match="'points' is on cuda"):
        scene.nearest_edge(torch.zeros(2, 3, device=cuda_device))


def test_edge_queries_never_write_into_the_users_vertices(device):
    """A later sync() refreshes the edges' own copy, not the registered tensor (one float32 mesh)."""
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    original = v.clone()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)), dynamic=True)
    scene.build()
    scene.nearest_edge(torch.zeros(3, device=device))
    m = torch.eye(4, device=device)
    m[2, 3] = -1.0
    scene.set_mesh_transform(0, m)
    scene.sync()
    assert torch.equal(v, original)
    hit = scene.intersect(rt.Ray(torch.tensor([0.2, 0.2, 5.0], device=device), torch.tensor([0.0, 0, -1], device=device)))
    torch.testing.assert_close(hit.t, torch.tensor(6.0, device=device))
    scene.sync()
    assert float(scene.intersect(rt.Ray(torch.tensor([0.2, 0.2, 5.0], device=device),
                                        torch.tensor([0.0, 0, -1], device=device))).t) == 6.0
    near = scene.nearest_edge(torch.tensor([0.5, -1.0, -1.0], device=device))
    torch.testing.assert_close(near.distance, torch.tensor(1.0, device=device))


def test_silhouette_edges_skip_masked_edges_and_disabled_shapes(device):
    # shape 0: the unit square (edges (0,1) (0,2) (1,2) (1,3) (2,3); (1,2) interior);
    # shape 1: one triangle at z = 5 (3 boundary edges). Seen from above.
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0.0]], device=device),
                           torch.tensor([[0, 1, 2], [1, 3, 2]], device=device)))
    scene.add_mesh(rt.Mesh(torch.tensor([[0, 0, 5.0], [1, 0, 5], [0, 1, 5]], device=device),
                           torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    eye = torch.tensor([0.3, 0.3, 10.0], device=device)
    assert scene.silhouette_edges(eye).tolist() == [True, True, False, True, True, True, True, True]
    mask = torch.ones(8, dtype=torch.bool, device=device)
    mask[[0, 6]] = False
    scene.set_edge_mask(mask)
    scene.sync()
    assert scene.silhouette_edges(eye).tolist() == [False, True, False, True, True, True, False, True]
    scene.set_shape_enabled(1, False)
    scene.sync()
    assert scene.silhouette_edges(eye).tolist() == [False, True, False, True, True, False, False, False]
    scene.set_edge_mask(torch.ones(8, dtype=torch.bool, device=device))
    scene.set_shape_enabled(1, True)
    scene.sync()
    assert scene.silhouette_edges(eye).tolist() == [True, True, False, True, True, True, True, True]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ray_with_tmax_equal_tmin_is_the_point_at_tmin(device, dtype):
    # DESIGN: the ray's segment is s in [tmin, tmax], closed, so tmax == tmin is the point
    # o + tmin d (only tmax < tmin is the malformed-ray miss).
    scene, _ = unit_square(device, dtype)
    o = torch.tensor([[0.25, -3.0, 0.5], [0.6, 0.6, 4.0]], dtype=dtype, device=device, requires_grad=True)
    d = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, -1.0]], dtype=dtype, device=device)
    s = torch.tensor([2.0, 3.7], dtype=dtype, device=device)
    hit = scene.nearest_edge(rt.Ray(o, d, s, tmin=s))
    point = scene.nearest_edge((o + s[:, None] * d).detach())
    # ray 0 stops at (0.25, -1, 0.5): edge (0,1) at distance sqrt(1 + 0.25);
    # ray 1 at (0.6, 0.6, 0.3) above the diagonal (1,2): sqrt(0.02 + 0.09)
    assert hit.global_edge_id.tolist() == [0, 2] == point.global_edge_id.tolist()
    expected = torch.tensor([math.sqrt(1.25), math.sqrt(0.11)], dtype=dtype, device=device)
    torch.testing.assert_close(hit.distance.detach(), expected)
    torch.testing.assert_close(hit.distance.detach(), point.distance)
    torch.testing.assert_close(hit.ray_t.detach(), s)
    torch.testing.assert_close(hit.ray_point.detach(), (o + s[:, None] * d).detach())
    hit.distance.sum().backward()  # d distance / d o = unit vector from the edge point
    grad = torch.tensor([[0, -1 / math.sqrt(1.25), 0.5 / math.sqrt(1.25)],
                         [0.1 / math.sqrt(0.11), 0.1 / math.sqrt(0.11), 0.3 / math.sqrt(0.11)]], dtype=dtype, device=device)
    torch.testing.assert_close(o.grad, grad, rtol=1e-4, atol=1e-5)
    below = scene.nearest_edge(rt.Ray(o.detach(), d, s, tmin=s + 1e-3))  # tmax < tmin: a miss
    assert below.global_edge_id.tolist() == [-1, -1] and below.distance.tolist() == [math.inf] * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_max_distance_equal_to_the_reported_distance_finds_it(device, dtype):
    # An edge at exactly max_distance (by the reported distance) is within it: with max_distance set to
    # the distance just reported, the float32 search radius missed the edge about half of the time
    # (points, top-k and ray segments alike, break-it 17); a result beyond the bound is a miss.
    scene = sphere_scene(device)[0]
    if dtype == torch.float64:
        v, f = bumpy_sphere(dtype=torch.float64, device=device)
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, f))
        scene.build()
    gen = torch.Generator().manual_seed(0)
    points = (torch.rand(40, 3, generator=gen, dtype=torch.float64) * 3 - 1.5).to(device, dtype)
    dirs = torch.randn(40, 3, generator=gen, dtype=torch.float64).to(device, dtype)
    free = scene.nearest_edge(points)
    rays = rt.Ray(points, dirs)
    free_ray = scene.nearest_edge(rays)
    free_k = scene.nearest_edges(points, 2)
    for i in range(points.shape[0]):
        d = free.distance[i].item()
        at = scene.nearest_edge(points[i], max_distance=d)
        assert at.global_edge_id.item() == free.global_edge_id[i].item() and at.distance.item() == d, i
        assert not scene.nearest_edge(points[i], max_distance=d * (1 - 1e-3)).is_valid().item()
        k = scene.nearest_edges(points[i], 2, max_distance=free_k.distance[i, 1].item())
        assert k.global_edge_id.tolist() == free_k.global_edge_id[i].tolist(), i
        dr_ = free_ray.distance[i].item()
        ray = rt.Ray(points[i], dirs[i])
        assert scene.nearest_edge(ray, max_distance=dr_).global_edge_id.item() == free_ray.global_edge_id[i].item(), i
        assert not scene.nearest_edge(ray, max_distance=dr_ * (1 - 1e-3)).is_valid().item()


@pytest.mark.parametrize("length", [1e-35, 1e-30, 1e-25, 1e20, 1e25, 1e35])
def test_ray_of_tiny_or_huge_direction_float64(device, length):
    # nearest_edge(ray) on float64 rays whose |d| squares out of float32's range: the search squared
    # d in float32 and dropped the ray (tiny d) or measured it as its origin (huge d); it now scales d
    # by powers of two first (break-it 17). Straight down through (0.25, 0.25): 0.25 from edges 0, 1.
    scene, _ = unit_square(device, torch.float64)
    o = torch.tensor([[0.25, 0.25, 1.0], [0.6, 0.3, 2.0]], dtype=torch.float64, device=device)
    unit = scene.nearest_edge(rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64, device=device)))
    hit = scene.nearest_edge(rt.Ray(o, torch.tensor([0.0, 0.0, -length], dtype=torch.float64, device=device)))
    assert hit.global_edge_id.tolist() == unit.global_edge_id.tolist() == [0, 2]
    torch.testing.assert_close(hit.distance, unit.distance)
    torch.testing.assert_close(hit.ray_t * length, unit.ray_t)


@pytest.mark.parametrize("length", [1e-35, 1e-25, 1e20, 1e35])
def test_ray_of_tiny_or_huge_direction_float32(device, length):
    # float32 rays: the search scales d into range, and the evaluation runs in float64 inside (it
    # squares d; in float32 a ray with d = (0, 0, -1e20) was measured from its origin: 1.03, not
    # 0.25, break-it 17). Values and gradients are those of the unit ray, rescaled.
    scene, v = unit_square(device, dynamic=True)
    o = torch.tensor([[0.25, 0.25, 1.0], [0.6, 0.3, 2.0]], device=device, requires_grad=True)
    unit = scene.nearest_edge(rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], device=device)))
    hit = scene.nearest_edge(rt.Ray(o, torch.tensor([0.0, 0.0, -length], device=device)))
    assert hit.distance.dtype == torch.float32
    assert hit.global_edge_id.tolist() == unit.global_edge_id.tolist() == [0, 2]
    torch.testing.assert_close(hit.distance, unit.distance)
    torch.testing.assert_close(hit.ray_t * length, unit.ray_t)
    torch.testing.assert_close(hit.ray_point, unit.ray_point)
    grad_unit, = torch.autograd.grad(unit.distance.sum(), o)
    grad_hit, = torch.autograd.grad(hit.distance.sum(), o)
    torch.testing.assert_close(grad_hit, grad_unit)
