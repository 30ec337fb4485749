"""Camera.sample_edges: lengths, clipping, normals, visibility, motion, and image derivatives.

The key tests compare the boundary term's per-pixel derivative of box-filtered coverage
(interior term zero: constant colours) with central finite differences of float64
references: the exact pixel coverage (polygon clipping, the limit of supersampling) and
1024-spp stratified supersampling (32 x 32 jittered strata per pixel, fixed points).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import rayd.torch as rt

sys.path.insert(0, str(Path(__file__).parent))
from edge_sampling_reference import (  # noqa: E402
    convex_hull, exact_layered_image, exact_triangle_coverage, grid_points, layered_image,
    pixel_jacobian,
)

W = H = 16
TRI = [[-0.5, -0.4, 3.0], [0.6, -0.3, 3.2], [0.05, 0.5, 2.8]]


def _rot(axis, angle):
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * k @ k


CUBE_F = torch.tensor([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                       [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
PLANE_F = torch.tensor([[0, 1, 2], [0, 2, 3]])
COLOURS = (1.0, 0.4)  # cube, plane; background 0


def _cube_plane():
    corners = np.array([[x, y, z] for x in (-.3, .3) for y in (-.3, .3) for z in (-.3, .3)])
    cube = corners @ _rot([1, 2, 0.5], 0.6).T + [0.1, -0.1, 3.0]
    plane = np.array([[-0.3, -3, 4.5], [3, -3, 4.5], [3, 0.8, 4.5], [-0.3, 0.8, 4.5]])
    return torch.tensor(np.concatenate([cube, plane]), dtype=torch.float64)


def _scene(parts, device="cpu"):
    scene = rt.Scene()
    for v, f in parts:
        scene.add_mesh(rt.Mesh(v, f.to(device)))
    scene.build()
    return scene


def _shade(scene, ray):
    colour = torch.tensor(COLOURS[: scene.num_meshes] + (0.0,), dtype=torch.float64, device=ray.o.device)
    return colour[scene.intersect(ray).shape_id.long()]


# ---------------------------------------------------------------------- lengths and clipping
def test_weights_sum_to_perimeter(device):
    v = torch.tensor(TRI, dtype=torch.float64, device=device)
    scene = _scene([(v, torch.tensor([[0, 1, 2]]))], device)
    cam = rt.Camera(W, H, fov_y=40.0)
    s = cam.sample_edges(scene, 1000, generator=torch.Generator().manual_seed(0))
    xy = cam.project(v)[0].cpu()
    perimeter = sum(float((xy[i] - xy[j]).norm()) for i, j in ((0, 1), (1, 2), (2, 0)))
    assert len(s) == 1000 and s.xy.shape == (1000, 2) and s.normal.shape == (1000, 2)
    assert float(s.weight.sum()) == pytest.approx(perimeter, rel=1e-12)
    assert s.weight.dtype == torch.float64 and s.global_edge_id.dtype == torch.int32
    assert bool(s.visible.all())
    # Stratified: the samples per edge follow the edge lengths to within one sample.
    counts = torch.bincount(s.global_edge_id.long().cpu(), minlength=3).double()
    lengths = torch.tensor([float((xy[0] - xy[1]).norm()), float((xy[0] - xy[2]).norm()), float((xy[1] - xy[2]).norm())])
    assert (counts - 1000 * lengths / perimeter).abs().max() <= 1.0


def test_clipping_hand_values():
    # fx = fy = 10, centre (5, 5), 10 x 10 image; triangle in camera space.
    cam = rt.Camera(10, 10, fx=10.0)
    # Image clip: (2, 2), (8, 2) and (5, 20) -> the two long edges stop at y = 10.
    v = torch.tensor([[-0.3, -0.3, 1.0], [0.3, -0.3, 1.0], [0.0, 1.5, 1.0]], dtype=torch.float64)
    s = cam.sample_edges(_scene([(v, torch.tensor([[0, 1, 2]]))]), 500, generator=torch.Generator().manual_seed(1))
    slanted = math.hypot(3 * 8 / 18, 8)
    assert float(s.weight.sum()) == pytest.approx(6 + 2 * slanted, rel=1e-12)
    assert float(s.xy[:, 1].max()) <= 10.0
    # Near-plane clip: C behind the camera; A -> (3, 6), B -> (7, 6); the edges to C run
    # off along (-1, 1) and (1, 1) and leave the image at (0, 9) and (10, 9).
    v = torch.tensor([[-0.2, 0.1, 1.0], [0.2, 0.1, 1.0], [0.0, 0.1, -1.0]], dtype=torch.float64)
    s = cam.sample_edges(_scene([(v, torch.tensor([[0, 1, 2]]))]), 500, generator=torch.Generator().manual_seed(2))
    assert float(s.weight.sum()) == pytest.approx(4 + 6 * math.sqrt(2), rel=1e-12)
    ab = s.global_edge_id == 0  # edge (0, 1): the face lies below it (towards C), so n = (0, -1)
    torch.testing.assert_close(s.normal[ab], torch.tensor([[0.0, -1.0]], dtype=torch.float64).expand(int(ab.sum()), 2))
    torch.testing.assert_close(s.xy[ab][:, 1], torch.full((int(ab.sum()),), 6.0, dtype=torch.float64))
    # The other two edges' normals point away from the face's inside (x -> outward).
    ac = s.global_edge_id == 1
    torch.testing.assert_close(s.normal[ac], torch.tensor([[-1.0, -1.0]], dtype=torch.float64).expand(int(ac.sum()), 2)
                               / math.sqrt(2))


def test_cube_silhouette_length_and_pose(device):
    # A camera with a pose looks at the cube: the sampled length is the hull perimeter.
    cube = _cube_plane()[:8].to(device)
    m = torch.eye(4, dtype=torch.float64, device=device)
    m[:3, :3] = torch.tensor(_rot([0.2, 1.0, 0.1], 0.15), device=device)
    m[:3, 3] = torch.tensor([0.3, 0.1, -0.5], device=device)
    cam = rt.Camera(W, H, fov_y=45.0, to_world=m)
    s = cam.sample_edges(_scene([(cube, CUBE_F)], device), 2000, generator=torch.Generator().manual_seed(3))
    hull = convex_hull(cam.project(cube)[0].cpu().numpy())
    assert (hull.min() > 0) and (hull.max() < W)
    perimeter = float(np.linalg.norm(hull - np.roll(hull, -1, axis=0), axis=1).sum())
    assert float(s.weight.sum()) == pytest.approx(perimeter, rel=1e-10)
    assert len(torch.unique(s.global_edge_id)) == len(hull)  # one silhouette edge per hull side


def test_normals_point_out_of_the_faces():
    v = torch.tensor(TRI, dtype=torch.float64)
    cam = rt.Camera(W, H, fov_y=40.0)
    s = cam.sample_edges(_scene([(v, torch.tensor([[0, 1, 2]]))]), 400, generator=torch.Generator().manual_seed(4))
    tri = cam.project(v)[0]
    far = (s.xy[:, None] - tri[None]).norm(dim=-1).min(1).values > 1.0
    from edge_sampling_reference import in_triangles
    inside = in_triangles(s.xy - 0.3 * s.normal, tri[None])
    outside = in_triangles(s.xy + 0.3 * s.normal, tri[None])
    assert bool(inside[far].all()) and not bool(outside[far].any())
    torch.testing.assert_close(s.normal.norm(dim=-1), torch.ones(400, dtype=torch.float64))
    # The rays through xy -/+ eps n: inside hits, outside misses (away from the corners).
    scene = _scene([(v, torch.tensor([[0, 1, 2]]))])
    assert bool(scene.intersect(s.ray_inside).is_valid()[far].all())
    assert not bool(scene.intersect(s.ray_outside).is_valid()[far].any())
    back, _ = cam.project(s.ray_inside(torch.ones(400, dtype=torch.float64)))
    torch.testing.assert_close(back, s.xy - 0.005 * s.normal)


def test_visible_flag_behind_cube(device):
    v = _cube_plane().to(device)
    scene = _scene([(v[:8], CUBE_F), (v[8:], PLANE_F)], device)
    cam = rt.Camera(W, H, fov_y=40.0)
    s = cam.sample_edges(scene, 3000, generator=torch.Generator().manual_seed(5))
    shape = scene.edge_topology().shape_id[s.global_edge_id.long()].cpu()
    hull = convex_hull(cam.project(v[:8])[0].cpu().numpy())
    xy = s.xy.cpu().numpy()
    # Signed distance to the hull (positive inside), by its edges.
    a, b = hull, np.roll(hull, -1, axis=0)
    edge = b - a
    cross = (edge[None, :, 0] * (xy[:, None, 1] - a[None, :, 1]) - edge[None, :, 1] * (xy[:, None, 0] - a[None, :, 0]))
    depth_in = (cross / np.linalg.norm(edge, axis=1)).min(1)
    plane = (shape == 1).numpy()
    hidden = plane & (depth_in > 0.05)
    shown = plane & (depth_in < -0.05)
    vis = s.visible.cpu().numpy()
    assert hidden.sum() > 50 and shown.sum() > 50
    assert not vis[hidden].any() and vis[shown].all()
    assert vis[shape.numpy() == 0].all()  # the cube's silhouette is never hidden


def test_motion_value_zero_and_normal_velocity():
    # Translating the triangle by (delta, 0, 0) moves each sample by fx / Z in x.
    v = torch.tensor(TRI, dtype=torch.float64)
    shift = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    placed = v + shift
    cam = rt.Camera(W, H, fov_y=40.0)
    s = cam.sample_edges(_scene([(placed, torch.tensor([[0, 1, 2]]))]), 64, generator=torch.Generator().manual_seed(6))
    assert bool((s.motion == 0).all())
    jac = torch.stack([torch.autograd.grad(s.motion[i], shift, retain_graph=True)[0] for i in range(64)])
    ends = torch.tensor([[0, 1], [0, 2], [1, 2]])[s.global_edge_id.long()]
    point = v[ends[:, 0]] * (1 - s.edge_t[:, None]) + v[ends[:, 1]] * s.edge_t[:, None]
    fx = cam.intrinsics()[0]
    z = point[:, 2]
    want = torch.stack((fx / z * s.normal[:, 0], fx / z * s.normal[:, 1],
                        -fx * (point[:, 0] * s.normal[:, 0] + point[:, 1] * s.normal[:, 1]) / z**2), -1)
    torch.testing.assert_close(jac, want)
    torch.testing.assert_close(cam.project(point)[0], s.xy)


# ---------------------------------------------------------------------- image derivatives
def _triangle_refs(v0, cam, h_ss=0.04, seeds=2):
    """Exact FD (H, W, 9); FD at step ``h_ss`` of the exact coverage (its truncation error);
    mean and sd over ``seeds`` jitter patterns of the 1024-spp FD at step ``h_ss``."""
    def exact(v):
        return torch.tensor(exact_triangle_coverage(cam.project(v)[0].numpy(), W, H))

    def fd(render, h):
        cols = []
        for j in range(v0.numel()):
            e = torch.zeros(v0.numel(), dtype=torch.float64)
            e[j] = h
            e = e.reshape(v0.shape)
            cols.append((render(v0 + e) - render(v0 - e)) / (2 * h))
        return torch.stack(cols, -1)

    # Supersample only the pixels the triangle can reach (the rest stay 0).
    xy = cam.project(v0)[0]
    lo = (xy.min(0).values - 1).floor().clamp(min=0).long()
    hi = (xy.max(0).values + 2).floor().clamp(max=W).long()
    ss = []
    for seed in range(seeds):
        pts = grid_points(W, H, 32, seed)[lo[1]:hi[1], lo[0]:hi[0]]

        def render(v):
            out = torch.zeros(H, W, dtype=torch.float64)
            out[lo[1]:hi[1], lo[0]:hi[0]] = layered_image([(cam.project(v)[0][None], 1.0)], pts)
            return out

        ss.append(fd(render, h_ss))
    ss = torch.stack(ss)
    return fd(exact, 1e-6), fd(exact, h_ss), ss.mean(0), ss.std(0)


def _estimates(v0, cam, parts, seeds, n):
    out = []
    for seed in range(seeds):
        v = v0.clone().requires_grad_()
        scene = _scene([(v[rows], f) for rows, f in parts])
        s = cam.sample_edges(scene, n, generator=torch.Generator().manual_seed(100 + seed))
        term = s.boundary_term(_shade(scene, s.ray_inside), _shade(scene, s.ray_outside))
        assert bool((term == 0).all())
        out.append(pixel_jacobian(term, v).detach())
    return torch.stack(out)


def _report(name, est, ref, se):
    l1 = float((est - ref).abs().sum() / ref.abs().sum())
    summed = float(((est.sum((0, 1)) - ref.sum((0, 1))).abs().sum() / ref.abs().sum()))
    tol = 4 * se + 0.01 * ref.abs().max()
    frac = float(((est - ref).abs() <= tol).double().mean())
    print(f"{name}: L1 rel {l1:.4f}, image-summed rel {summed:.4f}, per-pixel within 4 SE + 1% max: {frac:.4f}, "
          f"max |err| {float((est - ref).abs().max()):.4f}, max SE {float(se.max()):.4f}")
    return l1, summed, frac


def test_triangle_coverage_derivative_matches_finite_differences():
    v0 = torch.tensor(TRI, dtype=torch.float64)
    cam = rt.Camera(W, H, fov_y=40.0)
    ref, ref_h, ss, ss_sd = _triangle_refs(v0, cam)
    est = _estimates(v0, cam, [(slice(0, 3), torch.tensor([[0, 1, 2]]))], seeds=4, n=2048)
    mean, se = est.mean(0), est.std(0) / math.sqrt(est.shape[0])
    l1, summed, frac = _report("triangle vs exact FD", mean, ref, se)
    assert l1 < 0.02 and summed < 0.02 and frac == 1.0
    l1, summed, frac = _report("triangle single run vs exact FD", est[0], ref, est.std(0))
    assert l1 < 0.02 and summed < 0.02
    # 1024-spp supersampling at step h: its own error (sd over the jitter patterns) and the
    # step's truncation error (exact coverage, same step) enter the tolerance.
    se_ss = torch.sqrt(se**2 + ss_sd**2 / ss_sd.new_tensor(2.0)) + (ref_h - ref).abs() / 4
    l1, summed, frac = _report("triangle vs 1024-spp FD (2 patterns)", mean, ss, se_ss)
    assert summed < 0.02 and frac >= 0.99


def _cube_refs(v0, cam):
    def exact(v):
        xy = cam.project(v)[0].numpy()
        layers = [(convex_hull(xy[:8]), COLOURS[0]), (convex_hull(xy[8:]), COLOURS[1])]
        return torch.tensor(exact_layered_image(layers, W, H))

    cols = []
    for j in range(v0.numel()):
        e = torch.zeros(v0.numel(), dtype=torch.float64)
        e[j] = 1e-6
        e = e.reshape(v0.shape)
        cols.append((exact(v0 + e) - exact(v0 - e)) / 2e-6)
    return torch.stack(cols, -1)


def test_cube_over_plane_derivative_matches_finite_differences():
    v0 = _cube_plane()
    cam = rt.Camera(W, H, fov_y=40.0)
    ref = _cube_refs(v0, cam)
    # The exact reference agrees with 1024-spp supersampling of the layered triangles.
    pts = grid_points(W, H, 32, 0)
    xy = cam.project(v0)[0]
    ss = layered_image([(xy[:8][CUBE_F], COLOURS[0]), (xy[8:][PLANE_F], COLOURS[1])], pts)
    exact = exact_layered_image([(convex_hull(xy[:8].numpy()), 1.0), (convex_hull(xy[8:].numpy()), 0.4)], W, H)
    assert float((ss - torch.from_numpy(exact)).abs().max()) < 0.01
    est = _estimates(v0, cam, [(slice(0, 8), CUBE_F), (slice(8, 12), PLANE_F)], seeds=3, n=4096)
    mean, se = est.mean(0), est.std(0) / math.sqrt(est.shape[0])
    l1, summed, frac = _report("cube over plane vs exact FD", mean, ref, se)
    assert l1 < 0.02 and summed < 0.02 and frac == 1.0
    # The plane's derivative is nonzero only where its edge is not behind the cube.
    plane_x = ref[..., 8 * 3 + 0]  # plane vertex 0, x
    assert float(plane_x.abs().sum()) > 0


def test_zero_bias_over_seeds():
    # A scalar loss sum_k w_k I_k with random pixel weights; few samples, many seeds.
    v0 = torch.tensor(TRI, dtype=torch.float64)
    cam = rt.Camera(W, H, fov_y=40.0)
    w = torch.rand(H, W, generator=torch.Generator().manual_seed(7), dtype=torch.float64)

    def loss_exact(v):
        return float((torch.tensor(exact_triangle_coverage(cam.project(v)[0].numpy(), W, H)) * w).sum())

    ref = torch.zeros(9, dtype=torch.float64)
    for j in range(9):
        e = torch.zeros(9, dtype=torch.float64)
        e[j] = 1e-6
        ref[j] = (loss_exact(v0 + e.reshape(3, 3)) - loss_exact(v0 - e.reshape(3, 3))) / 2e-6
    v = v0.clone().requires_grad_()
    scene = _scene([(v, torch.tensor([[0, 1, 2]]))])
    grads = []
    gen = torch.Generator().manual_seed(8)
    for _ in range(200):
        s = cam.sample_edges(scene, 24, generator=gen)
        term = s.boundary_term(_shade(scene, s.ray_inside), _shade(scene, s.ray_outside))
        grads.append(torch.autograd.grad((term * w).sum(), v)[0].reshape(-1))
    g = torch.stack(grads)
    z = (g.mean(0) - ref) / (g.std(0) / math.sqrt(g.shape[0]))
    print("zero-bias z-scores:", [round(float(x), 2) for x in z])
    assert float(g.std(0).min()) > 0  # a real Monte Carlo estimate, not a degenerate one
    assert float(z.abs().max()) < 4.0


def test_camera_parameter_gradients():
    # d loss / d(camera translation, fx) through motion, against exact FD.
    v = torch.tensor(TRI, dtype=torch.float64)
    scene = _scene([(v, torch.tensor([[0, 1, 2]]))])
    w = torch.rand(H, W, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    base = torch.eye(4, dtype=torch.float64)
    base[:3, 3] = torch.tensor([0.05, -0.02, 0.1])
    f0 = 0.5 * H / math.tan(math.radians(20.0))

    def loss_exact(m, fx):
        cam = rt.Camera(W, H, fx=fx, to_world=m)
        return float((torch.tensor(exact_triangle_coverage(cam.project(v)[0].numpy(), W, H)) * w).sum())

    ref = []
    for j in range(3):
        e = torch.zeros(4, 4, dtype=torch.float64)
        e[j, 3] = 1e-6
        ref.append((loss_exact(base + e, f0) - loss_exact(base - e, f0)) / 2e-6)
    ref.append((loss_exact(base, f0 + 1e-5) - loss_exact(base, f0 - 1e-5)) / 2e-5)
    m = base.clone().requires_grad_()
    fx = torch.tensor(f0, dtype=torch.float64, requires_grad=True)
    cam = rt.Camera(W, H, fx=fx, to_world=m)
    s = cam.sample_edges(scene, 20000, generator=torch.Generator().manual_seed(10))
    term = s.boundary_term(_shade(scene, s.ray_inside), _shade(scene, s.ray_outside))
    gm, gf = torch.autograd.grad((term * w).sum(), (m, fx))
    got = torch.stack([gm[0, 3], gm[1, 3], gm[2, 3], gf])
    torch.testing.assert_close(got, torch.tensor(ref, dtype=torch.float64), rtol=0.02, atol=0.02 * max(map(abs, ref)))


def test_tent_filter_preserves_image_sum():
    # Away from the border the tent weights of a sample add up to 1, as the box's.
    v = torch.tensor(TRI, dtype=torch.float64, requires_grad=True)
    scene = _scene([(v, torch.tensor([[0, 1, 2]]))])
    s = rt.Camera(W, H, fov_y=40.0).sample_edges(scene, 500, generator=torch.Generator().manual_seed(11))
    f_in, f_out = _shade(scene, s.ray_inside), _shade(scene, s.ray_outside)
    (gb,) = torch.autograd.grad(s.boundary_term(f_in, f_out).sum(), v, retain_graph=True)
    tent = s.boundary_term(f_in, f_out, filter="tent")
    (gt,) = torch.autograd.grad(tent.sum(), v, retain_graph=True)
    torch.testing.assert_close(gt, gb)
    # Colour channels: (N, 3) shading gives an (H, W, 3) term, channel c scaled by c + 1.
    rgb = s.boundary_term(f_in[:, None] * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), torch.zeros(500, 3,
                          dtype=torch.float64))
    assert rgb.shape == (H, W, 3)
    (g3,) = torch.autograd.grad(rgb[..., 2].sum(), v)
    torch.testing.assert_close(g3, 3 * gb)


def test_nothing_on_screen():
    v = torch.tensor(TRI, dtype=torch.float64) * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)  # behind
    scene = _scene([(v, torch.tensor([[0, 1, 2]]))])
    s = rt.Camera(W, H, fov_y=40.0).sample_edges(scene, 100)
    assert len(s) == 0 and s.xy.shape == (0, 2) and s.ray_inside.shape == (0,)
    term = s.boundary_term(torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64))
    assert term.shape == (H, W) and bool((term == 0).all())


def test_masked_edges_and_disabled_shapes_are_not_sampled():
    v = _cube_plane()
    scene = _scene([(v[:8], CUBE_F), (v[8:], PLANE_F)])
    cam = rt.Camera(W, H, fov_y=40.0)
    top = scene.edge_topology()
    scene.set_edge_mask(top.shape_id == 0)
    scene.sync()
    s = cam.sample_edges(scene, 500)
    assert bool((top.shape_id[s.global_edge_id.long()] == 0).all())
    scene.set_shape_enabled(0, False)
    scene.sync()
    assert len(cam.sample_edges(scene, 500)) == 0


def test_sample_edges_errors():
    v = torch.tensor(TRI, dtype=torch.float64)
    scene = _scene([(v, torch.tensor([[0, 1, 2]]))])
    cam = rt.Camera(W, H, fov_y=40.0)
    pre = r"^rayd\.torch\.Camera\.sample_edges\(\): "
    with pytest.raises(TypeError, match=pre + "'scene' must be a rayd.torch.Scene"):
        cam.sample_edges(object(), 10)
    with pytest.raises(TypeError, match=pre + "'num_samples' must be an int"):
        cam.sample_edges(scene, 10.0)
    with pytest.raises(ValueError, match=pre + "'num_samples' must be >= 0"):
        cam.sample_edges(scene, -1)
    with pytest.raises(TypeError, match=pre + "'generator' must be a torch.Generator"):
        cam.sample_edges(scene, 10, generator=3)
    with pytest.raises(RuntimeError, match=pre):
        cam.sample_edges(rt.Scene(), 10)
    s = cam.sample_edges(scene, 10)
    pre = r"^rayd\.torch\.EdgeSamples\.boundary_term\(\): "
    f = torch.zeros(10, dtype=torch.float64)
    with pytest.raises(ValueError, match=pre + r"'f_inside' must have shape \(10,\) or \(10, C\)"):
        s.boundary_term(torch.zeros(9), f)
    with pytest.raises(TypeError, match=pre + "'f_outside' must be a torch.Tensor"):
        s.boundary_term(f, 0.0)
    with pytest.raises(ValueError, match=pre + "'filter' must be one of"):
        s.boundary_term(f, f, filter="gauss")


def test_fitting_a_translation_through_the_boundary_term():
    # Recover a 2D shift of the triangle from a target coverage image: every gradient
    # comes from the boundary term (the coverage itself has none).
    cam = rt.Camera(W, H, fov_y=40.0)
    pts = grid_points(W, H, 4).reshape(-1, 2)  # 16 spp per pixel, pixel-major

    def render(scene, _):
        hit = scene.intersect(cam.generate_rays(pts)).is_valid().double()
        return hit.reshape(H, W, 16).mean(-1)

    base = torch.tensor(TRI, dtype=torch.float64)
    true_shift = torch.tensor([0.12, -0.08, 0.0], dtype=torch.float64)
    target_scene = _scene([(base + true_shift, torch.tensor([[0, 1, 2]]))])
    target = render(target_scene, None)
    shift = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([shift], lr=0.03)
    decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.92)
    gen = torch.Generator().manual_seed(12)
    for _ in range(40):
        v = base + torch.cat((shift, shift.new_zeros(1)))
        scene = _scene([(v, torch.tensor([[0, 1, 2]]))])
        s = cam.sample_edges(scene, 1000, generator=gen)
        image = render(scene, None) + s.boundary_term(_shade(scene, s.ray_inside), _shade(scene, s.ray_outside))
        loss = ((image - target) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        decay.step()
    torch.testing.assert_close(shift.detach(), true_shift[:2], atol=0.01, rtol=0)


def test_split_vertex_cube_seams_sampled_once(device):
    # The cube with its vertices split per face (36 vertices, every edge a boundary edge of
    # its own face, as flat-shaded exports write it): the coincident boundary-edge pairs are
    # one interior edge each, so the sampled length is still the hull perimeter (it was
    # twice that, plus the length of every visible crease, before the seams were paired).
    cube = _cube_plane()[:8].to(device)
    split_v = cube[CUBE_F.reshape(-1).to(device)]
    split_f = torch.arange(36, device=device).reshape(12, 3)
    cam = rt.Camera(W, H, fov_y=45.0)
    s = cam.sample_edges(_scene([(split_v, split_f)], device), 2000, generator=torch.Generator().manual_seed(3))
    hull = convex_hull(cam.project(cube)[0].cpu().numpy())
    perimeter = float(np.linalg.norm(hull - np.roll(hull, -1, axis=0), axis=1).sum())
    assert float(s.weight.sum()) == pytest.approx(perimeter, rel=1e-10)
    # the normals point away from the cube's image, as for the welded cube
    centre = torch.as_tensor(hull.mean(0), device=device)
    assert bool(((s.xy.double() - centre) * s.normal.double()).sum(-1).gt(0).all())


def test_faces_listed_twice_are_sampled_as_one(device):
    """A face listed twice (same three vertex indices, either winding) is one face for
    ``sample_edges``. A triangle listed twice had no sampled outline (its records joined two
    coincident faces: never a silhouette), and a cube with two faces listed again sampled
    52 % (same winding) or 185 % (reversed copies) more length than the cube, each crease
    next to a copy twice, with a wrong boundary-term gradient. Now the length, the sampled
    edges' geometry and the gradient are the plain mesh's."""
    tri = torch.tensor(TRI, dtype=torch.float64, device=device)
    cam = rt.Camera(W, H, fov_y=45.0)
    want = cam.sample_edges(_scene([(tri, torch.tensor([[0, 1, 2]]))], device), 500,
                            generator=torch.Generator().manual_seed(2))
    for f in ([[0, 1, 2], [0, 1, 2]], [[0, 1, 2], [0, 2, 1]], [[0, 1, 2], [1, 2, 0], [0, 1, 2]]):
        got = cam.sample_edges(_scene([(tri, torch.tensor(f))], device), 500, generator=torch.Generator().manual_seed(2))
        assert float(got.weight.sum()) == pytest.approx(float(want.weight.sum()), rel=1e-12) and len(got) == 500
        torch.testing.assert_close(got.xy, want.xy, rtol=0, atol=1e-9)
        torch.testing.assert_close(got.normal, want.normal, rtol=0, atol=1e-12)
    cube = _cube_plane()[:8].to(device)
    grads = []
    for extra in ([], [CUBE_F[0], CUBE_F[5]], [CUBE_F[0].flip(0), CUBE_F[5].flip(0)], [CUBE_F[0], CUBE_F[0], CUBE_F[6]]):
        v = cube.clone().requires_grad_()
        f = torch.cat([CUBE_F] + [e[None] for e in extra])
        scene = _scene([(v, f)], device)
        s = cam.sample_edges(scene, 4000, generator=torch.Generator().manual_seed(4))
        hull = convex_hull(cam.project(cube)[0].detach().cpu().numpy())
        perimeter = float(np.linalg.norm(hull - np.roll(hull, -1, axis=0), axis=1).sum())
        assert float(s.weight.sum()) == pytest.approx(perimeter, rel=1e-10)
        term = s.boundary_term(_shade(scene, s.ray_inside), _shade(scene, s.ray_outside))
        w = torch.rand(H, W, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(device)
        (grad,) = torch.autograd.grad((term * w).sum(), [v])
        grads.append(grad)
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0], rtol=1e-12, atol=1e-12 * float(grads[0].abs().max()))


def test_float32_scene_far_from_the_origin_keeps_inside_and_outside(device):
    """A float32 scene and camera placed 1e4 to 1e5 from the origin: ``xy`` was re-projected in
    float32 from absolute coordinates (error ~0.01 pixel, above ``EDGE_OFFSET`` = 0.005), so
    ``ray_inside`` missed or ``ray_outside`` hit the triangle for 49 % (1e4) and 95 % (1e5) of
    the samples, biasing the boundary term. ``xy`` is now the host's float64 projection (the
    motion's derivative is unchanged), and every sample's rays lie on their sides."""
    for offset in (1e4, 1e5):
        o = np.array([offset, -offset / 3, offset / 2])
        v = torch.tensor(np.array(TRI) + o, dtype=torch.float32, device=device)
        scene = _scene([(v, torch.tensor([[0, 1, 2]]))], device)
        pose = torch.eye(4, dtype=torch.float32, device=device)
        pose[:3, 3] = torch.tensor(o, dtype=torch.float32)
        s = rt.Camera(64, 64, fov_y=40.0, to_world=pose).sample_edges(scene, 4000, generator=torch.Generator().manual_seed(0))
        assert len(s) == 4000
        assert bool(scene.intersect(s.ray_inside).is_valid().all())
        assert not bool(scene.intersect(s.ray_outside).is_valid().any())
        # xy is the projection of the sample's edge point (float64 reference)
        top = scene.edge_topology()
        ends = v.double().cpu()[top.v[s.global_edge_id.long()].long().cpu()]  # the float32 vertices
        point = ends[:, 0] + s.edge_t.double().cpu()[:, None] * (ends[:, 1] - ends[:, 0])
        want = rt.Camera(64, 64, fov_y=40.0, to_world=pose.double().cpu()).project(point)[0]
        torch.testing.assert_close(s.xy.double().cpu(), want, rtol=0, atol=1e-4)


def test_float32_closed_mesh_far_from_the_origin_is_visible(device):
    """The cube of ``_cube_plane`` 1e4 and 1e5 from the origin, float32: the ``visible`` segment
    ended at the float32 edge point, which can lie inside the cube (0.008 world units of
    rounding at 1e5, above the segment's 1e-4 relative end gap), so 13 % (1e4) and 27 % (1e5)
    of the silhouette samples were reported hidden. The segment now ends at the float64 point
    (``SamplePlan.point``); every sample of the lone cube is visible, as in float64."""
    cube = _cube_plane()[:8]
    for offset in (1e4, 1e5):
        o = torch.tensor([offset, -offset / 3, offset / 2], dtype=torch.float64)
        scene = _scene([((cube + o).float().to(device), CUBE_F)], device)
        pose = torch.eye(4, dtype=torch.float32, device=device)
        pose[:3, 3] = o.float()
        s = rt.Camera(64, 64, fov_y=40.0, to_world=pose).sample_edges(scene, 4000, generator=torch.Generator().manual_seed(0))
        assert len(s) == 4000 and bool(s.visible.all())
        assert bool(scene.intersect(s.ray_inside).is_valid().all())
        assert not bool(scene.intersect(s.ray_outside).is_valid().any())


def test_edge_samples_are_a_record_detach_index_to(device):
    # The same record operations as Intersection: fields in dir(), detach(), to(), indexing.
    v = torch.tensor([[-1.0, -1, 3], [1, -1, 3], [0, 1, 3]], dtype=torch.float64, device=device, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    cam = rt.Camera(8, 8, fov_y=90.0)
    s = cam.sample_edges(scene, 6, generator=torch.Generator().manual_seed(0))
    names = {"xy", "normal", "weight", "ray_inside", "ray_outside", "global_edge_id", "edge_t", "visible", "motion"}
    assert names <= set(dir(s)) and set(s.fields) == names and s.shape == (6,)
    mask = s.global_edge_id == s.global_edge_id[0]
    sub = s[mask]
    assert type(sub) is rt.EdgeSamples and (sub.width, sub.height) == (8, 8) and len(sub) == int(mask.sum())
    assert torch.equal(sub.xy, s.xy[mask]) and torch.equal(sub.edge_t, s.edge_t[mask])
    assert torch.equal(sub.global_edge_id, s.global_edge_id[mask]) and torch.equal(sub.visible, s.visible[mask])
    assert torch.equal(sub.ray_inside.d, s.ray_inside.d[mask]) and torch.equal(sub.ray_outside.o, s.ray_outside.o[mask])
    assert torch.equal(s[2:4].weight, s.weight[2:4])
    # indexing keeps motion differentiable: its gradient is that of the selected samples only
    want = torch.autograd.grad(s.motion[mask].sum(), v, retain_graph=True)[0]
    sub.motion.sum().backward()
    torch.testing.assert_close(v.grad, want)
    assert v.grad.abs().sum() > 0
    d = s.detach()
    assert type(d) is rt.EdgeSamples and not d.motion.requires_grad and torch.equal(d.xy, s.xy)
    assert not d.ray_inside.d.requires_grad and torch.equal(d.ray_inside.d, s.ray_inside.d.detach())
    f = s.detach().to(torch.float32).cpu()
    assert f.xy.dtype == torch.float32 and f.ray_inside.d.dtype == torch.float32 and f.global_edge_id.dtype == torch.int32
    assert f.ray_inside.o.device.type == "cpu" and repr(f) == "rayd.torch.EdgeSamples(num_samples=6, width=8, height=8)"
    term = s.detach().boundary_term(torch.ones(6, dtype=torch.float64, device=device), torch.zeros(6, dtype=torch.float64,
                                                                                                 device=device))
    assert term.shape == (8, 8) and float(term.abs().sum()) == 0.0
