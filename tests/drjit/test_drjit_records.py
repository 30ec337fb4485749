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
