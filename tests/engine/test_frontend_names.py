"""Public names of Mesh, Camera and EdgeSamples come from one rule (rayd.core.frontend.PublicName)."""

from __future__ import annotations

import pytest


def test_torch_names_in_messages_and_repr():
    torch = pytest.importorskip("torch")
    import rayd.torch as rt

    mesh = rt.Mesh(torch.zeros((3, 3)), torch.tensor([[0, 1, 2]]))
    assert repr(mesh).startswith("rayd.torch.Mesh(V=3, F=1, ")
    with pytest.raises(TypeError, match=r"^rayd.torch.Mesh\(\): 'vertices'"):
        rt.Mesh([0.0], torch.tensor([[0, 1, 2]]))
    with pytest.raises(TypeError, match=r"^rayd.torch.Mesh.from_trimesh\(\): "):
        rt.Mesh.from_trimesh(object())
    camera = rt.Camera(4, 3, fov_y=60.0)
    assert repr(camera).startswith("rayd.torch.Camera(width=4, height=3, ")
    with pytest.raises(ValueError, match=r"^rayd.torch.Camera\(\): 'to_world' must have shape \(4, 4\)"):
        rt.Camera(4, 3, fov_y=60.0, to_world=torch.eye(3))
    with pytest.raises(TypeError, match=r"^rayd.torch.Camera\(\): 'fx' must be a float or a 0-dim float tensor"):
        rt.Camera(4, 3, fx="1")


def test_drjit_names_in_messages_and_repr():
    dr = pytest.importorskip("drjit")
    import drjit.llvm as m

    import rayd.drjit as rd

    mesh = rd.Mesh(m.Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2]))
    assert repr(mesh).startswith("rayd.drjit.Mesh(V=3, F=1, ")
    with pytest.raises(TypeError, match=r"^rayd.drjit.Mesh.from_trimesh\(\): "):
        rd.Mesh.from_trimesh(object())
    camera = rd.Camera(4, 3, fov_y=60.0)
    assert repr(camera).startswith("rayd.drjit.Camera(width=4, height=3, ")
    with pytest.raises(TypeError, match=r"^rayd.drjit.Camera\(\): 'fov_y' must be a float"):
        rd.Camera(4, 3, fov_y="60")
    assert dr is not None


def test_edge_samples_repr_both_frontends():
    torch = pytest.importorskip("torch")
    import rayd.torch as rt

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[-1.0, -1, 3], [1, -1, 3], [0, 1, 3]]), torch.tensor([[0, 1, 2]])))
    scene.build()
    samples = rt.Camera(8, 8, fov_y=90.0).sample_edges(scene, 5)
    assert repr(samples) == "rayd.torch.EdgeSamples(num_samples=5, width=8, height=8)"

    pytest.importorskip("drjit")
    import drjit.llvm.ad as m

    import rayd.drjit as rd

    dscene = rd.Scene()
    dscene.add_mesh(rd.Mesh(m.Array3f([-1, 1, 0], [-1, -1, 1], [3, 3, 3]), m.Array3u([0], [1], [2])))
    dscene.build()
    samples = rd.Camera(8, 8, fov_y=90.0).sample_edges(dscene, 5)
    assert repr(samples) == "rayd.drjit.EdgeSamples(num_samples=5, width=8, height=8)"
