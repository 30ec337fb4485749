"""Inputs a new rayd.drjit user tries (session 20, helper breakit20c): record indices, parity with rayd.torch.

``Intersection[np.int64(i)]`` raised ``TypeError`` (rayd.torch's records take NumPy integers, as the
scene calls of rayd.drjit do): it selects ray ``i`` now. The parity test checks every ray query with
every argument (``active``, ``ignore``, per-ray ``tmin``/``tmax``) against rayd.torch and against a
float64 brute force, float32 and float64.
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import vec  # noqa: E402


def _triangle_scene(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f([0.0, 1, 0], [0.0, 0, 1], [0.0, 0, 0]), m.Array3i([0], [1], [2])))
    scene.build()
    return scene


@pytest.mark.parametrize("index", [np.int64(1), np.int32(-2), np.uint8(0)])
def test_records_take_numpy_integers(m, index):
    scene = _triangle_scene(m)
    ray = rd.Ray(m.Array3f([5.0, 0.2], [0.0, 0.2], [1.0, 1.0]), m.Array3f(0, 0, -1))
    hit = scene.intersect(ray)
    expected = [np.inf, 1.0][int(index) % 2]
    assert np.asarray(hit[index].t).tolist() == [expected]
    all_hits = scene.intersect_all(ray, 3)
    assert np.asarray(all_hits[index].t).tolist() == [expected, np.inf, np.inf]
    with pytest.raises(IndexError):
        hit[np.int64(2)]
    with pytest.raises(TypeError):
        hit[np.float64(1.0)]


def _brute(V, F, o, d, tmin, tmax, skip):
    """float64 closest hit per ray (Moeller-Trumbore), skipping face ``skip`` (-1: none)."""
    v0, v1, v2 = V[F[:, 0]], V[F[:, 1]], V[F[:, 2]]
    e1, e2 = v1 - v0, v2 - v0
    out_t, out_f = np.full(len(o), np.inf), np.full(len(o), -1)
    for i in range(len(o)):
        p = np.cross(d[i], e2)
        det = np.einsum("fk,fk->f", p, e1)
        with np.errstate(all="ignore"):
            s = o[i] - v0
            u = np.einsum("fk,fk->f", s, p) / det
            q = np.cross(s, e1)
            v = (q @ d[i]) / det
            t = np.einsum("fk,fk->f", e2, q) / det
        ok = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > tmin[i]) & (t < tmax[i])
        ok &= np.arange(len(F)) != skip[i]
        if ok.any():
            k = np.argmin(np.where(ok, t, np.inf))
            out_t[i], out_f[i] = t[k], k
    return out_t, out_f


@pytest.mark.parametrize("double", [False, True], ids=["f32", "f64"])
def test_ray_queries_with_every_argument_match_torch_and_brute_force(backend, m, double):
    trimesh = pytest.importorskip("trimesh")
    mesh = trimesh.creation.icosphere(subdivisions=2)
    V, F = np.asarray(mesh.vertices), np.asarray(mesh.faces, np.int32)
    rng = np.random.default_rng(9)
    n = 1500
    o = rng.normal(size=(n, 3)) * 2
    d = rng.normal(size=(n, 3)) * 0.5 - o * 0.4
    tmin = np.where(rng.uniform(size=n) < 0.3, rng.uniform(0, 2, n), 0.0)
    tmax = np.where(rng.uniform(size=n) < 0.3, rng.uniform(0.5, 3, n), np.inf)
    active = rng.uniform(size=n) < 0.8
    ignore = np.where(rng.uniform(size=n) < 0.5, rng.integers(0, len(F), n), -1).astype(np.int32)
    npdt, tdt = (np.float64, torch.float64) if double else (np.float32, torch.float32)
    A3, Fl = (m.Array3f64, m.Float64) if double else (m.Array3f, m.Float)
    device = "cpu" if backend == "llvm" else "cuda"
    ds = rd.Scene()
    ds.add_mesh(rd.Mesh(vec(A3, V.astype(npdt)), vec(m.Array3i, F)))
    ds.build()
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.tensor(V, dtype=tdt, device=device), torch.tensor(F, device=device)))
    ts.build()
    ray = rd.Ray(vec(A3, o.astype(npdt)), vec(A3, d.astype(npdt)), Fl(tmax.astype(npdt)), tmin=Fl(tmin.astype(npdt)))
    tray = rt.Ray(*(torch.tensor(a, dtype=tdt, device=device) for a in (o, d, tmax)),
                  tmin=torch.tensor(tmin, dtype=tdt, device=device))
    args_d = (m.Bool(active),), {"ignore": m.Int(ignore)}
    args_t = (torch.tensor(active, device=device),), {"ignore": torch.tensor(ignore, device=device)}
    for _ in range(2):  # (on the CPU the first query runs on Warp, later ones may run on Embree)
        hd, ht = ds.intersect(ray, *args_d[0], **args_d[1]), ts.intersect(tray, *args_t[0], **args_t[1])
        np.testing.assert_array_equal(np.asarray(hd.prim_id), ht.prim_id.cpu().numpy())
        np.testing.assert_allclose(np.asarray(hd.t), ht.t.cpu().numpy(), rtol=1e-14 if double else 0)
        for query in ("shadow_test", "count_intersections"):
            np.testing.assert_array_equal(np.asarray(getattr(ds, query)(ray, *args_d[0], **args_d[1])),
                                          getattr(ts, query)(tray, *args_t[0], **args_t[1]).cpu().numpy())
        ad, at = ds.intersect_all(ray, 4, *args_d[0], **args_d[1]), ts.intersect_all(tray, 4, *args_t[0], **args_t[1])
        np.testing.assert_array_equal(np.asarray(ad.global_prim_id), at.global_prim_id.cpu().numpy().ravel())
    # against a float64 brute force of the same (rounded) inputs
    cast = lambda a: a.astype(npdt).astype(np.float64)  # noqa: E731
    bt, bf = _brute(cast(V), F, cast(o), cast(d), cast(tmin), cast(tmax), ignore)
    bt[~active], bf[~active] = np.inf, -1
    t, f = np.asarray(hd.t), np.asarray(hd.prim_id)
    assert (np.isfinite(t) != np.isfinite(bt)).sum() == 0
    assert (f != bf).sum() <= 2  # (ties on shared edges)
    hit = np.isfinite(bt)
    np.testing.assert_allclose(t[hit], bt[hit], rtol=1e-12 if double else 1e-6)
    assert (np.asarray(ds.shadow_test(ray, *args_d[0], **args_d[1])) == hit).all()
