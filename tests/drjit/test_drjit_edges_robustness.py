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


# ------------------------------------------------- item 4: the build-time face snapshot
SQUARE_EDGES = [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]
SQUARE_EDGE_FACES = [[0, -1], [0, -1], [0, 1], [1, -1], [1, -1]]


@pytest.mark.parametrize("instance", [False, True])
@pytest.mark.parametrize("first", ["topology", "query"])
@pytest.mark.parametrize("how", ["setitem", "scatter"])
def test_faces_edited_in_place_after_build_are_not_seen(m, instance, first, how):
    scene, mesh = _square(m, instance=instance)
    if first == "query":  # the topology already exists when the faces change
        scene.nearest_edge(m.Array3f(0.0, 0.0, 0.0))
    # face (1, 3, 2) -> (1, 0, 2): would give three interior edges
    if how == "setitem":
        mesh.faces.y[1] = 0
    else:
        dr.scatter(mesh.faces.y, m.UInt(0), m.UInt(1))
    assert rows(mesh.faces).tolist()[1] == [1, 0, 2]
    top = scene.edge_topology()
    copies = 2 if instance else 1
    assert rows(top.v).tolist() == SQUARE_EDGES * copies
    assert rows(top.faces).tolist() == SQUARE_EDGE_FACES * copies
    assert rows(top.opposite).tolist()[:5] == [[2, -1], [1, -1], [0, 3], [2, -1], [1, -1]]
    hit = scene.intersect(rd.Ray(m.Array3f(0.8, 0.8, 1.0), m.Array3f(0.0, 0.0, -1.0)))
    assert rows(hit.prim_id).tolist() == [1]
    near = scene.nearest_edge(m.Array3f(1.5, 1.5, 0.0))
    assert rows(near.global_edge_id).tolist() == [3]
    assert abs(rows(near.distance)[0] - 0.5**0.5) < 1e-6
    sil = scene.silhouette_edges(m.Array3f(0.3, 0.3, 1.0))
    assert rows(sil).tolist() == [True, True, False, True, True] * copies


def test_faces_snapshot_matches_rayd_torch(backend, m):
    # The same edit in both frontends gives the same (build-time) topology.
    dev = "cpu" if backend == "llvm" else "cuda"
    ds, dmesh = _square(m, instance=True)
    ts = rt.Scene()
    tmesh = rt.Mesh(torch.tensor(SQUARE_V, device=dev), torch.tensor(SQUARE_F, device=dev))
    ts.add_mesh(tmesh)
    shift = torch.eye(4, device=dev)
    shift[2, 3] = 5.0
    ts.add_instance(0, shift)
    ts.build()
    dmesh.faces.y[1] = 0
    tmesh.faces[1, 1] = 0
    dt, tt = ds.edge_topology(), ts.edge_topology()
    for name in ("v", "faces", "opposite", "shape_id", "edge_id", "global_edge_id", "is_boundary"):
        assert rows(getattr(dt, name)).tolist() == getattr(tt, name).cpu().tolist(), name
