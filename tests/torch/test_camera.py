"""rayd.torch.Camera: pinhole rays and projection (values, round trips, gradients, errors)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import rayd.torch as rt


def _pose(dtype=torch.float64, device="cpu"):
    """A camera-to-world matrix: rotation about an oblique axis, a translation."""
    axis = torch.tensor([0.3, -0.5, 0.8], dtype=torch.float64)
    axis = axis / axis.norm()
    angle = 0.7
    k = torch.tensor([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]], dtype=torch.float64)
    r = torch.eye(3, dtype=torch.float64) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)
    m = torch.eye(4, dtype=torch.float64)
    m[:3, :3] = r
    m[:3, 3] = torch.tensor([0.4, -1.2, 2.0])
    return m.to(dtype=dtype, device=device)


def test_fov_sets_focal_and_centre():
    cam = rt.Camera(64, 48, fov_y=60.0)
    fx, fy, cx, cy = cam.intrinsics()
    assert fx == pytest.approx(24.0 / math.tan(math.radians(30.0)))
    assert fy == fx and cx == 32.0 and cy == 24.0


def test_default_rays_hand_values(device):
    # fx = fy = 10, cx = 2, cy = 1.5; pixel (0, 0) centre (0.5, 0.5) -> dir (-0.15, -0.1, 1).
    cam = rt.Camera(4, 3, fx=10.0, cx=2.0, cy=1.5, to_world=torch.eye(4, device=device))
    ray = cam.generate_rays()
    assert ray.d.shape == (3, 4, 3) and ray.o.shape == (3, 4, 3)
    want = torch.tensor([-0.15, -0.1, 1.0])
    torch.testing.assert_close(ray.d[0, 0].cpu(), want / want.norm())
    # centre pixel column 2 row 1 -> (2.5, 1.5): dir (0.05, 0, 1)
    want = torch.tensor([0.05, 0.0, 1.0])
    torch.testing.assert_close(ray.d[1, 2].cpu(), want / want.norm())
    torch.testing.assert_close(ray.d.norm(dim=-1).cpu(), torch.ones(3, 4))
    assert ray.o.abs().max() == 0


def test_opencv_axes():
    # Identity pose: +x world is right of the centre, +y world is below it.
    cam = rt.Camera(10, 10, fx=5.0)
    xy, depth = cam.project(torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 2.0], [0.0, 0.0, 3.0]]))
    torch.testing.assert_close(xy, torch.tensor([[7.5, 5.0], [5.0, 7.5], [5.0, 5.0]]))
    torch.testing.assert_close(depth, torch.tensor([2.0, 2.0, 3.0]))


def test_round_trip(device):
    m = _pose(device=device)
    cam = rt.Camera(40, 30, fx=35.0, fy=31.0, cx=19.0, cy=16.5, to_world=m)
    gen = torch.Generator().manual_seed(0)
    xy = (torch.rand(200, 2, generator=gen, dtype=torch.float64) * torch.tensor([40.0, 30.0])).to(device)
    ray = cam.generate_rays(xy)
    t = torch.rand(200, generator=gen, dtype=torch.float64).to(device) * 5 + 0.5
    points = ray(t)
    back, depth = cam.project(points)
    torch.testing.assert_close(back, xy, atol=1e-10, rtol=0)
    # Unit directions: t is a distance, so depth = t * d_cam.z
    torch.testing.assert_close((points - m[:3, 3]).norm(dim=-1), t)
    d_cam = ray.d @ m[:3, :3]
    torch.testing.assert_close(depth, t * d_cam[:, 2])


def test_project_hits_scene_point():
    # A ray from generate_rays hits the plane z = 4 at the point that projects back to its pixel.
    v = torch.tensor([[-10.0, -10, 4], [10, -10, 4], [0, 10, 4]], dtype=torch.float64)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]])))
    scene.build()
    cam = rt.Camera(16, 16, fov_y=40.0)
    ray = cam.generate_rays()
    hit = scene.intersect(ray)
    xy, depth = cam.project(hit.p)
    torch.testing.assert_close(xy, _centres(16, 16), atol=1e-5, rtol=0)
    torch.testing.assert_close(depth, torch.full((16, 16), 4.0, dtype=torch.float64))


def _centres(w, h):
    gy, gx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
    return torch.stack((gx, gy), -1).double()


def test_gradcheck_generate_rays():
    gen = torch.Generator().manual_seed(1)
    xy = (torch.rand(5, 2, generator=gen, dtype=torch.float64) * 20).requires_grad_()
    fx = torch.tensor(22.0, dtype=torch.float64, requires_grad=True)
    fy = torch.tensor(18.0, dtype=torch.float64, requires_grad=True)
    cx = torch.tensor(9.5, dtype=torch.float64, requires_grad=True)
    cy = torch.tensor(10.5, dtype=torch.float64, requires_grad=True)
    m = _pose().requires_grad_()

    def f(xy, fx, fy, cx, cy, m):
        ray = rt.Camera(20, 20, fx=fx, fy=fy, cx=cx, cy=cy, to_world=m).generate_rays(xy)
        return ray.o, ray.d

    assert torch.autograd.gradcheck(f, (xy, fx, fy, cx, cy, m))


def test_gradcheck_project():
    gen = torch.Generator().manual_seed(2)
    p = (torch.rand(6, 3, generator=gen, dtype=torch.float64) + torch.tensor([0.0, -1.0, 4.0])).requires_grad_()
    fx = torch.tensor(22.0, dtype=torch.float64, requires_grad=True)
    cy = torch.tensor(10.5, dtype=torch.float64, requires_grad=True)
    m = _pose().requires_grad_()

    def f(p, fx, cy, m):
        return rt.Camera(20, 20, fx=fx, cy=cy, to_world=m).project(p)

    assert torch.autograd.gradcheck(f, (p, fx, cy, m))


def test_gradcheck_fov():
    fov = torch.tensor(50.0, dtype=torch.float64, requires_grad=True)
    xy = torch.tensor([[1.0, 3.0], [7.0, 2.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda f: rt.Camera(8, 8, fov_y=f).generate_rays(xy).d, (fov,))
    # d fx / d fov = -(h/2) / (2 sin^2(fov/2)) * pi/180
    cam = rt.Camera(8, 8, fov_y=fov)
    (g,) = torch.autograd.grad(cam.fx, fov)
    half = math.radians(25.0)
    assert float(g) == pytest.approx(-4.0 / (2 * math.sin(half) ** 2) * math.pi / 180)


def test_dtype_promotion():
    cam = rt.Camera(4, 4, fx=3.0)
    assert cam.generate_rays().d.dtype == torch.float32
    assert cam.generate_rays(torch.zeros(2, 2, dtype=torch.float64)).d.dtype == torch.float64
    cam = rt.Camera(4, 4, fx=3.0, to_world=torch.eye(4, dtype=torch.float64))
    assert cam.generate_rays().d.dtype == torch.float64
    assert cam.project(torch.ones(3))[0].dtype == torch.float64


@pytest.mark.parametrize("kwargs, exc, text", [
    (dict(width=4.0, height=4, fx=1.0), TypeError, "'width' must be an int"),
    (dict(width=4, height=0, fx=1.0), ValueError, "'height' must be positive"),
    (dict(width=4, height=4), ValueError, "one of 'fov_y', 'fx' or 'fy' is required"),
    (dict(width=4, height=4, fov_y=40.0, fx=2.0), ValueError, "give either 'fov_y' or 'fx'/'fy'"),
    (dict(width=4, height=4, fov_y=180.0), ValueError, "'fov_y' must be in (0, 180)"),
    (dict(width=4, height=4, fx=-1.0), ValueError, "'fx' must be positive"),
    (dict(width=4, height=4, fx="1"), TypeError, "'fx' must be a float"),
    (dict(width=4, height=4, fx=1.0, cx=torch.ones(2)), ValueError, "'cx' must be a 0-dim tensor"),
    (dict(width=4, height=4, fx=torch.tensor(1)), TypeError, "'fx' must have dtype float32 or float64"),
    (dict(width=4, height=4, fx=1.0, to_world=torch.eye(3)), ValueError, "'to_world' must have shape (4, 4)"),
    (dict(width=4, height=4, fx=1.0, to_world=[[1.0]]), TypeError, "'to_world' must be a torch.Tensor"),
    (dict(width=4, height=4, fx=float("nan")), ValueError, "'fx' must be finite"),
])
def test_constructor_errors(kwargs, exc, text):
    with pytest.raises(exc, match=r"^rayd\.torch\.Camera\(\): ") as info:
        rt.Camera(**kwargs)
    assert text in str(info.value)


def test_call_errors():
    cam = rt.Camera(4, 4, fx=1.0)
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\.generate_rays\(\): 'samples' must have shape \(\.\.\., 2\)"):
        cam.generate_rays(torch.zeros(3, 3))
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Camera\.generate_rays\(\): 'samples'"):
        cam.generate_rays(torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\.project\(\): 'points' must have shape \(\.\.\., 3\)"):
        cam.project(torch.zeros(3, 2))
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Camera\.project\(\): 'points' must be a torch.Tensor"):
        cam.project([1.0, 2.0, 3.0])


def test_device_mismatch(cuda_device):
    cam = rt.Camera(4, 4, fx=1.0, to_world=torch.eye(4, device=cuda_device))
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\.project\(\): 'points' is on cpu"):
        cam.project(torch.zeros(3))
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\(\): 'to_world' is on"):
        rt.Camera(4, 4, fx=torch.tensor(1.0), to_world=torch.eye(4, device=cuda_device))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_project_on_the_camera_plane_is_zero_never_nan(device, dtype):
    # The camera centre and other points at depth 0 have no projection: xy = 0 with zero
    # gradient (never NaN or inf, as for misses); other points keep their projection.
    cam = rt.Camera(16, 12, fx=20.0, fy=18.0, cx=7.5, cy=6.0)
    pts = torch.tensor([[0.0, 0, 0], [1.0, -2.0, 0.0], [0.5, -0.25, 2.0], [0.5, 0.5, -1.0]], dtype=dtype,
                       device=device, requires_grad=True)
    xy, depth = cam.project(pts)
    expected = torch.tensor([[0, 0], [0, 0], [20 * 0.25 + 7.5, 18 * -0.125 + 6.0], [20 * -0.5 + 7.5, 18 * -0.5 + 6.0]],
                            dtype=dtype, device=device)
    torch.testing.assert_close(xy.detach(), expected)
    torch.testing.assert_close(depth.detach(), torch.tensor([0, 0, 2.0, -1.0], dtype=dtype, device=device))
    (xy.sum() + depth.sum()).backward()
    grad = torch.tensor([[0, 0, 1], [0, 0, 1], [10, 9, 1 - (20 * 0.5 - 18 * 0.25) / 4], [-20, -18, 1 - (20 * 0.5 + 18 * 0.5)]],
                        dtype=dtype, device=device)
    torch.testing.assert_close(pts.grad, grad)
    posed = rt.Camera(16, 12, fov_y=60.0, to_world=_pose(dtype, device))
    xy, depth = posed.project(_pose(dtype, device)[:3, 3])  # its own centre
    assert xy.tolist() == [0.0, 0.0] and float(depth) == 0.0


def test_assigned_parameters_are_checked_and_used():
    """Assigning a parameter after Camera() is checked as Camera() checks it and takes effect:
    ``camera.fov_y = 20`` was ignored (the rays kept the old focal length), ``camera.fx = -2.0``
    gave garbage rays, ``camera.to_world = 'x'`` failed later with an unrelated error."""
    cam = rt.Camera(8, 6, fov_y=60.0)
    cam.fov_y = 20.0
    torch.testing.assert_close(cam.generate_rays().d, rt.Camera(8, 6, fov_y=20.0).generate_rays().d)
    cam.fx = 5.0  # fx alone: fov_y no longer describes the camera
    assert cam.fov_y is None and cam.intrinsics() == (5.0, rt.Camera(8, 6, fov_y=20.0).intrinsics()[1], 4.0, 3.0)
    cam.cx, cam.cy = 1.0, None  # None: the image centre
    torch.testing.assert_close(cam.generate_rays().d, rt.Camera(8, 6, fx=5.0, fy=cam.fy, cx=1.0).generate_rays().d)
    pose = torch.eye(4, dtype=torch.float64)
    pose[:3, 3] = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    cam.to_world = pose
    torch.testing.assert_close(cam.generate_rays().o[0, 0], pose[:3, 3])
    before = cam.intrinsics()
    for name, value, exc, text in [("fx", -2.0, ValueError, "'fx' must be positive, got -2.0"),
                                   ("fy", float("nan"), ValueError, "'fy' must be finite"),
                                   ("fov_y", 200.0, ValueError, "'fov_y' must be in \\(0, 180\\)"),
                                   ("cx", "a", TypeError, "'cx' must be a float"),
                                   ("to_world", "x", TypeError, "'to_world' must be a torch.Tensor"),
                                   ("to_world", torch.eye(3), ValueError, "'to_world' must have shape \\(4, 4\\)"),
                                   ("width", 16, AttributeError, "'width' cannot be assigned")]:
        with pytest.raises(exc, match=r"^rayd\.torch\.Camera.*" + text):
            setattr(cam, name, value)
    assert cam.intrinsics() == before and cam.to_world is pose and cam.width == 8


def test_camera_made_inside_vmap_over_poses():
    """``torch.func.vmap`` over camera poses: ``Camera(to_world=M)`` with a batched ``M`` failed
    with "Cannot access data pointer of Tensor that doesn't have storage" (its value check read
    the matrix with ``tolist``); it now checks every matrix of the batch, as for the intrinsics,
    and equals a loop. A bad matrix anywhere in the batch still raises ``ValueError``."""
    points = torch.tensor([[0.1, 0.2, 3.0], [-0.4, 0.3, 2.5]], dtype=torch.float64)
    poses = torch.eye(4, dtype=torch.float64).repeat(3, 1, 1)
    poses[:, 0, 3] = torch.tensor([0.0, 0.1, 0.2], dtype=torch.float64)
    poses[1, :3, :3] = _pose()[:3, :3]

    def project(m):
        xy, depth = rt.Camera(8, 8, fx=10.0, to_world=m).project(points)
        return xy, depth

    def rays(m):
        return rt.Camera(8, 8, fx=10.0, to_world=m).generate_rays(points[:, :2]).d

    xy, depth = torch.func.vmap(project)(poses)
    loop = [project(m) for m in poses]
    torch.testing.assert_close(xy, torch.stack([x for x, _ in loop]), rtol=0, atol=0)
    torch.testing.assert_close(depth, torch.stack([z for _, z in loop]), rtol=0, atol=0)
    torch.testing.assert_close(torch.func.vmap(rays)(poses), torch.stack([rays(m) for m in poses]), rtol=0, atol=0)
    assert xy[0, 0].tolist() == pytest.approx([10 * 0.1 / 3 + 4, 10 * 0.2 / 3 + 4])
    bad = poses.clone()
    bad[2, :3, :3] = 0.0
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\(\): 'to_world' .*singular"):
        torch.func.vmap(project)(bad)


def test_tensor_fov_is_read_at_each_call():
    """A tensor ``fov_y`` was turned into ``fx = fy`` once, at ``Camera()``: after an optimiser
    step on ``fov_y`` the camera kept the old focal length (stale rays), and the second
    ``backward()`` failed ("Trying to backward through the graph a second time"). The focal
    length now follows ``fov_y`` at each call, as the other tensor parameters do."""
    fov = torch.tensor(40.0, dtype=torch.float64, requires_grad=True)
    cam = rt.Camera(8, 6, fov_y=fov)
    opt = torch.optim.SGD([fov], lr=10.0)
    xy = torch.tensor([[1.0, 2.0], [5.5, 0.5]], dtype=torch.float64)
    for _ in range(3):
        d = cam.generate_rays(xy).d
        want = rt.Camera(8, 6, fov_y=float(fov.detach())).generate_rays(xy).d
        torch.testing.assert_close(d, want, rtol=0, atol=1e-15)
        f = 3.0 / math.tan(math.radians(float(fov.detach())) / 2)
        assert cam.intrinsics() == pytest.approx((f, f, 4.0, 3.0), rel=1e-14)
        opt.zero_grad()
        d[:, 0].sum().backward()
        assert fov.grad is not None and fov.grad.abs() > 0
        opt.step()
    assert float(fov.detach()) != 40.0
    twin = copy.deepcopy(cam)  # failed: the focal length was a non-leaf tensor computed at Camera()
    with torch.no_grad():
        twin.fov_y.fill_(60.0)
    assert twin.intrinsics()[0] == pytest.approx(3.0 / math.tan(math.radians(30.0))) != cam.intrinsics()[0]
    with torch.no_grad():
        fov.fill_(200.0)  # in place out of range: the values are checked again by sample_edges
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[-1.0, -1, 3], [1, -1, 3], [0, 1, 3]]), torch.tensor([[0, 1, 2]])))
    scene.build()
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\.sample_edges\(\): 'fov_y' must be in \(0, 180\)"):
        cam.sample_edges(scene, 4)
