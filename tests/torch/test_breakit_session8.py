"""rayd.torch regressions found in the session-8 fresh-user pass (bad and edge-case input)."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

# A tetrahedron (mesh 0, faces 0-3) and an instance of it shifted by +5 in x (shape 1, faces 4-7).
TETRA_V = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
TETRA_F = [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]


def _tetra_and_instance(device):
    scene = rt.Scene()
    mesh = scene.add_mesh(rt.Mesh(torch.tensor(TETRA_V, device=device), torch.tensor(TETRA_F, device=device)))
    shift = torch.eye(4, device=device)
    shift[0, 3] = 5.0
    instance = scene.add_instance(mesh, shift)
    scene.build()
    return scene, mesh, instance


# ----------------------------------------------------------------- specular paths off disabled shapes
def test_specular_path_off_a_disabled_shape_is_invalid(device):
    """A face of a disabled shape reflects nothing (specular_paths called it valid)."""
    scene, mesh, instance = _tetra_and_instance(device)
    # Below the bottom face z = 0 (face 0 of the mesh, face 4 of the instance): a real mirror path each.
    src = torch.tensor([[0.2, 0.2, -1.0], [5.2, 0.2, -1.0]], device=device)
    dst = torch.tensor([[0.3, 0.2, -1.0], [5.3, 0.2, -1.0]], device=device)
    seq = torch.tensor([[0], [4]], device=device)
    before = scene.specular_paths(src, dst, seq)
    assert before.valid.tolist() == [True, True]
    # Hand-derived: mirror of (0.2, 0.2, -1) is (0.2, 0.2, 1); to (0.3, 0.2, -1): sqrt(0.1^2 + 2^2).
    assert torch.allclose(before.length.cpu(), torch.full((2,), (0.01 + 4.0) ** 0.5), atol=1e-6)
    scene.set_shape_enabled(mesh, False)
    scene.sync()
    after = scene.specular_paths(src, dst, seq)
    assert after.valid.tolist() == [False, True]
    assert after.length[0].item() == float("inf") and after.length[1].item() == pytest.approx(before.length[1].item())
    assert after.points[0].abs().sum().item() == 0.0
    # find_specular_paths agrees: from the disabled mesh's side only the line of sight is left.
    found = rt.find_specular_paths(scene, src[:1], dst[:1], 1, num_rays=2000)
    assert found.prim_sequence[found.valid].tolist() == [[-1]]


# ----------------------------------------------------------------- NumPy ids and flags
def test_set_mesh_transform_and_enable_take_numpy_ids_and_flags(device):
    """set_mesh_transform refused np.int64 ids and 1-D NumPy id arrays; set_shape_enabled np.bool_ flags
    ("'flag' must be a bool, got bool"), while add_instance / update_mesh_vertices took NumPy ints."""
    import numpy as np

    scene, mesh, instance = _tetra_and_instance(device)
    up = torch.eye(4, device=device)
    up[2, 3] = 1.0
    ray = rt.Ray(torch.tensor([[0.2, 0.2, -1.0], [5.2, 0.2, -1.0]], device=device), torch.tensor([0.0, 0.0, 1.0],
                                                                                                    device=device))
    scene.set_mesh_transform(np.int64(mesh), up)
    scene.sync()
    assert scene.intersect(ray).t.tolist() == pytest.approx([2.0, 2.0])  # the instance follows its mesh
    shift = torch.eye(4, device=device)
    shift[0, 3] = 5.0
    scene.set_mesh_transform(np.array([instance]), (up @ shift)[None])
    scene.sync()
    assert scene.intersect(ray).t.tolist() == pytest.approx([2.0, 3.0])  # instance: (up @ shift) @ up
    scene.set_shape_enabled(np.int64(instance), np.bool_(False))
    scene.sync()
    assert scene.intersect(ray).shape_id.tolist() == [mesh, -1]
    with pytest.raises(TypeError, match=r"'shape_id' must be an int or a sequence of ints, got ndarray"):
        scene.set_mesh_transform(np.array([0.0]), up[None])
    with pytest.raises(TypeError, match=r"'flag' must be a bool, got int"):
        scene.set_shape_enabled(0, 1)


# ----------------------------------------------------------------- float64 scenes at the interval ends
def _two_planes(dtype, device):
    """Two parallel triangles near z = 0.3 and z = 1.7 (values float32 cannot hold) and 2,000 rays up through both."""
    vertices = torch.tensor([[-5, -5, 0.3], [5, -5, 0.3], [0, 5, 0.3], [-5, -5, 1.7], [5, -5, 1.7], [0, 5, 1.7]],
                            dtype=torch.float64)
    vertices[:3, 2] += torch.tensor([1e-9, 2e-9, -1e-9], dtype=torch.float64)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices.to(dtype=dtype, device=device), torch.tensor([[0, 1, 2], [3, 4, 5]], device=device)))
    scene.build()
    g = torch.Generator().manual_seed(0)
    o = torch.rand(2000, 3, generator=g, dtype=torch.float64) * 0.2
    o[:, 2] = -1.0 - o[:, 2]
    d = torch.tensor([0.1, 0.05, 1.0], dtype=torch.float64) + torch.rand(2000, 3, generator=g, dtype=torch.float64) * 0.1
    return scene, o.to(dtype=dtype, device=device), d.to(dtype=dtype, device=device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_walking_through_a_surface_without_ignore(dtype, device):
    """tmin = previous t finds the plane behind; tmax = t is not blocked by the face at t (README, Precision)."""
    scene, o, d = _two_planes(dtype, device)
    first = scene.intersect(rt.Ray(o, d))
    assert first.prim_id.eq(0).all()
    behind = scene.intersect(rt.Ray(o, d, tmin=first.t))
    assert behind.prim_id.eq(1).all()
    assert not scene.shadow_test(rt.Ray(o, d, first.t)).any()


# ----------------------------------------------------------------- messages that name both types alike
def test_sample_edges_type_errors_name_the_package():
    """'must be a torch.Generator, got Generator' named a numpy Generator by its bare class name."""
    import numpy as np

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(TETRA_V), torch.tensor(TETRA_F)))
    scene.build()
    camera = rt.Camera(8, 8, fov_y=40.0)
    with pytest.raises(TypeError, match=r"'generator' must be a torch\.Generator, got numpy\.random\.Generator$"):
        camera.sample_edges(scene, 4, generator=np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"'scene' must be a rayd\.torch\.Scene, got NoneType$"):
        camera.sample_edges(None, 4)


# ----------------------------------------------------------------- NumPy float scalars
def test_numpy_float32_interval_bounds_and_max_distance(device):
    """tmin/tmax/max_distance refused np.float32 ("must be a float, got float32"); np.float64 passed."""
    import numpy as np

    scene, _, _ = _tetra_and_instance(device)
    o = torch.tensor([0.2, 0.2, -1.0], device=device)
    d = torch.tensor([0.0, 0.0, 1.0], device=device)
    assert scene.intersect(rt.Ray(o, d, np.float32(2.0))).t.item() == pytest.approx(1.0)
    assert scene.intersect(rt.Ray(o, d, np.float32(0.5))).t.item() == float("inf")
    assert scene.intersect(rt.Ray(o, d, tmin=np.float32(1.5))).t.item() == pytest.approx(1.6)  # the slanted face x + y + z = 1
    point = torch.tensor([0.2, 0.2, -1.0], device=device)
    assert scene.closest_point(point, max_distance=np.float32(1.5)).distance.item() == pytest.approx(1.0)
    assert scene.closest_point(point, max_distance=np.float32(0.5)).distance.item() == float("inf")
    assert scene.nearest_edge(point, max_distance=np.float32(0.5)).distance.item() == float("inf")
    with pytest.raises(TypeError, match=r"'max_distance' must be a float, got bool"):
        scene.nearest_edge(point, max_distance=True)


def test_find_specular_paths_checks_the_scene_type():
    """find_specular_paths(None, ...) raised AttributeError ('NoneType' object has no attribute '_require_ready')."""
    points = torch.zeros(1, 3)
    with pytest.raises(TypeError, match=r"^rayd\.torch\.find_specular_paths\(\): 'scene' must be a rayd\.torch\.Scene, "
                                        r"got NoneType$"):
        rt.find_specular_paths(None, points, points, 1)
