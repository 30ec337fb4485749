"""rayd.drjit edge queries under hostile input (issue 19): empty batches as the first query,
faces edited in place after build(), and edges shared by many faces (bounded topology)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import rows, vec

SQUARE_V = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
SQUARE_F = [[0, 1, 2], [1, 3, 2]]  # edges (0,1) (0,2) (1,2) (1,3) (2,3)


def _square(m, double=False, instance=False):
    scene = rd.Scene()
    mesh = rd.Mesh(vec(m.Array3f64 if double else m.Array3f, SQUARE_V), vec(m.Array3u, SQUARE_F))
    scene.add_mesh(mesh)
    if instance:
        shift = np.eye(4)
        shift[2, 3] = 5.0
        scene.add_instance(0, m.Matrix4f(shift.tolist()))
    scene.build()
    return scene, mesh


# --------------------------------------------------------------- item 7: empty batches
def _check_fields(m, result, shape, double, ray=False):
    assert result.shape == shape
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    for name in ["distance", "edge_t"] + (["ray_t"] if ray else []):
        assert isinstance(getattr(result, name), Float) and dr.width(getattr(result, name)) == 0, name
    for name in ["edge_point"] + (["ray_point"] if ray else []):
        assert isinstance(getattr(result, name), Array3) and dr.width(getattr(result, name)) == 0, name
    for name in ("edge_id", "shape_id", "global_edge_id"):
        assert isinstance(getattr(result, name), m.Int) and dr.width(getattr(result, name)) == 0, name


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("instance", [False, True])
def test_empty_batches_are_valid_first_queries(m, double, instance):
    Array3 = m.Array3f64 if double else m.Array3f
    for query in ("points", "top_k", "ray"):
        scene, _ = _square(m, double, instance)
        if query == "points":
            _check_fields(m, scene.nearest_edge(Array3()), (0,), double)
        elif query == "top_k":
            _check_fields(m, scene.nearest_edges(Array3(), 3), (0, 3), double)
        else:
            _check_fields(m, scene.nearest_edge(rd.Ray(Array3(), Array3())), (0,), double, ray=True)
        # A later non-empty query works: (0.5, -1, 0) is 1 from edge (0, 1).
        later = scene.nearest_edge(Array3(0.5, -1.0, 0.0))
        assert rows(later.distance).tolist() == [1.0]
        assert rows(later.global_edge_id).tolist() == [0]
        top = scene.nearest_edges(Array3(0.5, -1.0, 0.0), 2)
        assert rows(top.global_edge_id).tolist()[0] == 0
        ray = scene.nearest_edge(rd.Ray(Array3(-3.0, -1.0, 0.0), Array3(1.0, 0.0, 0.0)))
        assert rows(ray.distance).tolist() == [1.0]


def test_empty_batch_with_active_then_topology(m):
    scene, _ = _square(m)
    result = scene.nearest_edge(m.Array3f(), m.Bool())
    _check_fields(m, result, (0,), False)
    assert scene.edge_topology().num_edges == 5
