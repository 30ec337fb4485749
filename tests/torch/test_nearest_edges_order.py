"""nearest_edges slot order (break-it t23/t25): sorted by the reported distance, ties broken by
global_edge_id, in float32 and float64, against a float64 brute force of every edge."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt


def _soup():
    rng = np.random.default_rng(0)
    return rng.normal(size=(40, 3)), rng.integers(0, 40, size=(60, 3)), rng.normal(size=(2000, 3)) * 1.5


def brute_distances(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, E) float64 distances of points to segments [a, b]."""
    ab = b - a
    t = np.clip(np.einsum("nek,ek->ne", points[:, None] - a[None], ab) / np.maximum((ab * ab).sum(1), 1e-300), 0, 1)
    q = a[None] + t[..., None] * ab[None]
    return np.linalg.norm(points[:, None] - q, axis=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_slots_sorted_by_distance_then_global_edge_id(dtype):
    v, f, p = _soup()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype), torch.tensor(f)))
    scene.build()
    k = 8
    res = scene.nearest_edges(torch.tensor(p, dtype=dtype), k)
    dist, gid = res.distance.numpy(), res.global_edge_id.numpy()
    assert (gid >= 0).all()
    step = np.diff(dist, axis=1)
    assert (step >= 0).all(), f"{int((step < 0).sum())} slot pairs out of distance order"
    ties = step == 0
    assert ties.sum() > 50  # the soup has many exact ties (shared vertices)
    assert (gid[:, 1:][ties] > gid[:, :-1][ties]).all(), "ties not in global_edge_id order"
    # Each slot's distance is that of its edge; the k slots are the k nearest (float64 brute force).
    topo = scene.edge_topology()
    ev = topo.v.numpy()
    given = np.float32 if dtype == torch.float32 else np.float64  # the inputs as the scene holds them
    pp, vv = p.astype(given).astype(np.float64), v.astype(given).astype(np.float64)
    ref = brute_distances(pp, vv[ev[:, 0]], vv[ev[:, 1]])
    np.testing.assert_allclose(dist, np.take_along_axis(ref, gid, 1), rtol=1e-5)
    np.testing.assert_allclose(dist[:, -1], np.sort(ref, 1)[:, k - 1], rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vertex_ties_go_to_the_smallest_id_in_both_queries(dtype):
    # Points beyond the vertices of an icosphere: the edges of that vertex are exactly as far (the
    # vertex is the closest point of each), so slot 0 and nearest_edge are the smallest id among them.
    trimesh = pytest.importorskip("trimesh")
    sphere = trimesh.creation.icosphere(subdivisions=2)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(sphere.vertices, dtype=dtype), torch.tensor(sphere.faces)))
    scene.build()
    p = torch.tensor(sphere.vertices, dtype=dtype) * 1.3
    top, first = scene.nearest_edges(p, 8), scene.nearest_edge(p)
    ev = scene.edge_topology().v.numpy()
    for i in range(len(p)):
        at_vertex = np.flatnonzero((ev == i).any(1))
        assert top.global_edge_id[i, 0].item() == at_vertex.min()
        assert first.global_edge_id[i].item() == at_vertex.min()
        assert top.global_edge_id[i, : len(at_vertex)].tolist() == sorted(at_vertex.tolist())
