"""intersect / shadow_test / visible: one rayd.core.queries.RayQueries for both frontends, each documented in
its own words; visible's open interval (VISIBILITY_EPSILON, relative to the segment) from the one constant."""

from __future__ import annotations

import inspect

import pytest
import torch

import rayd.torch as rt
from rayd.core import queries
from rayd.torch import scene as torch_scene


def test_methods_run_the_core_code_with_frontend_docstrings():
    for name in ("intersect", "shadow_test", "visible"):
        method = getattr(rt.Scene, name)
        assert getattr(method, '_rayd_serialised', False)  # run under the engine lock
        assert inspect.unwrap(method).__code__ is getattr(queries.RayQueries, name).__code__
        assert method.__doc__ and "tensor" in method.__doc__
        assert method.__qualname__ == f"Scene.{name}"
    assert torch_scene.VISIBILITY_EPSILON == queries.VISIBILITY_EPSILON == 1e-4


@pytest.mark.parametrize("s_wall, blocked", [(0.5e-4, False), (2e-4, True), (0.5, True), (1 - 2e-4, True),
                                             (1 - 0.5e-4, False)])
def test_visible_epsilon_is_relative_to_the_segment(device, s_wall, blocked):
    # a wall x = 10 s_wall across a segment from x = 0 to x = 10: only s in (1e-4, 1 - 1e-4) blocks
    x = 10.0 * s_wall
    v = torch.tensor([[x, -1, -1], [x, 1, -1], [x, 0, 2]], dtype=torch.float64, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    start = torch.zeros(3, dtype=torch.float64, device=device)
    end = torch.tensor([10.0, 0, 0], dtype=torch.float64, device=device)
    assert scene.visible(start, end).item() is (not blocked)
    assert scene.visible(end, start).item() is (not blocked)  # symmetric
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Scene\.visible\(\): 'start'"):
        scene.visible([0.0, 0.0, 0.0], end)
