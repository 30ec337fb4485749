"""Regressions from the break-it pass over rayd.core (both frontends where it applies)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rayd.torch as rt

F64 = torch.float64
C = [1e6, -2e6, 5e5]


def _two_strips(device, centre):
    c = torch.tensor(centre, dtype=F64, device=device)
    v = torch.tensor([[0, 0, 0], [1, 0, 0], [0, -1, 0], [0, 0.02, 0], [1, 0.02, 0], [0, 1, 0]], dtype=F64,
                     device=device) + c
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2], [3, 4, 5]], device=device)))
    scene.build()
    ts = torch.linspace(0.1, 0.9, 9, dtype=F64, device=device)
    p = c + torch.stack([ts, torch.full_like(ts, 0.015), torch.zeros_like(ts)], 1)
    return scene, p


def test_nearest_edge_far_from_the_origin_searches_relative_to_the_centre(device):
    # Two edges 0.01 apart in distance, 1e6 from the origin: the float32 search must tell them apart.
    scene, p = _two_strips(device, C)
    near = scene.nearest_edge(p)
    top = scene.edge_topology()
    assert top.v[near.global_edge_id.long()].tolist() == [[3, 4]] * 9
    torch.testing.assert_close(near.distance, torch.full((9,), 0.005, dtype=F64, device=device), atol=1e-9, rtol=0)
    ray = rt.Ray(p, torch.tensor([0.0, 0.0, 1.0], dtype=F64, device=device))
    assert scene.nearest_edge(ray).global_edge_id.tolist() == near.global_edge_id.tolist()
    top2 = scene.nearest_edges(p, 2)
    assert top2.global_edge_id[:, 0].tolist() == near.global_edge_id.tolist()


def _matrix_scene(device, dtype=F64):
    m = torch.eye(4, dtype=dtype, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=F64, device=device),
                           torch.tensor([[0, 1, 2]], device=device), to_world=m))
    scene.build()
    return scene, m


@pytest.mark.parametrize("value,what", [(math.nan, "non-finite"), (0.0, "singular"), (1e39, "float32")])
def test_matrix_written_in_place_is_checked_at_sync(device, value, what):
    scene, m = _matrix_scene(device)
    m[0, 0] = value
    with pytest.raises(ValueError, match=rf"rayd.torch.Scene.sync\(\): the matrix of mesh 0 \(changed in place\).*{what}"):
        scene.sync()


def test_matrix_resized_in_place_is_a_clear_error(device):
    scene, m = _matrix_scene(device, torch.float32)  # (a float64 CPU matrix shares storage with NumPy: not resizable)
    m.resize_(2, 2)
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.sync\(\): the matrix of mesh 0 no longer holds 4x4"):
        scene.sync()
    scene, m = _matrix_scene(device, torch.float32)
    with torch.no_grad():
        m.resize_(8, 4)
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.sync\(\): the matrix of mesh 0 must keep the shape"):
        scene.sync()


def test_batch_source_resized_in_place_is_a_clear_error(device):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device),
                           torch.tensor([[0, 1, 2]], device=device)))
    ids = [scene.add_instance(0, torch.eye(4, device=device)) for _ in range(2)]
    scene.build()
    batch = torch.eye(4, device=device).repeat(2, 1, 1)
    scene.set_mesh_transform(ids, batch)
    scene.sync()
    batch.resize_(1, 4, 4)
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.sync\(\): the matrix of instance \d must keep the shape"):
        scene.sync()


def test_vertices_resized_in_place_is_a_clear_error(device):
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    mesh = rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device))
    scene = rt.Scene()
    scene.add_mesh(mesh, dynamic=True)
    scene.build()
    v.resize_(3, 4)
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.sync\(\): 'vertices of mesh 0' must have shape \(n, 3\)"):
        scene.sync()
    other = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    scene2 = rt.Scene()
    scene2.add_mesh(rt.Mesh(other, torch.tensor([[0, 1, 2]], device=device)))
    other.resize_(3, 1)
    with pytest.raises(ValueError, match=r"rayd.torch.Scene.build\(\): 'vertices of mesh 0' must have shape"):
        scene2.build()


def test_float64_vertices_beyond_float32_are_refused(device):
    scene = rt.Scene()
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1e39, 0]], dtype=F64, device=device)
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    with pytest.raises(ValueError, match=r"'vertices of mesh 0' holds values beyond the float32 range \(first at row 2\)"):
        scene.build()


def test_is_ready_waits_for_a_pending_edge_mask(device):
    scene, _ = _matrix_scene(device)
    assert scene.is_ready()
    scene.set_edge_mask(torch.tensor([True, False, True], device=device))
    assert scene.has_pending_updates() and not scene.is_ready()
    scene.sync()
    assert scene.is_ready() and not scene.has_pending_updates()
    assert scene.nearest_edge(torch.tensor([0.5, -1.0, 0.0], dtype=F64, device=device)).is_valid().item()


def test_vmap_equals_the_batch(device):
    """torch.func.vmap over rays/points (once a clear error, now supported: tests/torch/test_vmap.py)."""
    scene, _ = _matrix_scene(device)
    d = torch.tensor([0.0, 0, -1], dtype=F64, device=device)
    o = torch.rand(4, 3, dtype=F64, device=device) * 0.3 + torch.tensor([0, 0, 1.0], dtype=F64, device=device)
    for fn in (lambda x: scene.intersect(rt.Ray(x, d)).t, lambda x: scene.shadow_test(rt.Ray(x, d)),
               lambda x: scene.nearest_edge(x).distance):
        assert torch.equal(torch.func.vmap(fn)(o), fn(o))
    # the batch as a leading dimension gives what vmap gives
    assert torch.allclose(scene.intersect(rt.Ray(o, d)).t, o[:, 2])


def test_numpy_integer_ignore(device):
    scene, _ = _matrix_scene(device)
    ray = rt.Ray(torch.tensor([0.2, 0.2, 1.0], dtype=F64, device=device), torch.tensor([0.0, 0, -1], dtype=F64,
                                                                                       device=device))
    assert not scene.intersect(ray, ignore=np.int64(0)).is_valid().item()
    assert scene.intersect(ray, ignore=np.int32(-1)).is_valid().item()
