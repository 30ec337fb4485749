"""float64 scenes at the ends of the open hit interval: the reported t decides (DESIGN.md, hit interval).

The search ranks candidates by float32 t; a face it finds just past ``tmin`` may be
reported (float64) at ``t <= tmin``. The face behind must still be found, also when
the ray's own ``ignore`` names another face, and ``shadow_test`` must not count it.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt


def _planes(device, heights=(0.3, 1.0, 1.7)):
    """Parallel triangles at ``heights`` (the first perturbed below float32 resolution) and 2,000 rays up."""
    rows = [[[-5, -5, z], [5, -5, z], [0, 5, z]] for z in heights]
    vertices = torch.tensor(rows, dtype=torch.float64).reshape(-1, 3)
    vertices[:3, 2] += torch.tensor([1e-9, 2e-9, -1e-9], dtype=torch.float64)
    faces = torch.arange(vertices.shape[0], device=device).reshape(-1, 3)
    vertices = vertices.to(device).requires_grad_()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, faces))
    scene.build()
    g = torch.Generator().manual_seed(1)
    o = torch.rand(2000, 3, generator=g, dtype=torch.float64) * 0.2
    o[:, 2] = -1.0 - o[:, 2]
    d = torch.tensor([0.1, 0.05, 1.0], dtype=torch.float64) + torch.rand(2000, 3, generator=g, dtype=torch.float64) * 0.1
    return scene, vertices, o.to(device), d.to(device)


def test_walk_on_past_the_face_at_tmin_with_its_own_ignore(device):
    """tmin = t of the first plane, ignore = the middle plane: the third plane at t = (1.7 - o_z) / d_z."""
    scene, vertices, o, d = _planes(device)
    first = scene.intersect(rt.Ray(o, d))
    assert first.prim_id.eq(0).all()
    behind = scene.intersect(rt.Ray(o, d, tmin=first.t.detach()), ignore=1)
    assert behind.prim_id.eq(2).all()
    torch.testing.assert_close(behind.t, (1.7 - o[:, 2]) / d[:, 2], rtol=1e-13, atol=0)
    # The re-searched winners are evaluated like any other: dt/dz of the third plane's corners sums to 1 / d_z.
    (grad,) = torch.autograd.grad(behind.t.sum(), vertices)
    torch.testing.assert_close(grad[6:, 2].sum(), (1.0 / d[:, 2]).sum(), rtol=1e-10, atol=0)
    assert grad[:6].abs().max() == 0
    # Without ignore the middle plane is next; tmax = t of the middle plane leaves nothing in between.
    middle = scene.intersect(rt.Ray(o, d, tmin=first.t.detach()))
    assert middle.prim_id.eq(1).all()
    assert not scene.shadow_test(rt.Ray(o, d, middle.t.detach(), tmin=first.t.detach())).any()
    assert scene.shadow_test(rt.Ray(o, d, behind.t.detach() * 1.001, tmin=first.t.detach())).all()


def test_shadow_test_up_to_the_surface_is_unblocked(device):
    """shadow_test(tmax = t of the first face) counts nothing; a little beyond, everything is blocked."""
    scene, _, o, d = _planes(device, heights=(0.3,))
    first = scene.intersect(rt.Ray(o, d)).t.detach()
    assert not scene.shadow_test(rt.Ray(o, d, first)).any()
    assert scene.shadow_test(rt.Ray(o, d, first * (1 + 1e-6))).all()
    assert not scene.shadow_test(rt.Ray(o, d, first * (1 + 1e-6), tmin=first)).any()
