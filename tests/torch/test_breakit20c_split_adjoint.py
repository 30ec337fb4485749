"""The CPU split adjoint with gradients wanted for only some inputs (session 20, helper breakit20c).

rayd.torch's fused ``intersect`` backward splits over the CPU cores from its second call on
(``rayd.engine.evaluate._adjoint_split``, batches of at least ``CPU_SPLIT_MIN`` rays). The split
sliced ``grad_o`` / ``grad_d`` and copied ``grad_vertices`` without checking for ``None``, so the
common case of optimising vertices with fixed rays (``o``, ``d`` without ``requires_grad``) and a
loss on ``p`` (or any field beyond ``t``) raised ``TypeError: 'NoneType' object is not subscriptable``
at the second ``backward()``; so did rays-only gradients. Each case is checked against the
op-by-op path (deterministic mode), for two backward passes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import evaluate

N = 12_000  # above CPU_SPLIT_MIN (8192)


def _inputs():
    trimesh = pytest.importorskip("trimesh")
    mesh = trimesh.creation.icosphere(subdivisions=3)
    v = torch.tensor(np.asarray(mesh.vertices), dtype=torch.float32)
    f = torch.tensor(np.asarray(mesh.faces), dtype=torch.int64)
    g = torch.Generator().manual_seed(5)
    o = torch.randn(N, 3, generator=g) * 3
    d = torch.randn(N, 3, generator=g) * 0.3 - 0.3 * o
    return v, f, o, d


def _step(v, f, o, d, wants, deterministic):
    v, o, d = (x.clone().requires_grad_(name in wants) for name, x in (("v", v), ("o", o), ("d", d)))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    torch.use_deterministic_algorithms(deterministic)
    try:
        grads = []
        for _ in range(2):  # the first backward runs one launch; the second splits over the cores
            hit = scene.intersect(rt.Ray(o, d))
            valid = hit.is_valid()
            loss = torch.where(valid, hit.t, 0.0).sum() + hit.p[..., 0].sum() + hit.geo_n[..., 2].sum()
            inputs = [x for name, x in (("v", v), ("o", o), ("d", d)) if name in wants]
            grads.append(torch.autograd.grad(loss, inputs))
    finally:
        torch.use_deterministic_algorithms(False)
    assert int(valid.sum()) > 2000
    return grads


@pytest.mark.parametrize("wants", [("v",), ("o",), ("d",), ("o", "d"), ("v", "d")])
def test_split_backward_with_some_gradients(wants, monkeypatch):
    if (__import__("os").cpu_count() or 1) < 2:
        pytest.skip("the split runs on several cores only")
    calls = []
    real = evaluate._adjoint_split
    monkeypatch.setattr(evaluate, "_adjoint_split", lambda *a: (calls.append(1), real(*a))[1])
    v, f, o, d = _inputs()
    fused = _step(v, f, o, d, wants, deterministic=False)
    assert calls, "the split adjoint did not run"
    reference = _step(v, f, o, d, wants, deterministic=True)
    for step in range(2):
        for a, b in zip(fused[step], reference[step]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
