"""Session 21, helper breakit21a: ``visible`` and ``specular_paths`` on float64 segments decide like ``shadow_test``.

A float64 segment that ends on a face it meets at a grazing angle (1e-5 .. 1e-3 rad) is not
blocked by that face: its float64 crossing is at ``s = 0`` or ``1``, outside the open
interior ``(1e-4, 1 - 1e-4)``. The float32 search rounds the crossing into the interior
(error ~ ulp / angle); ``shadow_test`` and ``intersect`` re-decide on the float64 ``t``, and
``visible`` now does too (before: 297 of 2,000 such segments were reported blocked when
started from their free end, and ``visible`` was not symmetric). ``specular_paths`` tests its segments with closest-hit
searches from both ends; for float64 paths they now decide on the float64 ``t`` as
``intersect`` does (before: 257 of the 2,000 line-of-sight paths below were invalid).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.core.queries import VISIBILITY_EPSILON


def _grazing_segments(n: int = 2000, seed: int = 0):
    """A tilted triangle (plus a small one far away, so the search centre is not on it), points
    ``a`` inside it and ends ``e`` leaving it at 1e-5 .. 1e-3 rad; float64 NumPy."""
    rng = np.random.default_rng(seed)
    v = np.array([[-5.1, -4.7, -3.9], [6.3, -4.2, 1.7], [-4.4, 5.9, 2.8],
                  [0.3, 0.1, -7.3], [0.6, 0.2, -7.2], [0.4, 0.5, -7.35]])
    f = np.array([[0, 1, 2], [3, 4, 5]])
    normal = np.cross(v[1] - v[0], v[2] - v[0])
    normal /= np.linalg.norm(normal)
    t1 = np.cross(normal, [1.0, 0.0, 0.0])
    t1 /= np.linalg.norm(t1)
    t2 = np.cross(normal, t1)
    a = rng.dirichlet([2, 2, 2], n) @ v[:3]
    angle = rng.uniform(1e-5, 1e-3, n)[:, None]
    phi = rng.uniform(0, 2 * np.pi, n)[:, None]
    direction = np.cos(angle) * (np.cos(phi) * t1 + np.sin(phi) * t2) + np.sin(angle) * normal
    e = a + rng.uniform(1, 4, (n, 1)) * direction
    return v, f, a, e


def _float64_blocked(v, f, start, end):
    """Float64 reference: does a face cross ``start + s (end - start)`` for ``s`` in the open interior?"""
    d = end - start
    blocked = np.zeros(len(start), bool)
    for tri in f:
        v0, v1, v2 = v[tri]
        e1, e2 = v1 - v0, v2 - v0
        p = np.cross(d, e2)
        det = p @ e1
        s = start - v0
        with np.errstate(divide="ignore", invalid="ignore"):
            u = (s * p).sum(1) / det
            q = np.cross(s, e1)
            w = (d * q).sum(1) / det
            t = q @ e2 / det
        blocked |= (u >= 0) & (w >= 0) & (u + w <= 1) & (t > VISIBILITY_EPSILON) & (t < 1 - VISIBILITY_EPSILON)
    return blocked


def test_float64_segments_ending_on_a_grazed_face_are_visible_both_ways():
    v, f, a, e = _grazing_segments()
    assert not _float64_blocked(v, f, a, e).any() and not _float64_blocked(v, f, e, a).any()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v), torch.tensor(f)))
    scene.build()
    a_t, e_t = torch.tensor(a), torch.tensor(e)
    forward, backward = scene.visible(a_t, e_t), scene.visible(e_t, a_t)
    assert int((~forward).sum()) == 0 and int((~backward).sum()) == 0
    # the same decision as shadow_test over the segment's interior
    ray = rt.Ray(e_t, a_t - e_t, 1 - VISIBILITY_EPSILON, tmin=VISIBILITY_EPSILON)
    assert not bool(scene.shadow_test(ray).any())


def test_float64_visible_still_sees_real_blockers_and_masks():
    v, f, a, e = _grazing_segments(200, seed=1)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v), torch.tensor(f)))
    scene.build()
    normal = np.cross(v[1] - v[0], v[2] - v[0])
    normal /= np.linalg.norm(normal)
    # segments straight through the big triangle: blocked, and symmetric
    start, end = torch.tensor(a + 0.5 * normal), torch.tensor(a - 0.7 * normal)
    assert _float64_blocked(v, f, start.numpy(), end.numpy()).all()
    assert not bool(scene.visible(start, end).any()) and not bool(scene.visible(end, start).any())
    # the grazing ones with masks: inactive, zero-length and non-finite segments are not visible
    a_t, e_t = torch.tensor(a), torch.tensor(e)
    active = torch.arange(200) % 3 != 0
    got = scene.visible(e_t, a_t, active=active)
    assert torch.equal(got, active)
    e_bad = e_t.clone()
    e_bad[0, 1] = float("nan")
    e_bad[1] = a_t[1]
    got = scene.visible(a_t, e_bad)
    assert not bool(got[0]) and not bool(got[1]) and bool(got[2:].all())
    # broadcasting one start against many ends, and empty batches
    assert scene.visible(a_t[0], e_t[:5]).shape == (5,)
    assert scene.visible(torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, 3, dtype=torch.float64)).shape == (0,)


def test_float64_line_of_sight_paths_ending_on_a_grazed_face_are_valid():
    v, f, a, e = _grazing_segments()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v), torch.tensor(f)))
    scene.build()
    a_t, e_t = torch.tensor(a), torch.tensor(e)
    line_of_sight = torch.full((len(a), 1), -1)
    for source, target in ((e_t, a_t), (a_t, e_t)):
        paths = scene.specular_paths(source, target, line_of_sight)
        assert int(paths.valid.sum()) == len(a)
        np.testing.assert_allclose(paths.length.numpy(), np.linalg.norm(e - a, axis=1), rtol=1e-12)
    # a blocker in the middle still invalidates them (the small triangle moved onto each segment)
    normal = np.cross(v[1] - v[0], v[2] - v[0])
    normal /= np.linalg.norm(normal)
    start, end = torch.tensor(a[:50] + 0.5 * normal), torch.tensor(a[:50] - 0.7 * normal)
    assert not bool(scene.specular_paths(start, end, line_of_sight[:50]).valid.any())
