"""The Embree CPU accelerator (rayd.engine.cpu_embree, default where embreex imports): parity
with the Warp path and the float64 reference, the interval/ignore/enable/degenerate fall-backs,
refit, fallback without embreex, and the watertightness (the grown non-robust scene; robust mode's
vertex caps)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import reference
import torch
import warp as wp

import rayd.torch as rt
from rayd.engine import cpu_embree, embree_api

needs_embreex = pytest.mark.skipif(not cpu_embree.available(), reason="embreex not installed")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def embree():
    """Embree path on for the test (restored after)."""
    was, warm = cpu_embree.active(), cpu_embree.WARM_QUERIES
    cpu_embree.set_enabled(True)
    cpu_embree.WARM_QUERIES = 0  # Embree from the first query
    before = cpu_embree.stats["rays"]
    yield
    cpu_embree.set_enabled(was)
    cpu_embree.WARM_QUERIES = warm
    assert cpu_embree.stats["rays"] > before, "the Embree path was not taken"


def _both(scene_fn, query):
    """``query(scene)`` with Embree off, then on (same scene built twice)."""
    was, warm = cpu_embree.active(), cpu_embree.WARM_QUERIES
    try:
        cpu_embree.set_enabled(False)
        warp = query(scene_fn())
        cpu_embree.set_enabled(True)
        cpu_embree.WARM_QUERIES = 0
        before = cpu_embree.stats["rays"]
        emb = query(scene_fn())
        assert cpu_embree.stats["rays"] > before, "the Embree path was not taken"
    finally:
        cpu_embree.set_enabled(was)
        cpu_embree.WARM_QUERIES = warm
    return warp, emb


def _scene(vertices, faces, dynamic=False):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(vertices), torch.as_tensor(faces)), dynamic=dynamic)
    scene.build()
    return scene


def _random_scene(seed, n=300, degenerate=20):
    rng = np.random.default_rng(seed)
    centre = rng.uniform(-1, 1, (n, 1, 3)) + np.array([100.0, -50.0, 20.0])  # off-origin: centre-relative path
    tris = centre + 0.3 * rng.normal(size=(n, 3, 3))
    tris[:degenerate, 2] = tris[:degenerate, 0] + 0.7 * (tris[:degenerate, 1] - tris[:degenerate, 0])
    tris[degenerate : 2 * degenerate, 1] = tris[degenerate : 2 * degenerate, 0]
    return tris.reshape(-1, 3).astype(np.float32), np.arange(3 * n, dtype=np.int64).reshape(n, 3)


def _rays(seed, n, vertices):
    rng = np.random.default_rng(seed + 1)
    lo, hi = vertices.min(0), vertices.max(0)
    target = rng.uniform(lo, hi, (n, 3))
    o = target + rng.normal(size=(n, 3)) * 3.0  # from every side: back faces too
    return o.astype(np.float32), (target - o).astype(np.float32)


@needs_embreex
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closest_and_any_hit_parity_with_warp_and_reference(seed):
    v, f = _random_scene(seed)
    o, d = _rays(seed, 4000, v)
    ray = rt.Ray(torch.tensor(o), torch.tensor(d))
    warp, emb = _both(lambda: _scene(v, f), lambda s: (s.intersect(ray).prim_id, s.shadow_test(ray)))
    ref = reference.closest_hit(o.astype(np.float64), d.astype(np.float64), v.astype(np.float64), f)
    near_edge = ref["barycentric"].min(1) < 1e-4
    for prim in (warp[0].numpy(), emb[0].numpy()):
        assert ((prim == ref["prim"]) | near_edge).all()
    assert (ref["prim"] >= 0).mean() > 0.3
    assert not np.isin(emb[0].numpy(), np.arange(40)).any(), "degenerate triangles are misses"
    assert torch.equal(emb[1], warp[1])
    torch.testing.assert_close(emb[1], torch.as_tensor(ref["prim"] >= 0))


@needs_embreex
def test_large_batches_split_over_cores_match_warp():
    # Above runtime.CPU_SPLIT_MIN rows the prepare/finish kernels run in chunks (from the 2nd launch).
    v, f = _random_scene(7, n=2000, degenerate=10)
    o, d = _rays(7, 30000, v)
    ray = rt.Ray(torch.tensor(o), torch.tensor(d), torch.tensor(np.random.default_rng(0).uniform(1, 3, 30000)).float(),
                 tmin=0.1)
    warp, emb = _both(lambda: _scene(v, f), lambda s: [s.intersect(ray).prim_id for _ in range(2)])
    assert torch.equal(emb[0], emb[1])
    same = emb[1] == warp[1]
    assert same.float().mean() > 0.999, int((~same).sum())
    assert (warp[1] >= 0).float().mean() > 0.2


@needs_embreex
def test_tmin_tmax_open_interval_at_the_hit_distance():
    # One triangle z = 0 seen from z = 2: the hit is at exactly t = 2 (float32-exact).
    v = np.array([[-1, -1, 0], [3, -1, 0], [-1, 3, 0]], np.float32)
    f = np.array([[0, 1, 2]])
    n = 9
    o = torch.tensor([[0.25, 0.25, 2.0]]).expand(n, 3)
    d = torch.tensor([0.0, 0.0, -1.0]).expand(n, 3)
    eps = torch.tensor([-1e-3, -1e-6, 0.0, 1e-6, 1e-3])
    tmax = torch.cat((2.0 + eps, torch.full((4,), torch.inf)))
    tmin = torch.cat((torch.zeros(5), 2.0 + eps[[0, 1, 3, 4]]))
    ray = rt.Ray(o, d, tmax, tmin=tmin)
    warp, emb = _both(lambda: _scene(v, f), lambda s: s.intersect(ray).prim_id)
    expect = torch.tensor([-1, -1, -1, 0, 0, 0, 0, -1, -1], dtype=torch.int32)
    assert torch.equal(warp, expect)
    assert torch.equal(emb, expect)


@needs_embreex
def test_ignore_and_disabled_mesh_fall_back_to_warp(embree):
    # Two parallel squares z = 0 (mesh 0) and z = -1 (mesh 1), rays straight down.
    square = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float32)
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(square), faces))
    scene.add_mesh(rt.Mesh(torch.tensor(square - np.float32([0, 0, 1])), faces))
    scene.build()
    o = torch.tensor([[0.5, -0.2, 1.0], [-0.5, 0.3, 1.0]])
    ray = rt.Ray(o, torch.tensor([0.0, 0.0, -1.0]))
    assert scene.intersect(ray).global_prim_id.tolist() == [0, 1]
    hit = scene.intersect(ray, ignore=torch.tensor([0, 0]))
    assert hit.global_prim_id.tolist() == [2, 1]
    torch.testing.assert_close(hit.t, torch.tensor([2.0, 1.0]))
    scene.set_shape_enabled(0, False)
    scene.sync()
    assert scene.intersect(ray).global_prim_id.tolist() == [2, 3]
    assert scene.shadow_test(ray, ignore=torch.tensor([2, -1])).tolist() == [False, True]
    inactive = scene.intersect(ray, active=torch.tensor([False, True]))
    assert inactive.global_prim_id.tolist() == [-1, 3]


@needs_embreex
def test_refit_keeps_the_embree_scene_in_sync(embree):
    v = torch.tensor([[-1, -1, 0], [3, -1, 0], [-1, 3, 0]], dtype=torch.float32)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]])), dynamic=True)
    scene.build()
    ray = rt.Ray(torch.tensor([[0.25, 0.25, 2.0], [5.25, 0.25, 2.0]]), torch.tensor([0.0, 0.0, -1.0]))
    assert scene.intersect(ray).prim_id.tolist() == [0, -1]
    scene.update_mesh_vertices(0, v + torch.tensor([5.0, 0.0, 0.5]))
    scene.sync()
    hit = scene.intersect(ray)
    assert hit.prim_id.tolist() == [-1, 0]
    assert hit.t[1].item() == pytest.approx(1.5, abs=1e-6)


@needs_embreex
@pytest.mark.parametrize("refit", [False, True])
def test_the_second_query_on_a_geometry_builds_embree(embree, refit, monkeypatch):
    # WARM_QUERIES = 1 (the default) for small batches (RAYS_PER_FACE off here): after build() or a
    # refit, one query on Warp, then Embree (built or refitted then).
    cpu_embree.WARM_QUERIES = 1
    monkeypatch.setattr(cpu_embree, "RAYS_PER_FACE", (float("inf"), float("inf")))
    v = torch.tensor([[-1, -1, 0], [3, -1, 0], [-1, 3, 0]], dtype=torch.float32)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]])), dynamic=True)
    scene.build()
    ray = rt.Ray(torch.tensor([[0.25, 0.25, 2.0], [5.25, 0.25, 2.0]]), torch.tensor([0.0, 0.0, -1.0]))
    expect, t = [0, -1], 2.0
    if refit:
        scene.intersect(ray)
        scene.intersect(ray)
        scene.update_mesh_vertices(0, v + torch.tensor([5.0, 0.0, 0.5]))
        scene.sync()
        expect, t = [-1, 0], 1.5
    before = cpu_embree.stats["rays"]
    for embree_rays in (0, 2, 4):
        hit = scene.intersect(ray)
        assert cpu_embree.stats["rays"] == before + embree_rays
        assert hit.prim_id.tolist() == expect
        assert hit.t[expect.index(0)].item() == pytest.approx(t, abs=1e-6)


@needs_embreex
def test_concurrent_queries_on_one_scene(embree):
    # Queries from several threads at once (scratch buffers are per query): the sequential answers.
    import concurrent.futures

    v, f = _random_scene(3, n=1000, degenerate=0)
    scene = _scene(v, f)
    rays = [rt.Ray(*map(torch.tensor, _rays(s, 20000, v))) for s in range(4)]
    expect = [scene.intersect(r).prim_id for r in rays]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda r: scene.intersect(r).prim_id, rays))
            for g, e in zip(got, expect):
                assert torch.equal(g, e)


@needs_embreex
def test_slivers_answer_as_on_the_warp_path():
    # A sliver (altitude 1e-6 of a unit edge) beside a normal triangle; rays straight down and
    # oblique through and around the sliver: the Embree path's answers are the Warp path's
    # (near the normal triangle's boundary edge the two may differ within rounding: no rays there).
    v = np.array([[0, 0, 0], [1, 0, 0], [0.5, 1e-6, 0], [2, 0, 0], [3, 0, 0], [2, 1, 0]], np.float32)
    f = np.array([[0, 1, 2], [3, 4, 5]])
    rng = np.random.default_rng(5)
    n = 4000
    target = np.stack([rng.uniform(-0.1, 1.1, n), rng.uniform(-3e-6, 4e-6, n), np.zeros(n)], 1)
    d = np.concatenate([np.tile([[0.0, 0.0, -1.0]], (n // 2, 1)), rng.normal(size=(n - n // 2, 3)) * [1, 1, 0.2] - [0, 0, 1]])
    o = target - d
    ray = rt.Ray(torch.tensor(o, dtype=torch.float32), torch.tensor(d, dtype=torch.float32))
    warp, emb = _both(lambda: _scene(v, f), lambda s: (s.intersect(ray).prim_id, s.shadow_test(ray)))
    assert torch.equal(emb[0], warp[0]) and torch.equal(emb[1], warp[1])
    assert (warp[0] == 0).sum() > 10  # the sliver is hit


@needs_embreex
def test_gradients_equal_on_both_paths():
    vertices, faces = reference.icosphere(2)

    def run(scene_fn):
        v = torch.tensor(vertices, dtype=torch.float64, requires_grad=True)
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, torch.as_tensor(faces)))
        scene.build()
        rng = np.random.default_rng(3)
        o = torch.tensor(rng.uniform(-0.3, 0.3, (500, 3)))
        d = torch.tensor(rng.normal(size=(500, 3)))
        scene.intersect(rt.Ray(o, d)).t.sum().backward()
        return v.grad

    warp, emb = _both(lambda: None, run)
    torch.testing.assert_close(emb, warp, rtol=0, atol=0)
    assert warp.abs().sum() > 0


@needs_embreex
def test_drjit_llvm_frontend_parity():
    dr = pytest.importorskip("drjit")
    if not dr.has_backend(dr.JitBackend.LLVM):
        pytest.skip("no Dr.Jit LLVM backend")
    import rayd.drjit as rd
    from drjit.llvm.ad import Array3f, Array3u

    v, f = _random_scene(5, degenerate=4)
    o, d = _rays(5, 2000, v)

    def scene_fn():
        scene = rd.Scene()
        scene.add_mesh(rd.Mesh(Array3f(*v.T), Array3u(*f.T.astype(np.uint32))))
        scene.build()
        return scene

    def query(scene):
        hit = scene.intersect(rd.Ray(Array3f(*o.T), Array3f(*d.T)))
        return np.array(hit.prim_id), np.array(hit.t)

    warp, emb = _both(scene_fn, query)
    np.testing.assert_array_equal(emb[0], warp[0])
    np.testing.assert_array_equal(emb[1], warp[1])
    assert (warp[0] >= 0).mean() > 0.3


@needs_embreex
@pytest.mark.parametrize("name", ["test_grid_vertices_and_edges_straight_down", "test_grid_oblique_rays_through_vertices_and_edges"])
def test_watertight_grids_with_embree(embree, name):
    sys.path.insert(0, str(ROOT / "tests" / "torch"))
    import test_watertight

    for dtype in (torch.float32, torch.float64):  # (session 23: test_watertight runs both)
        for cells in (1, 2, 3, 24):
            getattr(test_watertight, name)("cpu", cells, dtype)


@needs_embreex
def test_watertight_closed_icosphere_with_embree(embree):
    # Embree 4.4's robust test alone leaks here (4-6 of 48,642 rays near vertices miss every
    # face); the grown scene does not (below), and the edge check sends these rays to Warp.
    sys.path.insert(0, str(ROOT / "tests" / "torch"))
    import test_watertight

    rays, redone = cpu_embree.stats["rays"], cpu_embree.stats["redone"]
    for dtype in (torch.float32, torch.float64):  # (session 23: test_watertight runs both)
        test_watertight.test_closed_icosphere_from_inside_and_outside("cpu", 4, dtype)
    # Every ray there aims at a vertex or an edge point: all are ties or near vertices, so
    # Warp answers them (the caps alone are tested below).
    assert cpu_embree.stats["redone"] - redone == cpu_embree.stats["rays"] - rays


@needs_embreex
def test_embree_alone_leaks_and_the_caps_flag_every_leak():
    # The measurement behind the caps: rays through the vertices of a closed icosphere, from
    # the centre, from inside and from outside (tests/torch/test_watertight.py): Embree's
    # triangles alone miss a few; the caps flag each of those rays.
    vertices, faces = reference.icosphere(4)
    v = vertices.astype(np.float32)
    rng = np.random.default_rng(4)
    inside = rng.uniform(-0.4, 0.4, v.shape).astype(np.float32)
    o = np.concatenate((np.zeros_like(v), inside, 3.0 * v))
    d = np.concatenate((v, v - inside, 0.5 * (v - 3.0 * v))).astype(np.float32)
    tri = cpu_embree._commit((v, faces.astype(np.int32)))
    prim = cpu_embree.trace(tri, o, d, np.full(len(d), 10.0, np.float32))["primID"]
    caps = cpu_embree._commit(cpu_embree.vertex_caps(v.astype(np.float64), cpu_embree.CAP * np.abs(v).max()))
    capped = cpu_embree.trace(caps, o, d, np.full(len(d), 10.0, np.float32))["primID"]
    leaked = prim < 0
    assert leaked.any(), "Embree no longer leaks here: the caps may be unnecessary (measure)"
    assert (capped[leaked] >= 0).all()
    # Rays through face centres pass far from every vertex: none flagged.
    centres = v.astype(np.float64)[faces].mean(1).astype(np.float32)
    capped = cpu_embree.trace(caps, np.zeros_like(centres), centres, np.full(len(centres), 10.0, np.float32))["primID"]
    assert (capped < 0).all()


@needs_embreex
def test_grown_scene_alone_does_not_leak_where_robust_mode_does():
    # The rays of the test above (through every vertex of the closed icosphere, from the centre,
    # inside and outside) against the non-robust scene of grown faces (cpu_embree_grown): every ray
    # hits a face, and its weights mapped back to the true face sum to 1 and lie within the margin.
    vertices, faces = reference.icosphere(4)
    v = vertices.astype(np.float32)
    rng = np.random.default_rng(4)
    inside = rng.uniform(-0.4, 0.4, v.shape).astype(np.float32)
    o = np.concatenate((np.zeros_like(v), inside, 3.0 * v))
    d = np.concatenate((v, v - inside, 0.5 * (v - 3.0 * v))).astype(np.float32)
    delta = cpu_embree.GROW * float(np.abs(v).max())
    points, table, flag, slivers, _ = cpu_embree.grown_faces(
        wp.array(v, dtype=wp.vec3, device="cpu"), wp.array(faces.astype(np.int32).ravel(), dtype=wp.int32, device="cpu"),
        0, len(faces), np.zeros(3), delta)
    assert slivers is None and (table[:, 0] > 1.0).all() and not flag.any()
    scene = embree_api.Scene([(points, cpu_embree.face_rows(len(faces)))], robust=False)
    hit = cpu_embree.trace(scene, o, d, np.full(len(d), 10.0, np.float32))
    assert (hit["primID"] >= 0).all()
    robust = cpu_embree._commit((v, faces.astype(np.int32)))
    assert (cpu_embree.trace(robust, o, d, np.full(len(d), 10.0, np.float32))["primID"] < 0).any()
    f = hit["primID"]
    s, k = table[f, 0].astype(np.float64), table[f, 1:].astype(np.float64)
    w = np.stack([1.0 - hit["u"] - hit["v"], hit["u"], hit["v"]], 1).astype(np.float64)
    true = s[:, None] * w - k
    np.testing.assert_allclose(true.sum(1), 1.0, atol=1e-5)
    assert (true.min(1) > -2e-3).all()  # within the margin (delta / altitude ~ 2^-13 / 0.05)


def test_vertex_caps_catch_every_line_within_r():
    # Geometry of the caps (no Embree): a line within r of V crosses the cap of its dominant
    # axis inside the triangle, at least 2 r from its edges.
    rng = np.random.default_rng(1)
    r = 1e-3
    pts, faces = cpu_embree.vertex_caps(np.zeros((1, 3)), r)
    tris = pts.astype(np.float64)[faces]  # (3, 3, 3): caps normal to x, y, z
    for _ in range(2000):
        d = rng.normal(size=3)
        d /= np.linalg.norm(d)
        offset = rng.normal(size=3)
        offset -= offset.dot(d) * d
        p = offset / np.linalg.norm(offset) * r * rng.uniform(0, 1)  # closest point, |p| < r
        k = int(np.argmax(np.abs(d)))
        q = p - p[k] / d[k] * d  # the crossing of the plane x_k = 0
        a, b, c = tris[k]
        n = np.cross(b - a, c - a)
        for e0, e1 in ((a, b), (b, c), (c, a)):
            inward = np.cross(n, e1 - e0)
            inward /= np.linalg.norm(inward)
            assert (q - e0).dot(inward) >= 2 * r * (1 - 1e-9)


def test_default_follows_embreex_and_info_names_it(monkeypatch):
    monkeypatch.delenv("RAYD_CPU_ACCEL", raising=False)
    code = "from rayd.engine import cpu_embree as c; print(c.active()); print(c.describe())"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("RAYD_CPU_ACCEL", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env).stdout.splitlines()
    assert out[0] == str(cpu_embree.available())
    assert out[1].startswith("embree" if cpu_embree.available() else "warp")
    env["RAYD_CPU_ACCEL"] = "warp"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env).stdout.splitlines()
    assert out[0] == "False" and out[1].startswith("warp")


def test_without_embreex_rayd_uses_warp():
    # Block the import (as if embreex were not installed), even with RAYD_CPU_ACCEL=embree.
    code = (
        "import sys; sys.modules['embreex'] = None\n"
        "import torch, rayd.torch as rt\n"
        "from rayd.engine import cpu_embree as c\n"
        "s = rt.Scene(); s.add_mesh(rt.Mesh(torch.tensor([[-1.,-1,0],[3,-1,0],[-1,3,0]]), torch.tensor([[0,1,2]])))\n"
        "s.build(); h = s.intersect(rt.Ray(torch.tensor([0.25,0.25,2.]), torch.tensor([0.,0,-1])))\n"
        "print(c.available(), c.active(), int(h.prim_id), float(h.t)); print(c.describe())\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src"), "RAYD_CPU_ACCEL": "embree"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    lines = out.splitlines()
    assert lines[0] == "False False 0 2.0"
    assert lines[1].startswith("warp (embreex not importable")


def test_sliver_rectangle_from_float64_corners():
    # A sliver 1e-9 thin, 0.3 from the frame's centre: its centre-relative corners rounded to float32 are
    # collinear, so a rectangle made from them was NaN (never hit by Embree); made from the float64 corners,
    # it is finite and the one sliver_caps gives for them.
    v = np.array([[1000, 0, 0], [1001, 0, 0], [1000.5, 1e-9, 0], [1000, 1, 0]], np.float32)
    f = np.array([[0, 1, 2], [0, 1, 3]], np.int32)
    centre, delta = np.array([1000.4999, 0.3, 0.1]), 1e-6
    _, table, flag, slivers, _ = cpu_embree.grown_faces(wp.array(v, dtype=wp.vec3, device="cpu"),
                                                        wp.array(f.ravel(), dtype=wp.int32, device="cpu"), 0, 2, centre, delta)
    assert flag.tolist() == [2, 0] and table[0].tolist() == [0.0] * 4
    rel = v.astype(np.float64) - centre
    _, pts, faces = cpu_embree.sliver_caps(rel[[0]], rel[[1]], rel[[2]], delta, np.ones(1, bool))
    assert np.isfinite(slivers[0]).all() and np.array_equal(slivers[0], pts) and np.array_equal(slivers[1], faces)
