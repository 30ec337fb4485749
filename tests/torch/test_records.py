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


def test_every_record_lists_its_fields_in_dir(device):
    # Issue 13: `dir()` of every record lists its fields (each query's record, both query kinds).
    v = torch.tensor([[-1.0, -1, 3], [1, -1, 3], [0, 1, 3]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    ray = rt.Ray(torch.tensor([[0.0, -0.3, 0.0]], device=device), torch.tensor([0.0, 0, 1], device=device))
    point = torch.tensor([[0.0, -2.0, 3.0]], device=device)
    source = torch.tensor([[0.0, -0.3, 0.0]], dtype=torch.float64, device=device)
    target = torch.tensor([[0.2, -0.3, 0.0]], dtype=torch.float64, device=device)
    records = {
        rt.Intersection: [scene.intersect(ray), scene.intersect_all(ray, 2)],
        rt.NearestEdge: [scene.nearest_edge(point), scene.nearest_edge(ray), scene.nearest_edges(point, 2)],
        rt.ClosestPoint: [scene.closest_point(point)],
        rt.ReflectionChain: [scene.trace_reflections(ray, 2)],
        rt.SpecularPaths: [scene.specular_paths(source, target, torch.tensor([[0]], device=device))],
        rt.SpecularPathSet: [rt.find_specular_paths(scene, source, target, 1, num_rays=100)],
        rt.EdgeSamples: [rt.Camera(8, 8, fov_y=90.0).sample_edges(scene, 4, generator=torch.Generator().manual_seed(0))],
    }
    for cls, made in records.items():
        for record in made:
            assert type(record) is cls and record.fields
            assert set(record.fields) <= set(dir(record)), (cls, set(record.fields) - set(dir(record)))
            assert {"fields", "detach"} <= set(dir(record))
