"""Regressions found by trying the new features (cameras, all hits, paths) as a user would."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rayd.torch as rt

TRI = [[-0.5, -0.4, 3.0], [0.6, -0.3, 3.2], [0.05, 0.5, 2.8]]


def _pose(dtype=torch.float64) -> torch.Tensor:
    """A rotation about a skew axis plus a shift (camera to world)."""
    a = torch.tensor([0.3, -0.5, 0.8], dtype=torch.float64)
    a = a / a.norm()
    k = torch.tensor([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]], dtype=torch.float64)
    m = torch.eye(4, dtype=torch.float64)
    m[:3, :3] = torch.eye(3, dtype=torch.float64) + math.sin(0.2) * k + (1 - math.cos(0.2)) * k @ k
    m[:3, 3] = torch.tensor([0.1, -0.05, -0.2])
    return m.to(dtype)


def _scene(vertices: torch.Tensor, device="cpu") -> rt.Scene:
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    return scene


# ----------------------------------------------------------------- forward mode through sample_edges
def test_sample_edges_motion_forward_mode_matches_reverse(device):
    """torch.func.jvp through sample_edges (it read wrapper tensors on the host and failed)."""
    vertices = torch.tensor(TRI, dtype=torch.float64, device=device)
    scene = _scene(vertices, device)
    fx = torch.tensor(20.0, dtype=torch.float64, device=device)
    pose = _pose().to(device)

    def motion(fx, pose):
        camera = rt.Camera(16, 16, fx=fx, fy=18.0, cx=7.5, cy=8.5, to_world=pose)
        return camera.sample_edges(scene, 64, generator=torch.Generator().manual_seed(3)).motion

    tangent_fx = torch.tensor(0.7, dtype=torch.float64, device=device)
    tangent_pose = torch.zeros(4, 4, dtype=torch.float64, device=device)
    tangent_pose[:3] = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4)
    value, jvp = torch.func.jvp(motion, (fx, pose), (tangent_fx, tangent_pose))
    assert value.shape == (64,) and torch.all(value == 0)
    # Reverse mode gives the Jacobian rows; their product with the tangent must agree.
    fx_r, pose_r = fx.clone().requires_grad_(True), pose.clone().requires_grad_(True)
    m = motion(fx_r, pose_r)
    rows = [torch.autograd.grad(m[i], (fx_r, pose_r), retain_graph=True) for i in range(m.shape[0])]
    want = torch.stack([g_fx * tangent_fx + (g_pose * tangent_pose).sum() for g_fx, g_pose in rows])
    assert want.abs().max() > 1e-3
    torch.testing.assert_close(jvp, want, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------- camera parameter values
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(fx=torch.tensor(0.0)), "'fx' must be positive, got 0.0"),
        (dict(fx=torch.tensor(-3.0)), "'fx' must be positive, got -3.0"),
        (dict(fx=10.0, fy=torch.tensor(float("nan"))), "'fy' must be finite, got nan"),
        (dict(fx=10.0, cx=torch.tensor(float("inf"))), "'cx' must be finite, got inf"),
        (dict(fov_y=torch.tensor(200.0)), "'fov_y' must be in (0, 180) degrees, got 200.0"),
        (dict(fov_y=torch.tensor(0.0)), "'fov_y' must be in (0, 180) degrees, got 0.0"),
        (dict(fx=10.0, to_world=torch.zeros(4, 4)), "'to_world' is singular"),
        (dict(fx=10.0, to_world=torch.full((4, 4), float("nan"))), "'to_world' holds non-finite values"),
    ],
)
def test_camera_rejects_bad_tensor_values(kwargs, message):
    """Tensor intrinsics and to_world are checked like numbers and mesh transforms (they were not)."""
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\(\): ") as info:
        rt.Camera(16, 16, **kwargs)
    assert message in str(info.value)


def test_sample_edges_rechecks_parameters_changed_in_place():
    """A focal length or pose edited in place to an invalid value is refused by sample_edges
    (it returned samples with NaN positions, or raised torch's LinAlgError)."""
    scene = _scene(torch.tensor(TRI))
    fx = torch.tensor(20.0)
    pose = torch.eye(4)
    camera = rt.Camera(16, 16, fx=fx, to_world=pose)
    assert len(camera.sample_edges(scene, 10)) == 10
    fx.zero_()
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\.sample_edges\(\): 'fx' must be positive"):
        camera.sample_edges(scene, 10)
    fx.fill_(20.0)
    pose[2, 2] = 0.0
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\.sample_edges\(\): 'to_world' is singular"):
        camera.sample_edges(scene, 10)


# ----------------------------------------------------------------- NumPy integers and scalars
def test_numpy_integers_accepted_like_ints():
    """Camera sizes, num_samples, max_hits, k take NumPy integers as max_bounces does (they raised TypeError)."""
    scene = rt.Scene()
    for z in (1.0, 2.0):
        v = torch.tensor([[-1.0, -1, z], [1, -1, z], [1, 1, z], [-1, 1, z]])
        scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2], [0, 2, 3]])))
    scene.build()
    camera = rt.Camera(np.int64(16), np.int32(12), fx=np.int64(10), cx=np.float32(7.5))
    assert (camera.width, camera.height) == (16, 12) and type(camera.width) is int
    assert camera.intrinsics() == (10.0, 10.0, 7.5, 6.0)
    ray = rt.Ray(torch.tensor([0.3, 0.1, 0.0]), torch.tensor([[0.0, 0.0, 1.0]]))
    hits = scene.intersect_all(ray, np.int64(3))
    assert hits.t.tolist() == [[1.0, 2.0, math.inf]]
    assert len(camera.sample_edges(scene, np.int64(7))) == 7
    assert scene.nearest_edges(torch.zeros(1, 3), np.int32(2)).distance.shape == (1, 2)
    for bad in (True, np.bool_(True)):
        with pytest.raises(TypeError, match=r"^rayd\.torch\.Scene\.intersect_all\(\): 'max_hits' must be an int"):
            scene.intersect_all(ray, bad)
        with pytest.raises(TypeError, match=r"^rayd\.torch\.Camera\(\): 'width' must be an int"):
            rt.Camera(bad, 12, fx=10.0)


# ----------------------------------------------------------------- forward mode through find_specular_paths
def _room(device="cpu") -> rt.Scene:
    """A floor (z = 0) and a wall (x = 3): first-order reflections off either, second order off both."""
    v = torch.tensor([[-5, -5, 0], [5, -5, 0], [5, 5, 0], [-5, 5, 0],
                      [3, -5, -1], [3, 5, -1], [3, 5, 6], [3, -5, 6]], dtype=torch.float64, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]], device=device)))
    scene.build()
    return scene


def test_find_specular_paths_forward_mode_matches_reverse(device):
    """torch.func.jvp through find_specular_paths (its host reads of wrapper tensors failed)."""
    scene = _room(device)
    sources = torch.tensor([[0.0, 0, 1], [1, 1, 2]], dtype=torch.float64, device=device)
    targets = torch.tensor([[-1.0, 0.5, 1.5], [2, 0, 0.5]], dtype=torch.float64, device=device)

    def lengths(s):
        return rt.find_specular_paths(scene, s, targets, 2, num_rays=500).length

    tangent = torch.linspace(-1, 1, 6, dtype=torch.float64, device=device).reshape(2, 3)
    value, jvp = torch.func.jvp(lengths, (sources,), (tangent,))
    finite = value.isfinite()
    assert finite.sum() >= 8  # line of sight, floor, wall, floor+wall ... for every pair
    x = sources.clone().requires_grad_(True)
    out = lengths(x)
    assert torch.equal(out.detach().isfinite(), finite)
    flat = torch.where(finite, out, 0).reshape(-1)
    want = torch.stack([(torch.autograd.grad(flat[i], x, retain_graph=True)[0] * tangent).sum()
                        for i in range(flat.shape[0])]).reshape(value.shape)
    torch.testing.assert_close(torch.where(finite, jvp, 0), want, rtol=1e-10, atol=1e-12)
    # The line of sight (slot of the all -1 sequence) moves by the unit direction . tangent.
    los = rt.find_specular_paths(scene, sources, targets, 2, num_rays=500)
    k = (los.prim_sequence[0, 0] < 0).all(-1).nonzero()[0, 0]
    direction = (sources[0] - targets[0]) / (sources[0] - targets[0]).norm()
    torch.testing.assert_close(jvp[0, 0, k], (direction * tangent[0]).sum())


def test_find_specular_paths_line_of_sight_must_be_bool():
    """A non-bool line_of_sight is a TypeError (the string "no" switched it on)."""
    scene = _room()
    points = torch.tensor([[0.0, 0, 1]], dtype=torch.float64)
    with pytest.raises(TypeError, match=r"^rayd\.torch\.find_specular_paths\(\): 'line_of_sight' must be a bool"):
        rt.find_specular_paths(scene, points, points, 1, num_rays=10, line_of_sight="no")
    found = rt.find_specular_paths(scene, points, torch.tensor([[-1.0, 0.5, 1.5]], dtype=torch.float64), 1,
                                   num_rays=200, line_of_sight=np.bool_(False))
    assert found.valid.any() and (found.prim_sequence[found.valid] >= 0).any(-1).all()


def test_unrequested_field_message_names_intersect_all():
    """Reading an unrequested field of an intersect_all record names that call too (it named only intersect())."""
    scene = _scene(torch.tensor(TRI))
    hits = scene.intersect_all(rt.Ray(torch.zeros(3), torch.tensor([[0.0, 0.0, 1.0]])), 2, flags=rt.RayFlags.Minimal)
    assert hits.t.shape == (1, 2) and torch.isfinite(hits.t[0, 0])
    with pytest.raises(AttributeError, match=r"pass flags=RayFlags\.Geometric .*Scene\.intersect_all\(\)"):
        hits.p


def test_camera_value_checks_keep_vmap_over_intrinsics_working():
    """The value checks read every element of a torch.func.vmap batch (a scalar read broke vmap)."""
    samples = torch.tensor([[1.0, 2.0], [3.5, 0.5]])

    def directions(fx):
        return rt.Camera(4, 4, fx=fx, fy=3.0).generate_rays(samples).d

    fxs = torch.tensor([5.0, 6.0, 7.0])
    batched = torch.func.vmap(directions)(fxs)
    assert batched.shape == (3, 2, 3)
    for i, fx in enumerate(fxs):
        torch.testing.assert_close(batched[i], directions(fx))
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\(\): 'fx' must be positive, got 0\.0"):
        torch.func.vmap(directions)(torch.tensor([5.0, 0.0, 7.0]))


# ----------------------------------------------------------------- no host synchronisation in project
def test_project_does_not_synchronise(device, monkeypatch):
    """project() inverts to_world without torch.linalg.inv's error check, which synchronises CUDA
    with the host on every call (as the scene's transforms already do, through inv_ex)."""
    pose = _pose(torch.float32).to(device)
    camera = rt.Camera(16, 16, fx=20.0, to_world=pose)
    points = torch.tensor([[0.1, -0.2, 3.0], [0.5, 0.4, 2.0]], device=device)
    want_cam = (points.double().cpu() - _pose()[:3, 3]) @ _pose()[:3, :3]  # rotation: inverse = transpose
    want = 20.0 * want_cam[:, :2] / want_cam[:, 2:] + 8.0

    def refuse(*args, **kwargs):
        raise AssertionError("torch.linalg.inv synchronises with the host")

    monkeypatch.setattr(torch.linalg, "inv", refuse)
    if torch.device(device).type == "cuda":
        torch.cuda.set_sync_debug_mode("error")
    try:
        xy, depth = camera.project(points)
        cam = camera.world_to_camera(points)
    finally:
        if torch.device(device).type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(xy.double().cpu(), want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(depth.double().cpu(), want_cam[:, 2], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(cam.double().cpu(), want_cam, rtol=1e-6, atol=1e-6)
