"""rayd.drjit regressions found by trying the new features (cameras, all hits, paths) as a user would."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402

TRI = np.array([[-0.5, -0.4, 3.0], [0.6, -0.3, 3.2], [0.05, 0.5, 2.8]])


def _scene(m, vertices=TRI):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64, vertices), m.Array3u(0, 1, 2)))
    scene.build()
    return scene


# ----------------------------------------------------------------- zero-width batches
@pytest.mark.parametrize("pose", [False, True])
def test_camera_zero_width_samples_and_points(m, pose):
    """generate_rays / project of width-0 inputs return width-0 results (they raised Dr.Jit size errors)."""
    to_world = m.Matrix4f64(np.eye(4)) if pose else None
    camera = rd.Camera(8, 6, fx=m.Float64(5.0), to_world=to_world)
    for Array2 in (m.Array2f, m.Array2f64):
        ray = camera.generate_rays(Array2())
        assert dr.width(ray.d) == 0
        assert isinstance(ray.d, m.Array3f64)  # the camera's float64 intrinsics promote
    xy, depth = camera.project(m.Array3f())
    assert dr.width(xy) == 0 and dr.width(depth) == 0
    # The same camera still works on real inputs: the centre ray of pixel (4, 3) points down +z.
    ray = camera.generate_rays(m.Array2f(4.0, 3.0))
    assert np.allclose(rows(ray.d), [[0.0, 0.0, 1.0]])


# ----------------------------------------------------------------- sample_edges with nothing to sample
def test_sample_edges_with_nothing_on_screen(m):
    """N = 0, geometry behind the camera, all edges masked: empty samples (they raised Dr.Jit size errors)."""
    camera = rd.Camera(16, 16, fov_y=60.0)
    front, behind = _scene(m), _scene(m, TRI * np.array([1.0, 1.0, -1.0]))
    masked = _scene(m)
    masked.set_edge_mask(m.Bool([False, False, False]))
    masked.sync()
    cases = [(front, 0), (behind, 100), (masked, 100)]
    for scene, n in cases:
        samples = camera.sample_edges(scene, n, generator=np.random.default_rng(0))
        assert len(samples) == 0
        assert dr.width(samples.xy) == 0 and dr.width(samples.weight) == 0 and dr.width(samples.motion) == 0
        assert dr.width(samples.global_edge_id) == 0 and dr.width(samples.ray_inside.d) == 0
        image = samples.boundary_term(m.Float(), m.Float())
        assert dr.width(image) == 256 and float(dr.sum(dr.abs(image))[0]) == 0.0
    # The front scene does have edges on screen: a positive total length, as in rayd.torch.
    samples = camera.sample_edges(front, 100, generator=np.random.default_rng(0))
    assert len(samples) == 100 and float(dr.sum(samples.weight)[0]) > 1.0


# ----------------------------------------------------------------- camera parameter values
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [("fx", 0.0, "'fx' must be positive, got 0.0"), ("fx", -2.0, "'fx' must be positive, got -2.0"),
     ("fy", float("nan"), "'fy' must be finite, got nan"), ("cy", float("inf"), "'cy' must be finite, got inf")],
)
def test_camera_rejects_bad_array_intrinsics(m, name, value, message):
    """Width-1 Float intrinsics are checked like numbers (they were taken as given)."""
    kwargs = {"fx": 10.0, name: m.Float(value)}
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\(\): ") as info:
        rd.Camera(16, 16, **kwargs)
    assert message in str(info.value)
    camera = rd.Camera(16, 16, fx=m.Float(10.0))
    camera.fx = m.Float(value) if name == "fx" else camera.fx
    if name == "fx":
        with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\.sample_edges\(\): 'fx' must be positive"):
            camera.sample_edges(_scene(m), 10)


# ----------------------------------------------------------------- NumPy integers and scalars
def test_numpy_integers_accepted_like_ints(m):
    """Camera sizes and fov_y, num_samples, max_hits take NumPy numbers (they raised TypeError)."""
    scene = _scene(m)
    camera = rd.Camera(np.int64(16), np.int32(16), fov_y=np.float32(60.0))
    assert (camera.width, camera.height) == (16, 16) and type(camera.width) is int
    assert np.isclose(camera.intrinsics()[0], 8.0 / np.tan(np.radians(30.0)))
    assert len(camera.sample_edges(scene, np.int64(5), generator=np.random.default_rng(0))) == 5
    ray = rd.Ray(m.Array3f(0.0, 0.0, 0.0), m.Array3f(0.0, 0.0, 1.0))
    hits = scene.intersect_all(ray, np.int64(2))
    assert hits.shape == (1, 2) and np.allclose(np.array(hits.t), [3.0, np.inf], atol=0.1)
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Scene\.intersect_all\(\): 'max_hits' must be an int"):
        scene.intersect_all(ray, np.bool_(True))


# ----------------------------------------------------------------- find_specular_paths arguments
def _room(m):
    v = np.array([[-5, -5, 0], [5, -5, 0], [5, 5, 0], [-5, 5, 0], [3, -5, -1], [3, 5, -1], [3, 5, 6], [3, -5, 6]], float)
    f = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64, v), vec(m.Array3u, f)))
    scene.build()
    return scene


def test_find_specular_paths_empty_sources_or_targets(m):
    """S = 0 or T = 0 gives an empty set (it raised a width mismatch from specular_paths)."""
    scene = _room(m)
    points = vec(m.Array3f64, [[0.0, 0, 1], [1, 1, 2]])
    for sources, targets, shape in ((m.Array3f64(), points, (0, 2, 0, 2)), (points, m.Array3f64(), (2, 0, 0, 2))):
        found = rd.find_specular_paths(scene, sources, targets, 2, num_rays=50)
        assert found.shape == shape
        assert dr.width(found.length) == 0 and dr.width(found.points) == 0 and dr.width(found.valid) == 0


def test_find_specular_paths_line_of_sight_must_be_bool(m):
    """A non-bool line_of_sight is a TypeError (the string "no" switched it on)."""
    scene = _room(m)
    points = vec(m.Array3f64, [[0.0, 0, 1]])
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.find_specular_paths\(\): 'line_of_sight' must be a bool"):
        rd.find_specular_paths(scene, points, points, 1, num_rays=10, line_of_sight="no")
    found = rd.find_specular_paths(scene, points, vec(m.Array3f64, [[-1.0, 0.5, 1.5]]), 1, num_rays=200,
                                   line_of_sight=np.bool_(False))
    seq = np.array(found.prim_sequence).reshape(found.shape)
    valid = np.array(found.valid).reshape(found.shape[:3])
    assert valid.any() and (seq[valid] >= 0).any(-1).all()  # no all -1 (line of sight) path


def test_ignore_takes_numpy_integers(m):
    """``ignore`` takes a NumPy integer as rayd.torch does (it raised TypeError)."""
    scene = rd.Scene()
    for z in (1.0, 2.0):
        scene.add_mesh(rd.Mesh(vec(m.Array3f, [[-1, -1, z], [1, -1, z], [1, 1, z], [-1, 1, z]]), vec(m.Array3u, [[0, 1, 2], [0, 2, 3]])))
    scene.build()
    ray = rd.Ray(m.Array3f(0.3, 0.1, 0.0), m.Array3f(0.0, 0.0, 1.0))
    assert np.array(scene.intersect_all(ray, 3, ignore=np.int64(0)).global_prim_id).tolist() == [2, -1, -1]
    assert np.array(scene.intersect(ray, ignore=np.int32(0)).global_prim_id).tolist() == [2]
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Scene\.intersect\(\): 'ignore' must be an int"):
        scene.intersect(ray, ignore=np.bool_(True))


def test_boundary_term_filter_type(m):
    """A non-str filter is a TypeError as in rayd.torch (it was a ValueError)."""
    samples = rd.Camera(16, 16, fov_y=60.0).sample_edges(_scene(m), 4, generator=np.random.default_rng(0))
    f = m.Float([1.0] * 4)
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.EdgeSamples\.boundary_term\(\): 'filter' must be a str"):
        samples.boundary_term(f, f, filter=3)
    with pytest.raises(ValueError, match=r"'filter' must be 'box' in rayd.drjit, got 'tent'"):
        samples.boundary_term(f, f, filter="tent")
    assert dr.width(samples.boundary_term(f, f)) == 256


def test_sample_edges_rechecks_to_world_changed_in_place(m):
    """A to_world whose entries were assigned since Camera() is checked again (numpy's LinAlgError escaped)."""
    pose = m.Matrix4f64(np.eye(4))
    camera = rd.Camera(16, 16, fov_y=60.0, to_world=pose)
    scene = _scene(m)
    assert len(camera.sample_edges(scene, 8, generator=np.random.default_rng(0))) == 8
    camera.to_world[2][2] = 0.0
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\.sample_edges\(\): 'to_world' is singular"):
        camera.sample_edges(scene, 8)
