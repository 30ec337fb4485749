"""rayd.drjit nearest_edges slot order (break-it t23/t25): sorted by the reported distance, ties
broken by global_edge_id (LLVM; float32 and float64), against a float64 brute force."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
llvm = pytest.importorskip("drjit.llvm.ad")


def _segment_distances(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, E) float64 distances of points to segments [a, b]."""
    ab = b - a
    t = np.clip(np.einsum("nek,ek->ne", points[:, None] - a[None], ab) / np.maximum((ab * ab).sum(1), 1e-300), 0, 1)
    return np.linalg.norm(points[:, None] - (a[None] + t[..., None] * ab[None]), axis=2)


@pytest.mark.parametrize("double", [False, True])
def test_slots_sorted_by_distance_then_global_edge_id(double):
    rng = np.random.default_rng(0)
    v, f, p = rng.normal(size=(40, 3)), rng.integers(0, 40, size=(60, 3)), rng.normal(size=(2000, 3)) * 1.5
    given = np.float64 if double else np.float32
    Array3 = llvm.Array3f64 if double else llvm.Array3f
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(Array3(v.astype(given).T), llvm.Array3u(f.T.astype(np.uint32))))
    scene.build()
    k = 8
    res = scene.nearest_edges(Array3(p.astype(given).T), k)
    dist = np.array(res.distance, dtype=np.float64).reshape(-1, k)
    gid = np.array(res.global_edge_id).reshape(-1, k)
    assert (gid >= 0).all()
    step = np.diff(dist, axis=1)
    assert (step >= 0).all(), f"{int((step < 0).sum())} slot pairs out of distance order"
    ties = step == 0
    assert ties.sum() > 50
    assert (gid[:, 1:][ties] > gid[:, :-1][ties]).all(), "ties not in global_edge_id order"
    vv, pp = v.astype(given).astype(np.float64), p.astype(given).astype(np.float64)
    ev = np.array(scene.edge_topology().v).T  # Array2i: (2, E)
    ref = _segment_distances(pp, vv[ev[:, 0]], vv[ev[:, 1]])
    np.testing.assert_allclose(dist, np.take_along_axis(ref, gid, 1), rtol=1e-5)
    np.testing.assert_allclose(dist[:, -1], np.sort(ref, 1)[:, k - 1], rtol=1e-5)
