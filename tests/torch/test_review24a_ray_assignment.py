"""Assigning ``o``, ``d``, ``tmax`` or ``tmin`` of an existing ``Ray`` (session 24, helper review24a).

A ``Ray`` "may be reused across steps" (its docstring), and its fields are plain attributes,
so ``ray.o = new_origins`` is the natural way to reuse one. The assignment was not checked:
the stored batch shape went stale and the next query failed deep inside with torch's
"The expanded size of the tensor (1) must match the existing size (3)" (new batch size), or
"shape '[1, 3]' is invalid for input of size 2" (a (..., 2) tensor), or
``'list' object has no attribute 'device'``. A query now checks a reassigned field as ``Ray()``
checks its arguments, naming the query and ``'ray.<field>'``, and takes the new batch shape
(``rayd.core.rays.RayBase._current``, shared with rayd.drjit).
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt


def _quad_scene(device):
    """Unit quad at z = 0: a ray from height h straight down hits at t = h."""
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], device=device),
                           torch.tensor([[0, 1, 2], [0, 2, 3]], device=device)))
    scene.build()
    return scene


def test_assigned_fields_take_effect_with_a_new_batch_shape(device):
    scene = _quad_scene(device)
    ray = rt.Ray(torch.tensor([[0.5, 0.5, 2.0]], device=device), torch.tensor([0.0, 0, -1], device=device))
    ray.o = torch.tensor([[0.2, 0.2, 1.0], [0.5, 0.5, 3.0], [0.7, 0.1, 0.5]], device=device)
    assert ray.shape == (3,)
    assert scene.intersect(ray).t.tolist() == [1.0, 3.0, 0.5]
    ray.tmax = torch.tensor([2.0, 2.0, 2.0], device=device)
    assert scene.intersect(ray).t.tolist() == [1.0, float("inf"), 0.5]
    ray.tmin = 0.75
    assert scene.intersect(ray).t.tolist() == [1.0, float("inf"), float("inf")]
    ray.d = torch.tensor([0.0, 0, -2], dtype=torch.float64, device=device)  # t in multiples of |d|; promoted dtype
    hit = scene.intersect(ray)
    assert hit.t.dtype == torch.float64 and hit.t.tolist() == [float("inf"), 1.5, float("inf")]  # t = h / 2
    ray.tmin = 0.0
    assert scene.intersect(ray).t.tolist() == [0.5, 1.5, 0.25]


@pytest.mark.parametrize("name, value, error, message", [
    ("o", torch.zeros(3, 2), ValueError, r"'o' must have shape \(\.\.\., 3\)"),
    ("o", [0.0, 0.0, 3.0], TypeError, r"'o' must be a torch\.Tensor"),
    ("d", torch.zeros(3, 3, dtype=torch.int32), TypeError, r"'d' must have dtype float32 or float64"),
    ("tmax", "far", TypeError, r"'tmax' must be a float or a float tensor"),
    ("tmin", torch.zeros(2), ValueError, r"batch shapes do not broadcast"),
    ("o", torch.zeros(2, 3), ValueError, r"batch shapes do not broadcast"),
])
def test_a_bad_assignment_is_the_querys_error_naming_the_field_and_mending_it_works(device, name, value, error, message):
    # The ray is checked again at the next query (rayd.core.rays.RayBase._current): an assignment may
    # pass through an inconsistent state (o of 5 rays, then d of 5), the query names 'ray.<field>'.
    scene = _quad_scene(device)
    o = torch.tensor([[0.2, 0.2, 1.0], [0.5, 0.5, 3.0], [0.7, 0.1, 0.5]], device=device)
    d = torch.tensor([[0.0, 0, -1]] * 3, device=device)
    ray = rt.Ray(o, d)
    if isinstance(value, torch.Tensor):
        value = value.to(device)
    old = getattr(ray, name)
    setattr(ray, name, value)
    with pytest.raises(error, match=r"^rayd\.torch\.Scene\.intersect\(\): " + message.replace("'" + name + "'", "'ray." + name + "'")):
        scene.intersect(ray)
    setattr(ray, name, old)
    assert ray.shape == (3,)
    assert scene.intersect(ray).t.tolist() == [1.0, 3.0, 0.5]
