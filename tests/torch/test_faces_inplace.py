"""Faces changed in place after ``Mesh(...)`` (issue 19, item 5).

``build()`` snapshots the faces and checks them again (an index of 1e8 used to crash
the build, 1e6 the first edge query, -5 gave silent garbage); after ``build()`` an
in-place change of a mesh's faces makes every query (and ``sync()``, ``edge_topology()``)
raise until the next ``build()``.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

BAD = [10**8, 10**6, -5, 4]  # 4 = V: one past the end


def _meshes(device):
    v0 = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    v1 = torch.tensor([[0.0, 0, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1]], device=device)
    f0 = torch.tensor([[0, 1, 2]], device=device)
    f1 = torch.tensor([[0, 1, 2], [1, 3, 2]], dtype=torch.int32, device=device)
    return (v0, f0), (v1, f1)


@pytest.mark.parametrize("value", BAD)
def test_build_rechecks_faces(device, value):
    (v0, f0), (v1, f1) = _meshes(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v0, f0))
    scene.add_mesh(rt.Mesh(v1, f1))
    f1[1, 1] = value
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Scene\.build\(\): 'faces of mesh 1' must index vertices "
                                         r"in \[0, 4\), got values in"):
        scene.build()
    assert not scene.is_ready()
    f1[1, 1] = 3  # repaired: builds and answers
    scene.build()
    hit = scene.intersect(rt.Ray(torch.tensor([0.8, 0.8, 2.0], device=device), torch.tensor([0.0, 0, -1], device=device)))
    assert int(hit.shape_id) == 1 and int(hit.prim_id) == 1 and float(hit.t) == pytest.approx(1.0)


@pytest.mark.parametrize("value", BAD + [0])
def test_queries_refuse_faces_changed_after_build(device, value):
    (v0, f0), (v1, f1) = _meshes(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v0, f0))
    scene.add_mesh(rt.Mesh(v1, f1), dynamic=True)
    scene.build()
    f0[0, 2] = value  # 0 is in range, but the BVH still holds the old face: stale too
    o = torch.tensor([[0.2, 0.2, 2.0]], device=device)
    d = torch.tensor([[0.0, 0, -1]], device=device)
    ray = rt.Ray(o, d)
    calls = {
        "intersect": lambda: scene.intersect(ray),
        "shadow_test": lambda: scene.shadow_test(ray),
        "visible": lambda: scene.visible(o, o + 3 * d),
        "nearest_edge": lambda: scene.nearest_edge(o),
        "nearest_edge_ray": lambda: scene.nearest_edge(ray),
        "nearest_edges": lambda: scene.nearest_edges(o, 2),
        "edge_topology": scene.edge_topology,
        "silhouette_edges": lambda: scene.silhouette_edges(o[0]),
        "sync": scene.sync,
    }
    for name, call in calls.items():
        method = "nearest_edge" if name == "nearest_edge_ray" else name
        with pytest.raises(RuntimeError, match=rf"^rayd\.torch\.Scene\.{method}\(\): the faces of mesh 0 changed in "
                                               r"place since build\(\); call build\(\)"):
            call()
    assert not scene.is_ready()
    f0[0, 2] = 2
    scene.build()
    assert scene.is_ready()
    hit = scene.intersect(ray)
    assert int(hit.shape_id) == 1 and float(hit.t) == pytest.approx(1.0)
    assert float(scene.nearest_edge(torch.tensor([0.5, -0.5, 0.0], device=device)).distance) == pytest.approx(0.5)


def test_valid_face_edit_takes_effect_at_build(device):
    (v0, f0), _ = _meshes(device)
    v = torch.cat((v0, torch.tensor([[5.0, 5, 0]], device=device)))
    faces = f0.clone()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, faces))
    scene.build()
    ray = rt.Ray(torch.tensor([1.0, 1.5, 1.0], device=device), torch.tensor([0.0, 0, -1], device=device))
    assert not bool(scene.intersect(ray).is_valid())  # outside the old face (0, 1, 2)
    faces[0, 1], faces[0, 2] = 2, 3  # face (0, 2, 3): (0,0,0), (0,1,0), (5,5,0), which covers (1, 1.5)
    scene.build()
    hit = scene.intersect(ray)
    assert bool(hit.is_valid()) and float(hit.t) == pytest.approx(1.0)
    torch.testing.assert_close(scene.edge_topology().v.cpu(), torch.tensor([[0, 2], [0, 3], [2, 3]], dtype=torch.int32))
