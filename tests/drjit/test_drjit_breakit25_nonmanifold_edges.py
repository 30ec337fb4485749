"""rayd.drjit Camera.sample_edges on an image curve shared by several edge records (helper
breakit25, session 25): the twin of ``tests/torch/test_breakit25_nonmanifold_edges.py``, whose
docstring tells the defect (each record of an edge with three faces, all on one side, was
sampled: the boundary term counted that image curve three times)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import vec

sys.path.insert(0, str(Path(__file__).parent.parent / "torch"))
import test_breakit25_nonmanifold_edges as reference  # noqa: E402


def _scene(m, meshes, delta=None):
    scene = rd.Scene()
    shared = np.array(reference.SHARED)
    for v, f in meshes:
        v = v.numpy()
        moved = vec(m.Array3f64, v)
        if delta is not None:  # the copies of the shared end points move along x
            on = (v[:, None, :] == shared[None]).all(-1).any(-1)
            moved = m.Array3f64(moved.x + delta * m.Float64(on.astype(np.float64)), moved.y, moved.z)
        scene.add_mesh(rd.Mesh(moved, vec(m.Array3u, f.numpy().astype(np.uint32))))
    scene.build()
    return scene


@pytest.mark.parametrize("name", reference.VARIANTS)
def test_a_shared_image_curve_is_sampled_once_like_torch(m, name):
    meshes = reference._variant(name)
    want = reference._outline_length(rt.Camera(reference.W, reference.H, fov_y=40.0), meshes)
    cam = rd.Camera(reference.W, reference.H, fov_y=40.0)
    s = cam.sample_edges(_scene(m, meshes), 3000, generator=np.random.default_rng(0))
    assert float(dr.sum(s.weight)[0]) == pytest.approx(want, rel=1e-10)


def test_boundary_term_of_the_coverage_like_torch(m):
    meshes = reference._variant("three fins, welded")
    delta = m.Float64(0.0)
    dr.enable_grad(delta)
    scene = _scene(m, meshes, delta)
    cam = rd.Camera(reference.W, reference.H, fov_y=40.0)
    s = cam.sample_edges(scene, 20000, generator=np.random.default_rng(1))
    covered = [m.Float64(dr.select(scene.intersect(r).is_valid(), 1.0, 0.0)) for r in (s.ray_inside, s.ray_outside)]
    dr.backward(dr.sum(s.boundary_term(*covered)))
    # d(covered area)/d(x shift of the shared edge), from the exact union of the projected triangles
    tcam = rt.Camera(reference.W, reference.H, fov_y=40.0)
    shared = torch.tensor(reference.SHARED, dtype=torch.float64)

    def area(dx):
        tris = []
        for v, f in meshes:
            on = (v[:, None, :] == shared[None]).all(-1).any(-1)
            tris += reference._triangles([(v + on[:, None].double() * torch.tensor([dx, 0.0, 0.0]), f)])
        return reference._union_area([reference._ccw(tcam.project(t)[0].numpy()) for t in tris])

    want = (area(1e-6) - area(-1e-6)) / 2e-6
    assert float(dr.grad(delta)[0]) == pytest.approx(want, rel=0.03)
