"""trace_reflections (one engine launch per chain) = B sequential intersect() calls with the
DESIGN rules (segment 0: the ray's tmin/tmax/ignore; then from p_b along the mirrored
direction, tmin = 0, tmax = inf, skipping the face left; the chain ends at the first miss),
on random scenes with instances and disabled shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd import engine


def _box(half):
    """A closed axis-aligned box (12 triangles), walls slightly tilted (general position)."""
    h = half
    v = np.array([[-h, -h, -h], [h, -h, -h], [h, h, -h], [-h, h, -h],
                  [-h, -h, h], [h, -h, h], [h, h, h], [-h, h, h]], dtype=np.float64)
    v += np.random.default_rng(3).uniform(-0.02, 0.02, v.shape)
    f = [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4],
         [1, 2, 6], [1, 6, 5], [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7]]
    return v, np.array(f)


def _soup(rng, count, spread, size):
    centres = rng.uniform(-spread, spread, (count, 1, 3))
    v = (centres + rng.normal(0.0, size, (count, 3, 3))).reshape(-1, 3)
    return v, np.arange(3 * count).reshape(count, 3)


def _rotation(rng):
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


def _scene(seed, dtype, device):
    """Shapes: the box room (0), a triangle soup (1) and two instances of it (2, 3), a soup
    (4) and an instance (5) that are disabled, a soup placed by a transform (6)."""
    rng = np.random.default_rng(seed)
    t = lambda x: torch.as_tensor(x, dtype=dtype, device=device)  # noqa: E731
    scene = rt.Scene()
    bv, bf = _box(3.0)
    scene.add_mesh(rt.Mesh(t(bv), torch.as_tensor(bf, device=device)))
    sv, sf = _soup(rng, 30, 1.8, 0.5)
    soup = scene.add_mesh(rt.Mesh(t(sv), torch.as_tensor(sf, device=device)))
    for k in range(2):
        m = np.eye(4)
        m[:3, :3] = _rotation(rng) * rng.uniform(0.6, 1.2)
        m[:3, 3] = rng.uniform(-1.0, 1.0, 3)
        scene.add_instance(soup, t(m))
    dv, df = _soup(rng, 20, 1.5, 0.6)
    hidden = scene.add_mesh(rt.Mesh(t(dv), torch.as_tensor(df, device=device)))
    moved = np.eye(4)
    moved[:3, 3] = [0.3, -0.2, 0.1]
    hidden_inst = scene.add_instance(soup, t(moved))
    tv, tf = _soup(rng, 15, 1.0, 0.4)
    m = np.eye(4)
    m[:3, :3] = _rotation(rng)
    m[:3, 3] = [0.2, 0.1, -0.3]
    scene.add_mesh(rt.Mesh(t(tv), torch.as_tensor(tf, device=device), to_world=t(m)))
    scene.set_shape_enabled(hidden, False)
    scene.set_shape_enabled(hidden_inst, False)
    scene.build()
    return scene


def _sequential(scene, o, d, tmin, tmax, ignore, bounces):
    """The chain by B intersect() calls (the DESIGN rules), as (ids [N, B], t [N, B], p [N, B, 3])."""
    active = torch.ones(o.shape[0], dtype=torch.bool, device=o.device)
    ids, ts, ps = [], [], []
    for b in range(bounces):
        hit = scene.intersect(rt.Ray(o, d, tmax, tmin=tmin), active, rt.RayFlags.Geometric, ignore=ignore)
        ids.append(hit.global_prim_id)
        ts.append(hit.t)
        ps.append(hit.p)
        active = active & hit.is_valid()
        g = hit.geo_n
        d = d - 2.0 * (d * g).sum(-1, keepdim=True) * g
        o, tmin, tmax, ignore = hit.p, 0.0, math.inf, hit.global_prim_id
    return torch.stack(ids, 1), torch.stack(ts, 1), torch.stack(ps, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1])
def test_chain_equals_sequential_intersects(device, dtype, seed):
    scene = _scene(seed, dtype, device)
    gen = torch.Generator().manual_seed(seed)
    n, bounces = 2000, 6
    o = ((torch.rand(n, 3, generator=gen, dtype=torch.float64) - 0.5) * 4).to(dtype).to(device)
    d = torch.randn(n, 3, generator=gen, dtype=torch.float64).to(dtype).to(device)
    tmin = (torch.rand(n, generator=gen) * 0.3).to(dtype).to(device)
    tmax = torch.where(torch.rand(n, generator=gen) < 0.2, torch.rand(n, generator=gen) * 0.5, math.inf)
    tmax = tmax.to(dtype).to(device)
    # Segment 0 skips a random face for some rays (-1 for the rest).
    total = scene.trace_reflections(rt.Ray(o, d), 1).global_prim_id.max().item() + 1
    ignore = torch.where(torch.rand(n, generator=gen) < 0.3, torch.randint(0, total, (n,), generator=gen), -1)
    ignore = ignore.to(device)
    # The first hit of unconstrained rays, ignored for a few: the ignore must change their winner.
    first = scene.intersect(rt.Ray(o, d), flags=rt.RayFlags.Minimal).global_prim_id
    ignore = torch.where(torch.arange(n, device=device) % 7 == 0, first, ignore)

    chain = scene.trace_reflections(rt.Ray(o, d, tmax, tmin=tmin), bounces, ignore=ignore)
    ids, t, p = _sequential(scene, o, d, tmin, tmax, ignore, bounces)
    assert torch.equal(chain.global_prim_id, ids)
    valid = ids >= 0
    assert 0.3 < valid[:, 0].float().mean() < 1.0 and valid[:, -1].any()  # misses, hits and long chains
    shape = chain.shape_id[valid]
    assert (shape >= 0).all() and not ((shape == 4) | (shape == 5)).any()  # disabled shapes never hit
    assert set(shape.unique().tolist()) >= {0, 1, 2, 3, 6}  # the box, the soup, its instances, the placed mesh
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    if dtype == torch.float64:  # the whole independent chain agrees (float32 rounding grows along a chain)
        torch.testing.assert_close(chain.t, t, rtol=tol, atol=tol)
        torch.testing.assert_close(chain.p, p, rtol=tol, atol=tol)
    torch.testing.assert_close(chain.t[:, 0], t[:, 0], rtol=tol, atol=tol)
    torch.testing.assert_close(chain.p[:, 0], p[:, 0], rtol=tol, atol=tol)
    # Every later slot is intersect() of the segment from the reported p, d_out (DESIGN rule).
    for b in range(1, bounces):
        hit = scene.intersect(rt.Ray(chain.p[:, b - 1], chain.d_out[:, b - 1]), valid[:, b - 1],
                              rt.RayFlags.Geometric, ignore=chain.global_prim_id[:, b - 1])
        assert torch.equal(hit.global_prim_id, chain.global_prim_id[:, b])
        torch.testing.assert_close(chain.t[:, b], hit.t, rtol=tol, atol=tol)
        torch.testing.assert_close(chain.p[:, b], hit.p, rtol=tol, atol=tol)
        torch.testing.assert_close(chain.geo_n[:, b], hit.geo_n, rtol=tol, atol=tol)
        g, dd = hit.geo_n, chain.d_out[:, b - 1]
        want = torch.where(hit.is_valid().unsqueeze(-1), dd - 2.0 * (dd * g).sum(-1, keepdim=True) * g, 0.0)
        torch.testing.assert_close(chain.d_out[:, b], want, rtol=tol, atol=tol)
    # Slot 0 honours the ray's interval; the ignore changed the winner where it was the first hit.
    t0 = chain.t[:, 0][valid[:, 0]]
    assert (t0 > tmin[valid[:, 0]]).all() and (t0 < tmax[valid[:, 0]]).all()
    skipped = (torch.arange(n, device=device) % 7 == 0) & (first >= 0)
    assert not (chain.global_prim_id[:, 0][skipped] == first[skipped]).any()


def test_engine_chain_matches_frontend(device):
    # The engine's own t per slot (float32, from its float32 snapshot) agrees with the record.
    scene = _scene(2, torch.float32, device)
    gen = torch.Generator().manual_seed(5)
    o = ((torch.rand(500, 3, generator=gen) - 0.5) * 4).to(device)
    d = torch.randn(500, 3, generator=gen).to(device)
    chain = scene.trace_reflections(rt.Ray(o, d), 4)
    assert (chain.num_bounces == 4).all()  # closed room: every chain is full
    ids = torch.empty((500, 4, 3), dtype=torch.int32, device=device)
    t = torch.empty((500, 4), dtype=torch.float32, device=device)
    from rayd.torch import _convert, _ops, _trace

    _, _, rows, _ = _trace.prepare(scene, "test", rt.Ray(o, d), None, None)
    rays = _ops.ray_batch(*rows)  # the engine's view of the search rows
    engine.trace_chain(scene._core.accel, scene._core.shape_lookup, rays, _convert.scalar_view(ids),
                       _convert.scalar_view(t), _convert.current_stream(o.device))
    assert torch.equal(ids[..., 0], chain.global_prim_id)
    assert torch.equal(ids[..., 1], chain.shape_id) and torch.equal(ids[..., 2], chain.prim_id)
    torch.testing.assert_close(t, chain.t, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="B must be in"):
        engine.trace_chain(scene._core.accel, scene._core.shape_lookup, rays,
                           _convert.scalar_view(torch.empty((500, 17, 3), dtype=torch.int32, device=device)),
                           _convert.scalar_view(torch.empty((500, 17), device=device)))
