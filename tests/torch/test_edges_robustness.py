"""Edge queries under hostile input (issue 19): empty batches as the first query, faces
edited in place after build(), and edges shared by many faces (bounded topology)."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

SQUARE_V = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]]
SQUARE_F = [[0, 1, 2], [1, 3, 2]]  # edges (0,1) (0,2) (1,2) (1,3) (2,3)


def _square(device, dtype=torch.float32, to_world=None, instance=False):
    v = torch.tensor(SQUARE_V, dtype=dtype, device=device)
    f = torch.tensor(SQUARE_F, device=device)
    m = None if to_world is None else torch.as_tensor(to_world, dtype=dtype, device=device)
    scene = rt.Scene()
    mesh = rt.Mesh(v, f, to_world=m)
    scene.add_mesh(mesh)
    if instance:
        shift = torch.eye(4, dtype=dtype, device=device)
        shift[2, 3] = 5.0
        scene.add_instance(0, shift)
    scene.build()
    return scene, mesh


# --------------------------------------------------------------- item 7: empty batches
EMPTY_SHAPES = [(0,), (2, 0), (0, 4)]
VARIANTS = [
    dict(dtype=torch.float32),  # the fused evaluation path
    dict(dtype=torch.float64),  # the op-by-op path
    dict(dtype=torch.float32, to_world=[[1, 0, 0, 0.5], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]),
    dict(dtype=torch.float32, instance=True),
]


def _check_fields(result, shape, dtype, device, ray=False):
    assert result.shape == torch.Size(shape)
    floats = ["distance", "edge_t"] + (["ray_t"] if ray else [])
    points = ["edge_point"] + (["ray_point"] if ray else [])
    for name in floats:
        value = getattr(result, name)
        assert value.shape == torch.Size(shape) and value.dtype == dtype and value.device.type == device, name
    for name in points:
        value = getattr(result, name)
        assert value.shape == torch.Size(shape + (3,)) and value.dtype == dtype, name
    for name in ("edge_id", "shape_id", "global_edge_id"):
        value = getattr(result, name)
        assert value.shape == torch.Size(shape) and value.dtype == torch.int32, name
    assert result.is_valid().shape == torch.Size(shape)


@pytest.mark.parametrize("batch", EMPTY_SHAPES)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_empty_point_batch_is_a_valid_first_query(device, batch, variant):
    kwargs = VARIANTS[variant]
    dtype = kwargs["dtype"]
    scene, _ = _square(device, **kwargs)
    result = scene.nearest_edge(torch.zeros(batch + (3,), dtype=dtype, device=device))
    _check_fields(result, batch, dtype, device)
    # A later non-empty query works and is right: (0.5, -1, 0) is 1 from edge (0,1) (plus shifts).
    p = torch.tensor([[0.5, -1.0, 0.0]], dtype=dtype, device=device)
    later = scene.nearest_edge(p)
    assert later.distance.tolist() == [1.0]
    assert later.global_edge_id.tolist() == [0]


@pytest.mark.parametrize("batch", EMPTY_SHAPES)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_empty_top_k_batch_is_a_valid_first_query(device, batch, variant):
    kwargs = VARIANTS[variant]
    dtype = kwargs["dtype"]
    scene, _ = _square(device, **kwargs)
    result = scene.nearest_edges(torch.zeros(batch + (3,), dtype=dtype, device=device), 3)
    _check_fields(result, batch + (3,), dtype, device)
    later = scene.nearest_edges(torch.tensor([[0.5, -1.0, 0.0]], dtype=dtype, device=device), 2)
    assert later.global_edge_id[0, 0].item() == 0
    assert later.distance[0, 0].item() == 1.0


@pytest.mark.parametrize("batch", EMPTY_SHAPES)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_empty_ray_batch_is_a_valid_first_query(device, batch, variant):
    kwargs = VARIANTS[variant]
    dtype = kwargs["dtype"]
    scene, _ = _square(device, **kwargs)
    o = torch.zeros(batch + (3,), dtype=dtype, device=device)
    ray = rt.Ray(o, torch.ones_like(o))
    result = scene.nearest_edge(ray)
    _check_fields(result, batch, dtype, device, ray=True)
    # Ray along x at y = -1: closest to edge (0, 1) at distance 1.
    o1 = torch.tensor([[-3.0, -1.0, 0.0]], dtype=dtype, device=device)
    later = scene.nearest_edge(rt.Ray(o1, torch.tensor([[1.0, 0.0, 0.0]], dtype=dtype, device=device)))
    assert later.distance.tolist() == [1.0]
    assert later.global_edge_id.tolist() == [0]


def test_empty_batch_with_active_and_gradients(device):
    scene, _ = _square(device)
    p = torch.zeros((2, 0, 3), device=device, requires_grad=True)
    result = scene.nearest_edge(p, torch.ones((2, 0), dtype=torch.bool, device=device))
    _check_fields(result, (2, 0), torch.float32, device)
    result.distance.sum().backward()
    assert p.grad.shape == (2, 0, 3)


def test_empty_batch_then_edge_topology_and_mask(device):
    scene, _ = _square(device)
    scene.nearest_edge(torch.zeros((0, 3), device=device))
    assert scene.edge_topology().num_edges == 5
    mask = torch.ones(5, dtype=torch.bool, device=device)
    mask[0] = False
    scene.set_edge_mask(mask)
    scene.sync()
    assert scene.nearest_edges(torch.zeros((0, 3), device=device), 2).shape == (0, 2)
    later = scene.nearest_edge(torch.tensor([[0.5, -1.0, 0.0]], device=device))
    assert later.global_edge_id.item() != 0


# ------------------------------------------------- item 4: the build-time face snapshot
SQUARE_EDGES = [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]
SQUARE_EDGE_FACES = [[0, -1], [0, -1], [0, 1], [1, -1], [1, -1]]


@pytest.mark.parametrize("instance", [False, True])
@pytest.mark.parametrize("first", ["topology", "query"])
def test_faces_edited_in_place_after_build_are_not_seen(device, instance, first):
    scene, mesh = _square(device, instance=instance)
    if first == "query":  # the topology already exists when the faces change
        scene.nearest_edge(torch.zeros((1, 3), device=device))
    mesh.faces[1, 1] = 0  # face (1, 3, 2) -> (1, 0, 2): would give three interior edges
    top = scene.edge_topology()
    copies = 2 if instance else 1
    assert top.v.tolist() == SQUARE_EDGES * copies
    assert top.faces.tolist() == SQUARE_EDGE_FACES * copies
    assert top.opposite.tolist()[:5] == [[2, -1], [1, -1], [0, 3], [2, -1], [1, -1]]
    # What intersect uses (face 1 is still (1, 3, 2)) and what the edge queries use agree.
    hit = scene.intersect(rt.Ray(torch.tensor([[0.8, 0.8, 1.0]], device=device),
                                 torch.tensor([[0.0, 0.0, -1.0]], device=device)))
    assert hit.prim_id.tolist() == [1]
    near = scene.nearest_edge(torch.tensor([[1.5, 1.5, 0.0]], device=device))
    assert near.global_edge_id.tolist() == [3]  # (1, 3); tie with (2, 3) goes to the smaller id
    torch.testing.assert_close(near.distance, torch.tensor([0.5**0.5], device=device))
    # Seen from above both (snapshot) faces face the viewer: only the boundary edges.
    sil = scene.silhouette_edges(torch.tensor([0.3, 0.3, 1.0], device=device))
    assert sil.tolist() == [True, True, False, True, True] * copies
