"""The closest-point search gives the same winners in every node layout and query order.

The pair-layout walk and the Morton query order (rayd.engine.closest_point) are speed
work: the winner per point must equal that of Warp's-layout walk in input order (the
walk before them) and its distance the float64 brute force, with ties, slivers,
disabled shapes, instances, ``max_distance``, ``active`` and broadcast points.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import closest_point as cp
from rayd.engine import triangles

N = 5000  # above cp.SORT_MIN: the Morton order is taken
assert N >= cp.SORT_MIN


def _soup(seed=0, count=300):
    rng = np.random.default_rng(seed)
    v = (rng.uniform(-1, 1, (count, 1, 3)) + 0.2 * rng.normal(size=(count, 3, 3))).reshape(-1, 3)
    v[:30] = v[30:60]  # duplicate faces: exact ties (smaller id wins)
    v[60:63] = [[0, 0, 0], [1, 1, 1], [2, 2, 2]]  # a collinear sliver
    return v, np.arange(3 * count).reshape(count, 3)


def _brute(points, tri):
    """(N,) float64 distance to the nearest triangle (dense samples would be inexact: use the region formula)."""
    from rayd.torch._closest_point import closest_on_triangles

    p = torch.as_tensor(points, dtype=torch.float64)
    t = torch.as_tensor(tri, dtype=torch.float64)
    best = torch.full((len(p),), math.inf, dtype=torch.float64)
    for k in range(len(t)):
        a, b, c = (t[k, j].expand(len(p), 3) for j in range(3))
        w = closest_on_triangles(p, a, b, c)
        q = w[:, :1] * a + w[:, 1:2] * b + w[:, 2:] * c
        best = torch.minimum(best, (p - q).norm(dim=-1))
    return best.numpy()


def _scene(v, f, device, layout, instance=False, disable=None):
    was = triangles.bvh_layout()
    triangles.set_bvh_layout(layout)
    try:
        scene = rt.Scene()
        mid = scene.add_mesh(rt.Mesh(torch.as_tensor(v, device=device), torch.as_tensor(f, device=device)))
        half = scene.add_mesh(rt.Mesh(torch.as_tensor(v[: len(v) // 2] + 0.5, device=device),
                                      torch.as_tensor(f[: len(f) // 2], device=device)))
        if instance:
            m = torch.eye(4, dtype=torch.float64, device=device)
            m[0, 0], m[1, 2], m[2, 1], m[:3, 3] = 1.5, -1.0, 1.0, torch.tensor([0.3, -0.2, 0.1])
            scene.add_instance(mid, m)
        if disable is not None:
            scene.set_shape_enabled([mid, half][disable], False)
        scene.build()
    finally:
        triangles.set_bvh_layout(was)
    return scene


def _winners(scene, pts, order, **kw):
    previous = cp.query_order()
    cp.set_query_order(order)
    try:
        out = scene.closest_point(pts, **kw)
    finally:
        cp.set_query_order(previous)
    return out.global_prim_id.cpu().numpy(), out.distance.cpu().numpy()


@pytest.mark.parametrize("case", ["plain", "instance", "disabled"])
def test_layouts_and_orders_agree(device, case):
    v, f = _soup(1)
    pts = torch.as_tensor(np.random.default_rng(2).uniform(-2, 2, (N, 3)), device=device)
    kw = {"instance": case == "instance", "disable": 1 if case == "disabled" else None}
    reference = _winners(_scene(v, f, device, "warp", **kw), pts, "input")
    for layout in ("warp", "pair"):
        scene = _scene(v, f, device, layout, **kw)
        for order in ("input", "morton"):
            gid, dist = _winners(scene, pts, order)
            np.testing.assert_array_equal(gid, reference[0], err_msg=f"{layout}/{order}")
            np.testing.assert_array_equal(dist, reference[1])
    if case == "plain":  # against the float64 brute force over both meshes
        tri = np.concatenate([v[f], (v[: len(v) // 2] + 0.5)[f[: len(f) // 2]]])
        np.testing.assert_allclose(reference[1][:400], _brute(pts[:400].cpu().numpy(), tri), rtol=1e-6, atol=1e-7)
        assert (reference[0] < 30).sum() > 0  # duplicate faces were winners: their ties went to the smaller id


def test_max_distance_active_and_broadcast(device):
    v, f = _soup(3)
    scene = _scene(v, f, device, "pair")
    rng = np.random.default_rng(4)
    pts = torch.as_tensor(rng.uniform(-3, 3, (N, 3)), device=device)
    pts[7] = float("nan")
    active = torch.as_tensor(rng.uniform(size=N) > 0.3, device=device)
    got = {order: _winners(scene, pts, order, active=active, max_distance=0.25) for order in ("input", "morton")}
    np.testing.assert_array_equal(got["morton"][0], got["input"][0])
    gid = got["morton"][0]
    assert gid[7] == -1 and (gid[~active.cpu().numpy()] == -1).all()
    assert (gid >= 0).any() and (gid == -1).sum() > (~active).sum().item()  # some beyond max_distance
    # one point broadcast over N rows (rayd.drjit's width-1 points): the engine call itself
    import warp as wp

    accel = scene._core.accel
    centre = scene._state.centre.cpu().numpy() if scene._state.centre is not None else 0.0
    one = wp.array((np.array([[0.1, 0.2, 0.3]]) - centre).astype(np.float32), dtype=wp.vec3, device=accel.device)
    flags = wp.ones(N, dtype=wp.uint8, device=accel.device)
    expected = _winners(scene, torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64, device=device), "input")[0][0]
    for order in ("input", "morton"):
        out = wp.empty(N, dtype=wp.int32, device=accel.device)
        previous = cp.query_order()
        cp.set_query_order(order)
        try:
            cp.closest_point_search(accel, one, flags, math.inf, out)
        finally:
            cp.set_query_order(previous)
        assert (out.numpy() == expected).all()


def test_winding_number_same_in_morton_order(device):
    """The hierarchical winding number per point does not depend on the query order (bit for bit)."""
    trimesh = pytest.importorskip("trimesh")
    sphere = trimesh.creation.icosphere(subdivisions=3)
    faces = np.asarray(sphere.faces)[np.asarray(sphere.vertices)[sphere.faces].mean(1)[:, 2] < 0.6]  # a hole
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(sphere.vertices, device=device), torch.as_tensor(faces, device=device)))
    scene.build()
    pts = torch.as_tensor(np.random.default_rng(6).uniform(-1.5, 1.5, (N, 3)), device=device)
    active = torch.as_tensor(np.random.default_rng(7).uniform(size=N) > 0.2, device=device)
    got = {}
    for order in ("input", "morton"):
        previous = cp.query_order()
        cp.set_query_order(order)
        try:
            got[order] = (scene.winding_number(pts, active), scene.contains(pts, active),
                          scene.signed_distance(pts, active))
        finally:
            cp.set_query_order(previous)
    for a, b in zip(got["input"], got["morton"]):
        assert torch.equal(a, b)
    w = got["morton"][0]
    assert ((w > 0.05) & (w < 0.95)).any() and (w[~active] == 0).all()  # fractional values near the hole
