"""Stream ordering on CUDA: rayd's work at build/sync/query waits for the caller's queued work.

A long ``torch.cuda._sleep`` queued first on a non-blocking side stream holds back what
follows it there; if any of rayd's fills, uploads, checks or host reads ran on another
stream, they would see the buffers as they were before the caller's writes (the bug behind
the intermittent rayd.drjit answers of session 12: a faces check that did not raise, an
instance missed). These tests fail deterministically when such work is not ordered.
"""

import pytest
import torch

import rayd.torch as rt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

QUAD_V = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
QUAD_F = [[0, 1, 2], [0, 2, 3]]
SLEEP = 200_000_000  # GPU cycles: ~0.1 s, far longer than the host needs to queue the rest


def _side_stream():
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    return stream


def test_build_checks_faces_written_on_a_delayed_stream():
    faces = torch.tensor(QUAD_F, device="cuda:0", dtype=torch.int32)
    mesh = rt.Mesh(torch.tensor(QUAD_V, device="cuda:0"), faces)
    stream = _side_stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)
        faces[1, 2] = 7  # out of range, written after the sleep
        scene = rt.Scene()
        scene.add_mesh(mesh)
        with pytest.raises(ValueError, match=r"must index vertices in \[0, 4\), got values in \[0, 7\]"):
            scene.build()
    stream.synchronize()


def test_build_sync_and_intersect_on_a_delayed_stream():
    """Vertices moved up by 2 after the sleep: build's bounds, sync's refit and the query see them."""
    v = torch.tensor(QUAD_V, device="cuda:0")
    scene = rt.Scene()
    stream = _side_stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)
        v[:, 2] += 2.0
        scene.add_mesh(rt.Mesh(v, torch.tensor(QUAD_F, device="cuda:0")), dynamic=True)
        scene.build()
        ray = rt.Ray(torch.tensor([[0.75, 0.25, 5.0]] * 4096, device="cuda:0"),
                     torch.tensor([0.0, 0.0, -1.0], device="cuda:0"))
        t_built = scene.intersect(ray).t * 1.0
        torch.cuda._sleep(SLEEP)
        scene.update_mesh_vertices(0, v + torch.tensor([0.0, 0.0, 1.0], device="cuda:0"))
        scene.sync()
        t_moved = scene.intersect(ray).t * 1.0
    stream.synchronize()
    assert (t_built == 3.0).all()
    assert (t_moved == 2.0).all()


def test_instance_transform_set_on_a_delayed_stream():
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(QUAD_V, device="cuda:0"), torch.tensor(QUAD_F, device="cuda:0")))
    m = torch.eye(4, device="cuda:0")
    m[0, 3] = 10.0
    scene.add_instance(0, m)
    scene.build()
    ray = rt.Ray(torch.tensor([[20.5, 0.5, 5.0]] * 4096, device="cuda:0"),
                 torch.tensor([0.0, 0.0, -1.0], device="cuda:0"))
    stream = _side_stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)
        moved = m.clone()
        moved[0, 3] = 20.0
        moved[2, 3] = 1.0
        scene.set_mesh_transform(1, moved)
        scene.sync()
        hit = scene.intersect(ray)
        shape, t = hit.shape_id * 1, hit.t * 1.0
    stream.synchronize()
    assert (shape == 1).all() and (t == 4.0).all()
