"""Break-it session 21 (helper breakit21c): the hit interval of float64 ``trace_reflections``.

``intersect`` of a float64 ray decides ``tmin < t < tmax`` on the float64 ``t``
(``tests/torch/test_interval_float64_band.py``); segment 0 of a chain is the same ray and
should keep the same first hit. Was: the chain's float32 search took ``tmax`` rounded to
float32, so a hit at ``t`` with ``tmax = t (1 + 1e-12)`` was an empty chain (zero
``path_length`` and zero gradients) while ``intersect`` found it. The ``tmin`` side is a
known limitation (docs/known-limitations.md): strict xfail below.
"""

from __future__ import annotations

import math

import pytest
import torch

import rayd.torch as rt


def _two_planes(device):
    # z = 0.3 (face 0) and z = 0.1 (face 1); a ray straight down from z = 1 meets them at t = 0.7 and 0.9
    v = torch.tensor([[0, 0, 0.3], [1, 0, 0.3], [0, 1, 0.3], [0, 0, 0.1], [1, 0, 0.1], [0, 1, 0.1]],
                     dtype=torch.float64, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2], [3, 4, 5]], device=device)))
    scene.build()
    return scene, v


@pytest.mark.parametrize("rel", [1e-15, 1e-12, 1e-9, 1e-8])
def test_float64_chain_keeps_a_hit_just_inside_tmax(device, rel):
    scene, v = _two_planes(device)
    v.requires_grad_(True)
    t = 1.0 - 0.3
    o = torch.tensor([[0.2, 0.2, 1.0]] * 2, dtype=torch.float64, device=device, requires_grad=True)
    d = torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64, device=device)
    tmax = torch.tensor([t * (1 + rel), t * (1 - rel)], dtype=torch.float64, device=device)
    ray = rt.Ray(o, d, tmax)
    hit = scene.intersect(ray)
    chain = scene.trace_reflections(ray, 2)
    assert hit.prim_id.tolist() == [0, -1]
    assert chain.global_prim_id[:, 0].tolist() == [0, -1]  # was [-1, -1]
    assert chain.t[:, 0].tolist() == [t, math.inf]
    assert chain.num_bounces.tolist() == [1, 0]  # the reflected segment goes up and leaves
    assert chain.path_length.tolist() == [t, 0.0]
    # d path_length / d o_z = 1 on the hit (o rises away from the plane below), 0 on the miss
    (g,) = torch.autograd.grad(chain.path_length.sum(), o)
    assert g[:, 2].tolist() == [1.0, 0.0]


@pytest.mark.xfail(strict=True, reason="known limitation: the chain's float32 search takes tmin rounded to float32 "
                                       "(docs/known-limitations.md, 'tmin of float64 chains')")
def test_float64_chain_keeps_a_hit_just_inside_tmin(device):
    scene, _ = _two_planes(device)
    t = 1.0 - 0.3
    o = torch.tensor([0.2, 0.2, 1.0], dtype=torch.float64, device=device)
    d = torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64, device=device)
    ray = rt.Ray(o, d, tmin=t * (1 - 1e-12))
    assert scene.intersect(ray).prim_id.item() == 0
    assert scene.trace_reflections(ray, 1).global_prim_id[0].item() == 0  # is 1: the face behind
