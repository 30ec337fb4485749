"""Float64 queries never report a crossing off its face, and lose no hit the float32 search can see.

A float64 query is searched on the float32 snapshot of the scene and re-evaluated on the float64
vertices. A grazing ray's re-evaluated crossing can then lie far off the face the search chose
(docs/known-limitations.md had it as "Hits off their face", float64, until session 23); the
re-evaluation now drops it by the engine's own rule (``rayd.core.hits.off_face``, as
``engine/watertight.py`` ``confirmed_face_t``) and searches on behind it (``rayd.torch._walk_on``).
Twin: ``tests/drjit/test_drjit_offface23_float64.py``. Rays and references: ``tests/offface23_reference.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree

from breakit22a_reference import along_edges, torus
from offface23_reference import (brute_force, float64_plane_crossing, grazing_rays_near_corner,
                                 tilted_face_and_wall)


@pytest.fixture(params=["embree", "warp"])
def accel(request):
    before = cpu_embree._enabled
    cpu_embree.set_enabled(request.param == "embree")
    yield request.param
    cpu_embree.set_enabled(before)


def _scene(v, f, device, dtype=torch.float64):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype, device=device), torch.tensor(f, device=device)))
    scene.build()
    return scene


def _twice(query, *args, **kwargs):
    """The second answer (the first query on a geometry runs on Warp, later ones on Embree when enabled)."""
    query(*args, **kwargs)
    return query(*args, **kwargs)


def _tilted(device):
    v, f, o, d, t_wall = tilted_face_and_wall()
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    return v, f, o, d, t_wall, _scene(v, f, device), ray


def test_the_tilted_face_is_off_face_in_float64_only():
    # The construction itself: the float32 snapshot puts the crossing inside face 0, float64 outside.
    v, f, o, d, _ = tilted_face_and_wall()
    t64, w64 = float64_plane_crossing(v[f[0]], o, d)
    t32, w32 = float64_plane_crossing(v[f[0]].astype(np.float32).astype(np.float64), o, d)
    assert w32.min() > 0.1 and abs(t32 - 2.3) < 1e-6
    assert w64.min() < -0.15 and abs(t64 - 1.6169) < 1e-4


def test_intersect_drops_the_off_face_winner_and_hits_the_wall(device, accel):
    v, f, o, d, t_wall, scene, ray = _tilted(device)
    hit = _twice(scene.intersect, ray)
    assert hit.prim_id.item() == 1, f"reported face {hit.prim_id.item()} at t = {hit.t.item()}, {hit.barycentric}"
    assert hit.t.item() == pytest.approx(t_wall, rel=1e-12)
    assert (hit.barycentric >= 0).all()
    # The float32 query of the same scene searches and evaluates the snapshot: face 0, inside, at t = 2.3.
    scene32 = _scene(v, f, device, torch.float32)
    hit32 = _twice(scene32.intersect, rt.Ray(torch.tensor(o, dtype=torch.float32, device=device),
                                             torch.tensor(d, dtype=torch.float32, device=device)))
    assert hit32.prim_id.item() == 0 and hit32.t.item() == pytest.approx(2.3, rel=1e-6)


def test_shadow_test_and_visible_skip_the_off_face_crossing(device, accel):
    _, _, o, d, t_wall, scene, ray = _tilted(device)
    for tmax, blocked in ((3.0, False), (t_wall - 1e-6, False), (t_wall + 1e-6, True)):
        short = rt.Ray(ray.o, ray.d, tmax)
        assert bool(_twice(scene.shadow_test, short)) is blocked, tmax
        assert _twice(scene.intersect, short).is_valid().item() is blocked, tmax
    start = ray.o
    assert bool(_twice(scene.visible, start, start + 3.0 * ray.d))
    assert not bool(_twice(scene.visible, start, start + 8.0 * ray.d))


def test_intersect_all_lists_only_the_wall(device, accel):
    _, _, _, _, t_wall, scene, ray = _tilted(device)
    hits = _twice(scene.intersect_all, ray, 4)
    assert hits.is_valid().tolist() == [True, False, False, False]
    assert hits.prim_id[0].item() == 1 and hits.t[0].item() == pytest.approx(t_wall, rel=1e-12)


def test_reflection_chain_never_reports_the_off_face_point(device, accel):
    # A float64 chain ends at a slot whose crossing lies off its face (docs/known-limitations.md,
    # "Float64 chains at an off-face winner": it does not search on behind it as intersect does).
    _, _, _, _, t_wall, scene, ray = _tilted(device)
    chain = _twice(scene.trace_reflections, ray, 2)
    valid = chain.is_valid()
    assert not (valid & (chain.prim_id == 0)).any(), chain.p
    if valid[0]:
        assert chain.prim_id[0].item() == 1 and chain.t[0].item() == pytest.approx(t_wall, rel=1e-12)


def test_grazing_hits_near_edges_and_a_vertex_still_hit(device, accel):
    v, o, d, t = grazing_rays_near_corner()
    scene = _scene(v, np.array([[0, 1, 2]]), device)
    hit = _twice(scene.intersect, rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device)))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(o)} grazing rays missed"
    torch.testing.assert_close(hit.t.cpu(), torch.tensor(t), rtol=1e-9, atol=0)
    assert (hit.barycentric > 0).all()
    assert _twice(scene.shadow_test, rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))).all()


def _terrain():
    """A float64 terrain (corners no float32 values): ``benchmarks/workloads.py``'s height field, scaled by 0.7."""
    x, y = np.meshgrid(np.linspace(-1, 1, 25), np.linspace(-1, 1, 25), indexing="ij")
    z = 0.15 * np.sin(3 * x) * np.cos(2 * y) + 0.05 * np.sin(7 * x + 5 * y)
    v = np.stack([x, y, z], -1).reshape(-1, 3) * 0.7
    k = np.arange(25 * 25).reshape(25, 25)
    a, b, c, e = k[:-1, :-1].ravel(), k[1:, :-1].ravel(), k[:-1, 1:].ravel(), k[1:, 1:].ravel()
    return v, np.concatenate([np.stack([a, b, e], 1), np.stack([a, e, c], 1)])


def _rays(v, f, seed):
    """Rays along random edges (in the planes of their faces up to rounding) and random rays through the box."""
    o1, d1 = along_edges(v, f, 1500, seed)
    rng = np.random.default_rng(seed)
    o2 = rng.uniform(-2, 2, (500, 3))
    d2 = rng.uniform(-0.8, 0.8, (500, 3)) - o2
    return np.concatenate([o1.astype(np.float64), o2]), np.concatenate([d1.astype(np.float64), d2])


@pytest.mark.parametrize("mesh", ["torus", "terrain"])
def test_parity_with_a_float64_brute_force(device, accel, mesh):
    # Each reported t lies between the closest crossing within float32 rounding of its face (t_loose) and
    # the closest crossing inside its face farther than that from its edges (t_strict): no invented hit
    # ahead of the surface, and no hit the float32 search can see lost (a miss only where t_strict = inf).
    v, f = torus() if mesh == "torus" else _terrain()
    o, d = _rays(v, f, 3)
    scene = _scene(v, f, device)
    hit = _twice(scene.intersect, rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device)))
    t = hit.t.cpu().numpy()
    loose, strict = brute_force(o, d, v, f)
    early = t < loose * (1 - 1e-9)
    late = t > strict * (1 + 1e-9)
    assert not early.any(), f"{int(early.sum())} hits ahead of every face, e.g. t {t[early][:3]} < {loose[early][:3]}"
    assert not late.any(), f"{int(late.sum())} hits lost, e.g. t {t[late][:3]} > {strict[late][:3]}"
    assert np.isfinite(t).sum() >= np.isfinite(strict).sum() > 100


def test_shadow_test_is_blocked_iff_intersect_hits_in_the_interval(device, accel):
    v, f = torus()
    o, d = _rays(v, f, 4)
    tmax = np.random.default_rng(4).uniform(0.0, 3.0, len(o))
    scene = _scene(v, f, device)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device), torch.tensor(tmax, device=device))
    blocked = _twice(scene.shadow_test, ray).cpu()
    valid = _twice(scene.intersect, ray).is_valid().cpu()
    assert (blocked == valid).all(), f"{int((blocked != valid).sum())} rays differ"
    assert 100 < int(valid.sum()) < len(o) - 100


def test_the_device_path_answers_as_the_cpu_shortcut(monkeypatch):
    # On CUDA (emulated here: ``_interval.host_ok`` False, as tests/torch/test_no_host_sync.py does) the rule
    # runs on every row and the walk-on on every ray, with no host read; on the CPU both run on the rows in
    # doubt only. The same winners, t, occlusion and listings, on the tilted face and along the torus' edges.
    from rayd.torch import _interval

    v, f, o, d, t_wall = tilted_face_and_wall()
    tv, tf = torus()
    to, td = along_edges(tv, tf, 600, 5)
    cases = [(_scene(v, f, "cpu"), torch.tensor(o)[None], torch.tensor(d)[None]),
             (_scene(tv, tf, "cpu"), torch.tensor(to, dtype=torch.float64), torch.tensor(td, dtype=torch.float64))]

    def answers():
        out = []
        for scene, oo, dd in cases:
            ray = rt.Ray(oo, dd, torch.full(oo.shape[:1], 2.5, dtype=torch.float64))
            hit, every = scene.intersect(ray), scene.intersect_all(ray, 4)
            out.append((hit.global_prim_id, hit.t, scene.shadow_test(ray), every.global_prim_id, every.t))
        return out

    host = answers()
    monkeypatch.setattr(_interval, "host_ok", lambda tensor: False)
    device = answers()
    for a, b in zip(host, device):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    assert host[0][0].tolist() == [-1] and not host[0][2].any()  # tmax 2.5: the wall (t = 7) lies beyond
