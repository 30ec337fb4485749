"""trace_reflections' fused path (float32 plain meshes: every field from one kernel,
rayd.engine.evaluate_chain) against the op-by-op evaluation of the same chain
(rayd.torch._chain.evaluate, float64-gradchecked in test_reflections.py): values, ids,
reverse-mode gradients with respect to origins, directions and the vertices of two meshes,
and the number of torch ops a call makes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rayd.torch as rt
from rayd.torch import _chain_fused

FIELDS = ("t", "p", "geo_n", "d_out", "image_source", "path_length")
IDS = ("global_prim_id", "shape_id", "prim_id", "num_bounces")


def _scene(device, requires_grad=False):
    """A slightly bumpy box room without a ceiling (mesh 0), a triangle soup inside it (mesh 1) and a
    disabled soup (mesh 2), all float32 and untransformed (the fused path's scenes)."""
    rng = np.random.default_rng(4)
    h = 3.0
    box = np.array([[-h, -h, -h], [h, -h, -h], [h, h, -h], [-h, h, -h],
                    [-h, -h, h], [h, -h, h], [h, h, h], [-h, h, h]]) + rng.uniform(-0.05, 0.05, (8, 3))
    box_f = [[0, 2, 1], [0, 3, 2], [0, 1, 5], [0, 5, 4],  # open at the top: some chains escape
             [1, 2, 6], [1, 6, 5], [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7]]
    soup = (rng.uniform(-1.8, 1.8, (25, 1, 3)) + rng.normal(0.0, 0.5, (25, 3, 3))).reshape(-1, 3)
    hidden = (rng.uniform(-1.5, 1.5, (10, 1, 3)) + rng.normal(0.0, 0.6, (10, 3, 3))).reshape(-1, 3)
    verts = [torch.tensor(x, dtype=torch.float32, device=device, requires_grad=requires_grad)
             for x in (box, soup, hidden)]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(verts[0], torch.tensor(box_f, device=device)))
    scene.add_mesh(rt.Mesh(verts[1], torch.arange(75, device=device).reshape(25, 3)))
    off = scene.add_mesh(rt.Mesh(verts[2], torch.arange(30, device=device).reshape(10, 3)))
    scene.set_shape_enabled(off, False)
    scene.build()
    return scene, verts


def _rays(device, n=1500, seed=0):
    gen = torch.Generator().manual_seed(seed)
    o = ((torch.rand(n, 3, generator=gen) - 0.5) * 4).to(device)
    d = torch.randn(n, 3, generator=gen).to(device)
    return o, d, gen


def _op_by_op(monkeypatch):
    monkeypatch.setattr(_chain_fused, "usable", lambda *args: False)


@pytest.mark.parametrize("bounds", ["floats", "float32 tensors", "float64 tensors"])
def test_fused_fields_equal_op_by_op(device, monkeypatch, bounds):
    scene, _ = _scene(device)
    o, d, gen = _rays(device)
    n = o.shape[0]
    if bounds == "floats":
        tmin, tmax = 0.05, 1e30
    else:
        dtype = torch.float32 if bounds == "float32 tensors" else torch.float64
        tmin = (torch.rand(n, generator=gen, dtype=torch.float64) * 0.5).to(dtype).to(device)
        tmax = torch.where(torch.rand(n, generator=gen) < 0.3, torch.rand(n, generator=gen) * 2, math.inf)
        tmax = tmax.to(dtype).to(device)
    ignore = torch.where(torch.rand(n, generator=gen) < 0.3, torch.randint(0, 35, (n,), generator=gen), -1)
    ray = rt.Ray(o, d, tmax, tmin=tmin)
    calls = []
    real = _chain_fused.engine.evaluate_chain
    monkeypatch.setattr(_chain_fused.engine, "evaluate_chain", lambda *a: calls.append(1) or real(*a))
    fused = scene.trace_reflections(ray, 6, ignore=ignore.to(device))
    assert calls == [1]  # the fused kernel ran, once
    _op_by_op(monkeypatch)
    ref = scene.trace_reflections(ray, 6, ignore=ignore.to(device))
    assert calls == [1]
    for name in IDS:
        assert torch.equal(getattr(fused, name), getattr(ref, name)), name
    counts = ref.num_bounces
    assert (counts == 0).any() and (counts == 6).any() and ((counts > 0) & (counts < 6)).any()
    for name in FIELDS:
        a, b = getattr(fused, name), getattr(ref, name)
        assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)  # the same formulas (bitwise, but for FMAs)
    assert torch.isinf(fused.t[ref.global_prim_id < 0]).all()
    assert (fused.p[ref.global_prim_id < 0] == 0).all()


def test_fused_gradients_equal_op_by_op(device, monkeypatch):
    def grads():
        scene, verts = _scene(device, requires_grad=True)
        o, d, gen = _rays(device, n=400, seed=3)
        o.requires_grad_(True)
        d.requires_grad_(True)
        chain = scene.trace_reflections(rt.Ray(o, d, tmin=0.01), 4)
        gen = torch.Generator().manual_seed(9)
        loss = sum((torch.randn(getattr(chain, k).shape, generator=gen).to(device) * getattr(chain, k)).sum()
                   for k in FIELDS)
        loss.backward()
        return chain, [o.grad, d.grad, verts[0].grad, verts[1].grad, verts[2].grad]

    fused_chain, fused = grads()
    _op_by_op(monkeypatch)
    ref_chain, ref = grads()
    assert torch.equal(fused_chain.num_bounces, ref_chain.num_bounces) and (ref_chain.num_bounces == 4).any()
    for a, b in zip(fused, ref):
        assert b is not None
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert (ref[3] != 0).any() and (ref[4] == 0).all()  # the soup is hit; the disabled soup never


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_fused_forward_makes_few_torch_ops(device):
    # No per-bounce torch work: the op-by-op evaluation made ~250 dispatched ops for 4
    # bounces (149 for 1, 809 for 16); the fused path makes 42 whatever B is (one intersect: 51).
    scene, _ = _scene(device)
    o, d, _ = _rays(device, n=256)
    counts = []
    for bounces in (1, 4, 16):
        scene.trace_reflections(rt.Ray(o, d), bounces)
        with _CountOps() as mode:
            scene.trace_reflections(rt.Ray(o, d), bounces)
        counts.append(mode.count)
    assert counts[0] == counts[1] == counts[2] and counts[0] <= 45, counts
