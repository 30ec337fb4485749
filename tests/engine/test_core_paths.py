"""rayd.core.paths (backend-neutral specular paths): sequence rules, candidates, validity on host arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayd.core import paths


def test_check_sequences():
    seq = np.array([[0, 1, -1], [0, -1, 1], [5, -1, -1], [-2, -1, -1], [-1, -1, -1]])
    ok, used, ids = paths.check_sequences(seq, num_faces=5)
    assert ok.tolist() == [True, False, False, False, True]
    assert used[0].tolist() == [True, True, False] and ids[2].tolist() == [-1, -1, -1]


def test_candidate_sequences_dedup_prefixes():
    gid = np.array([[3, 1, -1], [3, 1, 2], [3, 4, -1], [-1, -1, -1]])
    num = np.array([2, 3, 2, 0])
    cand = paths.candidate_sequences(gid, num, line_of_sight=True)
    assert cand.tolist() == [[-1, -1, -1], [3, -1, -1], [3, 1, -1], [3, 4, -1], [3, 1, 2]]
    assert paths.candidate_sequences(gid[3:], num[3:], line_of_sight=False).shape == (0, 3)


def test_sphere_directions_unit_and_balanced():
    d = paths.sphere_directions(1000)
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, rtol=1e-14)
    assert np.abs(d.mean(0)).max() < 1e-2


def test_validate_mirror_plane_without_blockers():
    # One triangle in z = 0; no blockers (the search finds nothing).
    corners = np.array([[[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 0.0]]])
    src = np.array([[-0.5, 0.0, 1.0], [-0.5, 0.0, 1.0], [-0.5, 0.0, 1.0]])
    dst = np.array([[0.5, 0.0, 1.0], [5.0, 0.0, 1.0], [0.5, 0.0, -1.0]])
    seq = np.zeros((3, 1), dtype=np.int64)
    ok, used, _ = paths.check_sequences(seq, 1)
    calls = []

    def search(o, d, tmin, tmax, flag, skip):
        calls.append(int(flag.sum()))
        return np.full(o.shape[0], -1, dtype=np.int32)

    valid, length = paths.validate(src, dst, np.repeat(corners[None], 3, 0), seq, ok, used, search)
    assert valid.tolist() == [True, False, False]  # outside the triangle; opposite sides
    assert abs(length[0] - 2 * math.sqrt(1.25)) < 1e-14 and np.isinf(length[1:]).all()
    assert calls == [2, 2]  # two segments of the one valid path, searched from both ends
    # A blocker found by the search invalidates the path.
    valid, _ = paths.validate(src[:1], dst[:1], corners[None], seq[:1], ok[:1], used[:1],
                              lambda o, *a: np.full(o.shape[0], 7, dtype=np.int32))
    assert not valid[0]


def test_argument_rules():
    assert paths.check_bounces("f()", np.int64(3)) == 3
    with pytest.raises(ValueError, match=r"f\(\): 'max_bounces'"):
        paths.check_bounces("f()", 17)
    with pytest.raises(TypeError, match=r"f\(\): 'max_bounces'"):
        paths.check_bounces("f()", True)
    with pytest.raises(ValueError, match=r"f\(\): 'num_rays'"):
        paths.check_num_rays("f()", 0)
    assert paths.by_length(np.array([[[3.0, 1.0, np.inf, 2.0]]])).tolist() == [[[1, 3, 0, 2]]]
