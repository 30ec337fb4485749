"""Parity of rayd.drjit with rayd.torch: same scene, same rays, every field.

Identical hit/miss, ``t`` within 1e-6 relative, ids identical except ties (a ray
through a shared edge may report either face, at the same ``t``).
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import rows, vec  # noqa: E402


def _grid(n: int, z, rng):
    """A bumpy (n+1)^2 grid over [-1, 1]^2 at height ``z``, with per-vertex normals and uv."""
    axis = np.linspace(-1, 1, n + 1)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    v = np.stack([x.ravel(), y.ravel(), z + 0.1 * rng.normal(size=x.size)], -1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, c], -1), np.stack([b, d, c], -1)])
    normals = np.concatenate([rng.normal(scale=0.2, size=(v.shape[0], 2)), np.ones((v.shape[0], 1))], -1)
    uv = rng.uniform(size=(v.shape[0], 2))
    return v, f, normals, uv


def _scenes(backend, m):
    rng = np.random.default_rng(3)
    meshes = [_grid(12, 0.0, rng), _grid(6, 0.6, rng), _grid(3, -0.5, rng)]
    to_world = np.eye(4)
    to_world[:3, :3] = [[0.7, 0.0, 0.1], [0.0, 0.8, 0.0], [0.0, 0.1, 1.0]]
    to_world[:3, 3] = [0.1, -0.2, 0.05]
    device = "cpu" if backend == "llvm" else "cuda"
    ds, ts = rd.Scene(), rt.Scene()
    vertices = []
    for i, (v, f, n, uv) in enumerate(meshes):
        kw_d, kw_t = {}, {}
        if i != 1:  # mesh 1 without normals and uv: the fallbacks
            kw_d = {"normals": vec(m.Array3f, n), "uv": vec(m.Array2f, uv)}
            kw_t = {
                "normals": torch.tensor(n, dtype=torch.float32, device=device),
                "uv": torch.tensor(uv, dtype=torch.float32, device=device),
            }
        if i == 2:
            kw_d["to_world"] = m.Matrix4f(to_world.tolist())
            kw_t["to_world"] = torch.tensor(to_world, dtype=torch.float32, device=device)
        vertices.append((vec(m.Array3f, v), torch.tensor(v, dtype=torch.float32, device=device)))
        ds.add_mesh(rd.Mesh(vertices[-1][0], m.Array3i(f.T.astype(np.int32)), **kw_d))
        ts.add_mesh(rt.Mesh(vertices[-1][1], torch.tensor(f, dtype=torch.int64, device=device), **kw_t))
    ds.build()
    ts.build()
    n = 4000
    o = np.concatenate([rng.uniform(-1.2, 1.2, size=(n, 2)), rng.uniform(1.0, 2.0, size=(n, 1))], -1)
    d = np.concatenate([rng.normal(scale=0.3, size=(n, 2)), -np.ones((n, 1))], -1)
    # Some rays start between the layers, some point up, some are cut short by tmax.
    o[::7, 2] = 0.3
    d[::11, 2] = 1.0
    tmax = np.where(np.arange(n) % 5 == 0, 1.2, np.inf)
    return ds, ts, o, d, tmax, device, vertices[0]


def test_every_field_matches_torch(backend, m):
    ds, ts, o, d, tmax, device, _ = _scenes(backend, m)
    hd = ds.intersect(rd.Ray(vec(m.Array3f, o), vec(m.Array3f, d), m.Float(tmax)))
    ht = ts.intersect(
        rt.Ray(
            torch.tensor(o, dtype=torch.float32, device=device),
            torch.tensor(d, dtype=torch.float32, device=device),
            torch.tensor(tmax, dtype=torch.float32, device=device),
        )
    )

    def t_(x):
        return x.detach().cpu().numpy()

    valid = rows(hd.is_valid())
    np.testing.assert_array_equal(valid, t_(ht.is_valid()))
    assert 0.3 < valid.mean() < 0.99, "the parity scene should have both hits and misses"
    np.testing.assert_allclose(rows(hd.t), t_(ht.t), rtol=1e-6)
    same = rows(hd.global_prim_id) == t_(ht.global_prim_id)
    # Ties on shared edges may pick either face; there must be few, and at equal t.
    assert (~same).sum() <= max(2, len(same) // 500)
    for name in ("prim_id", "shape_id", "global_prim_id"):
        np.testing.assert_array_equal(rows(getattr(hd, name))[same], t_(getattr(ht, name))[same], err_msg=name)
    for name in ("p", "geo_n", "barycentric", "n", "uv"):
        np.testing.assert_allclose(
            rows(getattr(hd, name))[same], t_(getattr(ht, name))[same], rtol=1e-5, atol=2e-5, err_msg=name
        )


def test_gradients_match_torch(backend, m):
    ds, ts, o, d, tmax, device, (vd, vt) = _scenes(backend, m)
    od, dd = vec(m.Array3f, o), vec(m.Array3f, d)
    dr.enable_grad(od, dd, vd)
    hd = ds.intersect(rd.Ray(od, dd, m.Float(tmax)))
    dr.backward(dr.sum(dr.select(hd.is_valid(), hd.t, 0)) + dr.sum(dr.sum(hd.p)))

    ot = torch.tensor(o, dtype=torch.float32, device=device, requires_grad=True)
    dt = torch.tensor(d, dtype=torch.float32, device=device, requires_grad=True)
    vt.requires_grad_(True)
    ht = ts.intersect(rt.Ray(ot, dt, torch.tensor(tmax, dtype=torch.float32, device=device)))
    (torch.where(ht.is_valid(), ht.t, 0).sum() + ht.p.sum()).backward()

    same = rows(hd.global_prim_id) == ht.global_prim_id.cpu().numpy()
    np.testing.assert_allclose(rows(dr.grad(od))[same], ot.grad.cpu().numpy()[same], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rows(dr.grad(dd))[same], dt.grad.cpu().numpy()[same], rtol=1e-4, atol=1e-4)
    if same.all():
        np.testing.assert_allclose(rows(dr.grad(vd)), vt.grad.cpu().numpy(), rtol=1e-4, atol=1e-4)
