"""The same nearest edges on CPU and CUDA, for the default edge trees of each device (they differ:
Warp's SAH tree on the CPU, the LBVH on CUDA), for the opt-in PLOC tree and for the 4-wide walk.

The winner is the float32 minimum of (distance, id) over all unmasked edges, whatever the tree;
the segment distances are rounded alike on both devices (``nearest_edge_kernels._dot_rn``), so the
ids must be equal, ties included (a query nearest to a vertex is equally near all its edges)."""

from __future__ import annotations

import math

import pytest
import torch
from edge_reference import bumpy_sphere

import rayd.torch as rt
from rayd.engine import edges


def _answers(device):
    g = torch.Generator().manual_seed(11)
    p = torch.rand(2000, 3, generator=g) * 2.8 - 1.4
    o = torch.rand(500, 3, generator=g) * 6 - 3
    d = torch.randn(500, 3, generator=g)
    v, f = bumpy_sphere(device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    point = scene.nearest_edge(p.to(device))
    ray = scene.nearest_edge(rt.Ray(o.to(device), d.to(device), math.inf, tmin=0.1))
    top = scene.nearest_edges(p[:300].to(device), 8)
    return point.global_edge_id.cpu(), ray.global_edge_id.cpu(), top.global_edge_id.cpu()


@pytest.mark.parametrize("builders,wide", [(None, False), ("ploc", False), ("ploc", True), ("lbvh", True),
                                           ("ploc", "q"), ("ploc", "qs")])
def test_nearest_edges_equal_on_cpu_and_cuda(cuda_device, monkeypatch, builders, wide):
    if builders is not None:
        monkeypatch.setitem(edges.DEFAULT_BUILDER, "cpu", builders)
        monkeypatch.setitem(edges.DEFAULT_BUILDER, "cuda", builders)
    monkeypatch.setitem(edges.DEFAULT_WIDE, "cpu", wide)
    monkeypatch.setitem(edges.DEFAULT_WIDE, "cuda", wide)
    cpu = _answers("cpu")
    gpu = _answers(cuda_device)
    for a, b in zip(cpu, gpu):
        assert torch.equal(a, b)
