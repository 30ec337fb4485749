"""Result records list their fields in ``dir()`` and name what a query did not compute."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt


def _scene(device):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device),
                           torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    return scene


def test_intersection_dir_lists_fields(device):
    scene = _scene(device)
    ray = rt.Ray(torch.tensor([[0.2, 0.2, 1.0]], device=device), torch.tensor([0.0, 0, -1], device=device))
    hit = scene.intersect(ray)
    names = {"t", "p", "n", "geo_n", "barycentric", "uv", "prim_id", "shape_id", "global_prim_id"}
    assert names <= set(dir(hit)) and {"is_valid", "flags", "shape"} <= set(dir(hit))
    assert set(hit.fields) == names
    minimal = scene.intersect(ray, flags=rt.RayFlags.Minimal)
    assert "p" not in dir(minimal) and "t" in dir(minimal)
    with pytest.raises(AttributeError, match=r"rayd.torch.Intersection.p: not computed; pass flags=RayFlags.Geometric"):
        minimal.p
    with pytest.raises(AttributeError, match=r"rayd.torch.Intersection has no field 'q'"):
        hit.q


def test_nearest_edge_dir_lists_fields(device):
    scene = _scene(device)
    near = scene.nearest_edge(torch.tensor([[0.5, -1.0, 0.0]], device=device))
    assert {"distance", "edge_t", "edge_point", "edge_id", "shape_id", "global_edge_id"} <= set(dir(near))
    assert "ray_t" not in dir(near)
    assert near.distance.item() == pytest.approx(1.0) and near.is_valid().item()
    with pytest.raises(AttributeError, match=r"rayd.torch.NearestEdge.ray_t: only ray queries have it"):
        near.ray_t
    ray = rt.Ray(torch.tensor([[0.5, -1.0, 1.0]], device=device), torch.tensor([0.0, 0, -1], device=device))
    assert {"ray_t", "ray_point"} <= set(dir(scene.nearest_edge(ray)))
    assert "NearestEdge(shape=(1,)" in repr(near)
