"""Break-it session 21 (helper breakit21c): nearest-edge point queries of transformed float32
scenes far from the origin.

The world geometry of a float32 mesh near the origin placed by an exactly representable
translation of 1e4..3e4 is exact; ``intersect``, ``closest_point`` and ``nearest_edge(ray)``
place it in float64 and report the distance of the float32 inputs to about 1e-8. Was:
``nearest_edge(points)`` and ``nearest_edges`` placed the vertices in float32 first (half an
ulp of 3e4 is 1e-3), so ``distance`` was off by 5e-4 and ``edge_t`` and the gradients by ~1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt

OFFSET = np.array([1.0e4, -2.0e4, 3.0e4])  # exact in float32
VERTICES = np.array([[-1.0, -1.0, 0.1], [1.2, -0.9, -0.1], [0.1, 1.1, 0.2], [1.5, 1.5, 0.3]], dtype=np.float32)
FACES = np.array([[0, 1, 2], [1, 3, 2]])
# query points (exact in float32 after the offset), each nearest to one edge's interior
LOCAL_POINTS = np.array([[0.125, 0.25, 0.5], [0.875, -0.25, -0.5], [1.5, 0.5, 0.25], [0.5, 1.5, 0.75]])


def _brute_force(world: np.ndarray, edges: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, ...]:
    """(distance, edge_t, edge_point) of the nearest edge (rows ``edges`` (E, 2), ``edge_t`` from the
    first end), NumPy float64 over every edge."""
    best = (np.full(len(points), np.inf), np.zeros(len(points)), np.zeros((len(points), 3)))
    for i, j in edges:
        a, b = world[i], world[j]
        t = np.clip((points - a) @ (b - a) / ((b - a) @ (b - a)), 0.0, 1.0)
        q = a + t[:, None] * (b - a)
        dist = np.linalg.norm(points - q, axis=1)
        closer = dist < best[0]
        best = (np.where(closer, dist, best[0]), np.where(closer, t, best[1]), np.where(closer[:, None], q, best[2]))
    return best


def _scene(vertices: torch.Tensor, matrix: torch.Tensor, placement: str) -> rt.Scene:
    faces = torch.as_tensor(FACES, device=vertices.device)
    scene = rt.Scene()
    if placement == "to_world":
        scene.add_mesh(rt.Mesh(vertices, faces, to_world=matrix))
    else:
        mesh = scene.add_mesh(rt.Mesh(vertices, faces))
        scene.add_instance(mesh, matrix)
        scene.set_shape_enabled(mesh, False)
    scene.build()
    return scene


def _inputs(dtype, device):
    vertices = torch.tensor(VERTICES, dtype=dtype, device=device)
    matrix = torch.eye(4, dtype=dtype, device=device)
    matrix[:3, 3] = torch.tensor(OFFSET, dtype=dtype)
    points = torch.tensor(LOCAL_POINTS + OFFSET, dtype=dtype, device=device)
    return vertices, matrix, points


@pytest.mark.parametrize("placement", ["to_world", "instance"])
def test_far_transformed_float32_point_queries_match_float64(device, placement):
    vertices, matrix, points = _inputs(torch.float32, device)
    scene = _scene(vertices, matrix, placement)
    # the exact world geometry of the float32 inputs
    edges = np.unique(scene.edge_topology().v.cpu().numpy(), axis=0)  # an instance's records repeat its mesh's
    assert len(edges) == 5
    want_d, want_t, want_q = _brute_force(VERTICES.astype(np.float64) + OFFSET, edges, points.cpu().double().numpy())
    one = scene.nearest_edge(points)
    top = scene.nearest_edges(points, 2)
    for distance, edge_t, edge_point in ((one.distance, one.edge_t, one.edge_point),
                                         (top.distance[:, 0], top.edge_t[:, 0], top.edge_point[:, 0])):
        assert distance.dtype == torch.float32
        np.testing.assert_allclose(distance.cpu().double().numpy(), want_d, rtol=1e-6, atol=0)  # was 5e-4 off
        np.testing.assert_allclose(edge_t.cpu().double().numpy(), want_t, rtol=0, atol=1e-6)  # was 3e-5 off
        # the edge point is a float32 world coordinate: within an ulp of 3e4
        np.testing.assert_allclose(edge_point.cpu().double().numpy(), want_q, rtol=0, atol=4e-3)


@pytest.mark.parametrize("placement", ["to_world", "instance"])
def test_far_transformed_float32_point_gradients_match_float64(device, placement):
    """Reverse mode into points, vertices and the transform, against the same query in float64."""
    grads = {}
    for dtype in (torch.float32, torch.float64):
        vertices, matrix, points = (x.requires_grad_(True) for x in _inputs(dtype, device))
        scene = _scene(vertices, matrix, placement)
        one = scene.nearest_edge(points)
        top = scene.nearest_edges(points, 2)
        weights = torch.linspace(0.5, 1.5, len(points), dtype=dtype, device=device)
        loss = ((one.distance + 0.7 * one.edge_t + top.distance[:, 1]) * weights).sum()
        grads[dtype] = [g.double().cpu() for g in torch.autograd.grad(loss, (points, vertices, matrix))]
    for g32, g64 in zip(grads[torch.float32], grads[torch.float64]):
        assert torch.allclose(g32, g64, rtol=1e-5, atol=1e-5), (g32 - g64).abs().max()  # was 1e-3 off


# ------------------------------------------------------------ Camera.sample_edges, motion
CAMERA_VERTICES = np.array([[-0.625, -0.5, 3.0], [0.75, -0.375, 3.25], [0.125, 0.625, 2.75], [0.875, 0.75, 4.0]],
                           dtype=np.float32)  # exact in float32: the float32 and float64 scenes are one geometry


@pytest.mark.parametrize("placement", ["to_world", "instance"])
def test_far_transformed_float32_motion_matches_float64(device, placement):
    """``motion``'s gradient into vertices, the mesh (or instance) transform and the camera pose, a mesh
    and a camera both placed 3e4 from the origin. Was: placed and projected in float32, 1.2e-4 relative
    off the float64 scene's (6e-8 now)."""
    grads, ids = {}, {}
    for dtype in (torch.float32, torch.float64):
        vertices = torch.tensor(CAMERA_VERTICES, dtype=dtype, device=device, requires_grad=True)
        matrix = torch.eye(4, dtype=dtype, device=device)
        matrix[:3, 3] = torch.tensor(OFFSET, dtype=dtype)
        matrix.requires_grad_(True)
        pose = matrix.detach().clone().requires_grad_(True)
        scene = _scene(vertices, matrix, placement)
        camera = rt.Camera(32, 24, fx=30.0, to_world=pose)
        samples = camera.sample_edges(scene, 256, generator=torch.Generator().manual_seed(0))
        assert samples.motion.dtype == dtype
        ids[dtype] = samples.global_edge_id.cpu()
        weights = torch.linspace(-1.0, 1.0, len(samples), dtype=dtype, device=device)
        grads[dtype] = [g.double().cpu() for g in torch.autograd.grad((samples.motion * weights).sum(),
                                                                      (vertices, matrix, pose))]
    assert torch.equal(ids[torch.float32], ids[torch.float64])
    for g32, g64 in zip(grads[torch.float32], grads[torch.float64]):
        assert (g32 - g64).abs().max() <= 1e-6 * g64.abs().max(), (g32 - g64).abs().max() / g64.abs().max()
