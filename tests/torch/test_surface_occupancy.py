"""The occupancy grid behind ``contains`` / ``signed_distance`` on the CPU (rayd.engine.occupancy).

Every answer must equal the exact decision ``w > 1/2`` (the float64 NumPy sum of signed
solid angles of ``test_surface_winding.reference``) on random points, on points just off
the surface (both sides, 1e-4 of the size along the vertex normals), on a closed mesh,
an open mesh (caps) and a soup with duplicate, flipped and degenerate faces. The tests
check that the grid path is taken (cells decided, segment partners used).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayd.engine import occupancy

from test_surface_winding import reference, scene_of

trimesh = pytest.importorskip("trimesh")
pytest.importorskip("scipy")


@pytest.fixture
def small_grid(monkeypatch):
    """A 48-cell grid (the default 256 costs seconds per scene to build on a loaded CI core)."""
    monkeypatch.setattr(occupancy, "GRID_CELLS", 48)
    monkeypatch.setattr(occupancy, "GRID_MIN_POINTS", 0)
    monkeypatch.setattr(occupancy, "GRID_AFTER_QUERIES", 0)


def _points(vertices, rng, n=1500, offset=1e-4):
    """Random points in the grown box, and points ``offset * size`` off the surface on both sides."""
    lo, hi = vertices.min(0), vertices.max(0)
    grow = 0.15 * (hi - lo)
    box = rng.uniform(lo - grow, hi + grow, (n, 3))
    size = float(np.linalg.norm(hi - lo))
    centre = vertices.mean(0)
    pick = vertices[rng.integers(0, len(vertices), n // 2)]
    direction = (pick - centre) / np.linalg.norm(pick - centre, axis=1, keepdims=True)
    near = np.concatenate([pick + offset * size * direction, pick - offset * size * direction])
    return np.concatenate([box, near]).astype(np.float32)


def _check(vertices, faces, rng, expect_caps):
    scene = scene_of(vertices, faces, "cpu")
    q = _points(np.asarray(vertices, np.float64), rng)
    with torch.no_grad():
        inside = scene.contains(torch.as_tensor(q)).numpy()
        signed = scene.signed_distance(torch.as_tensor(q)).numpy()
    grid = scene._core.accel._occupancy[1]
    assert grid is not None and grid.decided > 0.3
    exact = reference(q.astype(np.float64), vertices, faces)
    decidable = np.abs(exact - 0.5) > 1e-6
    np.testing.assert_array_equal(inside[decidable], exact[decidable] > 0.5)
    np.testing.assert_array_equal((signed < 0)[decidable], exact[decidable] > 0.5)
    loops = occupancy.boundary_loops(np.asarray(faces, np.int64), len(vertices))
    assert bool(loops) == expect_caps
    # the grid (not only the walk) answered points near the surface through segment partners
    partner = grid.partner.numpy()
    assert (partner >= 0).any()
    return scene, grid


def test_closed_sphere_matches_exact(small_grid):
    m = trimesh.creation.icosphere(subdivisions=3)
    _, grid = _check(np.asarray(m.vertices), np.asarray(m.faces), np.random.default_rng(0), expect_caps=False)
    assert set(np.unique(grid.values.numpy())) <= {occupancy.UNDECIDED, 0, 1}


def test_open_hemisphere_matches_exact(small_grid):
    m = trimesh.creation.icosphere(subdivisions=3)
    keep = m.triangles_center[:, 2] < 0.9  # a cap cut off: one boundary loop, w fractional near it
    _check(np.asarray(m.vertices), np.asarray(m.faces)[keep], np.random.default_rng(1), expect_caps=True)


def test_duplicate_flipped_degenerate_faces_match_exact(small_grid):
    m = trimesh.creation.icosphere(subdivisions=3)
    v = np.asarray(m.vertices)
    f = np.asarray(m.faces)
    rng = np.random.default_rng(2)
    dup = f[rng.choice(len(f), 40, replace=False)]
    flip = f[rng.choice(len(f), 10, replace=False)][:, ::-1]
    degenerate = np.array([[0, 0, 1], [2, 3, 3], [5, 5, 5]])
    # a collinear face: a new vertex on the segment between vertices 0 and 1
    v = np.concatenate([v, [0.5 * (v[0] + v[1])]])
    collinear = np.array([[0, len(v) - 1, 1]])
    faces = np.concatenate([f, dup, flip, degenerate, collinear])
    _check(v, faces, rng, expect_caps=True)


def test_two_nested_spheres_give_winding_two(small_grid):
    a = trimesh.creation.icosphere(subdivisions=2)
    b = trimesh.creation.icosphere(subdivisions=2)
    v = np.concatenate([np.asarray(a.vertices), 0.5 * np.asarray(b.vertices)])
    f = np.concatenate([np.asarray(a.faces), np.asarray(b.faces) + len(a.vertices)])
    _, grid = _check(v, f, np.random.default_rng(3), expect_caps=False)
    assert 2 in set(np.unique(grid.values.numpy()))


def test_segment_crossings_count_signed_faces():
    """The segment through a closed sphere crosses it twice, with opposite signs; one into it once (+1)."""
    m = trimesh.creation.icosphere(subdivisions=2)
    scene = scene_of(np.asarray(m.vertices), np.asarray(m.faces), "cpu")
    scene.contains(torch.zeros(1, 3))  # builds the grid (and the accel view)
    import warp as wp

    from rayd.engine import occupancy_query

    @wp.kernel
    def run(view: occupancy_query.SceneView, p0: wp.array(dtype=wp.vec3d), p1: wp.array(dtype=wp.vec3d),
            out: wp.array(dtype=wp.vec2i)):
        i = wp.tid()
        out[i] = occupancy_query.segment_crossings(view, p0[i], p1[i])

    p0 = np.array([[-2.0, 0.013, 0.021], [2.0, 0.013, 0.021], [0.0, 0.013, 0.021]])
    p1 = np.array([[2.0, 0.013, 0.021], [0.0, 0.013, 0.021], [2.0, 0.013, 0.021]])
    out = wp.empty(3, dtype=wp.vec2i, device="cpu")
    wp.launch(run, 3, [scene._core.accel.view, wp.array(p0, dtype=wp.vec3d, device="cpu"),
                       wp.array(p1, dtype=wp.vec3d, device="cpu")], [out], device="cpu")
    got = out.numpy()
    np.testing.assert_array_equal(got[:, 1], [1, 1, 1])
    np.testing.assert_array_equal(got[:, 0], [0, 1, -1])


def test_default_grid_on_a_disabled_mesh_and_refit(monkeypatch):
    """Default resolution; the grid follows the enable flags and refits (rebuilt, still exact)."""
    m = trimesh.creation.icosphere(subdivisions=3)
    v, f = np.asarray(m.vertices), np.asarray(m.faces)
    import rayd.torch as rt

    monkeypatch.setattr(occupancy, "GRID_MIN_POINTS", 0)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(v, dtype=torch.float32), torch.as_tensor(f)), dynamic=True)
    far = scene.add_mesh(rt.Mesh(torch.as_tensor(v + 5.0, dtype=torch.float32), torch.as_tensor(f)))
    scene.build()
    q = torch.tensor([[0.0, 0.0, 0.0], [5.0, 5.0, 5.0], [0.9, 0.0, 0.0], [1.1, 0.0, 0.0]])
    assert scene.contains(q).tolist() == [True, True, True, False]
    assert getattr(scene._core.accel, "_occupancy", None) is None  # the first large query walks
    assert scene.contains(q).tolist() == [True, True, True, False]
    assert scene._core.accel._occupancy[1] is not None  # the second builds the grid
    scene.set_shape_enabled(far, False)
    scene.update_mesh_vertices(0, torch.as_tensor(2.0 * v, dtype=torch.float32))
    scene.sync()
    assert scene.contains(q).tolist() == [True, False, True, True]
    stale = scene._core.accel._occupancy[0]
    assert scene.contains(q).tolist() == [True, False, True, True]
    assert scene._core.accel._occupancy[0] != stale  # rebuilt for the new geometry
