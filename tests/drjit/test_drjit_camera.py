"""rayd.drjit.Camera parity with rayd.torch.Camera: rays, projection, gradients, edge samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import grad_rtol, rows, vec  # noqa: E402

TRI = np.array([[-0.5, -0.4, 3.0], [0.6, -0.3, 3.2], [0.05, 0.5, 2.8]])


def _pose():
    a = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    m = np.eye(4)
    m[:3, :3] = np.eye(3) + math.sin(0.2) * k + (1 - math.cos(0.2)) * k @ k
    m[:3, 3] = [0.1, -0.05, -0.2]
    return m


def _cameras(m, pose=True):
    kw = dict(fx=20.0, fy=18.0, cx=7.5, cy=8.5)
    M = _pose()
    d = rd.Camera(16, 16, **kw, to_world=m.Matrix4f64(M) if pose else None)
    t = rt.Camera(16, 16, **kw, to_world=torch.tensor(M) if pose else None)
    return d, t


def test_rays_and_projection_match_torch(m):
    d, t = _cameras(m)
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 16, size=(50, 2))
    dr_ray = d.generate_rays(vec(m.Array2f64, xy))
    t_ray = t.generate_rays(torch.tensor(xy))
    np.testing.assert_allclose(rows(dr_ray.d), t_ray.d.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(rows(dr_ray.o).reshape(-1, 3)[0], t_ray.o[0].numpy(), atol=1e-12)
    # Default: every pixel centre, lane j * width + i = torch's [j, i].
    np.testing.assert_allclose(rows(d.generate_rays().d), t.generate_rays().d.reshape(-1, 3).numpy(), atol=1e-6)
    p = rng.normal(size=(40, 3)) + [0, 0, 4]
    xy_d, z_d = d.project(vec(m.Array3f64, p))
    xy_t, z_t = t.project(torch.tensor(p))
    np.testing.assert_allclose(rows(xy_d), xy_t.numpy(), atol=1e-10)
    np.testing.assert_allclose(rows(z_d), z_t.numpy(), atol=1e-12)


def test_gradients_match_torch(m):
    M = _pose()
    fx_d = m.Float64(20.0)
    mat = m.Matrix4f64(M)
    dr.enable_grad(fx_d, mat)
    p = np.array([[0.2, -0.1, 3.0], [0.5, 0.4, 4.0]])
    pd = vec(m.Array3f64, p)
    dr.enable_grad(pd)
    xy, z = rd.Camera(16, 16, fx=fx_d, to_world=mat).project(pd)
    dr.backward(dr.sum(xy.x * 1.3 + xy.y * 0.7 + z))
    fx_t = torch.tensor(20.0, dtype=torch.float64, requires_grad=True)
    mt = torch.tensor(M, requires_grad=True)
    pt = torch.tensor(p, requires_grad=True)
    xy_t, z_t = rt.Camera(16, 16, fx=fx_t, to_world=mt).project(pt)
    (xy_t[:, 0] * 1.3 + xy_t[:, 1] * 0.7 + z_t).sum().backward()
    tol = grad_rtol(m)
    np.testing.assert_allclose(rows(dr.grad(pd)), pt.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(float(dr.grad(fx_d)[0]), float(fx_t.grad), rtol=tol)
    np.testing.assert_allclose(np.array(dr.grad(mat)).reshape(4, 4)[:3], mt.grad.numpy()[:3], rtol=tol, atol=tol)


def test_edge_samples_match_torch(m):
    v = vec(m.Array3f64, TRI)
    dr.enable_grad(v)
    ds = rd.Scene()
    ds.add_mesh(rd.Mesh(v, m.Array3u(0, 1, 2)))
    ds.build()
    tv = torch.tensor(TRI, requires_grad=True)
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(tv, torch.tensor([[0, 1, 2]])))
    ts.build()
    dc, tc = _cameras(m, pose=False)
    s_d = dc.sample_edges(ds, 8000, generator=np.random.default_rng(0))
    s_t = tc.sample_edges(ts, 8000, generator=torch.Generator().manual_seed(0))
    assert len(s_d) == 8000
    assert float(dr.sum(s_d.weight)[0]) == pytest.approx(float(s_t.weight.sum()), rel=1e-12)
    assert np.array(s_d.visible).all()
    # Same edges and normals per edge (the sample positions differ: separate generators).
    gd = np.array(s_d.global_edge_id)
    nd = rows(s_d.normal)
    for e in range(3):
        want = s_t.normal[s_t.global_edge_id == e][0].numpy()
        np.testing.assert_allclose(nd[gd == e], np.broadcast_to(want, nd[gd == e].shape), atol=1e-12)
    assert np.array(s_d.motion).max() == 0 and np.array(s_d.motion).min() == 0
    w = np.random.default_rng(1).random(256)
    fi = m.Float64(dr.select(ds.intersect(s_d.ray_inside).is_valid(), 1.0, 0.0))
    fo = m.Float64(dr.select(ds.intersect(s_d.ray_outside).is_valid(), 1.0, 0.0))
    dr.backward(dr.sum(s_d.boundary_term(fi, fo) * m.Float64(w)))
    term = s_t.boundary_term(ts.intersect(s_t.ray_inside).is_valid().double(),
                             ts.intersect(s_t.ray_outside).is_valid().double())
    (term * torch.tensor(w).reshape(16, 16)).sum().backward()
    g_d, g_t = rows(dr.grad(v)), tv.grad.numpy()
    assert np.abs(g_d - g_t).max() < 0.01 * np.abs(g_t).max()


def test_split_vertex_seams_sampled_once_like_torch(m):
    # a folded strip of two triangles whose shared edge is split (two coincident boundary
    # edges): the seam is one interior edge, sampled once where it is a silhouette (here:
    # both faces lie above the edge in the image)
    v = np.array([[-0.5, -0.5, 3.0], [0.5, -0.5, 3.0], [0.0, 0.5, 3.0],
                  [-0.5, -0.5, 3.0], [0.5, -0.5, 3.0], [0.0, 0.2, 2.0]])
    f = np.array([[0, 1, 2], [4, 3, 5]])
    ds = rd.Scene()
    ds.add_mesh(rd.Mesh(vec(m.Array3f64, v), vec(m.Array3u, f)))
    ds.build()
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.tensor(v), torch.tensor(f)))
    ts.build()
    welded = rt.Scene()
    welded.add_mesh(rt.Mesh(torch.tensor(v[[0, 1, 2, 5]]), torch.tensor([[0, 1, 2], [1, 0, 3]])))
    welded.build()
    dc, tc = _cameras(m, pose=False)
    s_d = dc.sample_edges(ds, 500, generator=np.random.default_rng(0))
    s_t = tc.sample_edges(ts, 500, generator=torch.Generator().manual_seed(0))
    s_w = tc.sample_edges(welded, 500, generator=torch.Generator().manual_seed(0))
    total = float(s_w.weight.sum())
    assert float(s_t.weight.sum()) == pytest.approx(total, rel=1e-12)
    assert float(dr.sum(s_d.weight)[0]) == pytest.approx(total, rel=1e-12)
    ids = np.unique(np.array(s_d.global_edge_id)).tolist()
    assert 0 in ids and 3 not in ids  # the seam is sampled once (its first copy is edge 0)
    assert assert_no_seam_in(s_t)


def assert_no_seam_in(samples) -> bool:
    ids = samples.global_edge_id.unique().tolist()
    return 0 in ids and 3 not in ids


def test_errors(m):
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\(\): give either 'fov_y' or 'fx'/'fy'"):
        rd.Camera(4, 4, fov_y=30.0, fx=2.0)
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Camera\(\): 'width' must be an int"):
        rd.Camera(4.0, 4, fx=2.0)
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\(\): 'fx' must have width 1"):
        rd.Camera(4, 4, fx=m.Float(1.0, 2.0))
    cam = rd.Camera(4, 4, fx=2.0)
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\.project\(\): 'points'"):
        cam.project(m.Array2f(1.0, 2.0))
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Camera\.sample_edges\(\): 'scene' must be a rayd.drjit.Scene"):
        cam.sample_edges(rt.Scene(), 10)


def test_project_on_the_camera_plane_is_zero_never_nan(m):
    # The camera centre and other points at depth 0 have no projection: xy = 0 with zero
    # gradient (never NaN or inf); the same values as rayd.torch.
    cam = rd.Camera(16, 12, fx=20.0, fy=18.0, cx=7.5, cy=6.0)
    pts = vec(m.Array3f, [[0.0, 0, 0], [1.0, -2.0, 0.0], [0.5, -0.25, 2.0], [0.5, 0.5, -1.0]])
    dr.enable_grad(pts)
    xy, depth = cam.project(pts)
    np.testing.assert_allclose(rows(xy), [[0, 0], [0, 0], [12.5, 3.75], [-2.5, -3.0]], rtol=1e-6)
    np.testing.assert_allclose(rows(depth), [0, 0, 2.0, -1.0])
    dr.backward(dr.sum(xy.x + xy.y) + dr.sum(depth))
    grad = [[0, 0, 1], [0, 0, 1], [10, 9, 1 - (20 * 0.5 - 18 * 0.25) / 4], [-20, -18, 1 - (20 * 0.5 + 18 * 0.5)]]
    np.testing.assert_allclose(rows(dr.grad(pts)), grad, rtol=1e-6)
    pose = _pose()
    posed = rd.Camera(16, 12, fov_y=60.0, to_world=m.Matrix4f64(pose))
    xy, depth = posed.project(vec(m.Array3f64, [pose[:3, 3].tolist()]))  # its own centre
    assert rows(xy).tolist() == [[0.0, 0.0]] and rows(depth).tolist() == [0.0]


def test_edge_samples_are_a_record_detach_and_index(m):
    # The same record operations as Intersection: fields in dir(), detach(), indexing.
    v = vec(m.Array3f64, [[-1.0, -1, 3], [1, -1, 3], [0, 1, 3]])
    dr.enable_grad(v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u(0, 1, 2)))
    scene.build()
    s = rd.Camera(8, 8, fov_y=90.0).sample_edges(scene, 6, generator=np.random.default_rng(0))
    names = {"xy", "normal", "weight", "ray_inside", "ray_outside", "global_edge_id", "edge_t", "visible", "motion"}
    assert names <= set(dir(s)) and set(s.fields) == names and s.shape == (6,)
    gid = np.array(s.global_edge_id)
    keep = gid == gid[0]
    sub = s[m.Bool(keep)]
    assert type(sub) is rd.EdgeSamples and (sub.width, sub.height) == (8, 8) and len(sub) == int(keep.sum())
    np.testing.assert_array_equal(rows(sub.xy), rows(s.xy)[keep])
    np.testing.assert_array_equal(np.array(sub.edge_t), np.array(s.edge_t)[keep])
    np.testing.assert_array_equal(np.array(sub.global_edge_id), gid[keep])
    np.testing.assert_array_equal(rows(sub.ray_inside.d), rows(s.ray_inside.d)[keep])
    np.testing.assert_array_equal(rows(sub.ray_outside.o), np.broadcast_to(rows(s.ray_outside.o), (6, 3))[keep])
    np.testing.assert_array_equal(np.array(s[2:4].weight), np.array(s.weight)[2:4])
    # gathered motion stays differentiable: the gradient of the selected samples only
    dr.backward(dr.sum(sub.motion))
    g_sub = rows(dr.grad(v)).copy()
    dr.clear_grad(v)
    again = rd.Camera(8, 8, fov_y=90.0).sample_edges(scene, 6, generator=np.random.default_rng(0))  # same samples
    dr.backward(dr.sum(dr.select(m.Bool(keep), again.motion, 0.0)))
    np.testing.assert_allclose(g_sub, rows(dr.grad(v)), rtol=1e-12, atol=1e-12)
    assert np.abs(g_sub).sum() > 0
    d = s.detach()
    assert type(d) is rd.EdgeSamples and not dr.grad_enabled(d.motion) and not dr.grad_enabled(d.ray_inside.d)
    np.testing.assert_array_equal(rows(d.xy), rows(s.xy))
    assert repr(d) == "rayd.drjit.EdgeSamples(num_samples=6, width=8, height=8)"
    term = d.boundary_term(dr.full(m.Float64, 1.0, 6), dr.zeros(m.Float64, 6))
    assert dr.width(term) == 64 and float(dr.sum(dr.abs(term))[0]) == 0.0


def test_assigned_parameters_are_checked_and_used(m):
    """``camera.fov_y = 20`` was ignored and ``camera.fx = -2.0`` taken as given: assignments are
    checked as ``Camera()`` checks them and take effect (as in rayd.torch)."""
    cam = rd.Camera(8, 6, fov_y=60.0)
    cam.fov_y = 20.0
    assert np.allclose(cam.intrinsics(), rd.Camera(8, 6, fov_y=20.0).intrinsics())
    assert np.allclose(np.array(cam.generate_rays().d), np.array(rd.Camera(8, 6, fov_y=20.0).generate_rays().d))
    cam.fx = 5.0
    assert cam.fov_y is None and cam.intrinsics()[0] == 5.0
    for name, value, exc in [("fx", -2.0, ValueError), ("fov_y", 0.0, ValueError), ("cy", "a", TypeError),
                             ("height", 3, AttributeError)]:
        with pytest.raises(exc, match=r"^rayd\.drjit\.Camera"):
            setattr(cam, name, value)
    assert cam.intrinsics()[0] == 5.0 and cam.height == 6


def test_array_fov_like_torch(m):
    """``fov_y`` may be a width-1 ``Float``/``Float64`` (it was a float only, unlike rayd.torch's
    0-dim tensor): rays and the gradient to ``fov_y`` equal rayd.torch's, and its values are
    checked like a float's."""
    for Float, dtype in ((m.Float, torch.float32), (m.Float64, torch.float64)):
        fov = Float(40.0)
        dr.enable_grad(fov)
        d = rd.Camera(8, 6, fov_y=fov).generate_rays(m.Array2f64([1.0, 5.5], [2.0, 0.5])).d
        fov_t = torch.tensor(40.0, dtype=dtype, requires_grad=True)
        d_t = rt.Camera(8, 6, fov_y=fov_t).generate_rays(torch.tensor([[1.0, 2.0], [5.5, 0.5]], dtype=torch.float64)).d
        np.testing.assert_allclose(rows(d), d_t.detach().numpy(), rtol=0, atol=1e-12)
        dr.backward(dr.sum(d.x + 2 * d.y))
        (d_t[:, 0] + 2 * d_t[:, 1]).sum().backward()
        np.testing.assert_allclose(float(dr.grad(fov)[0]), float(fov_t.grad), rtol=grad_rtol(m))
    f = 3.0 / math.tan(math.radians(20.0))
    assert rd.Camera(8, 6, fov_y=m.Float64(40.0)).intrinsics() == pytest.approx((f, f, 4.0, 3.0), rel=1e-14)
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\(\): 'fov_y' must be in \(0, 180\) degrees, got 200"):
        rd.Camera(8, 6, fov_y=m.Float(200.0))
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\(\): 'fov_y' must have width 1, got width 2"):
        rd.Camera(8, 6, fov_y=m.Float([30.0, 40.0]))
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Camera\(\): 'fov_y' must be a float or a width-1 Float"):
        rd.Camera(8, 6, fov_y=m.Int(30))


def test_faces_listed_twice_sampled_as_one_like_torch(m):
    """A face listed twice is one face for ``sample_edges`` (as in rayd.torch): a doubled triangle
    had no sampled outline; a cube with a face listed again sampled the creases next to it twice."""
    corners = np.array([[x, y, z] for x in (-.3, .3) for y in (-.3, .3) for z in (-.3, .3)]) + [0.1, -0.1, 3.0]
    cube_f = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
              [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]
    totals = []
    for v, faces in ((TRI, [[0, 1, 2]]), (TRI, [[0, 1, 2], [0, 1, 2]]), (TRI, [[0, 1, 2], [0, 2, 1]]),
                     (corners, cube_f), (corners, cube_f + [cube_f[0]]), (corners, cube_f + [cube_f[5][::-1]])):
        ds = rd.Scene()
        ds.add_mesh(rd.Mesh(vec(m.Array3f64, np.asarray(v)), m.Array3i(*np.array(faces).T)))
        ds.build()
        s = rd.Camera(16, 16, fov_y=45.0).sample_edges(ds, 64, generator=np.random.default_rng(0))
        ts = rt.Scene()
        ts.add_mesh(rt.Mesh(torch.tensor(np.asarray(v)), torch.tensor(faces)))
        ts.build()
        st = rt.Camera(16, 16, fov_y=45.0).sample_edges(ts, 64, generator=torch.Generator().manual_seed(0))
        totals.append(float(dr.sum(s.weight)[0]))
        assert totals[-1] == pytest.approx(float(st.weight.sum()), rel=1e-12)
        assert np.array_equal(np.unique(np.array(s.global_edge_id)), st.global_edge_id.unique().numpy())
    assert totals[0] > 0 and totals[1] == pytest.approx(totals[0], rel=1e-12) and totals[2] == pytest.approx(totals[0], rel=1e-12)
    assert totals[4] == pytest.approx(totals[3], rel=1e-12) and totals[5] == pytest.approx(totals[3], rel=1e-12)


def test_float32_scene_far_from_the_origin_like_torch(m):
    """A float32 scene and camera 1e5 from the origin: the float32 re-projection of ``xy`` put
    94 % of the samples' ``ray_inside``/``ray_outside`` on the wrong side of the edge; ``xy`` is
    the host's float64 projection now (rayd.core ``SamplePlan.xy``), as in rayd.torch."""
    o = np.array([1e5, -1e5 / 3, 1e5 / 2])
    ds = rd.Scene()
    ds.add_mesh(rd.Mesh(vec(m.Array3f, (TRI + o).astype(np.float32)), m.Array3i(0, 1, 2)))
    ds.build()
    pose = np.eye(4)
    pose[:3, 3] = o
    s = rd.Camera(64, 64, fov_y=40.0, to_world=m.Matrix4f(pose)).sample_edges(ds, 2000, generator=np.random.default_rng(0))
    inside = np.array(ds.intersect(s.ray_inside).is_valid())
    outside = np.array(ds.intersect(s.ray_outside).is_valid())
    assert len(s) == 2000 and inside.mean() > 0.998 and outside.mean() < 0.002


def test_float32_closed_mesh_far_from_the_origin_is_visible_like_torch(m):
    """A float32 cube 1e5 from the origin: 25 % of its silhouette samples were reported hidden
    (the ``visible`` segment ended at the float32 edge point, inside the cube); it ends at the
    float64 point now (``SamplePlan.point``), as in rayd.torch."""
    o = np.array([1e5, -1e5 / 3, 1e5 / 2])
    a = np.array([1.0, 2.0, 0.5]) / np.linalg.norm([1.0, 2.0, 0.5])
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    rot = np.eye(3) + math.sin(0.6) * k + (1 - math.cos(0.6)) * k @ k
    corners = np.array([[x, y, z] for x in (-.3, .3) for y in (-.3, .3) for z in (-.3, .3)]) @ rot.T + [0.1, -0.1, 3.0] + o
    cube_f = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                       [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    ds = rd.Scene()
    ds.add_mesh(rd.Mesh(vec(m.Array3f, corners.astype(np.float32)), m.Array3i(*cube_f.T)))
    ds.build()
    pose = np.eye(4)
    pose[:3, 3] = o
    s = rd.Camera(64, 64, fov_y=40.0, to_world=m.Matrix4f(pose)).sample_edges(ds, 2000, generator=np.random.default_rng(0))
    assert len(s) == 2000 and np.array(s.visible).all()


def test_camera_space_maps_take_points_like_torch(m):
    # world_to_camera(points) and camera_to_pixels(p): the same one-argument calls as rayd.torch.
    d, t = _cameras(m)
    p = np.random.default_rng(3).normal(size=(20, 3)) + [0, 0, 4]
    cam_d = d.world_to_camera(vec(m.Array3f64, p))
    cam_t = t.world_to_camera(torch.tensor(p))
    np.testing.assert_allclose(rows(cam_d), cam_t.numpy(), atol=1e-12)
    np.testing.assert_allclose(rows(d.camera_to_pixels(cam_d)), t.camera_to_pixels(cam_t).numpy(), atol=1e-10)
    np.testing.assert_allclose(rows(d.camera_to_pixels(cam_d)), rows(d.project(vec(m.Array3f64, p))[0]), atol=1e-10)
