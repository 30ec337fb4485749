"""Fused optimiser steps change registered tensors in place: the scene must see it.

PyTorch's fused kernels (``fused=True``) do not bump autograd's version counter; rayd's
step post-hook (``rayd.torch._optim``) does, so a fused step is tracked like an unfused one.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

TRI = [[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]
FUSED = [
    lambda p: torch.optim.Adam(p, lr=1.0, fused=True),
    lambda p: torch.optim.AdamW(p, lr=1.0, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.5, fused=True),
]


def _rays(device):
    o = torch.tensor([[0.2, 0.2, 1.0], [3.2, 0.2, 1.0]], device=device)
    return rt.Ray(o, torch.tensor([0.0, 0, -1], device=device).expand(2, 3))


def _step(opt, param, target):
    opt.zero_grad()
    ((param[..., 0] - target) ** 2).sum().backward()
    opt.step()


@pytest.mark.parametrize("make", FUSED, ids=["adam", "adamw", "sgd"])
def test_fused_step_on_vertices_is_pending_and_sync_applies_it(device, make):
    v = torch.nn.Parameter(torch.tensor(TRI, device=device))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)), dynamic=True)
    scene.build()
    opt = make([v])
    for _ in range(3):
        _step(opt, v, 5.0)
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match=r"intersect\(\).*changed in place.*sync\(\)"):
        scene.intersect(_rays(device))
    scene.sync()
    hit = scene.intersect(_rays(device))
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(v.detach().clone(), torch.tensor([[0, 1, 2]], device=device)))
    fresh.build()
    assert torch.equal(hit.t, fresh.intersect(_rays(device)).t)
    assert float(v.detach()[0, 0]) > 1.0  # the triangle moved


def test_fused_step_on_static_vertices_asks_for_build(device):
    v = torch.nn.Parameter(torch.tensor(TRI, device=device))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    opt = torch.optim.Adam([v], lr=1.0, fused=True)
    _step(opt, v, 5.0)
    with pytest.raises(RuntimeError, match=r"static mesh 0 changed in place.*build\(\)"):
        scene.intersect(_rays(device))


def test_fused_step_on_a_transform_is_pending(device):
    m = torch.nn.Parameter(torch.eye(4, device=device))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(TRI, device=device), torch.tensor([[0, 1, 2]], device=device), to_world=m))
    scene.build()
    opt = torch.optim.Adam([m], lr=1.0, fused=True)
    opt.zero_grad()
    ((m[0, 3] - 3.0) ** 2).backward()
    opt.step()
    assert scene.has_pending_updates()
    scene.sync()
    t = scene.intersect(_rays(device)).t
    # x translated by +lr (Adam's first step is lr * sign(grad)): the ray at x = 0.2 now misses,
    # the ray at x = 3.2 is outside [1, 2] too.
    assert float(m[0, 3]) == pytest.approx(1.0)
    assert torch.isinf(t[0]) and torch.isinf(t[1])


def test_fused_parameter_without_gradient_is_not_marked(device):
    v = torch.nn.Parameter(torch.tensor(TRI, device=device))
    other = torch.nn.Parameter(torch.zeros(3, device=device))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))  # static
    scene.build()
    opt = torch.optim.Adam([v, other], lr=1.0, fused=True)
    opt.zero_grad()
    (other ** 2 - 1).sum().backward()  # v has no gradient: the fused step leaves it alone
    opt.step()
    assert not scene.has_pending_updates()
    assert torch.equal(scene.intersect(_rays(device)).t[:1], torch.ones(1, device=device))
