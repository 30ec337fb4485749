"""float64 ``count_intersections`` of rayd.drjit against ``intersect_all`` and ``shadow_test`` (helper breakit18b):
rays grazing a mesh's boundary edge, and rays from their first hit."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402
from reference import icosphere  # noqa: E402


def _scene(m, v, f):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64, v), m.Array3i(f.T.astype(np.int32))))
    scene.build()
    return scene


def _check(m, scene, ray):
    count = rows(scene.count_intersections(ray))
    valid = rows(scene.intersect_all(ray, 16).is_valid()).reshape(-1, 16).sum(-1)
    np.testing.assert_array_equal(count, valid)
    np.testing.assert_array_equal(count > 0, rows(scene.shadow_test(ray)).astype(bool))
    np.testing.assert_array_equal(count > 0, rows(scene.intersect(ray).is_valid()).astype(bool))
    return count


def test_float64_count_at_a_boundary_edge(m):
    """Rays through midpoints of a flat grid's border edges: one counted 1 with no hit, one 0 with a hit."""
    ax = np.linspace(-1.0, 1.0, 9)
    y, x = np.meshgrid(ax, ax, indexing="ij")
    v = np.stack([x.ravel(), y.ravel(), np.zeros(x.size)], -1)
    idx = np.arange(81).reshape(9, 9)
    a, b, c, e = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, c], -1), np.stack([b, e, c], -1)])
    o = np.array([[-0.6875127154304683, -0.4841688089952578, 0.5006538326278032],
                  [0.7891553617060865, -1.0196624785829806, 1.4607031577700955]])
    d = np.array([[0.8125127154304683, -0.5158311910047422, -0.5006538326278032],
                  [-1.4141553617060865, 0.01966247858298069, -1.4607031577700955]])
    _check(m, _scene(m, v, f), rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d)))


def test_float64_count_leaves_out_crossings_at_tmin(m):
    """Rays from their first hit (``tmin`` = its ``t``, or the origin moved onto it), on vertices float32 does
    not hold: the face at ``tmin`` is not counted (it was, by its float32 ``t``, for about 6 % of them)."""
    v, f = icosphere(2)
    scene = _scene(m, v * 1.2345678901234 + 0.1, f)
    rng = np.random.default_rng(0)
    o, d = rng.uniform(-2, 2, (3000, 3)), rng.normal(size=(3000, 3))
    first = scene.intersect(rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d)))
    t = rows(first.t)
    hit = np.isfinite(t)
    tmin = np.where(hit, t, 0.0)
    p = np.where(hit[:, None], rows(first.p), o)
    for ray in (rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d), tmin=m.Float64(tmin)),
                rd.Ray(vec(m.Array3f64, p), vec(m.Array3f64, d))):
        assert _check(m, scene, ray).max() >= 1
