"""In-place writes into the tensors ``scene.edge_topology()`` returns (session 24, helper review24a).

``edge_topology()`` returned the scene's own topology tensors, which the edge queries,
``silhouette_edges`` and ``sample_edges`` read. A user's in-place edit of the record (say
``top.v += vertex_offset`` to make scene-wide vertex ids, or ``top.shape_id[:] = 0``)
changed the scene: later ``edge_topology()`` calls returned the edited values,
``nearest_edge`` reported the edited ``shape_id`` and ``edge_id``, and ``silhouette_edges``
stopped with ``IndexError: index 5 is out of bounds`` (DESIGN.md: anything a user can change
in place is detected or refused). ``edge_topology()`` now returns a copy (``rayd.core.edges``,
both frontends).
"""

from __future__ import annotations

import torch

import rayd.torch as rt


def _scene(device):
    # Two unit quads (z = 0 and z = 1), the second an instance: boundary edges and a diagonal each.
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], device=device)
    f = torch.tensor([[0, 1, 2], [0, 2, 3]], device=device)
    scene = rt.Scene()
    mesh_id = scene.add_mesh(rt.Mesh(v, f))
    m = torch.eye(4, device=device)
    m[2, 3] = 1.0
    scene.add_instance(mesh_id, m)
    scene.build()
    return scene


def test_writes_into_the_returned_topology_do_not_reach_the_scene(device):
    scene = _scene(device)
    top = scene.edge_topology()
    # Hand-derived: edges of (0,1,2), (0,2,3) keyed by sorted pairs: (0,1) (0,2) (0,3) (1,2) (2,3), per shape.
    want_v = [[0, 1], [0, 2], [0, 3], [1, 2], [2, 3]] * 2
    assert top.v.tolist() == want_v
    assert top.shape_id.tolist() == [0] * 5 + [1] * 5
    assert top.is_boundary.tolist() == [True, False, True, True, True] * 2
    point = torch.tensor([[0.5, -0.25, 1.0]], device=device)  # nearest: edge (0, 1) of the instance, 0.25 away
    with torch.no_grad():
        for name in ("v", "faces", "opposite", "shape_id", "edge_id", "global_edge_id"):
            getattr(top, name).add_(5)
        top.is_boundary.fill_(False)
    again = scene.edge_topology()
    assert again.v.tolist() == want_v
    assert again.shape_id.tolist() == [0] * 5 + [1] * 5
    assert again.edge_id.tolist() == list(range(5)) * 2
    assert again.global_edge_id.tolist() == list(range(10))
    assert again.is_boundary.tolist() == [True, False, True, True, True] * 2
    hit = scene.nearest_edge(point)
    assert (hit.shape_id.item(), hit.edge_id.item(), hit.global_edge_id.item()) == (1, 0, 5)
    assert hit.distance.item() == 0.25
    # Seen from above the quads, only the boundary edges are silhouettes.
    assert scene.silhouette_edges(torch.tensor([0.5, 0.5, 3.0], device=device)).tolist() == \
        [True, False, True, True, True] * 2
