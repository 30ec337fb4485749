"""The fused evaluation's adjoint split over CPU cores (rayd.engine.evaluate._adjoint_split):
gradients equal the one-launch adjoint and the op-by-op path, per-row and broadcast rays."""

from __future__ import annotations

import numpy as np
import pytest
import reference
import torch

import rayd.torch as rt
from rayd.engine import evaluate


CALLS = {"split": 0}
_real_split = evaluate._adjoint_split


def _counted_split(*args):
    CALLS["split"] += 1
    return _real_split(*args)


def _grads(o, d, vertices, faces, split: bool, op_by_op: bool = False):
    was = evaluate.CPU_SPLIT_MIN
    evaluate.CPU_SPLIT_MIN = 8192 if split else 1 << 40
    o = o.clone().requires_grad_(True)
    d = d.clone().requires_grad_(True)
    v = vertices.clone().requires_grad_(True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, faces))
    scene.build()
    try:
        if op_by_op:
            torch.use_deterministic_algorithms(True)
        hit = scene.intersect(rt.Ray(o, d), flags=rt.RayFlags.Geometric)
        valid = hit.is_valid()
        w = torch.linspace(0.5, 1.5, valid.numel()).reshape(valid.shape)
        loss = (torch.where(valid, hit.t, 0.0) * w).sum() + (hit.p * w[..., None]).sum() + hit.geo_n.sum()
        loss.backward()
    finally:
        torch.use_deterministic_algorithms(False)
        evaluate.CPU_SPLIT_MIN = was
    assert int(valid.sum()) > 1000
    return o.grad, d.grad, v.grad


@pytest.mark.parametrize("broadcast_origin", [False, True])
def test_split_adjoint_matches_one_launch_and_op_by_op(broadcast_origin):
    vertices, faces = reference.icosphere(3)
    vertices = torch.as_tensor(vertices, dtype=torch.float32)
    faces = torch.as_tensor(faces)
    rng = np.random.default_rng(5)
    n = 20000  # above the split threshold: several chunks per core
    target = torch.as_tensor(rng.uniform(-0.7, 0.7, (n, 3)), dtype=torch.float32)
    if broadcast_origin:
        o = torch.tensor([[0.1, -0.2, 3.0]])
    else:
        o = torch.as_tensor(rng.normal(size=(n, 3)) * 3.0, dtype=torch.float32)
    d = target - o if not broadcast_origin else target - o.expand(n, 3)
    if broadcast_origin:
        d = d.contiguous()
    # Warm the kernel (the first launch of a kernel is never split).
    _grads(o, d, vertices, faces, split=False)
    evaluate._adjoint_split = _counted_split
    try:
        split = _grads(o, d, vertices, faces, split=True)
    finally:
        evaluate._adjoint_split = _real_split
    assert CALLS["split"] == 1, "the split adjoint did not run"
    CALLS["split"] = 0
    one = _grads(o, d, vertices, faces, split=False)
    ref = _grads(o, d, vertices, faces, split=False, op_by_op=True)
    for a, b, c in zip(split, one, ref):
        assert a.shape == b.shape == c.shape
        scale = float(c.abs().max())
        assert scale > 0
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * scale)
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-4 * scale)


def test_backward_of_zero_rays_keeps_contiguous_gradients():
    # A rank with no rays (DDP, fewer rays than ranks): the CPU zero buffers of the backward
    # must still be contiguous (N, 3) views for Warp (NumPy's empty arrays have zero strides).
    vertices, faces = reference.icosphere(1)
    v = torch.as_tensor(vertices, dtype=torch.float32).requires_grad_(True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.as_tensor(faces)))
    scene.build()
    o = torch.zeros((0, 3), requires_grad=True)
    d = torch.ones((0, 3), requires_grad=True)
    hit = scene.intersect(rt.Ray(o, d), flags=rt.RayFlags.Minimal)
    (hit.t.sum() + v.sum()).backward()
    assert o.grad is not None and o.grad.shape == (0, 3)
    torch.testing.assert_close(v.grad, torch.ones_like(v))
