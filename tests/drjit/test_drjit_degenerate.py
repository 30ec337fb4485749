"""rayd.drjit: degenerate (zero-area) triangles are never hit, in search and evaluation (issue 19, item 1)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

import reference  # noqa: E402
from drjit_testutil import rows, vec  # noqa: E402


def _scene(m, vertices, faces, double):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64 if double else m.Array3f, vertices), vec(m.Array3u, faces)))
    scene.build()
    return scene


@pytest.mark.parametrize("double", [False, True])
def test_issue_repro_collinear_triangle_is_a_miss(m, double):
    scene = _scene(m, [[-2, 3, -2], [-3, 4, -1], [-4, 5, 0]], [[0, 1, 2]], double)
    kind = m.Array3f64 if double else m.Array3f
    ray = rd.Ray(vec(kind, [[-5.0, -2, 3]]), vec(kind, [[2.5, 5.5, -4.5]]))
    hit = scene.intersect(ray)
    assert not rows(hit.is_valid()).any()
    assert np.isinf(rows(hit.t)).all() and (rows(hit.geo_n) == 0).all() and (rows(hit.p) == 0).all()
    assert not rows(scene.shadow_test(ray)).any()


@pytest.mark.parametrize("double", [False, True])
def test_random_degenerate_and_slivers_against_float64_brute_force(m, double):
    vertices, faces, degenerate, o, d = reference.degenerate_scene(0)
    scene = _scene(m, vertices, faces, double)
    kind = m.Array3f64 if double else m.Array3f
    ray = rd.Ray(vec(kind, o), vec(kind, d))
    hit = scene.intersect(ray)
    got = [rows(x).astype(np.float64) for x in (hit.t, hit.p, hit.geo_n)]
    hits, robust = reference.check_degenerate_hits(rows(hit.prim_id), *got, rows(scene.shadow_test(ray)), vertices,
                                                   faces, degenerate, o, d, tol=1e-9 if double else 1e-4)
    assert hits > 30 and robust > 20
