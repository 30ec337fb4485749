"""rayd.drjit, float64 scenes at the ends of the open hit interval: the reported t decides (DESIGN.md).

The search ranks candidates by float32 t; a face it finds just past ``tmin`` may be
reported (float64) at ``t <= tmin``. The face behind must still be found (also when
the ray's own ``ignore`` names another face) and ``shadow_test`` must not count it.
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")


def _planes(m, heights=(0.3, 1.0, 1.7)):
    """Parallel triangles at ``heights`` (the first perturbed below float32 resolution) and 2,000 rays up."""
    v = np.array([[[-5, -5, z], [5, -5, z], [0, 5, z]] for z in heights], dtype=np.float64).reshape(-1, 3)
    v[:3, 2] += [1e-9, 2e-9, -1e-9]
    faces = np.arange(len(v), dtype=np.uint32).reshape(-1, 3)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f64(v.T), m.Array3u(faces.T)))
    scene.build()
    rng = np.random.default_rng(1)
    o = rng.random((2000, 3)) * 0.2
    o[:, 2] = -1.0 - o[:, 2]
    d = np.array([0.1, 0.05, 1.0]) + rng.random((2000, 3)) * 0.1
    return scene, o, d, m.Array3f64(o.T), m.Array3f64(d.T)


def test_walk_on_past_the_face_at_tmin(m):
    """tmin = t of the first plane finds the middle one; with ignore = 1 the third, at t = (1.7 - o_z) / d_z."""
    scene, o, d, O, D = _planes(m)
    first = scene.intersect(rd.Ray(O, D))
    assert np.all(np.asarray(first.prim_id) == 0)
    middle = scene.intersect(rd.Ray(O, D, tmin=first.t))
    assert np.all(np.asarray(middle.prim_id) == 1)
    behind = scene.intersect(rd.Ray(O, D, tmin=first.t), ignore=1)
    assert np.all(np.asarray(behind.prim_id) == 2)
    np.testing.assert_allclose(np.asarray(behind.t), (1.7 - o[:, 2]) / d[:, 2], rtol=1e-13, atol=0)
    assert not np.any(np.asarray(scene.shadow_test(rd.Ray(O, D, middle.t, tmin=first.t))))


def test_shadow_test_up_to_the_surface_is_unblocked(m):
    """shadow_test(tmax = t of the first face) counts nothing; a little beyond, everything is blocked."""
    scene, _, _, O, D = _planes(m, heights=(0.3,))
    first = scene.intersect(rd.Ray(O, D)).t
    assert not np.any(np.asarray(scene.shadow_test(rd.Ray(O, D, first))))
    assert np.all(np.asarray(scene.shadow_test(rd.Ray(O, D, first * (1 + 1e-6)))))
    assert not np.any(np.asarray(scene.shadow_test(rd.Ray(O, D, first * (1 + 1e-6), tmin=first))))
