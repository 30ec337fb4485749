"""rayd.drjit.Scene.intersect: hand-derived hits, miss values, flags, broadcasting."""

from __future__ import annotations

import math

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402

TRI = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]


def _triangle_scene(m, *, z=0.0, double=False, **mesh_kwargs):
    Array3 = m.Array3f64 if double else m.Array3f
    v = vec(Array3, [[x, y, z] for x, y, _ in TRI])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2]), **mesh_kwargs))
    scene.build()
    return scene, v


def test_single_triangle_hit_values(m):
    scene, _ = _triangle_scene(m)
    # Ray straight down onto (0.25, 0.5): t = 2 for |d| = 1, t = 1 for |d| = 2.
    o = vec(m.Array3f, [[0.25, 0.5, 2.0], [0.25, 0.5, 2.0]])
    d = vec(m.Array3f, [[0.0, 0.0, -1.0], [0.0, 0.0, -2.0]])
    hit = scene.intersect(rd.Ray(o, d))
    np.testing.assert_allclose(rows(hit.t), [2.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(rows(hit.p), [[0.25, 0.5, 0.0]] * 2, atol=1e-6)
    np.testing.assert_allclose(rows(hit.barycentric), [[0.25, 0.25, 0.5]] * 2, atol=1e-6)
    np.testing.assert_allclose(rows(hit.geo_n), [[0.0, 0.0, 1.0]] * 2, atol=1e-6)
    np.testing.assert_allclose(rows(hit.n), [[0.0, 0.0, 1.0]] * 2, atol=1e-6)
    np.testing.assert_allclose(rows(hit.uv), [[0.25, 0.5]] * 2, atol=1e-6)
    assert rows(hit.prim_id).tolist() == [0, 0]
    assert rows(hit.shape_id).tolist() == [0, 0]
    assert rows(hit.global_prim_id).tolist() == [0, 0]
    assert rows(hit.is_valid()).tolist() == [True, True]
    assert hit.shape == (2,)
    assert type(hit.t) is m.Float and type(hit.p) is m.Array3f and type(hit.prim_id) is m.Int


def test_misses_have_documented_values(m):
    scene, _ = _triangle_scene(m)
    nan = math.nan
    o = vec(m.Array3f, [[2.0, 2.0, 1.0], [0.2, 0.2, 1.0], [nan, 0.2, 1.0], [0.2, 0.2, 1.0], [0.2, 0.2, -1.0]])
    d = vec(m.Array3f, [[0.0, 0.0, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    hit = scene.intersect(rd.Ray(o, d))
    assert np.all(np.isinf(rows(hit.t)))
    for name in ("prim_id", "shape_id", "global_prim_id"):
        assert rows(getattr(hit, name)).tolist() == [-1] * 5
    for name in ("p", "geo_n", "barycentric", "n", "uv"):
        value = rows(getattr(hit, name))
        assert not np.isnan(value).any() and np.all(value == 0), name
    assert not rows(hit.is_valid()).any()


def test_open_interval_and_inactive(m, plain):
    scene, _ = _triangle_scene(m)
    o = vec(m.Array3f, [[0.2, 0.2, 1.0]] * 5)
    d = m.Array3f(0, 0, -1)
    # t = 1 exactly: excluded by tmax = 1 and by tmin = 1; included by (0.5, 1.5).
    tmin = m.Float([0.0, 1.0, 0.5, 0.5, 0.0])
    tmax = m.Float([1.0, 2.0, 1.5, 1.5, math.inf])
    active = m.Bool([True, True, True, False, True])
    hit = scene.intersect(rd.Ray(o, d, tmax, tmin=tmin), active)
    assert rows(hit.is_valid()).tolist() == [False, False, True, False, True]
    np.testing.assert_allclose(rows(hit.t)[[2, 4]], [1.0, 1.0], rtol=1e-6)


def test_broadcast_one_origin_many_directions(m):
    scene, _ = _triangle_scene(m)
    o = m.Array3f(0.0, 0.0, 1.0)
    d = vec(m.Array3f, [[0.1, 0.1, -1.0], [0.3, 0.2, -1.0], [2.0, 0.0, -1.0]])
    hit = scene.intersect(rd.Ray(o, d, 10.0))
    assert hit.shape == (3,)
    assert rows(hit.is_valid()).tolist() == [True, True, False]
    np.testing.assert_allclose(rows(hit.p)[:2], [[0.1, 0.1, 0.0], [0.3, 0.2, 0.0]], atol=1e-6)


def test_empty_batch(m):
    scene, _ = _triangle_scene(m)
    hit = scene.intersect(rd.Ray(m.Array3f(), m.Array3f()))
    assert hit.shape == (0,)
    assert dr.width(hit.p) == 0


def test_two_meshes_ids_and_closest(m):
    # Mesh 0 at z = 0 (two faces), mesh 1 at z = 0.5 (one face) above it.
    v0 = vec(m.Array3f, [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]])
    f0 = m.Array3i([0, 1], [1, 3], [2, 2])
    v1 = vec(m.Array3f, [[0, 0, 0.5], [1, 0, 0.5], [0, 1, 0.5]])
    scene = rd.Scene()
    assert scene.add_mesh(rd.Mesh(v0, f0)) == 0
    assert scene.add_mesh(rd.Mesh(v1, m.Array3u([0], [1], [2]))) == 1
    scene.build()
    o = vec(m.Array3f, [[0.1, 0.1, 1.0], [0.8, 0.8, 1.0], [0.1, 0.1, 0.25]])
    hit = scene.intersect(rd.Ray(o, m.Array3f(0, 0, -1)))
    assert rows(hit.shape_id).tolist() == [1, 0, 0]
    assert rows(hit.prim_id).tolist() == [0, 1, 0]
    assert rows(hit.global_prim_id).tolist() == [2, 1, 0]
    np.testing.assert_allclose(rows(hit.t), [0.5, 1.0, 0.25], rtol=1e-6)
    assert scene.num_meshes == 2


def test_float64_outputs(m):
    scene, _ = _triangle_scene(m, double=True)
    hit = scene.intersect(rd.Ray(m.Array3f(0.25, 0.25, 1.0), m.Array3f(0, 0, -1)))
    assert type(hit.t) is m.Float64 and type(hit.p) is m.Array3f64
    np.testing.assert_allclose(rows(hit.t), [1.0], rtol=1e-12)


def test_plain_arrays_give_plain_outputs(plain):
    v = vec(plain.Array3f, TRI)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, plain.Array3u([0], [1], [2])))
    scene.build()
    hit = scene.intersect(rd.Ray(plain.Array3f(0.2, 0.2, 1), plain.Array3f(0, 0, -1)))
    assert type(hit.t) is plain.Float
    np.testing.assert_allclose(rows(hit.t), [1.0], rtol=1e-6)


def test_shading_normals_and_uv(m):
    normals = vec(m.Array3f, [[0, 0, 1], [1, 0, 1], [0, 1, 1]])
    uv = vec(m.Array2f, [[0.0, 0.0], [2.0, 0.0], [0.0, 4.0]])
    scene, _ = _triangle_scene(m, normals=normals, uv=uv)
    hit = scene.intersect(rd.Ray(m.Array3f(0.25, 0.5, 1.0), m.Array3f(0, 0, -1)))
    w = np.array([0.25, 0.25, 0.5])
    n = w @ np.array([[0, 0, 1], [1, 0, 1], [0, 1, 1]], dtype=float)
    np.testing.assert_allclose(rows(hit.n)[0], n / np.linalg.norm(n), atol=1e-6)
    np.testing.assert_allclose(rows(hit.uv)[0], [0.5, 2.0], atol=1e-6)
    np.testing.assert_allclose(rows(hit.geo_n)[0], [0, 0, 1], atol=1e-6)


def test_to_world(m):
    # Translate by (0, 0, 3) and scale x by 2: the triangle spans x in [0, 2] at z = 3.
    to_world = m.Matrix4f([[2, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 3], [0, 0, 0, 1]])
    scene, _ = _triangle_scene(m, to_world=to_world)
    o = vec(m.Array3f, [[1.5, 0.1, 5.0], [0.9, 0.9, 5.0]])
    hit = scene.intersect(rd.Ray(o, m.Array3f(0, 0, -1)))
    assert rows(hit.is_valid()).tolist() == [True, False]
    np.testing.assert_allclose(rows(hit.t)[0], 2.0, rtol=1e-6)
    np.testing.assert_allclose(rows(hit.p)[0], [1.5, 0.1, 3.0], atol=1e-6)


def test_flags_minimal(m):
    scene, _ = _triangle_scene(m)
    hit = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1)), flags=rd.RayFlags.Minimal)
    np.testing.assert_allclose(rows(hit.t), [1.0])
    with pytest.raises(AttributeError, match="RayFlags.Geometric"):
        hit.p
    with pytest.raises(AttributeError, match="RayFlags.ShadingN"):
        hit.n
    with pytest.raises(AttributeError, match="RayFlags.UV"):
        hit.uv
    hit = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1)), flags=rd.RayFlags.UV)
    np.testing.assert_allclose(rows(hit.uv), [[0.2, 0.2]], atol=1e-6)
    with pytest.raises(AttributeError, match="RayFlags.Geometric"):
        hit.geo_n


def test_dynamic_update_and_sync(m):
    v = vec(m.Array3f, TRI)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2])), dynamic=True)
    scene.build()
    ray = rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1))
    np.testing.assert_allclose(rows(scene.intersect(ray).t), [1.0], rtol=1e-6)
    # Update with a new array ...
    scene.update_mesh_vertices(0, v + m.Array3f(0, 0, 0.5))
    assert scene.has_pending_updates() and not scene.is_ready()
    scene.sync()
    assert scene.is_ready()
    np.testing.assert_allclose(rows(scene.intersect(ray).t), [0.5], rtol=1e-6)
    # ... and by an in-place change of the registered array, moving it out of reach.
    w = v + m.Array3f(0, 0, 0.5)
    scene.update_mesh_vertices(0, w)
    scene.sync()
    w.x += 5.0
    assert scene.has_pending_updates()
    scene.sync()
    assert not rows(scene.intersect(ray).is_valid()).any()


def test_repr_and_properties(m, backend):
    scene, _ = _triangle_scene(m)
    assert scene.backend == backend
    assert scene.device == ("cpu" if backend == "llvm" else scene.device)
    assert "ready" in repr(scene)
    assert "rayd.drjit.Ray" in repr(rd.Ray(m.Array3f(0, 0, 1), m.Array3f(0, 0, -1)))


def test_mesh_without_faces_keeps_numbering(m):
    scene = rd.Scene()
    assert scene.add_mesh(rd.Mesh(m.Array3f(), m.Array3u())) == 0
    assert scene.add_mesh(rd.Mesh(vec(m.Array3f, [[5, 5, 5]]), m.Array3u())) == 1
    assert scene.add_mesh(rd.Mesh(vec(m.Array3f, TRI), m.Array3u([0], [1], [2]))) == 2
    scene.build()
    hit = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1)))
    assert rows(hit.shape_id).tolist() == [2] and rows(hit.prim_id).tolist() == [0]
    assert rows(hit.global_prim_id).tolist() == [0]
    np.testing.assert_allclose(rows(hit.p), [[0.2, 0.2, 0.0]], atol=1e-6)
