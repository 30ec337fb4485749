"""rayd.drjit: the open hit interval on reported values (issue 19, items 12 and 13)."""

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
def test_walk_through_box_advances_and_finds_both_faces(m, double):
    vertices, faces, o, d = reference.box_walk_rays()
    scene = _scene(m, vertices, faces, double)
    kind, Float = (m.Array3f64, m.Float64) if double else (m.Array3f, m.Float)
    n = o.shape[0]
    tmin = np.zeros(n)
    ignore = np.full(n, -1)
    hits = np.zeros(n, dtype=np.int64)
    for _ in range(4):
        ray = rd.Ray(vec(kind, o), vec(kind, d), tmin=Float(tmin))
        hit = scene.intersect(ray, ignore=m.Int(ignore))
        valid = rows(hit.is_valid())
        np.testing.assert_array_equal(rows(scene.shadow_test(ray, ignore=m.Int(ignore))), valid)
        t = rows(hit.t).astype(np.float64)
        assert (t[valid] > tmin[valid]).all()
        hits += valid
        tmin = np.where(valid, t, tmin)
        ignore = np.where(valid, rows(hit.global_prim_id), ignore)
    assert (hits == 2).all()
    np.testing.assert_allclose((o + tmin[:, None] * d)[:, 2], 0.5, atol=1e-5)


def test_far_from_origin_float64_scene_no_hit_behind_the_origin(m):
    vertices, faces, o, d = reference.far_scene()
    scene = _scene(m, vertices, faces, True)
    away = rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d))
    assert not rows(scene.intersect(away).is_valid()).any()
    assert not rows(scene.shadow_test(away)).any()
    towards = rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, -d))
    hit = scene.intersect(towards)
    assert rows(hit.is_valid()).all() and (rows(hit.prim_id) == 0).all()
    np.testing.assert_allclose(rows(hit.t), 0.01, rtol=0, atol=1e-9)
    assert rows(scene.shadow_test(towards)).all()


def test_far_from_origin_instance(m):
    vertices, faces, o, d = reference.far_scene(seed=1)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64, vertices - vertices[0]), vec(m.Array3u, faces)))
    scene.set_shape_enabled(0, False)
    matrix = np.eye(4)
    matrix[:3, 3] = vertices[0]
    scene.add_instance(0, m.Matrix4f64(matrix))
    scene.build()
    assert not rows(scene.shadow_test(rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d)))).any()
    hit = scene.intersect(rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, -d)))
    assert rows(hit.is_valid()).all()
    np.testing.assert_allclose(rows(hit.t), 0.01, rtol=0, atol=1e-9)
