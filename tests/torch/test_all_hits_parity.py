"""Parity of ``count_intersections`` on closed meshes (session 19, helper breakit19).

``count_intersections``'s docstring says that a ray through a closed mesh crosses it an
even number of times, wherever it passes. Rays exactly through vertices and edges that
cross the surface do (the first test, float64, through every vertex and edge point of a
rotated, offset icosphere, placed directly, by ``to_world`` and as an instance). A ray
that only *touches* a closed mesh at a vertex or along an edge tangentially counted one
crossing there, so the total was odd: the second test was a strict xfail until session 20
(helper limits20) made a touch count 0 (each merged hit counts the crossings of the
infinitesimally displaced ray; more in ``test_all_hits_touch.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from reference import icosphere

F64 = torch.float64
OCTA_V = [[1.0, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]]
OCTA_F = [[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]]


def _rotation(rng):
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


@pytest.mark.parametrize("placement", ["direct", "to_world", "instance"])
@pytest.mark.parametrize("offset", [0.0, 1000.3])
def test_rays_through_vertices_and_edges_of_a_closed_mesh_cross_twice(device, placement, offset):
    rng = np.random.default_rng(7)
    v, f = icosphere(2)
    r, c = _rotation(rng), np.array([offset, -0.5 * offset, 0.25 * offset]) + rng.normal(size=3) * 0.1
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = r, c
    world = v @ r.T + c
    scene = rt.Scene()
    faces = torch.tensor(f, device=device)
    if placement == "direct":
        scene.add_mesh(rt.Mesh(torch.tensor(world, dtype=F64, device=device), faces))
    elif placement == "to_world":
        scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=F64, device=device), faces,
                               to_world=torch.tensor(m, dtype=F64, device=device)))
    else:
        scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=F64, device=device), faces))
        scene.add_instance(0, torch.tensor(m, dtype=F64, device=device))
        scene.set_shape_enabled(0, False)
    scene.build()
    edges = np.unique(np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [0, 2]]]), axis=1), axis=0)
    frac = rng.uniform(0.05, 0.95, len(edges))[:, None]
    targets = np.concatenate([world, world[edges[:, 0]] * (1 - frac) + world[edges[:, 1]] * frac])
    outward = (targets - c) / np.linalg.norm(targets - c, axis=1, keepdims=True)
    u = rng.normal(size=targets.shape)
    u = u / np.linalg.norm(u, axis=1, keepdims=True) + 1.5 * outward
    o = targets + 3.0 * u / np.linalg.norm(u, axis=1, keepdims=True)
    ray = rt.Ray(torch.tensor(o, dtype=F64, device=device), torch.tensor(targets - o, dtype=F64, device=device))
    assert (scene.count_intersections(ray) == 2).all()
    assert (scene.intersect_all(ray, 4).is_valid().sum(-1) == 2).all()
    torch.testing.assert_close(scene.intersect(ray).t, torch.ones(len(o), dtype=F64, device=device))


def test_touching_a_closed_mesh_keeps_the_parity(device):
    v = np.array(OCTA_V)
    scene = rt.Scene()
    for shift in ([0.0, 0.0, 0.0], [3.0, 0.1, -0.95]):  # B's apex (3, 0.1, 0.05) on the ray below
        scene.add_mesh(rt.Mesh(torch.tensor(v + shift, dtype=F64, device=device),
                               torch.tensor(OCTA_F, device=device)))
    scene.build()
    o = torch.tensor([[-3.0, 0.1, 0.05], [0.5, -2.0, 0.5]], dtype=F64, device=device)
    d = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=F64, device=device)  # through A; along A's edge
    count = scene.count_intersections(rt.Ray(o, d))
    assert (count % 2 == 0).all(), count
