"""Records behave like a batch of tensors: ``detach()``, ``to()``, indexing by mask / index / slice."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt


def _close(value, expected, atol=1e-6):
    """``value`` (any device) equals ``expected`` within ``atol`` (inf where expected is inf)."""
    want = torch.tensor(expected, dtype=torch.float64)
    got = value.detach().cpu().double()
    return got.shape == want.shape and torch.allclose(got, want, atol=atol, rtol=0)


def _scene(device, dtype=torch.float32):
    # unit right triangle in z = 0
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device, dtype=dtype),
                           torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    return scene


def _rays(device, dtype=torch.float32):
    o = torch.tensor([[0.2, 0.2, 1.0], [5.0, 5.0, 1.0], [0.1, 0.3, 2.0]], device=device, dtype=dtype,
                     requires_grad=True)
    return o, rt.Ray(o, torch.tensor([0.0, 0, -1], device=device, dtype=dtype))


def test_mask_selects_rays_with_same_fields_and_flags(device):
    scene = _scene(device)
    o, ray = _rays(device)
    hit = scene.intersect(ray)
    sel = hit[hit.is_valid()]
    assert type(sel) is rt.Intersection and sel.flags == hit.flags and sel.fields == hit.fields
    assert sel.shape == (2,) and len(sel) == 2
    assert _close(sel.t, [1.0, 2.0])
    assert _close(sel.p, [[0.2, 0.2, 0.0], [0.1, 0.3, 0.0]])
    assert _close(sel.barycentric, [[0.6, 0.2, 0.2], [0.6, 0.1, 0.3]])
    assert sel.prim_id.tolist() == [0, 0] and sel.prim_id.dtype == torch.int32
    assert sel.is_valid().all()
    # gradients flow through the selection: t = o_z for d = (0, 0, -1)
    sel.t.sum().backward()
    assert _close(o.grad, [[0, 0, 1], [0, 0, 0], [0, 0, 1]])


def test_index_and_slice(device):
    scene = _scene(device)
    _, ray = _rays(device)
    hit = scene.intersect(ray)
    picked = hit[torch.tensor([2, 1, 0], device=device)]
    assert _close(picked.t, [2.0, float("inf"), 1.0])
    assert picked.shape_id.tolist() == [0, -1, 0]
    one = hit[0]
    assert one.shape == () and one.t.item() == pytest.approx(1.0) and one.p.shape == (3,)
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d rayd.torch.Intersection"):
        len(one)
    tail = hit[1:]
    assert _close(tail.t, [float("inf"), 2.0])
    assert tail.p[0].tolist() == [0.0, 0.0, 0.0]  # miss value kept


def test_ellipsis_indexes_batch_dims_only(device):
    scene = _scene(device)
    o = torch.tensor([[[0.2, 0.2, 1.0], [5.0, 5.0, 1.0]], [[0.1, 0.3, 2.0], [0.5, 0.25, 3.0]]], device=device)
    hit = scene.intersect(rt.Ray(o, torch.tensor([0.0, 0, -1], device=device)))
    assert hit.shape == (2, 2)
    col = hit[..., 0]  # the first ray of each row, not the x component of p
    assert col.shape == (2,) and col.p.shape == (2, 3) and col.uv.shape == (2, 2)
    assert _close(col.t, [1.0, 2.0])
    assert _close(col.p, [[0.2, 0.2, 0.0], [0.1, 0.3, 0.0]])
    # a mask over the leading dim keeps the rest
    rows = hit[torch.tensor([False, True], device=device)]
    assert rows.shape == (1, 2) and _close(rows.t, [[2.0, 3.0]])
    # a full mask flattens
    flat = hit[hit.is_valid()]
    assert _close(flat.t, [1.0, 2.0, 3.0])


def test_bad_mask_shape_is_index_error(device):
    hit = _scene(device).intersect(_rays(device)[1])
    with pytest.raises(IndexError, match=r"rayd.torch.Intersection\[mask\]: a bool mask must have the record's "
                                         r"batch shape \(3,\)"):
        hit[torch.tensor([True, False], device=device)]


def test_minimal_record_stays_minimal(device):
    hit = _scene(device).intersect(_rays(device)[1], flags=rt.RayFlags.Minimal)
    sel = hit[hit.is_valid()].detach()
    assert sel.flags == rt.RayFlags.Minimal and _close(sel.t, [1.0, 2.0])
    with pytest.raises(AttributeError, match="pass flags=RayFlags.Geometric"):
        sel.p


def test_detach_shares_memory_and_cuts_the_graph(device):
    hit = _scene(device).intersect(_rays(device)[1])
    assert hit.t.requires_grad
    det = hit.detach()
    assert type(det) is rt.Intersection
    for name in hit.fields:
        assert not getattr(det, name).requires_grad
        assert getattr(det, name).data_ptr() == getattr(hit, name).data_ptr()
        assert torch.equal(getattr(det, name), getattr(hit, name).detach())


def test_to_dtype_converts_float_fields_only(device):
    hit = _scene(device).intersect(_rays(device)[1])
    wide = hit.to(torch.float64)
    assert wide.t.dtype == torch.float64 and wide.p.dtype == torch.float64
    assert wide.prim_id.dtype == torch.int32 and wide.global_prim_id.dtype == torch.int32
    assert _close(wide.t, [1.0, float("inf"), 2.0])
    same = hit.to(device)
    assert same.t is hit.t  # already there: no copy
    assert hit.cpu().t.device.type == "cpu"
    with pytest.raises(TypeError, match=r"rayd.torch.Intersection.to\(\): 'dtype' must be a floating dtype"):
        hit.to(dtype=torch.int64)


def test_to_cuda_round_trip(cuda_device):
    hit = _scene("cpu").intersect(_rays("cpu")[1])
    there = hit.to(cuda_device)
    assert there.t.device.type == "cuda" and there.prim_id.device.type == "cuda"
    back = there.cpu()
    for name in hit.fields:
        assert torch.equal(getattr(back, name), getattr(hit, name).detach())


def test_nearest_edge_indexing(device):
    scene = _scene(device)
    pts = torch.tensor([[0.5, -1.0, 0.0], [0.2, 0.2, 0.0], [0.0, 0.5, 3.0]], device=device)
    near = scene.nearest_edge(pts)
    sel = near[torch.tensor([True, False, True], device=device)]
    assert type(sel) is rt.NearestEdge and sel.shape == (2,)
    assert _close(sel.distance, [1.0, 3.0])
    assert _close(sel.edge_point, [[0.5, 0.0, 0.0], [0.0, 0.5, 0.0]])
    with pytest.raises(AttributeError, match="only ray queries have it"):
        sel.ray_t
    assert not sel.detach().distance.requires_grad


def test_nearest_edges_top_k_index_leading_dims(device):
    scene = _scene(device)
    pts = torch.tensor([[0.5, -1.0, 0.0], [0.2, 0.2, 0.0]], device=device)
    near = scene.nearest_edges(pts, 2)
    assert near.shape == (2, 2)
    sel = near[torch.tensor([False, True], device=device)]
    assert sel.shape == (1, 2) and sel.edge_point.shape == (1, 2, 3)
    # (0.2, 0.2): 0.2 from the edges x = 0 and y = 0 (tie broken by global_edge_id), 0.6/sqrt(2) from the hypotenuse
    assert _close(sel.distance, [[0.2, 0.2]])
    first = near[..., 0]
    single = scene.nearest_edge(pts)
    assert first.shape == (2,) and first.edge_point.shape == (2, 3)
    assert torch.equal(first.global_edge_id, single.global_edge_id)
    assert torch.allclose(first.distance, single.distance)


def test_ray_nearest_edge_indexing_keeps_ray_fields(device):
    scene = _scene(device)
    ray = rt.Ray(torch.tensor([[0.5, -1.0, 1.0], [9.0, 9.0, 9.0]], device=device),
                 torch.tensor([0.0, 0, -1], device=device), tmax=0.5)
    near = scene.nearest_edge(ray, max_distance=2.0)
    assert near.is_valid().tolist() == [True, False]
    sel = near[near.is_valid()]
    # the segment z in [0.5, 1] above (0.5, -1): closest point (0.5, -1, 0.5), edge point (0.5, 0, 0)
    assert _close(sel.ray_t, [0.5]) and _close(sel.distance, [1.25 ** 0.5])
    assert _close(sel.ray_point, [[0.5, -1.0, 0.5]])
