"""Engine ring: rayd.engine.edge_topology.mesh_edges equals rayd.torch's mesh_edges bitwise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import warp as wp

from rayd.engine.edge_topology import mesh_edges
from rayd.torch.edges import mesh_edges as torch_mesh_edges


def _dev(device: str) -> str:
    return "cuda:0" if device == "cuda" else device


def _engine(device: str, faces, num_vertices: int) -> list[np.ndarray]:
    flat = np.asarray(faces, dtype=np.int32).reshape(-1)
    edges = mesh_edges(wp.array(flat, dtype=wp.int32, device=_dev(device)), num_vertices)
    return [a.numpy().reshape(-1, 2).astype(np.int64) for a in (edges.v, edges.faces, edges.opposite)]


def _torch(device: str, faces, num_vertices: int) -> list[np.ndarray]:
    f = torch.as_tensor(np.asarray(faces, dtype=np.int64).reshape(-1, 3), device=device)
    return [a.cpu().numpy() for a in torch_mesh_edges(f, num_vertices)]


def _same(device: str, faces, num_vertices: int) -> list[np.ndarray]:
    got = _engine(device, faces, num_vertices)
    want = _torch(device, faces, num_vertices)
    for name, g, w in zip(("v", "faces", "opposite"), got, want):
        assert g.shape == w.shape, name
        assert np.array_equal(g, w), name
    return got


def test_triangle(device):
    v, faces, opposite = _same(device, [[0, 1, 2]], 3)
    assert v.tolist() == [[0, 1], [0, 2], [1, 2]]
    assert faces.tolist() == [[0, -1]] * 3
    assert opposite.tolist() == [[2, -1], [1, -1], [0, -1]]


def test_quad(device):
    v, faces, opposite = _same(device, [[0, 1, 2], [1, 3, 2]], 4)
    assert v.tolist() == [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]
    assert faces.tolist() == [[0, -1], [0, -1], [0, 1], [1, -1], [1, -1]]
    assert opposite[2].tolist() == [0, 3]


def test_octahedron(device):
    f = [[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]]
    v, faces, _ = _same(device, f, 6)
    assert len(v) == 12 and (faces[:, 1] >= 0).all()


def test_three_face_fan(device):
    # Three faces on edge (0, 1): three records (0,1), (0,2), (1,2) of face pairs.
    v, faces, opposite = _same(device, [[0, 1, 2], [1, 0, 3], [0, 1, 4]], 5)
    on_edge = (v == [0, 1]).all(1)
    assert faces[on_edge].tolist() == [[0, 1], [0, 2], [1, 2]]
    assert opposite[on_edge].tolist() == [[2, 3], [2, 4], [3, 4]]


def test_empty(device):
    got = _engine(device, np.zeros((0, 3)), 5)
    assert all(a.shape == (0, 2) for a in got)


@pytest.mark.parametrize("seed", range(8))
def test_random_meshes_with_duplicate_and_degenerate_faces(device, seed):
    rng = np.random.default_rng(seed)
    num_vertices = int(rng.integers(3, 40))
    faces = rng.integers(0, num_vertices, (int(rng.integers(1, 200)), 3))
    faces[: len(faces) // 4] = faces[len(faces) // 2 : len(faces) // 2 + len(faces) // 4]  # duplicates
    faces[-1] = [faces[-1, 0], faces[-1, 0], faces[-1, 1]]  # a degenerate face
    _same(device, faces, num_vertices)


def test_large_vertex_ids(device):
    # Keys lo * V + hi need more than 32 bits.
    rng = np.random.default_rng(3)
    num_vertices = 3_000_000
    ids = rng.choice(num_vertices, 500, replace=False)
    faces = ids[rng.integers(0, 500, (2000, 3))]
    _same(device, faces, num_vertices)


def test_bad_input():
    with pytest.raises(TypeError, match="mesh_edges"):
        mesh_edges(wp.zeros(6, dtype=wp.float32, device="cpu"), 3)
    with pytest.raises(ValueError, match="3 ids per face"):
        mesh_edges(wp.zeros(4, dtype=wp.int32, device="cpu"), 3)
