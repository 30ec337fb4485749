"""rayd.drjit regressions found in the session-8 fresh-user pass (bad and edge-case input)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")


def _quad(m):
    scene = rd.Scene()
    vertices = m.Array3f([0, 1, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0])
    scene.add_mesh(rd.Mesh(vertices, m.Array3u([0, 1], [1, 3], [2, 2])))
    scene.build()
    return scene


def test_shadow_test_of_zero_rays(m):
    """A width-0 batch gives a width-0 Bool (it raised Dr.Jit's 'incompatible sizes (0, 1)')."""
    scene = _quad(m)
    blocked = scene.shadow_test(rd.Ray(m.Array3f(), m.Array3f()))
    assert dr.width(blocked) == 0
    # The same scene still answers a real ray: straight down onto the quad is blocked.
    assert np.array_equal(np.asarray(scene.shadow_test(rd.Ray(m.Array3f(0.25, 0.25, 1.0), m.Array3f(0, 0, -1)))),
                          [True])


def test_specular_path_off_a_disabled_shape_is_invalid(m):
    """A face of a disabled shape reflects nothing (specular_paths called it valid)."""
    scene = rd.Scene()
    mesh = scene.add_mesh(rd.Mesh(m.Array3f([0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]),
                                  m.Array3u([0, 0, 0, 1], [2, 1, 3, 2], [1, 3, 2, 3])))
    shift = np.eye(4)
    shift[0, 3] = 5.0
    scene.add_instance(mesh, m.Matrix4f(shift))
    scene.build()
    src = m.Array3f([0.2, 5.2], [0.2, 0.2], [-1.0, -1.0])
    dst = m.Array3f([0.3, 5.3], [0.2, 0.2], [-1.0, -1.0])
    seq = m.TensorXi(np.array([[0], [4]], dtype=np.int32))
    assert np.asarray(scene.specular_paths(src, dst, seq).valid).tolist() == [True, True]
    scene.set_shape_enabled(mesh, False)
    scene.sync()
    after = scene.specular_paths(src, dst, seq)
    assert np.asarray(after.valid).tolist() == [False, True]
    length = np.asarray(after.length)
    assert length[0] == np.inf and length[1] == pytest.approx((0.01 + 4.0) ** 0.5, abs=1e-6)


def test_set_mesh_transform_and_enable_take_numpy_ids_and_flags(m):
    """set_mesh_transform refused np.int64 ids and NumPy id arrays; set_shape_enabled np.bool_ flags."""
    scene = rd.Scene()
    mesh = scene.add_mesh(rd.Mesh(m.Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u(0, 1, 2)))
    shift = np.eye(4)
    shift[0, 3] = 5.0
    instance = scene.add_instance(mesh, m.Matrix4f(shift))
    scene.build()
    up = np.eye(4)
    up[2, 3] = 1.0
    ray = rd.Ray(m.Array3f([0.2, 5.2], [0.2, 0.2], [-1.0, -1.0]), m.Array3f(0, 0, 1))
    scene.set_mesh_transform(np.int64(mesh), m.Matrix4f(up))
    scene.sync()
    assert np.allclose(np.asarray(scene.intersect(ray).t), [2.0, 2.0])
    scene.set_mesh_transform(np.array([instance]), m.Matrix4f(up @ shift))
    scene.sync()
    assert np.allclose(np.asarray(scene.intersect(ray).t), [2.0, 3.0])
    scene.set_shape_enabled(np.int64(instance), np.bool_(False))
    scene.sync()
    assert np.asarray(scene.intersect(ray).shape_id).tolist() == [mesh, -1]


def test_sample_edges_type_errors_name_the_package(m):
    """'must be a rayd.drjit.Scene, got Scene' for a rayd.torch scene; 'got Generator' for a torch one."""
    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    camera = rd.Camera(8, 8, fov_y=40.0)
    with pytest.raises(TypeError, match=r"'scene' must be a rayd\.drjit\.Scene, got rayd\.torch\.Scene$"):
        camera.sample_edges(rt.Scene(), 4)
    with pytest.raises(TypeError, match=r"'generator' must be a numpy\.random\.Generator, got torch\.Generator$"):
        camera.sample_edges(_quad(m), 4, generator=torch.Generator())


def test_numpy_float32_interval_bounds_and_max_distance(m):
    """tmin/tmax/max_distance refused np.float32 ("must be a float, got float32"); np.float64 passed."""
    scene = _quad(m)
    o, d = m.Array3f(0.25, 0.25, 1.0), m.Array3f(0, 0, -1)
    assert np.asarray(scene.intersect(rd.Ray(o, d, np.float32(2.0))).t).tolist() == [1.0]
    assert np.asarray(scene.intersect(rd.Ray(o, d, np.float32(0.5))).t).tolist() == [np.inf]
    assert np.asarray(scene.intersect(rd.Ray(o, d, tmin=np.float32(1.0))).t).tolist() == [np.inf]
    assert np.asarray(scene.closest_point(o, max_distance=np.float32(0.5)).distance).tolist() == [np.inf]
    assert np.allclose(np.asarray(scene.nearest_edge(o, max_distance=np.float32(2.0)).distance), [(0.25**2 + 1) ** 0.5])


def test_find_specular_paths_checks_the_scene_type(m):
    """find_specular_paths(<a rayd.torch.Scene>, ...) raised AttributeError instead of naming the argument."""
    rt = pytest.importorskip("rayd.torch")
    points = m.Array3f(0, 0, 0)
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.find_specular_paths\(\): 'scene' must be a rayd\.drjit\.Scene, "
                                        r"got rayd\.torch\.Scene$"):
        rd.find_specular_paths(rt.Scene(), points, points, 1)
