"""``rayd.drjit.Mesh.from_trimesh``: the same mesh as rayd.torch's, on a Dr.Jit backend."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("drjit")
trimesh = pytest.importorskip("trimesh")

import drjit as dr  # noqa: E402

import rayd.drjit as rd  # noqa: E402


def _trimesh_ray_backend() -> bool:
    """trimesh's ray tests need embreex or rtree (the GPU machine has neither)."""
    import importlib.util
    return any(importlib.util.find_spec(name) is not None for name in ("embreex", "rtree"))


@pytest.mark.skipif(not _trimesh_ray_backend(), reason="trimesh ray queries need embreex or rtree")
def test_icosphere_matches_trimesh_ray_test(backend, m):
    ico = trimesh.creation.icosphere(subdivisions=2)
    mesh = rd.Mesh.from_trimesh(ico, backend=backend, dtype="float64")
    assert type(mesh.vertices) is m.Array3f64 and type(mesh.faces) is m.Array3u and mesh.normals is None
    assert np.array_equal(np.array(mesh.vertices).T, ico.vertices)
    assert np.array_equal(np.array(mesh.faces).T, ico.faces)
    scene = rd.Scene()
    scene.add_mesh(mesh)
    scene.build()
    rng = np.random.default_rng(3)
    o = rng.normal(size=(200, 3))
    o = 3.0 * o / np.linalg.norm(o, axis=1, keepdims=True)
    d = rng.uniform(-1.3, 1.3, size=(200, 3)) - o
    hit = scene.intersect(rd.Ray(m.Array3f64(o.T), m.Array3f64(d.T)))
    tri, ray, loc = ico.ray.intersects_id(o, d, multiple_hits=False, return_locations=True)
    valid = np.array(hit.is_valid())
    assert 30 < len(ray) < 200 and np.array_equal(np.flatnonzero(valid), np.sort(ray))
    got = np.array(hit.p).T[ray]
    assert np.abs(got - loc).max() < 1e-5


def test_options_and_errors(backend, m):
    box = trimesh.creation.box(extents=(2.0, 2.0, 2.0))
    mesh = rd.Mesh.from_trimesh(box, backend=backend, normals=True, ad=False)
    assert type(mesh.vertices).__module__ == f"drjit.{backend}" and type(mesh.vertices).__name__ == "Array3f"
    assert np.allclose(np.array(mesh.normals).T, box.vertex_normals, atol=1e-7)
    scene = rd.Scene()
    scene.add_mesh(mesh)
    scene.build()
    hit = scene.intersect(rd.Ray(m.Array3f(5.0, 0.25, 0.5), m.Array3f(-1.0, 0.0, 0.0)))
    assert dr.allclose(hit.t, 4.0)
    with pytest.raises(TypeError, match=r"rayd.drjit.Mesh.from_trimesh\(\): 'mesh' must be a trimesh.Trimesh"):
        rd.Mesh.from_trimesh([1, 2])
    with pytest.raises(ValueError, match=r"'backend' must be 'llvm' or 'cuda', got 'gpu'"):
        rd.Mesh.from_trimesh(box, backend="gpu")
    with pytest.raises(TypeError, match=r"'dtype' must be 'float32' or 'float64'"):
        rd.Mesh.from_trimesh(box, dtype="half")
    with pytest.raises(ValueError, match="uv=True but the mesh has no texture coordinates"):
        rd.Mesh.from_trimesh(box, backend=backend, uv=True)


def test_to_world_errors_name_from_trimesh_and_a_good_one_places_the_mesh(backend, m):
    box = trimesh.creation.box(extents=(2.0, 2.0, 2.0))
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Mesh\.from_trimesh\(\): 'to_world' must be a Dr\.Jit array"):
        rd.Mesh.from_trimesh(box, backend=backend, to_world=np.eye(4))
    shift = np.eye(4)
    shift[0, 3] = 3.0  # box now spans x in [2, 4]
    mesh = rd.Mesh.from_trimesh(box, backend=backend, to_world=m.Matrix4f(shift))
    scene = rd.Scene()
    scene.add_mesh(mesh)
    scene.build()
    hit = scene.intersect(rd.Ray(m.Array3f(10.0, 0.25, 0.5), m.Array3f(-1.0, 0.0, 0.0)))
    assert dr.allclose(hit.t, 6.0)
