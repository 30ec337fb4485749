"""Edge topology (DESIGN.md, "Edges"): the rule, hand-built meshes, a loop reference."""

from __future__ import annotations

import itertools

import pytest
import torch

import rayd.torch as rt


def _scene(device, *meshes):
    scene = rt.Scene()
    for vertices, faces in meshes:
        scene.add_mesh(rt.Mesh(torch.as_tensor(vertices, dtype=torch.float32, device=device),
                               torch.as_tensor(faces, device=device)))
    scene.build()
    return scene


def octahedron():
    v = [[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]]
    f = [[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]]
    return v, f


def loop_reference(faces: list[list[int]]):
    """The topology rule written as plain Python loops (the definition, not fast).

    Up to 8 faces on an edge: one record per unordered pair; more: the cyclic pairs
    ``(f_0, f_1), ..., (f_{k-1}, f_0)`` of its faces in ascending order.
    """
    incident: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for f, (a, b, c) in enumerate(faces):
        for x, y, z in ((a, b, c), (b, c, a), (c, a, b)):
            incident.setdefault((min(x, y), max(x, y)), []).append((f, z))
    rows = []
    for key in sorted(incident):
        members = incident[key]
        if len(members) == 1:
            rows.append((key, (members[0][0], -1), (members[0][1], -1)))
        k = len(members)
        pairs = itertools.combinations(members, 2) if k <= 8 else zip(members, members[1:] + members[:1])
        for (f0, o0), (f1, o1) in pairs:
            rows.append((key, (f0, f1), (o0, o1)))
    return rows


def _rows(top):
    return list(zip(map(tuple, top.v.tolist()), map(tuple, top.faces.tolist()), map(tuple, top.opposite.tolist())))


def test_triangle(device):
    top = _scene(device, ([[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 2]])).edge_topology()
    assert top.v.tolist() == [[0, 1], [0, 2], [1, 2]]
    assert top.faces.tolist() == [[0, -1]] * 3
    assert top.opposite.tolist() == [[2, -1], [1, -1], [0, -1]]
    assert top.is_boundary.tolist() == [True] * 3
    assert top.global_edge_id.tolist() == [0, 1, 2]
    for name in ("v", "faces", "opposite", "shape_id", "edge_id", "global_edge_id"):
        assert getattr(top, name).dtype == torch.int32
        assert getattr(top, name).device.type == torch.device(device).type
    assert top.is_boundary.dtype == torch.bool
    assert len(top) == top.num_edges == 3


def test_quad(device):
    top = _scene(device, ([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], [[0, 1, 2], [1, 3, 2]])).edge_topology()
    assert top.num_edges == 5
    assert int(top.is_boundary.sum()) == 4
    assert top.v.tolist() == [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]
    diagonal = top.v.tolist().index([1, 2])
    assert top.faces[diagonal].tolist() == [0, 1]
    assert top.opposite[diagonal].tolist() == [0, 3]
    assert not bool(top.is_boundary[diagonal])


def test_closed_octahedron(device):
    v, f = octahedron()
    top = _scene(device, (v, f)).edge_topology()
    assert top.num_edges == 12
    assert not bool(top.is_boundary.any())
    assert bool((top.faces >= 0).all()) and bool((top.faces[:, 0] != top.faces[:, 1]).all())
    keys = top.v[:, 0].long() * 6 + top.v[:, 1].long()
    assert bool((keys[1:] > keys[:-1]).all())  # unique, ascending
    assert _rows(top) == loop_reference(f)


def test_three_face_fan_gives_one_record_per_face_pair(device):
    v = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1]]
    f = [[0, 1, 2], [0, 1, 3], [1, 0, 4]]  # three faces on edge (0, 1): a non-manifold wedge
    top = _scene(device, (v, f)).edge_topology()
    wedge = [i for i, e in enumerate(top.v.tolist()) if e == [0, 1]]
    assert wedge == [0, 1, 2]
    assert top.faces[wedge].tolist() == [[0, 1], [0, 2], [1, 2]]
    assert top.opposite[wedge].tolist() == [[2, 3], [2, 4], [3, 4]]
    assert not bool(top.is_boundary[wedge].any())
    assert top.num_edges == 3 + 6
    assert int(top.is_boundary.sum()) == 6
    assert _rows(top) == loop_reference(f)


def test_several_meshes_in_shape_order(device):
    tri = ([[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 2]])
    v, f = octahedron()
    top = _scene(device, tri, (v, f)).edge_topology()
    assert top.num_edges == 15
    assert top.shape_id.tolist() == [0] * 3 + [1] * 12
    assert top.edge_id.tolist() == list(range(3)) + list(range(12))
    assert top.global_edge_id.tolist() == list(range(15))
    assert int(top.v[3:].max()) == 5  # mesh-local vertex ids


@pytest.mark.parametrize("seed,num_vertices,num_faces", [(0, 12, 40), (1, 12, 40), (2, 5, 120), (3, 4, 300)])
def test_matches_loop_reference_on_random_soup(device, seed, num_vertices, num_faces):
    # The last two put far more than 8 faces on most edges (the cyclic rule).
    g = torch.Generator().manual_seed(seed)
    faces = torch.randint(0, num_vertices, (num_faces, 3), generator=g)
    faces = faces[(faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])]
    vertices = torch.rand(num_vertices, 3, generator=g)
    top = _scene(device, (vertices, faces.int())).edge_topology()
    assert _rows(top) == loop_reference(faces.tolist())
    assert top.is_boundary.tolist() == [r[1][1] < 0 for r in loop_reference(faces.tolist())]


def test_topology_needs_build(device):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.rand(3, 3, device=device), torch.tensor([[0, 1, 2]], device=device)))
    with pytest.raises(RuntimeError, match=r"rayd.torch.Scene.edge_topology\(\): the scene is not built"):
        scene.edge_topology()
    scene.build()
    scene.add_mesh(rt.Mesh(torch.rand(3, 3, device=device), torch.tensor([[0, 1, 2]], device=device)))
    with pytest.raises(RuntimeError, match="build"):
        scene.edge_topology()
    scene.build()
    assert scene.edge_topology().num_edges == 6
