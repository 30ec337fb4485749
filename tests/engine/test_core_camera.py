"""rayd.core.camera: the backend-neutral clipping and sampling arithmetic (NumPy only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayd.core import camera as cc

K = (10.0, 10.0, 5.0, 5.0)  # fx, fy, cx, cy of a 10 x 10 image


def test_fov_to_focal():
    assert cc.fov_to_focal(90.0, 20) == pytest.approx(10.0)


def test_image_to_edge_param_is_perspective_correct():
    rng = np.random.default_rng(0)
    p0 = np.c_[rng.normal(size=(50, 2)), rng.uniform(0.5, 3, 50)]
    p1 = np.c_[rng.normal(size=(50, 2)), rng.uniform(0.5, 3, 50)]
    s = rng.uniform(size=50)
    t = cc.image_to_edge_param(s, p0[:, 2], p1[:, 2])
    x0, x1 = cc.project(p0, K), cc.project(p1, K)
    np.testing.assert_allclose(cc.project(p0 + t[:, None] * (p1 - p0), K), x0 + s[:, None] * (x1 - x0), atol=1e-10)


def test_clip_hand_cases():
    a = np.array([[-0.3, -0.3, 1.0], [-0.2, 0.1, 1.0], [0.0, 0.0, -1.0], [-0.3, -0.3, 1.0]])
    b = np.array([[0.0, 1.5, 1.0], [0.0, 0.1, -1.0], [0.1, 0.1, -2.0], [0.3, -0.3, 1.0]])
    t0, t1, xy0, xy1 = cc.clip_to_image(a, b, K, 10, 10)
    # (2, 2) -> (5, 20): stops at y = 10, t = 8/18 (no perspective: constant depth).
    np.testing.assert_allclose([t0[0], t1[0]], [0.0, 8 / 18])
    np.testing.assert_allclose(xy1[0], [2 + 3 * 8 / 18, 10.0])
    # (3, 6) towards a point behind the camera: leaves the image at (0, 9).
    np.testing.assert_allclose(xy0[1], [3.0, 6.0])
    np.testing.assert_allclose(xy1[1], [0.0, 9.0], atol=1e-9)
    assert 0 < t1[1] < 0.5
    # Entirely behind the camera: nothing.
    assert t0[2] == t1[2] == 0 and np.all(xy0[2] == xy1[2])
    # Inside: untouched.
    np.testing.assert_allclose([t0[3], t1[3]], [0.0, 1.0])
    np.testing.assert_allclose(np.linalg.norm(xy1[3] - xy0[3]), 6.0)


def test_stratified_positions():
    lengths = np.array([2.0, 0.0, 1.0, 5.0])
    index, s = cc.stratified_positions(lengths, np.full(8, 0.5))
    # Positions (i + 0.5) * 1: 0.5, 1.5 on piece 0; 2.5 on piece 2; 3.5 .. 7.5 on piece 3.
    np.testing.assert_array_equal(index, [0, 0, 2, 3, 3, 3, 3, 3])
    np.testing.assert_allclose(s, [0.25, 0.75, 0.5, 0.1, 0.3, 0.5, 0.7, 0.9])
    index, s = cc.stratified_positions(lengths, np.random.default_rng(1).uniform(size=10000))
    assert 1 not in index
    np.testing.assert_allclose(np.bincount(index, minlength=4) / 10000, lengths / 8, atol=1e-4)


def test_edge_normals_sides():
    a = np.array([[-1.0, 0.0, 2.0]])
    b = np.array([[1.0, 0.0, 2.0]])
    below = cc.edge_normals(a, b, np.array([[0.0, 1.0, 2.0]]), K)  # face towards +y (down)
    above = cc.edge_normals(a, b, np.array([[0.0, -1.0, -5.0]]), K)  # behind the camera, towards -y
    np.testing.assert_allclose(below, [[0.0, -1.0]], atol=1e-15)
    np.testing.assert_allclose(above, [[0.0, 1.0]], atol=1e-15)
    assert math.isclose(float(np.linalg.norm(below)), 1.0)


def test_merge_seams_pairs_coincident_boundary_edges():
    from rayd.core.camera import merge_seams

    # camera at the origin looking along +z; an edge on the plane x = 0 at depth 4..6
    a = np.array([0.0, -1.0, 5.0])
    b = np.array([0.0, 1.0, 5.0])
    left, right = np.array([-1.0, 0.0, 5.0]), np.array([1.0, 0.0, 5.0])
    behind = np.array([-1.0, 0.0, 6.0])
    # a flat seam: faces on opposite sides of the plane through the centre and the edge
    flat = merge_seams(np.stack([a, b]), np.stack([b, a]), np.stack([left, right]), np.array([True, True]))
    assert flat.tolist() == [False, False]
    # a fold: both faces on the same side -> one silhouette edge, the first of the pair
    fold = merge_seams(np.stack([a, b]), np.stack([b, a]), np.stack([left, behind]), np.array([True, True]))
    assert fold.tolist() == [True, False]
    # interior edges and lone boundary edges are untouched; three coincident edges too
    mixed = merge_seams(np.stack([a, a, a + 1]), np.stack([b, b, b + 1]), np.stack([left, right, left]),
                        np.array([False, True, True]))
    assert mixed.tolist() == [True, True, True]
    triple = merge_seams(np.stack([a, b, a]), np.stack([b, a, b]), np.stack([left, right, left]),
                         np.array([True, True, True]))
    assert triple.tolist() == [True, True, True]
    assert merge_seams(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0, bool)).shape == (0,)


def test_coincident_faces_rule():
    """Records of faces listed more than once (rayd.core.camera.coincident_faces): nothing to do
    without coincident faces; a record of two coincident faces is a boundary when its edge has no
    other face, else dropped; a record repeating an earlier one of its edge (same opposite pair)
    is dropped."""
    opp = np.array([[2, -1], [1, 3]])
    assert cc.coincident_faces(opp, lambda: pytest.fail("not read")) is None
    # edge (0,1) of shape 0 with faces A=(0,1,2), A'=(0,1,2), G=(0,1,3): records (A,A'), (A,G), (A',G);
    # edge (0,2) of shape 0 with faces A, A' only: one record (A,A'); the same edge of shape 1: a plain pair.
    v = np.array([[0, 1], [0, 1], [0, 1], [0, 2], [0, 2]])
    opp = np.array([[2, 2], [2, 3], [2, 3], [1, 1], [1, 4]])
    shape = np.array([0, 0, 0, 0, 1])
    drop, boundary = cc.coincident_faces(opp, lambda: (v, shape))
    assert drop.tolist() == [True, False, True, False, False]
    assert boundary.tolist() == [False, False, False, True, False]
