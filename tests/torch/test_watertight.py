"""Watertightness: rays exactly through shared edges and vertices never leak (float32 and float64 scenes and
rays: float64 queries drop a winner off its face, ``rayd.core.hits.off_face``, and must still never leak)."""

from __future__ import annotations

import numpy as np
import pytest
import reference
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree, triangles, wide_q


@pytest.fixture(autouse=True, params=["default", "ploc", "wide4", "wide4q"])
def bvh_constructor(request):
    """Every test over the default builder, over rayd's PLOC builder (``set_bvh_constructor("ploc")``),
    over the 4-wide node layout (``set_bvh_layout("wide4")``, ``engine.wide_nodes``) and over its compressed
    nodes (``"wide4q"``, ``engine.wide_q``, every node read compressed: ``FLOAT_TOP = 0``); the last three
    on the CPU with Embree off, so that rayd's tree and walk are the ones tested."""
    if request.param == "default":
        yield request.param
        return
    was, was_layout, was_embree = triangles.bvh_constructor(), triangles.bvh_layout(), cpu_embree.active()
    was_top = wide_q.FLOAT_TOP
    if request.param == "ploc":
        triangles.set_bvh_constructor("ploc")
    else:
        triangles.set_bvh_layout(request.param)
        wide_q.FLOAT_TOP = 0
    cpu_embree.set_enabled(False)
    try:
        yield request.param
    finally:
        triangles.set_bvh_constructor(was)
        triangles.set_bvh_layout(was_layout)
        cpu_embree.set_enabled(was_embree)
        wide_q.FLOAT_TOP = was_top


@pytest.fixture(params=[torch.float32, torch.float64], ids=["float32", "float64"])
def dtype(request):
    """The dtype of the scene's vertices and of the rays (float64: vertices and edge points not float32 values)."""
    return request.param


def _build(vertices, faces, device, dtype=None):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(vertices, dtype=dtype, device=device), torch.as_tensor(faces, device=device)))
    scene.build()
    return scene


def _edge_points(vertices, faces, weights=(0.5, 0.25, 1.0 / 3.0)):
    """Points on every face edge (float64), at the given fractions, plus every vertex."""
    v = np.asarray(vertices, dtype=np.float64)
    edges = np.concatenate((faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]))
    points = [v]
    for s in weights:
        points.append((1 - s) * v[edges[:, 0]] + s * v[edges[:, 1]])
    return np.concatenate(points)


@pytest.mark.parametrize("cells", [1, 2, 3, 7, 24, 100])
def test_grid_vertices_and_edges_straight_down(device, cells, dtype):
    vertices, faces = reference.grid(cells)
    if dtype == torch.float64:  # corners and edge points that are no float32 values
        vertices = vertices.astype(np.float64) * 0.7
    targets = _edge_points(vertices, faces)
    o = torch.tensor(targets, dtype=dtype, device=device)
    o[:, 2] = 2.0
    hit = _build(vertices, faces, device, dtype).intersect(rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], dtype=dtype,
                                                                                   device=device)))
    # Points on the grid's outer rim lie on a boundary edge: no neighbour, but still inside the grid.
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(o)} rays leaked"
    torch.testing.assert_close(hit.t, torch.full_like(hit.t, 2.0), rtol=0, atol=1e-6)
    torch.testing.assert_close(hit.p[:, :2], o[:, :2], rtol=0, atol=1e-6)


@pytest.mark.parametrize("cells", [1, 5, 24, 64])
def test_grid_oblique_rays_through_vertices_and_edges(device, cells, dtype):
    rng = np.random.default_rng(cells)
    vertices, faces = reference.grid(cells)
    targets = _edge_points(vertices, faces)
    inner = np.abs(targets[:, :2]).max(1) < 0.999  # the rim may graze off the grid obliquely
    targets = targets[inner]
    origins = targets + np.concatenate((rng.uniform(-1, 1, (len(targets), 2)), np.full((len(targets), 1), 1.5)), 1)
    o = torch.tensor(origins, dtype=dtype, device=device)
    d = torch.tensor(targets, dtype=dtype, device=device) - o
    hit = _build(vertices, faces, device, dtype).intersect(rt.Ray(o, d))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(o)} rays leaked"
    torch.testing.assert_close(hit.t, torch.ones_like(hit.t), rtol=0, atol=1e-5)


@pytest.mark.parametrize("cells", [1, 2, 24, 33, 160])
def test_seed_rays_all_hit(device, cells, dtype):
    # The seed's batch: xy uniform in 0.45 * span around the centre, from z = 2 straight down.
    _, faces = reference.grid(cells)
    axis = torch.linspace(-1.0, 1.0, cells + 1, dtype=torch.float32)  # the seed's vertices, bit for bit
    y, x = torch.meshgrid(axis, axis, indexing="ij")
    vertices = torch.stack((x.reshape(-1), y.reshape(-1), torch.zeros(x.numel())), dim=1)
    generator = torch.Generator().manual_seed(1234)
    xy = (torch.rand((20000, 2), generator=generator) - 0.5) * (2.0 * 0.45 * 2.0)
    o = torch.cat((xy, torch.full((20000, 1), 2.0)), 1).to(device, dtype)
    d = torch.zeros_like(o)
    d[:, 2] = -1.0
    hit = _build(vertices.to(dtype), faces, device).intersect(rt.Ray(o, d))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(o)} rays missed"
    torch.testing.assert_close(hit.t, torch.full_like(hit.t, 2.0), rtol=0, atol=1e-6)


@pytest.mark.parametrize("subdivisions", [0, 2, 4])
def test_closed_icosphere_from_inside_and_outside(device, subdivisions, dtype):
    vertices, faces = reference.icosphere(subdivisions)
    vertices = vertices.astype(np.float32 if dtype == torch.float32 else np.float64)
    targets = _edge_points(vertices, faces)
    scene = _build(vertices, faces, device)
    # From the centre towards every vertex and edge point: a closed mesh, so all hit.
    d = torch.tensor(targets, dtype=dtype, device=device)
    hit = scene.intersect(rt.Ray(torch.zeros(3, dtype=dtype, device=device), d))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(d)} rays leaked from inside"
    torch.testing.assert_close(hit.t, torch.ones_like(hit.t), rtol=0, atol=1e-5)
    # From off-centre points inside, through the same vertices and edge points.
    rng = np.random.default_rng(subdivisions)
    o = torch.tensor(rng.uniform(-0.4, 0.4, (len(targets), 3)), dtype=dtype, device=device)
    hit = scene.intersect(rt.Ray(o, d - o))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(d)} rays leaked off-centre"
    # From outside, aimed through them at the centre: a convex mesh, entered right there (t = 2).
    o = 3.0 * d
    hit = scene.intersect(rt.Ray(o, 0.5 * (d - o)))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(d)} rays leaked from outside"
    torch.testing.assert_close(hit.t, torch.full_like(hit.t, 2.0), rtol=0, atol=1e-5)


@pytest.mark.parametrize("scale,offset", [(1000.0, 0.0), (1.0, 5000.0), (1e-3, 0.0)])
def test_no_leaks_after_refit_to_another_magnitude(device, scale, offset, dtype):
    # Built at unit size, then refit far away / much larger / much smaller: still watertight.
    rng = np.random.default_rng(int(scale + offset))
    vertices, faces = reference.grid(24)
    v = torch.tensor(vertices, dtype=dtype, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor(faces, device=device)), dynamic=True)
    scene.build()
    moved = vertices.astype(np.float64) * scale + offset
    if dtype == torch.float32:
        moved = moved.astype(np.float32)
    with torch.no_grad():
        v.copy_(torch.tensor(moved, device=device))
    scene.sync()
    targets = _edge_points(moved, faces)
    targets = targets[np.abs(targets[:, :2] - offset).max(1) < 0.999 * scale]
    lift = np.concatenate((rng.uniform(-1, 1, (len(targets), 2)), np.full((len(targets), 1), 1.5)), 1) * scale
    o = torch.tensor(targets + lift, dtype=dtype, device=device)
    d = torch.tensor(targets, dtype=dtype, device=device) - o
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(o)} rays leaked"


@pytest.mark.parametrize("instanced", [False, True])
@pytest.mark.parametrize("distance", [10.0, 1e3, 1e5])
def test_no_leaks_for_distant_origins(device, distance, instanced, dtype):
    # Rays from far away (relative to the mesh) through its vertices and edges; also
    # through an instance of it (object-space bottom-level BVH), moved by x = 10.
    rng = np.random.default_rng(int(distance))
    vertices, faces = reference.grid(24)
    targets = _edge_points(vertices, faces)
    targets = targets[np.abs(targets[:, :2]).max(1) < 0.95]
    away = rng.standard_normal((len(targets), 3))
    away[:, 2] = np.abs(away[:, 2]) + 0.3
    away /= np.linalg.norm(away, axis=1, keepdims=True)
    scene = rt.Scene()
    mesh_id = scene.add_mesh(rt.Mesh(torch.tensor(vertices, dtype=dtype, device=device),
                                     torch.tensor(faces, device=device)))
    if instanced:
        to_world = torch.eye(4, dtype=dtype, device=device)
        to_world[0, 3] = 10.0
        scene.add_instance(mesh_id, to_world)
        targets = targets + np.array([10.0, 0.0, 0.0])
    scene.build()
    o = torch.tensor(targets + distance * away, dtype=dtype, device=device)
    d = torch.tensor(targets, dtype=dtype, device=device) - o
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.is_valid().all(), f"{int((~hit.is_valid()).sum())} of {len(o)} rays leaked"
    assert (hit.shape_id == (1 if instanced else 0)).all()
    torch.testing.assert_close(hit.t, torch.ones_like(hit.t), rtol=0, atol=1e-5)
