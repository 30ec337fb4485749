"""The CPU Embree path's sorted tracing (rayd.engine.cpu_embree.SORT_MIN_RAYS): an incoherent batch
is traced in a Morton order of its rays and its answers are put back in place; they equal the
batch traced in turn and the Warp path."""

from __future__ import annotations

import pytest
import torch
from edge_reference import bumpy_sphere

import rayd.torch as rt
from rayd.engine import cpu_embree

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")

N = 20_000


PERMUTED = []


def _hits(scene, ray, sort_min: int, embree: bool = True):
    was, real = cpu_embree.SORT_MIN_RAYS, cpu_embree._permuted
    cpu_embree._permuted = lambda *a: PERMUTED.append(1) or real(*a)
    cpu_embree.SORT_MIN_RAYS = sort_min
    cpu_embree.set_enabled(embree)
    try:
        scene.intersect(ray)  # the first query on a geometry is Warp's (WARM_QUERIES)
        return scene.intersect(ray), scene.shadow_test(ray)
    finally:
        cpu_embree.SORT_MIN_RAYS, cpu_embree._permuted = was, real
        cpu_embree.set_enabled(True)


def test_sorted_batch_equals_in_turn_and_warp():
    v, f = bumpy_sphere(48, 96)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    g = torch.Generator().manual_seed(5)
    o = 3.0 * torch.nn.functional.normalize(torch.randn(N, 3, generator=g), dim=1)
    d = torch.rand(N, 3, generator=g) - 0.5 - o  # towards the unit cube: incoherent packets
    d[::7] *= -1.0  # some rays away from the sphere: misses
    ray = rt.Ray(o, d)
    before = dict(cpu_embree.stats)
    sorted_hit, sorted_shadow = _hits(scene, ray, 16384)
    assert cpu_embree.stats["rays"] > before["rays"] and PERMUTED  # Embree answered, in sorted order
    PERMUTED.clear()
    turn_hit, turn_shadow = _hits(scene, ray, 1 << 40)
    assert not PERMUTED
    warp_hit, warp_shadow = _hits(scene, ray, 16384, embree=False)
    assert 0.5 < float(sorted_hit.is_valid().float().mean()) < 0.95
    for other in (turn_hit, warp_hit):
        assert torch.equal(sorted_hit.prim_id, other.prim_id)
        assert torch.equal(sorted_hit.t, other.t)
    assert torch.equal(sorted_shadow, turn_shadow) and torch.equal(sorted_shadow, warp_shadow)


def test_incoherence_sample():
    n = 1 << 15
    same = torch.tensor([[0.0, 0.0, -1.0]]).expand(n, 3).contiguous()
    spread = torch.nn.functional.normalize(torch.randn(n, 3, generator=torch.Generator().manual_seed(1)), dim=1)
    from rayd.torch import _convert

    assert not cpu_embree._incoherent(_convert.vec3_view(same), n)
    assert cpu_embree._incoherent(_convert.vec3_view(spread), n)


def test_reused_order_follows_every_change_of_the_rays():
    # A sorted batch's order and sorted rays are kept for later queries on the same ray arrays
    # (cpu_embree_order.reuse_order) only while they hold the same bytes: changes in place, through
    # .data or through a NumPy alias (no version counter moves) are all seen.
    v, f = bumpy_sphere(48, 96)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    g = torch.Generator().manual_seed(7)
    o = 3.0 * torch.nn.functional.normalize(torch.randn(N, 3, generator=g), dim=1)
    d = torch.rand(N, 3, generator=g) - 0.5 - o
    ray = rt.Ray(o, d)
    was = cpu_embree.SORT_MIN_RAYS
    cpu_embree.SORT_MIN_RAYS = 16384
    reused = []
    real = cpu_embree.reuse_order

    def spy(*a):
        found = real(*a)
        reused.append(found[0] is not None)
        return found

    cpu_embree.reuse_order = spy
    per_face, cpu_embree.RAYS_PER_FACE = cpu_embree.RAYS_PER_FACE, (float("inf"), float("inf"))
    try:
        scene.intersect(ray)  # Warp (the first query on the geometry, RAYS_PER_FACE off)
        first = [scene.intersect(ray) for _ in range(3)]
        assert reused == [False, False, True]  # kept at the second query, reused from the third
        for h in first[1:]:
            assert torch.equal(h.prim_id, first[0].prim_id) and torch.equal(h.t, first[0].t)
        mirrored = rt.Ray(o, d.clone())
        for change in ("in place", ".data", "numpy"):
            if change == "in place":
                o.mul_(1.001)
            elif change == ".data":
                o.data[:100] += 0.01
            else:
                o.numpy()[N // 2] += 0.01
            mirrored = rt.Ray(o.clone(), d.clone())  # new arrays: never a reused order
            hit = scene.intersect(ray)
            assert reused[-1] is False, change
            want = scene.intersect(mirrored)
            assert torch.equal(hit.prim_id, want.prim_id) and torch.equal(hit.t, want.t), change
    finally:
        cpu_embree.SORT_MIN_RAYS = was
        cpu_embree.reuse_order = real
        cpu_embree.RAYS_PER_FACE = per_face


def test_a_reused_layout_changes_no_answer():
    # The layout decisions (incoherence sample, image width) are kept while the rays' 64-row
    # fingerprint holds; they only order the rays: rows changed outside the fingerprint keep a
    # stale width, and the answers are still those of the rays as they are.
    v, f = bumpy_sphere(48, 96)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    w, h = 160, 128  # a camera's rows (tiles), 20,480 rays
    ys, xs = torch.meshgrid(torch.linspace(-0.9, 0.9, h), torch.linspace(-0.9, 0.9, w), indexing="ij")
    d = torch.stack([xs, ys, torch.full_like(xs, 1.5)], -1).reshape(-1, 3).contiguous()
    o = torch.tensor([0.0, 0.0, -3.0]).expand(w * h, 3).contiguous()
    ray = rt.Ray(o, d)
    n = w * h
    widths = []
    real = cpu_embree.image_width
    cpu_embree.image_width = lambda *a: widths.append(real(*a)) or widths[-1]
    try:
        scene.intersect(ray)  # Warp
        scene.intersect(ray)
        scene.intersect(ray)
        assert widths == [w]  # probed once, then reused
        sampled = set(torch.linspace(0, n - 1, 64).long().tolist())
        rows = torch.tensor([i for i in range(0, n, 3) if i not in sampled])
        g = torch.Generator().manual_seed(3)
        d[rows] = d[rows[torch.randperm(len(rows), generator=g)]]  # no longer an image
        hit = scene.intersect(ray)
        assert widths == [w]  # the stale width
        cpu_embree.set_enabled(False)
        want = scene.intersect(rt.Ray(o.clone(), d.clone()))
    finally:
        cpu_embree.image_width = real
        cpu_embree.set_enabled(True)
    assert torch.equal(hit.prim_id, want.prim_id) and torch.equal(hit.t, want.t)
