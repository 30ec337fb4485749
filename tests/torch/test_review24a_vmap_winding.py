"""``torch.func.vmap`` of ``winding_number`` takes the same path as a loop (session 24, helper review24a).

docs/compile.md: under ``vmap`` "Results equal a Python loop over the vmapped dimension
exactly". ``winding_number`` treated every functorch wrapper as a request for gradients, so
under a plain ``vmap`` (no ``grad``/``jvp``) it summed the exact ``O(N F)`` solid angles in
torch ops instead of the hierarchical engine query a loop runs: values differed from the
loop by up to the fast path's error (2.3e-3 on a 320-face icosphere), and a vmapped query
over a large mesh paid ``N F`` work and memory. Composed with ``grad``/``jvp`` the exact,
differentiable sum is still the one used (checked against central differences below).
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt
from sphere_mesh import uv_sphere


def _scene(device, dtype, grad=False):
    v, f = uv_sphere(dtype=dtype, device=device)
    v = v.clone().requires_grad_(grad)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    return scene


def _points(device, dtype):
    gen = torch.Generator().manual_seed(3)
    return (torch.randn(4, 64, 3, generator=gen, dtype=dtype) * 1.2).to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vmap_of_winding_number_equals_a_loop(device, dtype):
    scene = _scene(device, dtype)
    pts = _points(device, dtype)
    want = torch.stack([scene.winding_number(x) for x in pts])
    exact = torch.stack([scene.winding_number(x, exact=True) for x in pts])
    assert (want - exact).abs().max() > 1e-6  # the fast path is not the exact sum here: the test tells them apart
    got = torch.func.vmap(scene.winding_number)(pts)
    if device == "cpu":
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    got_exact = torch.func.vmap(lambda x: scene.winding_number(x, exact=True))(pts)
    torch.testing.assert_close(got_exact, exact, rtol=1e-9, atol=1e-9)


def test_vmap_of_grad_and_jvp_of_winding_number_still_differentiate_the_exact_sum(device):
    scene = _scene(device, torch.float64)
    pts = _points(device, torch.float64)[0, :8]
    grads = torch.func.vmap(torch.func.grad(lambda x: scene.winding_number(x)))(pts)
    tangent = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, device=device)
    _, jvps = torch.func.vmap(lambda x: torch.func.jvp(lambda y: scene.winding_number(y), (x,), (tangent,)))(pts)
    eps = 1e-6
    for i, p in enumerate(pts):
        fd = torch.stack([(scene.winding_number(p + eps * e, exact=True) - scene.winding_number(p - eps * e, exact=True))
                          / (2 * eps) for e in torch.eye(3, dtype=torch.float64, device=device)])
        torch.testing.assert_close(grads[i], fd, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(jvps[i], (fd * tangent).sum(), rtol=1e-5, atol=1e-7)
