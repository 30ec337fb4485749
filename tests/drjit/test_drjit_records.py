"""Result records of rayd.drjit list their fields in ``dir()`` (as rayd.torch's)."""

from __future__ import annotations

import pytest

import rayd.drjit as rd


def _scene(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2])))
    scene.build()
    return scene


def test_records_dir_lists_fields(m):
    scene = _scene(m)
    hit = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1.0), m.Array3f(0.0, 0.0, -1.0)))
    assert {"t", "p", "n", "geo_n", "barycentric", "uv", "prim_id", "shape_id", "global_prim_id"} <= set(dir(hit))
    near = scene.nearest_edge(m.Array3f(0.5, -1.0, 0.0))
    assert {"distance", "edge_t", "edge_point", "global_edge_id"} <= set(dir(near)) and "ray_t" not in dir(near)
    assert near.distance[0] == pytest.approx(1.0)
    with pytest.raises(AttributeError, match=r"rayd.drjit.NearestEdge.ray_t: only ray queries have it"):
        near.ray_t


def test_every_record_lists_its_fields_in_dir(m):
    # Issue 13: `dir()` of every record lists its fields (each query's record, both query kinds).
    import numpy as np

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f([-1, 1, 0], [-1, -1, 1], [3, 3, 3]), m.Array3u([0], [1], [2])))
    scene.build()
    ray = rd.Ray(m.Array3f(0.0, -0.3, 0.0), m.Array3f(0.0, 0.0, 1.0))
    point = m.Array3f(0.0, -2.0, 3.0)
    source, target = m.Array3f64(0.0, -0.3, 0.0), m.Array3f64(0.2, -0.3, 0.0)
    records = {
        rd.Intersection: [scene.intersect(ray)],
        rd.Intersections: [scene.intersect_all(ray, 2)],
        rd.NearestEdge: [scene.nearest_edge(point), scene.nearest_edge(ray), scene.nearest_edges(point, 2)],
        rd.ClosestPoint: [scene.closest_point(point)],
        rd.ReflectionChain: [scene.trace_reflections(ray, 2)],
        rd.SpecularPaths: [scene.specular_paths(source, target, m.TensorXi(np.zeros((1, 1), np.int32)))],
        rd.SpecularPathSet: [rd.find_specular_paths(scene, source, target, 1, num_rays=100)],
        rd.EdgeSamples: [rd.Camera(8, 8, fov_y=90.0).sample_edges(scene, 4, generator=np.random.default_rng(0))],
    }
    for cls, made in records.items():
        for record in made:
            assert type(record) is cls and record.fields
            assert set(record.fields) <= set(dir(record)), (cls, set(record.fields) - set(dir(record)))
            assert {"fields", "detach"} <= set(dir(record))
