"""``edge_topology()`` returns a copy in both frontends (helper review24b, session 24).

Found: ``Scene.edge_topology()`` (``rayd.core.edges.EdgeQueries``) returned the scene's own cached
``EdgeTopology``, which ``silhouette_edges``, ``Camera.sample_edges`` and later ``edge_topology()``
calls read. An in-place write into the returned arrays reached it: in rayd.drjit a plain Dr.Jit
write such as ``topo.faces.y += 1`` made ``silhouette_edges`` crash the process (segmentation fault)
and ``topo.opposite.x += 2`` made ``sample_edges`` sample other edges (total weight 59.0 instead of
34.6 on an icosphere); in rayd.torch ``topo.shape_id[:] = 5`` made ``silhouette_edges`` raise torch's
``IndexError``. The record's fields are now copies (rayd.drjit: in their own memory, so a write
through a NumPy view of them does not reach the scene either; ``edge_mask()`` likewise).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import trimesh

import rayd.torch as rt

SPHERE = trimesh.creation.icosphere(subdivisions=1)
VERTICES = np.asarray(SPHERE.vertices, dtype=np.float64)
FACES = np.asarray(SPHERE.faces, dtype=np.int64)
EYE = (0.0, 0.0, 4.0)


def _topology_rows(topo) -> dict:
    """Every field of an ``EdgeTopology`` as NumPy rows (either frontend)."""
    out = {}
    for name in ("v", "faces", "opposite", "is_boundary", "shape_id", "edge_id", "global_edge_id"):
        a = getattr(topo, name)
        a = a.cpu().numpy() if isinstance(a, torch.Tensor) else np.array(a)
        out[name] = a.T if (a.ndim == 2 and a.shape[0] == 2 and name in ("v", "faces", "opposite")
                            and not isinstance(getattr(topo, name), torch.Tensor)) else a
    return out


def test_torch_writes_into_the_returned_topology_stay_there():
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(VERTICES, dtype=torch.float32), torch.tensor(FACES)))
    scene.build()
    eye = torch.tensor(EYE)
    want = _topology_rows(scene.edge_topology())
    silhouette = scene.silhouette_edges(eye).clone()
    camera = rt.Camera(16, 16, fov_y=40.0, to_world=torch.tensor([[1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 4.0], [0, 0, 0, 1]]))
    weight = camera.sample_edges(scene, 64, generator=torch.Generator().manual_seed(0)).weight.sum()
    topo = scene.edge_topology()
    topo.shape_id[:] = 5
    topo.faces[:, 1] += 1
    topo.opposite[:, 0] += 2
    topo.v[:] = 0
    got = _topology_rows(scene.edge_topology())
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert torch.equal(scene.silhouette_edges(eye), silhouette)
    assert int(silhouette.sum()) > 0
    again = camera.sample_edges(scene, 64, generator=torch.Generator().manual_seed(0)).weight.sum()
    torch.testing.assert_close(again, weight)
    mask = scene.edge_mask()
    mask[:] = False
    assert bool(scene.edge_mask().all())


def test_drjit_writes_into_the_returned_topology_stay_there():
    dr = pytest.importorskip("drjit")
    import rayd.drjit as rd
    from drjit.llvm.ad import Array3f, Array3u, Matrix4f

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(Array3f(np.ascontiguousarray(VERTICES.T, dtype=np.float32)),
                           Array3u(np.ascontiguousarray(FACES.T, dtype=np.uint32))))
    scene.build()
    eye = Array3f(*EYE)
    want = _topology_rows(scene.edge_topology())
    silhouette = np.array(scene.silhouette_edges(eye))
    camera = rd.Camera(16, 16, fov_y=40.0, to_world=Matrix4f(np.array([[1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 4.0],
                                                                       [0, 0, 0, 1]], dtype=np.float32)))
    weight = float(dr.sum(camera.sample_edges(scene, 64, generator=np.random.default_rng(0)).weight)[0])
    topo = scene.edge_topology()
    topo.faces.y += 1  # Dr.Jit writes (new variables in the record's arrays)
    topo.opposite.x += 2
    topo.v.x[0] = 7
    np.asarray(topo.shape_id)[:] = 5  # and writes through zero-copy NumPy views
    np.asarray(topo.v.y)[:] = 0
    got = _topology_rows(scene.edge_topology())
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(np.array(scene.silhouette_edges(eye)), silhouette)
    assert silhouette.sum() > 0
    again = float(dr.sum(camera.sample_edges(scene, 64, generator=np.random.default_rng(0)).weight)[0])
    assert again == pytest.approx(weight, rel=1e-6)
    mask = scene.edge_mask()
    np.asarray(mask)[:] = False
    assert bool(np.all(np.array(scene.edge_mask())))
