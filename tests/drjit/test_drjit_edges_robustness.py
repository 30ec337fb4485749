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
def test_faces_edited_in_place_after_build_are_refused_until_build(m, instance, first, how):
    # Edge queries and intersect use one face snapshot: an in-place edit after build()
    # is never answered from stale data; every query says to build() again.
    scene, mesh = _square(m, instance=instance)
    if first == "query":  # the topology already exists when the faces change
        scene.nearest_edge(m.Array3f(0.0, 0.0, 0.0))
    # face (1, 3, 2) -> (1, 0, 2): would give three interior edges
    if how == "setitem":
        mesh.faces.y[1] = 0
    else:
        dr.scatter(mesh.faces.y, m.UInt(0), m.UInt(1))
    assert rows(mesh.faces).tolist()[1] == [1, 0, 2]
    ray = rd.Ray(m.Array3f(0.8, 0.8, 1.0), m.Array3f(0.0, 0.0, -1.0))
    for query in (scene.edge_topology, lambda: scene.intersect(ray),
                  lambda: scene.nearest_edge(m.Array3f(1.5, 1.5, 0.0)),
                  lambda: scene.silhouette_edges(m.Array3f(0.3, 0.3, 1.0))):
        with pytest.raises(RuntimeError, match=r"the faces of mesh 0 changed in place since build\(\); call build"):
            query()
    scene.build()  # the new faces: (0, 1, 2) and (1, 0, 2) share all three of (0, 1, 2)'s edges
    top = scene.edge_topology()
    assert rows(top.v).tolist()[:3] == [[0, 1], [0, 2], [1, 2]]
    assert rows(top.faces).tolist()[:3] == [[0, 1], [0, 1], [0, 1]]
    hit = scene.intersect(ray)
    assert rows(hit.prim_id).tolist() == [-1]  # (0.8, 0.8) lies in neither face now


# ------------------------------------------- item 11: edges shared by many faces
def _fan(m, angles_deg):
    """Faces (0, 1, 2 + j) on the edge (0, 1) along x; vertex 2 + j at (0.5, cos a_j, sin a_j)."""
    a = np.radians(np.asarray(angles_deg, dtype=np.float64))
    v = np.concatenate([[[0.0, 0, 0], [1, 0, 0]], np.stack([np.full_like(a, 0.5), np.cos(a), np.sin(a)], -1)])
    k = len(a)
    f = np.stack([np.zeros(k, int), np.ones(k, int), 2 + np.arange(k)], -1)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, v), vec(m.Array3u, f.astype(np.uint32))))
    scene.build()
    return scene, v, f


@pytest.mark.parametrize("k", range(1, 13))
def test_edge_with_k_faces_gives_the_documented_records(backend, m, k):
    scene, v, f = _fan(m, [360.0 * (j + 0.5) / k for j in range(k)])
    top = scene.edge_topology()
    on_edge = (rows(top.v) == [0, 1]).all(1)
    count = 1 if k == 1 else k * (k - 1) // 2 if k <= 8 else k
    assert on_edge.sum() == count
    want = ([[0, -1]] if k == 1 else [[a, b] for a in range(k) for b in range(a + 1, k)] if k <= 8
            else [[a, (a + 1) % k] for a in range(k)])
    assert rows(top.faces)[on_edge].tolist() == want
    assert top.num_edges == count + 2 * k
    # The same records as rayd.torch (one engine implementation behind both).
    dev = "cpu" if backend == "llvm" else "cuda"
    ts = rt.Scene()
    ts.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32, device=dev), torch.tensor(f, device=dev)))
    ts.build()
    tt = ts.edge_topology()
    for name in ("v", "faces", "opposite", "is_boundary"):
        assert rows(getattr(top, name)).tolist() == getattr(tt, name).cpu().tolist(), name


@pytest.mark.parametrize("seed,num_vertices,num_faces", [(0, 12, 60), (1, 5, 150), (2, 4, 400)])
def test_random_soup_topology_equals_rayd_torch(backend, m, seed, num_vertices, num_faces):
    rng = np.random.default_rng(seed)
    f = rng.integers(0, num_vertices, (num_faces, 3))
    f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])]
    v = rng.random((num_vertices, 3))
    dev = "cpu" if backend == "llvm" else "cuda"
    ds, ts = rd.Scene(), rt.Scene()
    ds.add_mesh(rd.Mesh(vec(m.Array3f, v), vec(m.Array3u, f.astype(np.uint32))))
    ts.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32, device=dev), torch.tensor(f, device=dev)))
    ds.build()
    ts.build()
    dt, tt = ds.edge_topology(), ts.edge_topology()
    assert dt.num_edges <= 10.5 * len(f)
    for name in ("v", "faces", "opposite", "is_boundary", "shape_id", "edge_id"):
        assert rows(getattr(dt, name)).tolist() == getattr(tt, name).cpu().tolist(), name
    view = [0.3, -2.0, 1.5]
    assert rows(ds.silhouette_edges(m.Array3f(*view))).tolist() == ts.silhouette_edges(
        torch.tensor(view, device=dev)).cpu().tolist()


def test_silhouette_of_an_edge_with_twelve_faces(m):
    # As in the rayd.torch test: faces j = 0, 1, 2, 9, 10, 11 face (0.5, 0, 10); the cyclic
    # records (2, 3) and (8, 9) of the shared edge are its silhouette records.
    scene, _, _ = _fan(m, [15.0 + 30.0 * j for j in range(12)])
    on_edge = (rows(scene.edge_topology().v) == [0, 1]).all(1)
    sil = rows(scene.silhouette_edges(m.Array3f(0.5, 0.0, 10.0)))
    assert np.flatnonzero(sil[on_edge]).tolist() == [2, 8]
    assert sil[~on_edge].all()


@pytest.mark.parametrize("copies", [5_000, 50_000])
def test_many_copies_of_one_triangle(m, copies):
    import time

    start = time.perf_counter()
    scene = rd.Scene()
    f = np.tile([[0, 1, 2]], (copies, 1)).astype(np.uint32)
    scene.add_mesh(rd.Mesh(vec(m.Array3f, [[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), vec(m.Array3u, f)))
    scene.build()
    top = scene.edge_topology()
    near = scene.nearest_edge(m.Array3f(0.5, -1.0, 0.0))
    sil = scene.silhouette_edges(m.Array3f(0.2, 0.2, 1.0))
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, elapsed
    assert top.num_edges == 3 * copies
    faces = rows(top.faces)[:copies]
    assert np.array_equal(faces, np.stack([np.arange(copies), (np.arange(copies) + 1) % copies], -1))
    assert rows(near.global_edge_id).tolist() == [0] and rows(near.distance).tolist() == [1.0]
    assert not rows(sil).any()


def test_too_many_records_is_a_value_error(m, monkeypatch):
    from rayd.engine import edge_topology

    monkeypatch.setattr(edge_topology, "MAX_RECORDS", 24)
    scene, _ = _square(m)
    for _ in range(4):
        scene.add_instance(0, m.Matrix4f(np.eye(4).tolist()))
    scene.build()
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene edge queries: the scene has 25 edge records"):
        scene.nearest_edge(m.Array3f(0.0, 0.0, 0.0))
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, np.eye(3)), vec(m.Array3u, [[0, 1, 2]] * 3)))
    scene.build()
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene edge queries: a mesh of 3 faces is too large"):
        scene.edge_topology()
