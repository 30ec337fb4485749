"""rayd.torch winding_number derivatives at points on a mesh's edges and vertices (helper breakit25,
session 25).

The solid angle's numerator and denominator both vanish there (and a corner vector, at a
vertex). Points on the surface are outside DESIGN.md's contract for the winding number's
value (docs/known-limitations.md), but a derivative must never be NaN: reverse mode gave 0
there, forward mode (``torch.func.jvp``, forward-mode AD) NaN, which poisons a whole batch
(e.g. sample points taken at the mesh's own vertices). rayd.drjit gives 0 in both modes.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import jvp, vjp

import rayd.torch as rt

F64 = torch.float64
#: On the face, on an edge, on a vertex, in the face's plane outside it, and off the plane.
POINTS = torch.tensor([[0.25, 0.25, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [2.0, 2.0, 0.0], [0.3, 0.2, 0.4]],
                      dtype=F64)


def _scene():
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=F64), torch.tensor([[0, 1, 2]])))
    scene.build()
    return scene


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_forward_mode_equals_reverse_mode_and_is_never_nan(axis):
    scene = _scene()
    tangent = torch.zeros_like(POINTS)
    tangent[:, axis] = 1.0
    _, forward = jvp(scene.winding_number, (POINTS,), (tangent,))
    _, pull = vjp(scene.winding_number, POINTS)
    reverse = pull(torch.ones(len(POINTS), dtype=F64))[0][:, axis]
    assert not bool(forward.isnan().any())
    torch.testing.assert_close(forward, reverse, rtol=1e-12, atol=1e-15)
    # off the surface, the derivative is the true one: d/dz of the solid angle in the plane, outside the face
    if axis == 2:
        h = 1e-6
        lifted = POINTS[3:4] + torch.tensor([[0.0, 0.0, h]], dtype=F64)
        lowered = POINTS[3:4] - torch.tensor([[0.0, 0.0, h]], dtype=F64)
        fd = (scene.winding_number(lifted, exact=True) - scene.winding_number(lowered, exact=True)) / (2 * h)
        torch.testing.assert_close(forward[3:4], fd, rtol=1e-6, atol=0)
