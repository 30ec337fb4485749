"""Engine ring: rayd.engine.edge_topology.mesh_edges against the rule written as plain
loops (DESIGN.md, "Edges"; all pairs up to 8 faces on an edge, the cyclic pairs beyond),
and rayd.torch's mesh_edges (which calls it) equal to it bitwise."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import warp as wp

from rayd.engine import edge_topology
from rayd.engine.edge_topology import MAX_ALL_PAIRS, mesh_edges
from rayd.torch.edges import mesh_edges as torch_mesh_edges


def _dev(device: str) -> str:
    return "cuda:0" if device == "cuda" else device


def loop_reference(faces) -> list[np.ndarray]:
    """The topology rule as plain Python loops (the definition, not fast)."""
    incident: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for f, (a, b, c) in enumerate(np.asarray(faces, dtype=np.int64).reshape(-1, 3).tolist()):
        for x, y, z in ((a, b, c), (b, c, a), (c, a, b)):
            incident.setdefault((min(x, y), max(x, y)), []).append((f, z))
    v, fp, op = [], [], []
    for key in sorted(incident):
        members = incident[key]
        k = len(members)
        if k == 1:
            pairs = [(members[0], (-1, -1))]
        elif k <= MAX_ALL_PAIRS:
            pairs = [(members[a], members[b]) for a in range(k) for b in range(a + 1, k)]
        else:
            pairs = [(members[a], members[(a + 1) % k]) for a in range(k)]
        for (f0, o0), (f1, o1) in pairs:
            v.append(key)
            fp.append((f0, f1))
            op.append((o0, o1))
    return [np.asarray(x, dtype=np.int64).reshape(-1, 2) for x in (v, fp, op)]


def _engine(device: str, faces, num_vertices: int) -> list[np.ndarray]:
    flat = np.asarray(faces, dtype=np.int32).reshape(-1)
    edges = mesh_edges(wp.array(flat, dtype=wp.int32, device=_dev(device)), num_vertices)
    return [a.numpy().reshape(-1, 2).astype(np.int64) for a in (edges.v, edges.faces, edges.opposite)]


def _torch(device: str, faces, num_vertices: int) -> list[np.ndarray]:
    f = torch.as_tensor(np.asarray(faces, dtype=np.int64).reshape(-1, 3), device=device)
    return [a.cpu().numpy() for a in torch_mesh_edges(f, num_vertices)]


def _same(device: str, faces, num_vertices: int) -> list[np.ndarray]:
    got = _engine(device, faces, num_vertices)
    for want in (loop_reference(faces), _torch(device, faces, num_vertices)):
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


def _fan(k: int) -> np.ndarray:
    """k triangles (0, 1, 2 + j) on the edge (0, 1)."""
    return np.stack([np.zeros(k, int), np.ones(k, int), 2 + np.arange(k)], -1)


@pytest.mark.parametrize("k", range(1, 13))
def test_record_count_of_an_edge_with_k_faces(device, k):
    v, faces, opposite = _same(device, _fan(k), k + 2)
    on_edge = (v == [0, 1]).all(1)
    want = 1 if k == 1 else k * (k - 1) // 2 if k <= 8 else k
    assert on_edge.sum() == want
    if k == 1:
        assert faces[on_edge].tolist() == [[0, -1]]
    elif k <= 8:
        assert faces[on_edge].tolist() == [[a, b] for a in range(k) for b in range(a + 1, k)]
    else:
        assert faces[on_edge].tolist() == [[a, (a + 1) % k] for a in range(k)]
    assert np.array_equal(opposite[on_edge], np.where(faces[on_edge] < 0, -1, faces[on_edge] + 2))
    # The spokes (0, 2 + j) and (1, 2 + j) are boundary edges, one record each.
    assert len(v) == want + 2 * k and (faces[~on_edge, 1] == -1).all()


def test_many_copies_of_one_triangle_is_linear_and_fast():
    for copies in (5_000, 50_000):
        faces = np.tile([[0, 1, 2]], (copies, 1))
        start = time.perf_counter()
        got = _engine("cpu", faces, 3)
        elapsed = time.perf_counter() - start
        assert elapsed < 3.0, elapsed
        v, pairs, opposite = got
        assert len(v) == 3 * copies  # was copies (copies - 1) / 2 per edge: 3.7e7 and 3.7e9
        ring = np.stack([np.arange(copies), (np.arange(copies) + 1) % copies], -1)
        for e, third in enumerate((2, 1, 0)):
            rows = slice(e * copies, (e + 1) * copies)
            assert (v[rows] == [[0, 1], [0, 2], [1, 2]][e]).all()
            assert np.array_equal(pairs[rows], ring)
            assert (opposite[rows] == third).all()


def test_many_copies_on_the_device(device):
    # 20,000 copies of a two-triangle quad: every edge has more than 8 faces (the
    # diagonal 40,000), so every face-edge gives exactly one record of a cycle.
    faces = np.tile([[0, 1, 2], [2, 1, 3]], (20_000, 1))
    v, pairs, _ = _same(device, faces, 4)
    assert len(v) == 3 * len(faces)
    diagonal = (v == [1, 2]).all(1)
    assert diagonal.sum() == 40_000
    assert pairs[diagonal][-1].tolist() == [39_999, 0]


def test_too_large_a_mesh_is_refused_before_allocating(monkeypatch):
    # The bound is 3.5 records per face-edge; with a limit of 30 records, 2 faces pass
    # (at most 21) and 3 faces (at most 32) are refused with a ValueError.
    monkeypatch.setattr(edge_topology, "MAX_RECORDS", 30)
    assert len(_engine("cpu", [[0, 1, 2], [0, 1, 2]], 3)[0]) == 3
    with pytest.raises(ValueError, match=r"rayd.engine.mesh_edges\(\): a mesh of 3 faces is too large"):
        mesh_edges(wp.zeros(9, dtype=wp.int32, device="cpu"), 3)
