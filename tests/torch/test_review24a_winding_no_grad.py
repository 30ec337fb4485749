"""``winding_number`` under ``torch.no_grad()`` / ``inference_mode`` (session 24, helper review24a).

With points (or vertices) that require grad, ``winding_number`` took its differentiable exact
sum in torch ops (``O(N F)`` work and memory) even where grad mode was off and no gradient
could flow: 20,000 points around a 20k-face icosphere took 85 s under ``no_grad`` against
0.03 s for the same points without ``requires_grad`` (2-core CPU), and gave the exact value
where a plain call gives the hierarchical one. Now a tensor's ``requires_grad`` selects the
differentiable sum only while grad mode is on, as for ``closest_point``'s fused path; forward
mode (dual tensors, ``torch.func.jvp``), which ``no_grad`` does not stop, still does.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwad
import trimesh

import rayd.torch as rt


def _scene(device, dtype, grad_vertices):
    sphere = trimesh.creation.icosphere(subdivisions=2)
    v = torch.as_tensor(sphere.vertices, dtype=dtype, device=device).requires_grad_(grad_vertices)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.as_tensor(sphere.faces, device=device)))
    scene.build()
    return scene


def _points(device, dtype):
    gen = torch.Generator().manual_seed(5)
    return (torch.randn(256, 3, generator=gen, dtype=torch.float64) * 1.2).to(device=device, dtype=dtype)


def _refuse(*args):
    raise AssertionError("the differentiable O(N F) torch sum ran")


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("grad_of", ["points", "vertices"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_grad_takes_the_value_path(device, dtype, grad_of, mode, monkeypatch):
    from rayd.torch import _closest_point

    scene = _scene(device, dtype, grad_of == "vertices")
    plain = _scene(device, dtype, False)  # the same mesh, nothing requiring grad
    pts = _points(device, dtype)
    want = plain.winding_number(pts)  # the hierarchical value
    exact = plain.winding_number(pts, exact=True)
    assert (want - exact).abs().max() > 1e-6  # the two paths differ here: the values tell them apart
    monkeypatch.setattr(_closest_point, "_solid_angle_sum", _refuse)
    query = pts.clone().requires_grad_(grad_of == "points")
    with getattr(torch, mode)():
        got = scene.winding_number(query)
    assert not got.requires_grad
    assert torch.equal(got, want)


def test_grad_mode_on_and_forward_mode_still_differentiate(device, monkeypatch):
    """Where a gradient can flow, the exact differentiable sum runs (values against central differences)."""
    scene = _scene(device, torch.float64, False)
    pts = _points(device, torch.float64)[:4]
    eps = 1e-6
    tangent = torch.tensor([0.2, -0.4, 0.7], dtype=torch.float64, device=device)
    fd = (scene.winding_number(pts + eps * tangent, exact=True)
          - scene.winding_number(pts - eps * tangent, exact=True)) / (2 * eps)
    query = pts.clone().requires_grad_(True)
    w = scene.winding_number(query)
    (grad,) = torch.autograd.grad(w.sum(), query)
    torch.testing.assert_close((grad * tangent).sum(-1), fd, rtol=1e-5, atol=1e-8)
    with torch.no_grad(), fwad.dual_level():
        w = scene.winding_number(fwad.make_dual(pts, tangent.expand_as(pts)))
        torch.testing.assert_close(fwad.unpack_dual(w).tangent, fd, rtol=1e-5, atol=1e-8)
