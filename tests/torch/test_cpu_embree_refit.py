"""The CPU Embree mirror in update loops (rayd.engine.cpu_embree.EmbreeMirror.ready / rebuild): a query on a
changed geometry with enough rays (RAYS_PER_FACE) runs on Embree at once, its scene refitted in place when the
topology, the sliver set and the frame allow, and rebuilt otherwise; every answer equals the Warp path's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from edge_reference import bumpy_sphere

import rayd.torch as rt
from rayd.engine import cpu_embree

pytestmark = pytest.mark.skipif(not cpu_embree.active(), reason="the CPU Embree path is not active")


def _warp_answer(v, f, ray):
    cpu_embree.set_enabled(False)
    try:
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, f))
        scene.build()
        return scene.intersect(ray), scene.shadow_test(ray)
    finally:
        cpu_embree.set_enabled(True)


def _rays(n, seed):
    g = torch.Generator().manual_seed(seed)
    o = 3.0 * torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    d = 0.8 * torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1) - o
    return rt.Ray(o, d)


def test_update_loop_refits_in_place_and_matches_warp(monkeypatch):
    events = []
    real_commit, real_update = cpu_embree._commit, cpu_embree.embree_api.Scene.update
    monkeypatch.setattr(cpu_embree, "_commit", lambda *a, **k: events.append("new") or real_commit(*a, **k))
    monkeypatch.setattr(cpu_embree.embree_api.Scene, "update", lambda self, v: events.append("refit") or real_update(self, v))
    real_attach, attached = cpu_embree.embree_api.Scene._attach, []
    monkeypatch.setattr(cpu_embree.embree_api.Scene, "_attach",
                        lambda self, gid, *a: attached.append((events[:1], gid)) or real_attach(self, gid, *a))
    v0, f = bumpy_sphere(24, 48)
    faces = f.shape[0]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v0.clone(), f), dynamic=True)
    scene.build()
    big = _rays(2 * faces, 3)  # above RAYS_PER_FACE of a new scene (1.5) and of a refit (0.5)
    small = _rays(faces // 8, 4)  # below both
    m = None
    g = torch.Generator().manual_seed(9)
    seen = []  # per step: how the Embree scene was brought up to date
    for step in range(8):
        if step == 0:
            v = v0
        elif step == 5:  # the whole mesh 3 x larger: beyond the frame's R, a new scene in a new frame
            v = 3.0 * v0
        elif step == 6:  # back to 1 x: below R / 2 of that frame, a new frame again
            v = v0.clone()
        else:  # small motions: refits in place
            v = v0 + 0.01 * torch.randn(v0.shape, generator=g)
        if step:
            scene.update_mesh_vertices(0, v)
            scene.sync()
        events.clear()
        before = cpu_embree.stats["rays"]
        if step == 3:  # a small batch first: Warp's (WARM_QUERIES), the scene stays stale
            hit = scene.intersect(small)
            assert cpu_embree.stats["rays"] == before
            want = _warp_answer(v, f, small)[0]
            assert torch.equal(hit.prim_id, want.prim_id) and torch.equal(hit.t, want.t)
        hit, blocked = scene.intersect(big), scene.shadow_test(big)
        assert cpu_embree.stats["rays"] >= before + big.o.shape[0]  # Embree at once
        want, want_blocked = _warp_answer(v, f, big)
        bad = (hit.prim_id != want.prim_id).nonzero().flatten()
        assert not bad.numel(), (step, events, bad[:5].tolist(), hit.prim_id[bad[:5]].tolist(), want.prim_id[bad[:5]].tolist(), hit.t[bad[:5]].tolist(), want.t[bad[:5]].tolist())
        assert torch.allclose(hit.t, want.t, rtol=0, atol=0) and torch.equal(blocked, want_blocked)
        seen.append(events[:1])
    # build(); the first change: a frame with room (FRAME_SLACK); then refits, except where the frame no
    # longer fits (steps 5 and 6)
    assert seen == [["new"], ["new"], ["refit"], ["refit"], ["refit"], ["new"], ["new"], ["refit"]]
    # noise makes a sliver near a pole at some step: its rectangle (geomID 1) attached within a refit
    assert (["refit"], 1) in attached, "no sliver rectangle appeared in a refit (that path is not tested)"
    assert (hit.prim_id >= 0).float().mean() > 0.2  # the rays hit the sphere


def test_small_batches_stay_on_warp_until_the_second_query():
    v, f = bumpy_sphere(24, 48)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    small = _rays(f.shape[0] // 8, 5)
    before = cpu_embree.stats["rays"]
    first = scene.intersect(small)
    assert cpu_embree.stats["rays"] == before  # Warp
    second = scene.intersect(small)
    assert cpu_embree.stats["rays"] == before + small.o.shape[0]  # Embree (WARM_QUERIES = 1)
    assert torch.equal(first.prim_id, second.prim_id) and torch.equal(first.t, second.t)


def test_no_refit_in_place_while_a_query_traces_the_scene(monkeypatch):
    # Compiled torch queries call the engine without ENGINE_LOCK: a query of another thread may be tracing the
    # Embree scene when an update is due. Then a new scene is made (the query keeps the one it took); the refit
    # in place waits for no query in flight.
    events = []
    real_commit, real_update, real_rebuild = cpu_embree._commit, cpu_embree.embree_api.Scene.update, cpu_embree.EmbreeMirror.rebuild
    monkeypatch.setattr(cpu_embree, "_commit", lambda *a, **k: events.append("new") or real_commit(*a, **k))
    monkeypatch.setattr(cpu_embree.embree_api.Scene, "update", lambda self, v: events.append("refit") or real_update(self, v))
    busy, mirrors = {"on": False}, []

    def rebuild(self):
        mirrors.append(self)
        if busy["on"]:
            self.tracing += 1  # as if another thread's search() were running
        try:
            real_rebuild(self)
        finally:
            if busy["on"]:
                self.tracing -= 1
    monkeypatch.setattr(cpu_embree.EmbreeMirror, "rebuild", rebuild)
    v0, f = bumpy_sphere(24, 48)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v0.clone(), f), dynamic=True)
    scene.build()
    big = _rays(2 * f.shape[0], 3)
    g = torch.Generator().manual_seed(2)
    seen = []
    for step, traced in enumerate((False, False, False, True, False)):
        v = v0 if step == 0 else v0 + 0.003 * torch.randn(v0.shape, generator=g)
        if step:
            scene.update_mesh_vertices(0, v)
            scene.sync()
        events.clear()
        busy["on"] = traced
        hit = scene.intersect(big)
        seen.append(events[:1])
        want = _warp_answer(v, f, big)[0]
        assert torch.equal(hit.prim_id, want.prim_id) and torch.equal(hit.t, want.t)
    assert seen == [["new"], ["new"], ["refit"], ["new"], ["refit"]]
    assert mirrors and not any(m.tracing for m in mirrors)  # every search() counted itself out
