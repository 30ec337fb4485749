"""The open hit interval on reported values (issue 19, items 12 and 13), and any hit agreeing with closest hit."""

from __future__ import annotations

import numpy as np
import pytest
import reference
import torch

import rayd.torch as rt


def _scene(vertices, faces, device, dtype):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(vertices, dtype=dtype, device=device), torch.tensor(faces, device=device)))
    scene.build()
    return scene


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_walk_through_box_advances_and_finds_both_faces(device, dtype):
    """tmin = previous t, ignore = previous face: every step strictly advances; exactly two hits per ray.

    Before the fix the neighbour across the diagonal came back at t == tmin (a walk that never advances).
    """
    vertices, faces, o, d = reference.box_walk_rays()
    scene = _scene(vertices, faces, device, dtype)
    o, d = (torch.tensor(x, dtype=dtype, device=device) for x in (o, d))
    n = o.shape[0]
    tmin = torch.zeros(n, dtype=dtype, device=device)
    ignore = torch.full((n,), -1, dtype=torch.int64, device=device)
    hits = torch.zeros(n, dtype=torch.int64, device=device)
    for _ in range(4):
        ray = rt.Ray(o, d, tmin=tmin)
        hit = scene.intersect(ray, ignore=ignore)
        valid = hit.is_valid()
        assert torch.equal(scene.shadow_test(ray, ignore=ignore), valid)
        assert (hit.t[valid] > tmin[valid]).all()
        hits += valid
        tmin = torch.where(valid, hit.t, tmin)
        ignore = torch.where(valid, hit.global_prim_id.long(), ignore)
    assert (hits == 2).all()
    # The second hit is the back face z = +0.5.
    torch.testing.assert_close((o + tmin[:, None] * d)[:, 2], torch.full((n,), 0.5, dtype=dtype, device=device),
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hits_never_outside_the_open_interval(device, dtype):
    """tmin set to each first hit's own t (no ignore): that face may not be reported again at t == tmin."""
    vertices, faces, o, d = reference.box_walk_rays(seed=1)
    scene = _scene(vertices, faces, device, dtype)
    o, d = (torch.tensor(x, dtype=dtype, device=device) for x in (o, d))
    first = scene.intersect(rt.Ray(o, d))
    ray = rt.Ray(o, d, tmin=first.t)
    second = scene.intersect(ray)
    valid = second.is_valid()
    assert (second.t[valid] > first.t[valid]).all()
    assert torch.equal(scene.shadow_test(ray), valid)
    ray = rt.Ray(o, d, tmax=first.t)  # nothing strictly before the first hit
    assert not scene.intersect(ray).is_valid().any()
    assert not scene.shadow_test(ray).any()
