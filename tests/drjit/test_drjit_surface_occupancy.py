"""rayd.drjit ``contains`` / ``signed_distance`` through the CPU occupancy grid: the same
answers as rayd.torch and as the exact winding-number decision (rayd.engine.occupancy)."""

from __future__ import annotations


import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
trimesh = pytest.importorskip("trimesh")
pytest.importorskip("scipy")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import exact_winding, rows, vec

from rayd.engine import occupancy


def test_grid_contains_matches_torch_and_exact(m, backend, monkeypatch):
    if backend != "llvm":
        pytest.skip("the occupancy grid is CPU-only")
    monkeypatch.setattr(occupancy, "GRID_CELLS", 40)
    monkeypatch.setattr(occupancy, "GRID_MIN_POINTS", 0)
    monkeypatch.setattr(occupancy, "GRID_AFTER_QUERIES", 0)
    sphere = trimesh.creation.icosphere(subdivisions=3)
    v = np.asarray(sphere.vertices, np.float64)
    f = np.asarray(sphere.faces)
    f = f[sphere.triangles_center[:, 2] < 0.9]  # a small hole: caps
    rng = np.random.default_rng(4)
    pts = rng.uniform(-1.3, 1.3, (1500, 3)).astype(np.float32)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, v), vec(m.Array3u, f)))
    scene.build()
    got = rows(scene.contains(vec(m.Array3f, pts))).astype(bool)
    sd = rows(scene.signed_distance(vec(m.Array3f, pts)))
    assert scene._core.accel._occupancy[1] is not None
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.as_tensor(v, dtype=torch.float32), torch.as_tensor(f.astype(np.int64))))
    ts.build()
    np.testing.assert_array_equal(got, ts.contains(torch.as_tensor(pts)).numpy())
    exact = exact_winding(pts, v.astype(np.float32).astype(np.float64)[f])
    sure = np.abs(exact - 0.5) > 1e-6
    np.testing.assert_array_equal(got[sure], exact[sure] > 0.5)
    np.testing.assert_array_equal((sd < 0)[sure], exact[sure] > 0.5)
