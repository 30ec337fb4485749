"""Breaking what session 18 merged (helper breakit18b): the float64 walk-on's device path over broadcast
batches, the CPU Embree path's reuse of a sorted batch's order after the rays change, and float64
``count_intersections`` against ``intersect_all`` for rays grazing a mesh's boundary edge."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree
from rayd.torch import _interval
from reference import icosphere


def _grid(dtype, device="cpu"):
    """A flat 8 x 8 grid over [-1, 1]^2 at z = 0 (open: its border edges are silhouette edges)."""
    ax = np.linspace(-1.0, 1.0, 9)
    y, x = np.meshgrid(ax, ax, indexing="ij")
    v = np.stack([x.ravel(), y.ravel(), np.zeros(x.size)], -1)
    idx = np.arange(81).reshape(9, 9)
    a, b, c, e = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, c], -1), np.stack([b, e, c], -1)])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype, device=device), torch.tensor(f, device=device)))
    scene.build()
    return scene


def test_float64_count_equals_intersect_all_at_a_boundary_edge(device):
    """Rays through midpoints of the grid's border edges ((0.125, -1, 0), (-0.625, -1, 0)): the documented
    ``count_intersections == intersect_all(ray, K).is_valid().sum(-1)``; in float64 one ray counted 1 with
    no hit, the other 0 with a hit at t = 1 (float32: both agree)."""
    o = [[-0.6875127154304683, -0.4841688089952578, 0.5006538326278032],
         [0.7891553617060865, -1.0196624785829806, 1.4607031577700955]]
    d = [[0.8125127154304683, -0.5158311910047422, -0.5006538326278032],
         [-1.4141553617060865, 0.01966247858298069, -1.4607031577700955]]
    for dtype in (torch.float32, torch.float64):
        scene = _grid(dtype, device)
        ray = rt.Ray(torch.tensor(o, dtype=dtype, device=device), torch.tensor(d, dtype=dtype, device=device))
        hit, count = scene.intersect(ray), scene.count_intersections(ray)
        assert torch.equal(count, scene.intersect_all(ray, 8).is_valid().sum(-1).to(count.dtype)), dtype
        assert torch.equal(count > 0, hit.is_valid()) and torch.equal(scene.shadow_test(ray), hit.is_valid())


def _fields(x):
    if isinstance(x, torch.Tensor):
        return {"": x}
    return {k: getattr(x, k) for k in ("t", "global_prim_id", "p", "n", "barycentric") if hasattr(x, k)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_walk_on_device_path_of_broadcast_batches(dtype, monkeypatch):
    """o (1, W), d (H, 1), tmin (H, W) at the first hit (the float64 walk-on runs), tmax (W,), active (1, W),
    ignore (H, 1): every ray query equals the flattened batch's, on the CPU shortcut and the device path."""
    torch.manual_seed(3)
    v = torch.tensor([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=dtype)
    scene = rt.Scene()
    for z in (0.0, -1.0):  # two parallel quads: behind the first hit lies a second
        scene.add_mesh(rt.Mesh(v + torch.tensor([0.0, 0.0, z], dtype=dtype), torch.tensor([[0, 1, 2], [0, 2, 3]])))
    scene.build()
    h, w = 3, 4
    o = torch.rand(1, w, 3, dtype=dtype) * 0.8 + 0.1
    o[..., 2] = 2.0
    d = torch.randn(h, 1, 3, dtype=dtype) * 0.02
    d[..., 2] = -1.0
    oe, de = o.expand(h, w, 3).reshape(-1, 3), d.expand(h, w, 3).reshape(-1, 3)
    tmin = scene.intersect(rt.Ray(oe, de)).t.reshape(h, w)
    tmax = torch.full((w,), 10.0, dtype=dtype)
    active = torch.tensor([[True, False, True, True]])
    ignore = torch.tensor([[-1], [2], [-1]], dtype=torch.int32)
    flat = (rt.Ray(oe, de, tmax.expand(h, w).reshape(-1), tmin=tmin.reshape(-1)), active.expand(h, w).reshape(-1),
            ignore.expand(h, w).reshape(-1))

    def queries(ray, act, ign):
        return [scene.intersect(ray, act, ignore=ign), scene.shadow_test(ray, act, ignore=ign),
                scene.intersect_all(ray, 3, act, ignore=ign), scene.count_intersections(ray, act, ignore=ign),
                scene.nearest_edge(ray, act)]

    want = queries(*flat)
    assert bool((want[0].t.reshape(h, w) > tmin + 0.5).any())  # the walk-on found faces behind
    for host in (True, False):
        if not host:
            monkeypatch.setattr(_interval, "host_ok", lambda t: False)
        got = queries(rt.Ray(o, d, tmax, tmin=tmin), active, ignore)
        for g, wnt in zip(got, want):
            for name, value in _fields(g).items():
                ref = _fields(wnt)[name]
                value = value.reshape(ref.shape)
                assert torch.equal(value.nan_to_num(-7.0) if value.is_floating_point() else value,
                                   ref.nan_to_num(-7.0) if ref.is_floating_point() else ref), (host, name)


@pytest.mark.skipif(not cpu_embree.available(), reason="the CPU Embree path")
def test_sorted_batch_order_follows_every_change_of_the_rays(monkeypatch):
    """An incoherent batch of SORT_MIN_RAYS rays (sorted, its order kept from the second query on): after
    in-place edits (``.data``, a NumPy view, ``copy_``), a new tensor, a new batch and moved vertices, every
    answer equals a fresh scene's."""
    reused = []
    original = cpu_embree.reuse_order

    def counting(*args):
        out = original(*args)
        reused.append(out[0] is not None)
        return out

    monkeypatch.setattr(cpu_embree, "reuse_order", counting)
    rng = np.random.default_rng(7)
    v, f = icosphere(2)
    n = cpu_embree.SORT_MIN_RAYS + 1000

    def scene_of(vertices):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor(vertices, dtype=torch.float32), torch.tensor(f)), dynamic=True)
        scene.build()
        return scene

    def batch():
        return (torch.tensor(rng.uniform(-2, 2, (n, 3)), dtype=torch.float32),
                torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float32))

    def check(scene, o, d, vertices):
        fresh = scene_of(vertices)
        for _ in range(3):  # the first query sorts, the second keeps the order, the third reuses it
            got = scene.intersect(rt.Ray(o, d)).global_prim_id
        want = fresh.intersect(rt.Ray(o.clone(), d.clone())).global_prim_id
        assert torch.equal(got, want)
        assert torch.equal(scene.shadow_test(rt.Ray(o, d)), want >= 0)
        return got

    scene = scene_of(v)
    o, d = batch()
    first = check(scene, o, d, v)
    o2, d2 = batch()
    o.data.copy_(o2)  # in place, through .data
    d.data.copy_(d2)
    assert not torch.equal(check(scene, o, d, v), first)
    o.numpy()[:64] = 0.0  # through a NumPy view: the first rows now start inside the sphere
    got = check(scene, o, d, v)
    assert bool((got[:64] >= 0).all())
    d.numpy()[100] *= -1.0
    check(scene, o, d, v)
    o.copy_(o2)
    check(scene, o, d, v)
    check(scene, o.clone(), d.clone(), v)  # a new tensor with the same values
    o3, d3 = batch()
    check(scene, o3, d3, v)  # another batch of the same shape
    check(scene_of(1.3 * v), o3, d3, 1.3 * v)  # another scene with the same rays
    scene.update_mesh_vertices(0, torch.tensor(0.7 * v, dtype=torch.float32))
    scene.sync()
    check(scene, o3, d3, 0.7 * v)  # the same rays after moved vertices
    # The order is dropped after each change (the first query of every check sorts afresh). How often it was
    # reused is not asserted: alone and after tests/torch, tests/engine or tests/drjit it is reused (>= 8 times),
    # but after the whole suite of a clean-clone CI run it was not (session 18; not explained yet, and a
    # speed question only: every answer above is checked). test_cpu_embree_sorted.py spies the reuse itself.
    assert not reused or not all(reused)  # (empty where the Embree path did not run: no embreex)


@pytest.mark.parametrize("host", [True, False])
def test_float64_count_leaves_out_crossings_at_tmin(host, monkeypatch):
    """float64 rays from their first hit (``tmin`` = its ``t``, or the origin moved onto it), on vertices that
    float32 does not hold: ``count_intersections`` equals ``intersect_all(...).is_valid().sum(-1)`` and its
    ``> 0`` equals ``shadow_test`` (it counted the face at ``tmin``, by its float32 ``t``, for 182 and 342 of
    these 3000 rays), on the CPU shortcut and the device path."""
    v, f = icosphere(2)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v * 1.2345678901234 + 0.1, dtype=torch.float64), torch.tensor(f)))
    scene.build()
    rng = np.random.default_rng(0)
    o = torch.tensor(rng.uniform(-2, 2, (3000, 3)))
    d = torch.tensor(rng.normal(size=(3000, 3)))
    first = scene.intersect(rt.Ray(o, d))
    if not host:
        monkeypatch.setattr(_interval, "host_ok", lambda t: False)
    for ray in (rt.Ray(o, d, tmin=first.t.nan_to_num(0.0, 0.0, 0.0)),
                rt.Ray(first.p.where(first.is_valid().unsqueeze(-1), o), d)):
        count = scene.count_intersections(ray)
        assert torch.equal(count, scene.intersect_all(ray, 16).is_valid().sum(-1).to(count.dtype))
        assert torch.equal(count > 0, scene.shadow_test(ray))
        assert int(count.max()) >= 1
