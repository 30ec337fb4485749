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
