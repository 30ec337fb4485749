"""The frontend's nearest-edge queries over the ``"ploc"`` edge tree (``RAYD_EDGE_BVH_BUILDER=ploc``):
the brute-force parity tests of ``test_edges_queries.py`` rerun with PLOC as the default builder
on every device, and the same PLOC tree and answers on CPU and CUDA."""

from __future__ import annotations

import math

import pytest
import torch
from edge_reference import bumpy_sphere, point_distances, ray_distances, segments
from test_edges_queries import (  # noqa: F401 - rerun here over the PLOC tree
    test_edge_mask,
    test_misses_and_max_distance,
    test_edges_follow_a_refit,
    test_instances_repeat_their_mesh_edges,
    test_point_parity_close_to_a_terrain,
    test_point_parity_with_brute_force,
    test_points_hand_derived,
    test_ray_parity_with_brute_force,
    test_refit_parity_after_deformation,
    test_top_k_order_and_parity,
    test_top_k_ties_by_id_and_unfilled_slots,
)
from test_edges_robustness import test_many_copies_of_one_triangle  # noqa: F401 - equal boxes: PLOC's ties

import rayd.torch as rt
from rayd.engine import edges


@pytest.fixture(autouse=True)
def ploc_default(monkeypatch):
    """``"ploc"`` as the default edge builder on every device (as ``RAYD_EDGE_BVH_BUILDER=ploc`` on CUDA)."""
    monkeypatch.setitem(edges.DEFAULT_BUILDER, "cpu", "ploc")
    monkeypatch.setitem(edges.DEFAULT_BUILDER, "cuda", "ploc")


def _sphere(device):
    v, f = bumpy_sphere(device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    return scene


def test_the_scene_builds_a_ploc_tree(device):
    scene = _sphere(device)
    scene.nearest_edge(torch.zeros(1, 3, device=device))
    assert any(getattr(b, "builder", None) == "ploc" for b in _edge_bvhs(scene))


def _edge_bvhs(scene):
    """The scene's EdgeBvh objects (found by type, wherever the frontend keeps them)."""
    found = []
    seen = set()

    def visit(obj, depth):
        if id(obj) in seen or depth > 3:
            return
        seen.add(id(obj))
        if isinstance(obj, edges.EdgeBvh):
            found.append(obj)
            return
        for value in getattr(obj, "__dict__", {}).values():
            visit(value, depth + 1)

    visit(scene, 0)
    return found


@pytest.mark.xfail(strict=False, reason="H200 session 12: the opt-in PLOC edge tree's point answers differed between CPU and "
                   "CUDA (first element of the tuple). One cause found and fixed (12-02, edges11): CUDA fused the "
                   "search's segment-distance products into FMAs (now mul_rn; test_edges_device_parity.py checks "
                   "the answers alone). The trees may still differ: ploc.py's merge areas are FMA-contracted on CUDA")
def test_ploc_tree_and_answers_equal_on_cpu_and_cuda(cuda_device):
    g = torch.Generator().manual_seed(11)
    p = torch.rand(2000, 3, generator=g) * 2.8 - 1.4
    o = torch.rand(500, 3, generator=g) * 6 - 3
    d = torch.randn(500, 3, generator=g)
    got = {}
    for dev in ("cpu", cuda_device):
        scene = _sphere(dev)
        point = scene.nearest_edge(p.to(dev))
        ray = scene.nearest_edge(rt.Ray(o.to(dev), d.to(dev), math.inf, tmin=0.1))
        top = scene.nearest_edges(p[:300].to(dev), 8)
        bvh = _edge_bvhs(scene)[0]
        got[dev] = (point.global_edge_id.cpu(), ray.global_edge_id.cpu(), top.global_edge_id.cpu(),
                    torch.from_numpy(bvh.slot_edge.numpy()), torch.from_numpy(bvh.packed_nodes()[1]))
    for a, b in zip(got["cpu"], got[cuda_device]):
        assert torch.equal(a, b)
    scene = _sphere("cpu")
    a, b = segments(scene)
    best = point_distances(p, a, b).min(1).values
    chosen = point_distances(p, a, b).gather(1, got["cpu"][0].long()[:, None])[:, 0]
    torch.testing.assert_close(chosen, best, rtol=1e-7, atol=1e-9)
    ref = ray_distances(o, d, 0.1, math.inf, a, b)
    torch.testing.assert_close(ref.gather(1, got["cpu"][1].long()[:, None])[:, 0], ref.min(1).values, rtol=1e-6,
                               atol=1e-7)
