"""rayd.drjit twin of ``tests/torch/test_review23_offface_instances.py``: float64 rays onto an instance whose
mesh lies far from its local origin lose true hits near shared edges (``rayd.core.hits.off_face`` measures
its tolerance in world coordinates; the instance was searched in local ones)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402

X = 1.0e4


def _grid(n=4):
    xs = np.linspace(0, 1, n + 1)
    v = np.array([[X + x, y, 0.0] for y in xs for x in xs])
    f = []
    for j in range(n):
        for i in range(n):
            a = j * (n + 1) + i
            f += [[a, a + 1, a + n + 2], [a, a + n + 2, a + n + 1]]
    return v, np.array(f, dtype=np.uint32)


def _rays(m):
    s = np.linspace(0.02, 0.98, 97)
    x = (s[:, None] + np.array([-1e-5, 1e-5])).reshape(-1)
    y = np.repeat(s, 2)
    o = np.stack([x, y, np.ones_like(x)], -1)
    d = np.tile([0.0, 0.0, -1.0], (len(x), 1))
    return rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d))


@pytest.mark.parametrize("kind", ["to_world", "instance"])
def test_float64_rays_onto_an_instance_near_its_edges_all_hit(m, kind):
    v, f = _grid()
    mat = np.eye(4)
    mat[0, 3] = -X
    scene = rd.Scene()
    if kind == "instance":
        scene.add_mesh(rd.Mesh(vec(m.Array3f64, v), m.Array3u(f.T)))
        scene.add_instance(0, m.Matrix4f64(mat.tolist()))
        scene.set_shape_enabled(0, False)
    else:
        scene.add_mesh(rd.Mesh(vec(m.Array3f64, v), m.Array3u(f.T), to_world=m.Matrix4f64(mat.tolist())))
    scene.build()
    hit = scene.intersect(_rays(m))
    valid = np.asarray(hit.is_valid())
    assert valid.all(), f"{int((~valid).sum())} of {valid.size} rays lost"
    np.testing.assert_allclose(np.asarray(hit.t), 1.0)
    assert np.asarray(scene.shadow_test(_rays(m))).all()
