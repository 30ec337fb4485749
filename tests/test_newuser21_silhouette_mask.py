"""``silhouette_edges`` while an edge mask awaits ``sync()``: a RuntimeError, as every edge query (it read the
previously applied mask and answered with it). After ``sync()`` it sees the new mask; reset to all True, the
silhouette from another viewpoint is the NumPy float64 rule's (DESIGN.md, Edges)."""

from __future__ import annotations

import numpy as np
import pytest

trimesh = pytest.importorskip("trimesh")

SPHERE = trimesh.creation.icosphere(subdivisions=2)


def _silhouette(v: np.ndarray, f: np.ndarray, edge_faces: np.ndarray, eye: np.ndarray) -> np.ndarray:
    """NumPy float64: boundary edges and edges whose two faces disagree about facing ``eye``."""
    a, b, c = (v[f[:, i]] for i in range(3))
    facing = np.einsum("ij,ij->i", np.cross(b - a, c - a), eye - a) > 0
    boundary = edge_faces[:, 1] < 0
    return boundary | (facing[edge_faces[:, 0]] != facing[np.maximum(edge_faces[:, 1], 0)])


def _check(scene, eye0, eye1, to_numpy, all_true):
    first = scene.silhouette_edges(eye0)
    scene.set_edge_mask(first)
    with pytest.raises(RuntimeError, match=r"silhouette_edges\(\): the edge mask changed since the last sync\(\)"):
        scene.silhouette_edges(eye1)
    scene.sync()
    faces = to_numpy(scene.edge_topology().faces)
    want1 = _silhouette(np.asarray(SPHERE.vertices, np.float64), np.asarray(SPHERE.faces), faces, np.array([5.0, 0, 0]))
    want0 = to_numpy(first)
    assert want1.sum() > 10 and (want0 & want1).sum() < want1.sum()
    np.testing.assert_array_equal(to_numpy(scene.silhouette_edges(eye1)), want0 & want1)  # masked
    scene.set_edge_mask(all_true(len(want0)))
    scene.sync()
    np.testing.assert_array_equal(to_numpy(scene.silhouette_edges(eye1)), want1)


def test_torch():
    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh.from_trimesh(SPHERE, dtype=torch.float64))
    scene.build()
    _check(scene, torch.tensor([0, 0, 5.0]), torch.tensor([5.0, 0, 0]), lambda x: x.cpu().numpy(),
           lambda n: torch.ones(n, dtype=torch.bool))


def test_drjit():
    pytest.importorskip("drjit")
    rd = pytest.importorskip("rayd.drjit")
    from drjit.llvm.ad import Array3f64, Bool

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh.from_trimesh(SPHERE, dtype="float64"))
    scene.build()

    def to_numpy(x):
        a = np.array(x)
        return a.T if a.ndim == 2 else a

    _check(scene, Array3f64(0, 0, 5), Array3f64(5, 0, 0), to_numpy, lambda n: Bool(np.ones(n, bool)))
