"""``rayd.torch.Mesh.from_trimesh``: a trimesh.Trimesh in, a Mesh whose queries agree with trimesh's own ray test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt

trimesh = pytest.importorskip("trimesh")


def _scene(mesh):
    scene = rt.Scene()
    scene.add_mesh(mesh)
    scene.build()
    return scene


def _sphere_rays(n=300, seed=0):
    """Rays from a radius-3 shell towards points near the centre (most hit, some miss)."""
    rng = np.random.default_rng(seed)
    o = rng.normal(size=(n, 3))
    o = 3.0 * o / np.linalg.norm(o, axis=1, keepdims=True)
    target = rng.uniform(-1.3, 1.3, size=(n, 3))
    return o, target - o


def _trimesh_ray_backend() -> bool:
    """trimesh's ray tests need embreex or rtree (the GPU machine has neither)."""
    import importlib.util
    return any(importlib.util.find_spec(name) is not None for name in ("embreex", "rtree"))


@pytest.mark.skipif(not _trimesh_ray_backend(), reason="trimesh ray queries need embreex or rtree")
def test_icosphere_matches_trimesh_ray_test(device):
    ico = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    mesh = rt.Mesh.from_trimesh(ico, device=device, dtype=torch.float64)
    assert mesh.vertices.dtype == torch.float64 and mesh.faces.dtype == torch.int32
    assert mesh.vertices.device.type == device and mesh.normals is None and mesh.uv is None
    assert (mesh.num_vertices, mesh.num_faces) == (len(ico.vertices), len(ico.faces))
    assert np.array_equal(mesh.vertices.cpu().numpy(), ico.vertices)
    o, d = _sphere_rays()
    hit = _scene(mesh).intersect(rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device)))
    tri, ray, loc = ico.ray.intersects_id(o, d, multiple_hits=False, return_locations=True)
    want_hit = np.zeros(len(o), bool)
    want_hit[ray] = True
    valid = hit.is_valid().cpu().numpy()
    assert 50 < want_hit.sum() < len(o) and np.array_equal(valid, want_hit)
    # the closest hit point agrees with trimesh's location (float32 traversal, float64 evaluation)
    got = hit.p.cpu().numpy()[ray]
    assert np.abs(got - loc).max() < 1e-5
    # the hit face is the one trimesh reports, except where the point lies on an edge shared by two faces
    same = hit.prim_id.cpu().numpy()[ray] == tri
    assert same.mean() > 0.98
    # n == geo_n without normals; geo_n points outwards on the sphere
    assert torch.allclose(hit.n, hit.geo_n)
    outward = (hit.geo_n * hit.p).sum(-1)[hit.is_valid()]
    assert (outward > 0.9).all()


def test_box_hit_values(device):
    box = trimesh.creation.box(extents=(2.0, 4.0, 6.0))  # centred: x in [-1, 1], y in [-2, 2], z in [-3, 3]
    scene = _scene(rt.Mesh.from_trimesh(box, device=device))
    o = torch.tensor([[5.0, 0.5, 0.5], [0.2, -9.0, 0.1], [0.0, 0.0, 10.0], [5.0, 5.0, 5.0]], device=device)
    d = torch.tensor([[-1.0, 0, 0], [0, 2.0, 0], [0, 0, -1.0], [1.0, 0, 0]], device=device)
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.t.cpu().tolist() == [4.0, 3.5, 7.0, float("inf")]
    assert torch.allclose(hit.geo_n[:3].cpu(), torch.tensor([[1.0, 0, 0], [0, -1.0, 0], [0, 0, 1.0]]))
    assert hit.prim_id[3].item() == -1


def test_normals_only_when_asked(device):
    ico = trimesh.creation.icosphere(subdivisions=1)
    mesh = rt.Mesh.from_trimesh(ico, device=device, normals=True)
    assert mesh.normals.dtype == torch.float32
    assert np.allclose(mesh.normals.cpu().numpy(), ico.vertex_normals, atol=1e-7)
    o, d = _sphere_rays(100, seed=1)
    hit = _scene(mesh).intersect(rt.Ray(torch.tensor(o, device=device, dtype=torch.float32),
                                        torch.tensor(d, device=device, dtype=torch.float32)))
    ok = hit.is_valid().cpu().numpy()
    w = hit.barycentric.double().cpu().numpy()[ok]
    faces = ico.faces[hit.prim_id.cpu().numpy()[ok]]
    want = (w[:, :, None] * ico.vertex_normals[faces]).sum(1)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.abs(hit.n.cpu().numpy()[ok] - want).max() < 1e-5
    assert not torch.allclose(hit.n[hit.is_valid()], hit.geo_n[hit.is_valid()])  # interpolated, not faceted


def test_uv_and_gradients(device):
    vertices = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    texcoords = np.array([[0.5, 0.5], [1.0, 0.5], [0.5, 1.0]])
    tri = trimesh.Trimesh(vertices, [[0, 1, 2]], process=False,
                          visual=trimesh.visual.TextureVisuals(uv=texcoords))
    mesh = rt.Mesh.from_trimesh(tri, device=device, dtype=torch.float64, uv=True)
    mesh.vertices.requires_grad_()
    hit = _scene(mesh).intersect(rt.Ray(torch.tensor([0.2, 0.3, 1.0], device=device, dtype=torch.float64),
                                        torch.tensor([0.0, 0, -1], device=device, dtype=torch.float64)))
    assert torch.allclose(hit.uv.cpu(), torch.tensor([0.5 + 0.5 * 0.2, 0.5 + 0.5 * 0.3], dtype=torch.float64))
    hit.t.backward()  # t = z of the plane through the vertices: dt/dz_i = w_i
    assert torch.allclose(mesh.vertices.grad[:, 2].cpu(), torch.tensor([-0.5, -0.2, -0.3], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"rayd.torch.Mesh.from_trimesh\(\): uv=True but the mesh has no texture"):
        rt.Mesh.from_trimesh(trimesh.creation.box(), uv=True)


def test_not_a_trimesh_is_type_error():
    with pytest.raises(TypeError, match=r"rayd.torch.Mesh.from_trimesh\(\): 'mesh' must be a trimesh.Trimesh, got int"):
        rt.Mesh.from_trimesh(3)
    with pytest.raises(TypeError, match=r"got trimesh.scene.scene.Scene \(a trimesh.Scene: flatten it"):
        rt.Mesh.from_trimesh(trimesh.Scene([trimesh.creation.box()]))
    with pytest.raises(TypeError, match=r"'dtype' must be torch.float32 or torch.float64"):
        rt.Mesh.from_trimesh(trimesh.creation.box(), dtype=torch.float16)
    # An unknown option is named as from_trimesh's, not as an internal hook's.
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Mesh\.from_trimesh\(\) got an unexpected keyword argument 'bogus'"):
        rt.Mesh.from_trimesh(trimesh.creation.box(), bogus=1)
    import rayd.drjit as rd
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Mesh\.from_trimesh\(\) got an unexpected keyword argument 'call'"):
        rd.Mesh.from_trimesh(trimesh.creation.box(), call="x")


def test_to_world_errors_name_from_trimesh_and_a_good_one_places_the_mesh(device):
    box = trimesh.creation.box(extents=(2.0, 2.0, 2.0))
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Mesh\.from_trimesh\(\): 'to_world' must be a torch\.Tensor"):
        rt.Mesh.from_trimesh(box, to_world=np.eye(4))
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Mesh\.from_trimesh\(\): 'to_world' must have shape \(4, 4\)"):
        rt.Mesh.from_trimesh(box, device=device, to_world=torch.eye(3, device=device))
    shift = torch.eye(4, device=device)
    shift[0, 3] = 3.0  # box now spans x in [2, 4]
    scene = _scene(rt.Mesh.from_trimesh(box, device=device, to_world=shift))
    hit = scene.intersect(rt.Ray(torch.tensor([10.0, 0.25, 0.5], device=device), torch.tensor([-1.0, 0, 0], device=device)))
    assert float(hit.t) == pytest.approx(6.0)


def test_bad_device_is_a_value_error_naming_from_trimesh():
    """A device rayd cannot use is refused by name (was torch's AssertionError 'Torch not compiled with CUDA'
    or RuntimeError from deep inside torch.as_tensor)."""
    box = trimesh.creation.box()
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Mesh\.from_trimesh\(\): 'device' must name a torch device"):
        rt.Mesh.from_trimesh(box, device="gpu0")
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Mesh\.from_trimesh\(\): 'device' is meta; rayd runs on"):
        rt.Mesh.from_trimesh(box, device="meta")
    missing = torch.cuda.device_count()  # one past the last CUDA device (cuda:0 on a CPU-only machine)
    with pytest.raises(ValueError, match=rf"'device' is cuda:{missing}, but this PyTorch sees no such CUDA device"):
        rt.Mesh.from_trimesh(box, device=f"cuda:{missing}")
    assert rt.Mesh.from_trimesh(box, device=torch.device("cpu")).vertices.device.type == "cpu"
