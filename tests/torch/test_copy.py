"""copy.deepcopy(scene): an independent scene with the same shapes, state and answers (issue 16)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import rayd.torch as rt
from sphere_mesh import uv_sphere

F64 = torch.float64


def _rays(device):
    gen = torch.Generator().manual_seed(2)
    o = torch.tensor([0.0, 0.0, -5.0], dtype=F64, device=device)
    d = (torch.randn(64, 3, generator=gen, dtype=F64) * 0.25 + torch.tensor([0.0, 0.0, 1.0], dtype=F64)).to(device)
    return rt.Ray(o, d)


def _scene(device):
    v, f = uv_sphere(dtype=F64, device=device)
    v = v.clone().requires_grad_()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)  # 0
    m = torch.eye(4, dtype=F64, device=device)
    m[0, 3] = 2.5
    scene.add_mesh(rt.Mesh(v.detach() * 0.5, f, to_world=m))  # 1
    batch = torch.eye(4, dtype=F64, device=device).repeat(2, 1, 1)
    batch[:, 1, 3] = torch.tensor([2.5, -2.5], dtype=F64)
    scene.add_instance(1, torch.eye(4, dtype=F64, device=device))  # 2
    scene.add_instance(1, torch.eye(4, dtype=F64, device=device))  # 3
    scene.set_mesh_transform([2, 3], batch)
    scene.build()
    scene.set_shape_enabled(3, False)
    scene.sync()
    return scene, v


def _answers(scene, device):
    hit = scene.intersect(_rays(device))
    pts = torch.linspace(-3, 3, 21, dtype=F64, device=device)[:, None].expand(21, 3) * torch.tensor(
        [1.0, 0.3, 0.1], dtype=F64, device=device)
    return hit.t, hit.shape_id, scene.nearest_edge(pts).distance, scene.closest_point(pts).global_prim_id


def test_deepcopy_answers_like_the_original_and_is_independent(device):
    scene, v = _scene(device)
    mask = torch.ones(scene.edge_topology().num_edges, dtype=torch.bool, device=device)
    mask[::3] = False
    scene.set_edge_mask(mask)
    scene.sync()
    twin = copy.deepcopy(scene)
    assert twin.is_ready() and twin.num_shapes == scene.num_shapes and twin.device == scene.device
    for a, b in zip(_answers(scene, device), _answers(twin, device)):
        assert torch.equal(a, b)
    pts = torch.tensor([[2.5, 0.0, 0.0], [2.5, 2.5, 0.0], [2.5, -2.5, 0.0]], dtype=F64, device=device)
    assert twin.closest_point(pts).shape_id.tolist() == [1, 2, 1]  # instance 3 (y = -2.5) is disabled there too
    assert torch.equal(twin.edge_mask(), mask)
    # independent: moving the original's dynamic mesh leaves the copy as it was
    before = _answers(twin, device)
    with torch.no_grad():
        v.mul_(1.2)
    scene.sync()
    assert not torch.equal(_answers(scene, device)[0], before[0])
    assert twin.is_ready()
    for a, b in zip(before, _answers(twin, device)):
        assert torch.equal(a, b)
    # the copy's vertices are its own leaf tensor, and gradients reach it, not the original
    v_twin = twin._core.table.meshes[0].vertices
    assert v_twin is not v and v_twin.requires_grad and v_twin.is_leaf
    torch.where(twin.intersect(_rays(device)).is_valid(), twin.intersect(_rays(device)).t, 0).sum().backward()
    assert v_twin.grad is not None and v.grad is None
    # a copy keeps the shape kinds: 1 is a transformed mesh, 2 and 3 instances of it
    assert [s.is_instance for s in twin._core.table.shapes] == [False, False, True, True]
    twin.update_mesh_vertices(0, v_twin.detach() * 0.9)  # dynamic stays dynamic
    twin.sync()
    with pytest.raises(RuntimeError, match=r"mesh 1 was added with dynamic=False"):
        twin.update_mesh_vertices(1, v_twin.detach())


def test_deepcopy_shares_tensors_copied_together_and_copies_unbuilt_scenes(device):
    scene, v = _scene(device)
    twin, v2 = copy.deepcopy((scene, v))
    assert twin._core.table.meshes[0].vertices is v2
    with torch.no_grad():
        v2.add_(0.1)  # an in-place change of the copied tensor is seen by the copy
    assert twin.has_pending_updates() and not scene.has_pending_updates()
    fresh = rt.Scene()
    fresh.add_mesh(rt.Mesh(*uv_sphere(dtype=F64, device=device)))
    other = copy.deepcopy(fresh)
    assert not other.is_ready()
    other.build()
    assert other.intersect(_rays(device)).is_valid().any()


def test_deepcopy_of_a_pending_scene_applies_the_updates(device):
    scene, v = _scene(device)
    scene.update_mesh_vertices(0, v.detach() * 1.3)
    twin = copy.deepcopy(scene)
    assert scene.has_pending_updates() and twin.is_ready()
    scene.sync()
    for a, b in zip(_answers(scene, device), _answers(twin, device)):
        assert torch.equal(a, b)


def test_shallow_copy_and_pickle_are_clear_errors(device):
    scene, _ = _scene(device)
    with pytest.raises(TypeError, match=r"copy.copy\(rayd.torch.Scene\): .*use copy.deepcopy"):
        copy.copy(scene)
    with pytest.raises(TypeError, match=r"pickle.dumps\(rayd.torch.Scene\): .*cannot be pickled"):
        pickle.dumps(scene)
