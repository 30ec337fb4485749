"""Camera.sample_edges on an image curve shared by several edge records (helper breakit25, session 25).

An edge with three or more faces has one record per pair of its faces (DESIGN.md, "Edges"),
and edges of separate meshes (or of unwelded patches) can have the same two end points. When
every face at such an edge lies on one side of it as seen from the camera, each of those
records was a silhouette and was sampled: the visibility boundary along that image curve was
counted once per record (three fins on one edge: three times), and the boundary term's
derivative was off by as much (the image derivative of the welded fins was 4.6x the finite
differences). An image curve is one visibility boundary: ``ray_inside``/``ray_outside`` see
the whole scene on either side of it, so one sample set along it gives the whole term.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import rayd.torch as rt

sys.path.insert(0, str(Path(__file__).parent))
from edge_sampling_reference import _area, clip_convex  # noqa: E402

F64 = torch.float64
W = H = 32
#: The shared edge (0, 1), vertical in the image, and the third vertices of five faces, all to
#: its left as seen from the camera at the origin (x < 0), off each other's planes, no two of their
#: edges on one image line.
SHARED = [[0.0, -0.5, 3.0], [0.0, 0.5, 3.0]]
APEX = [[-0.5, 0.0, 3.0], [-0.5, 0.05, 3.4], [-0.4, -0.15, 2.7], [-0.45, 0.1, 3.2], [-0.35, -0.2, 2.9]]


def _variant(name: str) -> tuple[list, list]:
    """``[(vertices (V, 3), faces (F, 3))]`` meshes whose triangles are ``(s0, s1, apex_k)``."""
    s, apex = torch.tensor(SHARED, dtype=F64), torch.tensor(APEX, dtype=F64)
    if name == "three fins, welded":  # one edge with three faces: three records
        return [(torch.cat([s, apex[:3]]), torch.tensor([[0, 1, 2], [1, 0, 3], [0, 1, 4]]))]
    if name == "three fins, unwelded":  # three coincident boundary edges of one mesh
        v = torch.cat([torch.cat([s, apex[k:k + 1]]) for k in range(3)])
        return [(v, torch.tensor([[0, 1, 2], [4, 3, 5], [6, 7, 8]]))]
    if name == "two wedges, two meshes":  # two coincident interior edges, one per mesh
        return [(torch.cat([s, apex[:2]]), torch.tensor([[0, 1, 2], [1, 0, 3]])),
                (torch.cat([s, apex[3:5]]), torch.tensor([[0, 1, 2], [1, 0, 3]]))]
    raise ValueError(name)


VARIANTS = ["three fins, welded", "three fins, unwelded", "two wedges, two meshes"]


def _scene(meshes):
    scene = rt.Scene()
    for v, f in meshes:
        scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    return scene


def _triangles(meshes):
    return [v[f] for v, f in meshes for f in f]


def _ccw(p: np.ndarray) -> np.ndarray:
    signed = 0.5 * np.sum(p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1])
    return p if signed > 0 else p[::-1]


def _union_area(polys: list) -> float:
    """Area of the union of convex polygons, by inclusion-exclusion (float64)."""
    total = 0.0
    n = len(polys)
    for mask in range(1, 1 << n):
        members = [polys[i] for i in range(n) if mask >> i & 1]
        inter = list(members[0])
        for clipper in members[1:]:
            inter = clip_convex(inter, clipper) if len(inter) >= 3 else []
        total += (-1) ** (len(members) + 1) * (_area(inter) if len(inter) >= 3 else 0.0)
    return total


def _outline_length(cam, meshes) -> float:
    """The image length of every distinct edge (by end-point positions): the shared edge once."""
    seen, total = set(), 0.0
    for tri in _triangles(meshes):
        xy = cam.project(tri)[0]
        for i, j in ((0, 1), (1, 2), (2, 0)):
            key = tuple(sorted((tuple(tri[i].tolist()), tuple(tri[j].tolist()))))
            if key not in seen:
                seen.add(key)
                total += float((xy[i] - xy[j]).norm())
    return total


@pytest.mark.parametrize("name", VARIANTS)
def test_a_shared_image_curve_is_sampled_once(name):
    cam = rt.Camera(W, H, fov_y=40.0)
    meshes = _variant(name)
    s = cam.sample_edges(_scene(meshes), 3000, generator=torch.Generator().manual_seed(0))
    assert float(s.weight.sum()) == pytest.approx(_outline_length(cam, meshes), rel=1e-10)


@pytest.mark.parametrize("name", VARIANTS)
def test_boundary_term_of_the_coverage_matches_finite_differences(name):
    # d(covered image area)/d(x shift of the shared edge's vertices), against the exact area of the
    # union of the projected triangles (every triangle inside the image).
    cam = rt.Camera(W, H, fov_y=40.0)
    meshes = _variant(name)
    shared = torch.tensor(SHARED, dtype=F64)

    def moved(delta):  # the copies of the shared end points move, the apexes stay
        out = []
        for v, f in meshes:
            on = (v[:, None, :] == shared[None]).all(-1).any(-1)
            out.append((v + on[:, None].to(F64) * torch.stack([delta, delta * 0, delta * 0]), f))
        return out

    def area(dx: float) -> float:
        tris = _triangles(moved(torch.tensor(dx, dtype=F64)))
        return _union_area([_ccw(cam.project(t)[0].numpy()) for t in tris])

    h = 1e-6
    want = (area(h) - area(-h)) / (2 * h)
    delta = torch.zeros((), dtype=F64, requires_grad=True)
    scene = _scene(moved(delta))
    s = cam.sample_edges(scene, 20000, generator=torch.Generator().manual_seed(1))
    covered = [scene.intersect(r).is_valid().to(F64) for r in (s.ray_inside, s.ray_outside)]
    (got,) = torch.autograd.grad(s.boundary_term(*covered).sum(), delta)
    assert float(got) == pytest.approx(want, rel=0.03)
