"""Edge queries under hostile input (issue 19): empty batches as the first query, faces
edited in place after build(), and edges shared by many faces (bounded topology)."""

from __future__ import annotations

import math
import time

import pytest
import torch

import rayd.torch as rt
from rayd.engine import edge_topology

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
def test_faces_edited_in_place_after_build_are_refused_until_build(device, instance, first):
    # Edge queries and intersect use one face snapshot: an in-place edit after build()
    # is never answered from stale data; every query says to build() again.
    scene, mesh = _square(device, instance=instance)
    if first == "query":  # the topology already exists when the faces change
        scene.nearest_edge(torch.zeros((1, 3), device=device))
    mesh.faces[1, 1] = 0  # face (1, 3, 2) -> (1, 0, 2): would give three interior edges
    ray = rt.Ray(torch.tensor([[0.8, 0.8, 1.0]], device=device), torch.tensor([[0.0, 0.0, -1.0]], device=device))
    for query in (scene.edge_topology, lambda: scene.intersect(ray),
                  lambda: scene.nearest_edge(torch.tensor([[1.5, 1.5, 0.0]], device=device)),
                  lambda: scene.silhouette_edges(torch.tensor([0.3, 0.3, 1.0], device=device))):
        with pytest.raises(RuntimeError, match=r"the faces of mesh 0 changed in place since build\(\); call build"):
            query()
    scene.build()  # the new faces: (0, 1, 2) and (1, 0, 2) share all three of (0, 1, 2)'s edges
    top = scene.edge_topology()
    assert top.v.tolist()[:3] == [[0, 1], [0, 2], [1, 2]]
    assert top.faces.tolist()[:3] == [[0, 1], [0, 1], [0, 1]]
    assert scene.intersect(ray).prim_id.tolist() == [-1]  # (0.8, 0.8) lies in neither face now


# ------------------------------------------- item 11: edges shared by many faces
def _fan_scene(device, angles_deg, copies_of=None):
    """Faces (0, 1, 2 + j) on the edge (0, 1) along x; vertex 2 + j at (0.5, cos a_j, sin a_j)."""
    a = torch.tensor(angles_deg, dtype=torch.float64) * math.pi / 180
    v = torch.cat([torch.tensor([[0.0, 0, 0], [1, 0, 0]], dtype=torch.float64),
                   torch.stack([torch.full_like(a, 0.5), a.cos(), a.sin()], -1)]).float().to(device)
    k = len(angles_deg)
    f = torch.stack([torch.zeros(k, dtype=torch.long), torch.ones(k, dtype=torch.long), 2 + torch.arange(k)], -1)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f.to(device)))
    scene.build()
    return scene


def _rule_count(k):
    return 1 if k == 1 else k * (k - 1) // 2 if k <= 8 else k


@pytest.mark.parametrize("k", range(1, 13))
def test_edge_with_k_faces_gives_the_documented_records(device, k):
    top = _fan_scene(device, [360.0 * (j + 0.5) / k for j in range(k)]).edge_topology()
    on_edge = (top.v == torch.tensor([0, 1], dtype=torch.int32, device=device)).all(1)
    assert int(on_edge.sum()) == _rule_count(k)
    want = ([[0, -1]] if k == 1 else [[a, b] for a in range(k) for b in range(a + 1, k)] if k <= 8
            else [[a, (a + 1) % k] for a in range(k)])
    assert top.faces[on_edge].tolist() == want
    assert top.is_boundary[on_edge].tolist() == [k == 1] * _rule_count(k)
    assert top.num_edges == _rule_count(k) + 2 * k


def test_silhouette_of_an_edge_with_twelve_faces(device):
    # Face j has normal (0, -sin a_j, cos a_j): seen from (0.5, 0, 10) it faces the viewer
    # iff cos a_j > 0, i.e. j = 0, 1, 2, 9, 10, 11 for a_j = 15 + 30 j degrees. Of the
    # cyclic records (j, j + 1) exactly those across a change, (2, 3) and (8, 9), are
    # silhouette records; the edge is a silhouette edge, as with all pairs.
    scene = _fan_scene(device, [15.0 + 30.0 * j for j in range(12)])
    top = scene.edge_topology()
    on_edge = (top.v == torch.tensor([0, 1], dtype=torch.int32, device=device)).all(1)
    sil = scene.silhouette_edges(torch.tensor([0.5, 0.0, 10.0], device=device))
    assert torch.nonzero(sil[on_edge]).flatten().tolist() == [2, 8]
    assert bool(sil[~on_edge].all())  # the spokes are boundary edges
    # Ten faces all facing the viewer: no silhouette record on the shared edge.
    scene = _fan_scene(device, [-72.0 + 16.0 * j for j in range(10)])
    top = scene.edge_topology()
    on_edge = (top.v == torch.tensor([0, 1], dtype=torch.int32, device=device)).all(1)
    assert int(on_edge.sum()) == 10
    assert not bool(scene.silhouette_edges(torch.tensor([0.5, 0.0, 10.0], device=device))[on_edge].any())


@pytest.mark.parametrize("copies", [5_000, 50_000])
def test_many_copies_of_one_triangle(device, copies):
    start = time.perf_counter()
    scene = rt.Scene()
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device).repeat(copies, 1)))
    scene.build()
    top = scene.edge_topology()
    near = scene.nearest_edge(torch.tensor([[0.5, -1.0, 0.0]], device=device))
    sil = scene.silhouette_edges(torch.tensor([0.2, 0.2, 1.0], device=device))
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, elapsed  # was 31 s (5,000) and a 30 GB allocation (50,000)
    assert top.num_edges == 3 * copies
    ring = torch.stack([torch.arange(copies), (torch.arange(copies) + 1) % copies], -1).int()
    assert torch.equal(top.faces[:copies].cpu(), ring)
    assert near.global_edge_id.tolist() == [0] and near.distance.tolist() == [1.0]
    assert not bool(sil.any())  # every copy faces the viewer


def test_too_many_records_is_a_value_error(device, monkeypatch):
    # Instances repeat their mesh's records; the scene-wide count must fit int32 ids
    # (a limit of 24 records here stands in for 2**31 - 1). The square (2 faces, 5
    # records) passes the per-mesh bound ceil(10.5 * 2) = 21; five copies do not.
    monkeypatch.setattr(edge_topology, "MAX_RECORDS", 24)
    scene, _ = _square(device)
    for _ in range(4):
        scene.add_instance(0, torch.eye(4, device=device))
    scene.build()
    with pytest.raises(ValueError, match=r"rayd.torch.Scene edge queries: the scene has 25 edge records"):
        scene.nearest_edge(torch.zeros((1, 3), device=device))
    # A mesh whose bound alone is too large (3 faces: 32 > 24) is refused before the engine runs.
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.rand(3, 3, device=device), torch.tensor([[0, 1, 2]] * 3, device=device)))
    scene.build()
    with pytest.raises(ValueError, match=r"rayd.torch.Scene edge queries: a mesh of 3 faces is too large"):
        scene.edge_topology()
