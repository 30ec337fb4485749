"""Regressions from the break-it pass over rayd.core, rayd.drjit side."""

from __future__ import annotations

import math

import drjit as dr
import numpy as np
import pytest

import rayd.drjit as rd

C = np.array([1e6, -2e6, 5e5])


def test_nearest_edge_far_from_the_origin(m):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, -1, 0], [0, 0.02, 0], [1, 0.02, 0], [0, 1, 0]]) + C
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f64(*v.T), m.Array3u([0, 3], [1, 4], [2, 5])))
    scene.build()
    t = np.linspace(0.1, 0.9, 9)
    p = np.stack([t, np.full(9, 0.015), np.zeros(9)], 1) + C
    near = scene.nearest_edge(m.Array3f64(*p.T))
    assert np.allclose(np.array(near.distance), 0.005, atol=1e-9, rtol=0)
    ray = scene.nearest_edge(rd.Ray(m.Array3f64(*p.T), m.Array3f64(0.0, 0.0, 1.0)))
    assert np.array(ray.global_edge_id).tolist() == np.array(near.global_edge_id).tolist()


def test_matrix_written_in_place_is_checked_at_sync(m):
    matrix = m.Matrix4f64(1.0)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f64([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2]), to_world=matrix))
    scene.build()
    matrix[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene.sync\(\): the matrix of mesh 0 \(changed in place\) holds "
                                         r"non-finite"):
        scene.sync()


def test_is_ready_waits_for_a_pending_edge_mask(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2])))
    scene.build()
    scene.set_edge_mask(dr.llvm.Bool([True, False, True]) if dr.backend_v(m.Float) == dr.JitBackend.LLVM
                        else dr.cuda.Bool([True, False, True]))
    assert scene.has_pending_updates() and not scene.is_ready()
    scene.sync()
    assert scene.is_ready()
