"""A 1-D shape in an error message is written as Python writes it, ``(3,)``, in both frontends."""

from __future__ import annotations

import re

import pytest


def test_torch_one_dimensional_shape_is_written_with_a_comma():
    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])))
    scene.build()
    message = "rayd.torch.Scene.silhouette_edges(): 'viewpoint' must have shape (3,), got (2, 3)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        scene.silhouette_edges(torch.zeros(2, 3))
    # a rank-2 request keeps its form
    from rayd.torch import _check
    with pytest.raises(ValueError, match=re.escape("'x' must have shape (N, 3), got (3,)")):
        _check.shape("f()", "x", torch.zeros(3), last=3, ndim=2)


def test_drjit_says_the_same_shape():
    pytest.importorskip("drjit")
    rd = pytest.importorskip("rayd.drjit")
    from drjit.llvm.ad import Array3f, Array3u

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), Array3u([0], [1], [2])))
    scene.build()
    with pytest.raises(ValueError, match=re.escape("'viewpoint' must have shape (3,)")):
        scene.silhouette_edges(Array3f([0, 1], [0, 1], [5, 5]))


def test_drjit_from_trimesh_names_a_missing_backend():
    dr = pytest.importorskip("drjit")
    trimesh = pytest.importorskip("trimesh")
    rd = pytest.importorskip("rayd.drjit")
    box = trimesh.creation.box()
    for backend in ("llvm", "cuda"):
        if dr.has_backend(getattr(dr.JitBackend, backend.upper())):
            mesh = rd.Mesh.from_trimesh(box, backend=backend)
            assert mesh.backend == backend and mesh.num_faces == 12
        else:  # was Dr.Jit's own TypeError from jit_init_thread_state(), naming no rayd call
            with pytest.raises(ValueError, match=rf"^rayd\.drjit\.Mesh\.from_trimesh\(\): 'backend' is '{backend}', "
                                                 rf"but Dr\.Jit has no {backend.upper()} backend"):
                rd.Mesh.from_trimesh(box, backend=backend)


def test_drjit_to_world_message_names_a_matrix_type():
    """A wrong ``to_world`` is told the matrix type to pass (it was told ``Array3f``)."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("drjit")
    rd = pytest.importorskip("rayd.drjit")
    from drjit.llvm.ad import Array3f, Array3u, Matrix4f

    v, f = Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), Array3u([0], [1], [2])
    with pytest.raises(TypeError, match=re.escape("'to_world' must be a Dr.Jit array of the LLVM or CUDA backend "
                                                  "(e.g. drjit.llvm.ad.Matrix4f, drjit.cuda.ad.Matrix4f), got "
                                                  "numpy.ndarray")):
        rd.Mesh(v, f, to_world=np.eye(4))
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, f))
    with pytest.raises(TypeError, match=r"add_instance\(\): 'to_world' .*e\.g\. drjit\.llvm\.ad\.Matrix4f"):
        scene.add_instance(0, np.eye(4))
    with pytest.raises(TypeError, match=r"Camera\(\): 'to_world' .*e\.g\. drjit\.llvm\.ad\.Matrix4f"):
        rd.Camera(8, 8, fov_y=40.0, to_world=np.eye(4))
    # each argument is told its own kind: points a vector, faces an index vector, masks a Bool
    with pytest.raises(TypeError, match=r"'o' .*e\.g\. drjit\.llvm\.ad\.Array3f,"):
        rd.Ray(np.zeros(3), Array3f(0, 0, 1))
    with pytest.raises(TypeError, match=r"'faces' .*e\.g\. drjit\.llvm\.ad\.Array3u,"):
        rd.Mesh(v, np.array([[0, 1, 2]]))
    with pytest.raises(TypeError, match=r"'uv' .*e\.g\. drjit\.llvm\.ad\.Array2f,"):
        rd.Mesh(v, f, uv=np.zeros((3, 2)))
    scene.build()
    ray = rd.Ray(Array3f(0.2, 0.2, 1), Array3f(0, 0, -1))
    with pytest.raises(TypeError, match=r"'active' .*e\.g\. drjit\.llvm\.ad\.Bool,"):
        scene.intersect(ray, active=np.ones(1, bool))
    with pytest.raises(TypeError, match=r"'ignore' .*e\.g\. drjit\.llvm\.ad\.Int,"):
        scene.intersect(ray, ignore=np.ones(1, int))
    assert rd.Mesh(v, f, to_world=Matrix4f(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1)).to_world is not None


def test_drjit_mitsuba_transform_is_told_to_pass_its_matrix():
    mi = pytest.importorskip("mitsuba")
    rd = pytest.importorskip("rayd.drjit")
    from drjit.llvm.ad import Array3f, Array3u

    mi.set_variant("llvm_ad_rgb")
    transform = mi.Transform4f().translate([0, 0, 1])
    v, f = Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), Array3u([0], [1], [2])
    with pytest.raises(TypeError, match=re.escape("(a Mitsuba transform: pass its .matrix)")):
        rd.Mesh(v, f, to_world=transform)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, f, to_world=transform.matrix))
    scene.build()
    hit = scene.intersect(rd.Ray(Array3f(0.2, 0.2, 5.0), Array3f(0.0, 0.0, -1.0)))
    assert abs(hit.t[0] - 4.0) < 1e-6  # the triangle lifted to z = 1
