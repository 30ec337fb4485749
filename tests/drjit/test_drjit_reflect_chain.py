"""rayd.drjit trace_reflections (one engine launch per chain) = rayd.torch's on a random scene with
instances, disabled shapes and a placed mesh, and every slot = intersect() of the segment from the
reported p, d_out (DESIGN rule), float32 and float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

import rayd.torch as rt  # noqa: E402
from drjit_testutil import rows, vec  # noqa: E402

B = 5


def _parts(seed):
    """(meshes [(v, f, to_world)], instances [(mesh, 4x4)], disabled shape ids) as NumPy."""
    rng = np.random.default_rng(seed)
    h = 3.0
    box = np.array([[-h, -h, -h], [h, -h, -h], [h, h, -h], [-h, h, -h], [-h, -h, h], [h, -h, h], [h, h, h],
                    [-h, h, h]]) + rng.uniform(-0.02, 0.02, (8, 3))
    box_f = np.array([[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [1, 2, 6], [1, 6, 5],
                      [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7]])

    def soup(count, spread, size):
        v = (rng.uniform(-spread, spread, (count, 1, 3)) + rng.normal(0.0, size, (count, 3, 3))).reshape(-1, 3)
        return v, np.arange(3 * count).reshape(count, 3)

    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    place = np.eye(4)
    place[:3, :3] = q * np.sign(np.linalg.det(q))
    place[:3, 3] = [0.2, 0.1, -0.3]
    inst = np.eye(4)
    inst[:3, :3] = 0.8 * place[:3, :3].T
    inst[:3, 3] = [0.5, -0.4, 0.3]
    meshes = [(box, box_f, None), (*soup(30, 1.8, 0.5), None), (*soup(20, 1.5, 0.6), None), (*soup(15, 1.0, 0.4), place)]
    # Shapes: 0 box, 1 soup, 2 hidden soup (disabled), 3 placed soup, 4 instance of 1, 5 instance of 1 (disabled).
    moved = np.eye(4)
    moved[:3, 3] = [0.3, -0.2, 0.1]
    return meshes, [(1, inst), (1, moved)], [2, 5]


def _scenes(m, seed, double):
    meshes, instances, disabled = _parts(seed)
    A3 = m.Array3f64 if double else m.Array3f
    M4 = m.Matrix4f64 if double else m.Matrix4f
    tdt = torch.float64 if double else torch.float32
    ds, ts = rd.Scene(), rt.Scene()
    for v, f, w in meshes:
        ds.add_mesh(rd.Mesh(vec(A3, v), vec(m.Array3u, f.astype(np.uint32)), to_world=None if w is None else M4(w.tolist())))
        ts.add_mesh(rt.Mesh(torch.tensor(v, dtype=tdt), torch.tensor(f), to_world=None if w is None else torch.tensor(w, dtype=tdt)))
    for base, w in instances:
        ds.add_instance(base, M4(w.tolist()))
        ts.add_instance(base, torch.tensor(w, dtype=tdt))
    for s in disabled:
        ds.set_shape_enabled(s, False)
        ts.set_shape_enabled(s, False)
    ds.build()
    ts.build()
    return ds, ts, A3, tdt


@pytest.mark.parametrize("double", [False, True])
def test_chain_equals_torch_and_intersect(backend, m, double):
    if backend != "llvm":
        pytest.skip("rayd.torch reference on the CPU only here")
    ds, ts, A3, tdt = _scenes(m, 4, double)
    rng = np.random.default_rng(9)
    n = 800
    o = (rng.uniform(-2.0, 2.0, (n, 3))).astype(tdt == torch.float64 and np.float64 or np.float32)
    d = rng.normal(size=(n, 3)).astype(o.dtype)
    tmin = (rng.uniform(0.0, 0.3, n)).astype(o.dtype)
    ignore = np.where(rng.uniform(size=n) < 0.3, rng.integers(0, 120, n), -1).astype(np.int32)
    Float = m.Float64 if double else m.Float
    chain = ds.trace_reflections(rd.Ray(vec(A3, o), vec(A3, d), math.inf, tmin=Float(tmin)), B, ignore=m.Int(ignore))
    ref = ts.trace_reflections(rt.Ray(torch.tensor(o), torch.tensor(d), tmin=torch.tensor(tmin)), B,
                               ignore=torch.tensor(ignore))
    tol = 1e-12 if double else 1e-6
    ids = np.array(chain.global_prim_id).reshape(n, B)
    np.testing.assert_array_equal(ids, ref.global_prim_id.numpy())
    np.testing.assert_array_equal(np.array(chain.shape_id).reshape(n, B), ref.shape_id.numpy())
    np.testing.assert_array_equal(np.array(chain.prim_id).reshape(n, B), ref.prim_id.numpy())
    np.testing.assert_array_equal(np.array(chain.num_bounces), ref.num_bounces.numpy())
    assert (ids[:, -1] >= 0).any() and not np.isin(np.array(chain.shape_id), [2, 5]).any()
    for name in ("t", "p", "geo_n", "d_out", "image_source"):
        got = rows(getattr(chain, name))
        got = got.reshape((n, B) + got.shape[1:])
        want = getattr(ref, name).numpy()
        np.testing.assert_allclose(got[:, 0], want[:, 0], rtol=tol, atol=tol, err_msg=name)
        # float32 roundings (FMA contraction, sum order) grow along a chain: the whole chain to 1e-3 there.
        whole = tol if double else 1e-3
        np.testing.assert_allclose(got, want, rtol=whole, atol=whole, err_msg=name)
    np.testing.assert_allclose(np.array(chain.path_length), ref.path_length.numpy(), rtol=1e-12 if double else 1e-3)
    # Slot 1 is rayd.drjit's intersect() of the segment from the reported p_0, d_out_0.
    p0 = rows(chain.p).reshape(n, B, 3)[:, 0]
    d0 = rows(chain.d_out).reshape(n, B, 3)[:, 0]
    valid = ids[:, 0] >= 0
    hit = ds.intersect(rd.Ray(vec(A3, p0), vec(A3, np.where(valid[:, None], d0, 1.0))), m.Bool(valid),
                       ignore=m.Int(ids[:, 0].copy()))
    np.testing.assert_array_equal(np.array(hit.global_prim_id), ids[:, 1])
    np.testing.assert_allclose(np.array(hit.t), rows(chain.t).reshape(n, B)[:, 1], rtol=tol, atol=tol)
