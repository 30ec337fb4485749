"""Tensors made under ``torch.inference_mode()`` in differentiable queries (session 24, helper review24a).

docs/lifecycle.md: "Nothing is refused: an inference-mode tensor is registered like any
other". A float32 scene of one mesh whose vertices were made under inference mode (a
mesh loaded by a data pipeline), queried with rays or points that require a gradient,
stopped with torch's "Inference tensors cannot be saved for backward" in the fused
float32 paths (``intersect``, ``intersect_all``, ``trace_reflections``,
``nearest_edge(points)``, ``nearest_edges``), which saved the vertex tensor itself for
the backward; the same call in float64, on a transformed mesh, or through
``closest_point`` worked. Likewise inference-mode rays or points with vertices that
require a gradient. The fused paths now save a copy of such a tensor: it has no version
counter, so a write into it between the forward and the backward would otherwise go
unseen and the backward would differentiate the new geometry.

Values: a unit quad at ``z = 0`` hit from ``z = 2`` straight down (``d = (0, 0, -1)``):
``t = o_z``, so ``dt/do = (0, 0, 1)``; raising every vertex by ``δ`` lowers ``t`` by
``δ``, so the vertex gradients of ``t`` sum to ``(0, 0, -1)``. A mirror ray reflects
once, so ``path_length = o_z`` too. The nearest edge of a point above the quad's side
``y = 0`` at height ``h`` is that side at distance ``h``, with gradient ``(0, 0, 1)``.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

QUAD = [[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]]
FACES = [[0, 1, 2], [0, 2, 3]]
ORIGINS = [[0.3, 0.6, 2.0], [0.7, 0.2, 1.5], [0.25, 0.75, 3.0]]
POINTS = [[0.5, -0.0, 0.4], [0.3, -0.0, 0.7]]  # above the side y = 0 (edge 0-1), at heights h


def _scene(vertices, device):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, torch.tensor(FACES, device=device)), dynamic=True)
    scene.build()
    return scene


def _queries():
    """name -> f(scene, o, d, points) returning the scalar differentiated and its expected value."""
    return {
        "intersect": lambda s, o, d, p: s.intersect(rt.Ray(o, d)).t.sum(),
        "intersect_minimal": lambda s, o, d, p: s.intersect(rt.Ray(o, d), flags=rt.RayFlags.Minimal).t.sum(),
        "intersect_all": lambda s, o, d, p: s.intersect_all(rt.Ray(o, d), 2).t[..., 0].sum(),
        "trace_reflections": lambda s, o, d, p: s.trace_reflections(rt.Ray(o, d), 2).path_length.sum(),
        "nearest_edge": lambda s, o, d, p: s.nearest_edge(p).distance.sum(),
        "nearest_edges": lambda s, o, d, p: s.nearest_edges(p, 2).distance[..., 0].sum(),
    }


def _expected(name, o, p):
    if name.startswith("nearest"):
        return p[:, 2].sum().item(), torch.tensor([0.0, 0, 1]).expand(len(p), 3)
    return o[:, 2].sum().item(), torch.tensor([0.0, 0, 1]).expand(len(o), 3)


@pytest.mark.parametrize("name", list(_queries()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inference_mode_vertices_with_rays_that_need_a_gradient(device, dtype, name):
    with torch.inference_mode():
        vertices = torch.tensor(QUAD, dtype=dtype, device=device)
    scene = _scene(vertices, device)
    o = torch.tensor(ORIGINS, dtype=dtype, device=device, requires_grad=True)
    p = torch.tensor(POINTS, dtype=dtype, device=device, requires_grad=True)
    d = torch.tensor([0.0, 0, -1], dtype=dtype, device=device).expand(len(ORIGINS), 3)
    value = _queries()[name](scene, o, d, p)
    want_value, want_grad = _expected(name, o.detach(), p.detach())
    x = p if name.startswith("nearest") else o
    (grad,) = torch.autograd.grad(value, x)
    assert value.item() == pytest.approx(want_value, rel=1e-6)
    torch.testing.assert_close(grad.cpu().double(), want_grad.double(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(_queries()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inference_mode_rays_with_vertices_that_need_a_gradient(device, dtype, name):
    vertices = torch.tensor(QUAD, dtype=dtype, device=device, requires_grad=True)
    scene = _scene(vertices, device)
    with torch.inference_mode():
        o = torch.tensor(ORIGINS, dtype=dtype, device=device)
        p = torch.tensor(POINTS, dtype=dtype, device=device)
        d = torch.tensor([0.0, 0, -1], dtype=dtype, device=device).expand(len(ORIGINS), 3)
    value = _queries()[name](scene, o, d, p)
    want_value, _ = _expected(name, o, p)
    (grad,) = torch.autograd.grad(value, vertices)
    assert value.item() == pytest.approx(want_value, rel=1e-6)
    # Raising every vertex by delta lowers t (and the chain's length) by delta per ray and
    # shortens a point's distance to the side below it by delta per point.
    count = len(POINTS) if name.startswith("nearest") else len(ORIGINS)
    torch.testing.assert_close(grad.sum(0).cpu().double(), torch.tensor([0.0, 0, -count], dtype=torch.float64),
                               rtol=1e-6, atol=1e-6)


def test_inference_mode_vertices_with_a_second_order_gradient(device):
    """create_graph=True through the fused float32 kernels' re-evaluated backward."""
    with torch.inference_mode():
        vertices = torch.tensor(QUAD, device=device)
    scene = _scene(vertices, device)
    o = torch.tensor(ORIGINS, device=device, requires_grad=True)
    d = torch.tensor([0.0, 0.05, -1], device=device).expand(len(ORIGINS), 3).contiguous().requires_grad_()
    t = scene.intersect(rt.Ray(o, d)).t.sum()
    (grad_d,) = torch.autograd.grad(t, d, create_graph=True)
    # t = -o_z / d_z: dt/dd_z = o_z / d_z^2, d^2 t / (dd_z do_z) = 1 / d_z^2 = 1.
    want = torch.zeros(len(ORIGINS), 3)
    want[:, 2] = torch.tensor(ORIGINS)[:, 2]
    torch.testing.assert_close(grad_d.detach().cpu(), want, rtol=1e-5, atol=1e-6)
    (second,) = torch.autograd.grad(grad_d[:, 2].sum(), o)
    torch.testing.assert_close(second.cpu(), torch.tensor([[0.0, 0, 1]]).expand(len(ORIGINS), 3), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["intersect", "intersect_minimal", "trace_reflections"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backward_after_an_in_place_write_into_inference_vertices_uses_the_forward_geometry(device, dtype, name):
    """An inference tensor has no version counter, so nothing would notice a write between the
    forward and the backward: the backward must not read the vertices again (it keeps a copy)."""
    with torch.inference_mode():
        vertices = torch.tensor(QUAD, dtype=dtype, device=device)
    scene = _scene(vertices, device)
    o = torch.tensor(ORIGINS, dtype=dtype, device=device)
    d = torch.tensor([0.0, 0.05, -1], dtype=dtype, device=device).expand(len(ORIGINS), 3).contiguous().requires_grad_()
    value = _queries()[name](scene, o, d, None)
    with torch.inference_mode():
        vertices[:, 2] += 1.0  # the quad moves up to z = 1 after the forward
    scene.sync()
    (grad_d,) = torch.autograd.grad(value, d)
    # For the quad at z = 0 (the forward's): t = -o_z / d_z, dt/dd_z = o_z / d_z^2 = o_z (d_z = -1),
    # dt/dd_y = 0. For a chain, path_length = t |d| adds t d / |d| to the gradient.
    want = torch.zeros(len(ORIGINS), 3)
    t = torch.tensor(ORIGINS)[:, 2]
    want[:, 2] = t
    if name == "trace_reflections":
        dd = torch.tensor([0.0, 0.05, -1])
        want = want * dd.norm() + t[:, None] * dd / dd.norm()
    torch.testing.assert_close(grad_d.cpu().float(), want, rtol=1e-5, atol=1e-6)
