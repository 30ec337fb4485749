"""rayd.drjit: float64 rays exactly through the vertices and edges of a closed mesh cross it twice
(session 19, helper breakit19; the rayd.torch twin, with the strict xfail on tangential touches, is
``tests/torch/test_all_hits_parity.py``)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows  # noqa: E402
from reference import icosphere  # noqa: E402


def _a3(m, a):
    return m.Array3f64(*(np.ascontiguousarray(a[:, k]) for k in range(3)))


@pytest.mark.parametrize("placement", ["direct", "to_world", "instance"])
@pytest.mark.parametrize("offset", [0.0, 1000.3])
def test_rays_through_vertices_and_edges_of_a_closed_mesh_cross_twice(m, placement, offset):
    rng = np.random.default_rng(7)
    v, f = icosphere(2)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    r = q * np.sign(np.linalg.det(q))
    c = np.array([offset, -0.5 * offset, 0.25 * offset]) + rng.normal(size=3) * 0.1
    mat = np.eye(4)
    mat[:3, :3], mat[:3, 3] = r, c
    world = v @ r.T + c
    faces = m.Array3u(*(f[:, k].astype(np.uint32) for k in range(3)))
    scene = rd.Scene()
    if placement == "direct":
        scene.add_mesh(rd.Mesh(_a3(m, world), faces))
    elif placement == "to_world":
        scene.add_mesh(rd.Mesh(_a3(m, v), faces, to_world=m.Matrix4f64(mat)))
    else:
        scene.add_mesh(rd.Mesh(_a3(m, v), faces))
        scene.add_instance(0, m.Matrix4f64(mat))
        scene.set_shape_enabled(0, False)
    scene.build()
    edges = np.unique(np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [0, 2]]]), axis=1), axis=0)
    frac = rng.uniform(0.05, 0.95, len(edges))[:, None]
    targets = np.concatenate([world, world[edges[:, 0]] * (1 - frac) + world[edges[:, 1]] * frac])
    outward = (targets - c) / np.linalg.norm(targets - c, axis=1, keepdims=True)
    u = rng.normal(size=targets.shape)
    u = u / np.linalg.norm(u, axis=1, keepdims=True) + 1.5 * outward
    o = targets + 3.0 * u / np.linalg.norm(u, axis=1, keepdims=True)
    ray = rd.Ray(_a3(m, o), _a3(m, targets - o))
    assert (np.asarray(scene.count_intersections(ray)) == 2).all()
    valid = rows(scene.intersect_all(ray, 4).is_valid()).reshape(len(o), 4)  # (slots of a ray side by side)
    assert (valid.sum(-1) == 2).all()
    np.testing.assert_allclose(np.asarray(scene.intersect(ray).t), 1.0, rtol=1e-9)
