"""intersect_all / count_intersections: rayd.core.queries.AllHitsQueries' code in both frontends, the checks once."""

from __future__ import annotations

import inspect

import pytest
import torch

import rayd.torch as rt
from rayd.core import queries


def test_methods_run_the_core_code_with_frontend_docstrings():
    for name in ("intersect_all", "count_intersections"):
        method = getattr(rt.Scene, name)
        assert getattr(method, '_rayd_serialised', False)  # run under the engine lock
        assert inspect.unwrap(method).__code__ is getattr(queries.AllHitsQueries, name).__code__
        assert "tensor" in method.__doc__
    drjit = pytest.importorskip("rayd.drjit")
    for name in ("intersect_all", "count_intersections"):
        method = getattr(drjit.Scene, name)
        assert getattr(method, '_rayd_serialised', False)  # run under the engine lock
        assert inspect.unwrap(method).__code__ is getattr(queries.AllHitsQueries, name).__code__
        assert "Bool" in method.__doc__ or "Int" in method.__doc__


def test_checks_name_the_frontend_call(device):
    v = torch.tensor([[0.0, -1, -1], [0, 1, -1], [0, 0, 2]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    ray = rt.Ray(torch.tensor([-1.0, 0, 0], device=device), torch.tensor([1.0, 0, 0], device=device))
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Scene\.intersect_all\(\): 'max_hits'"):
        scene.intersect_all(ray, 65)
    with pytest.raises(TypeError, match=r"^rayd\.torch\.Scene\.intersect_all\(\): 'flags'"):
        scene.intersect_all(ray, 2, flags=3.5)
    hits = scene.intersect_all(ray, 2)
    assert hits.t.tolist() == [1.0, float("inf")]
    assert scene.count_intersections(ray).item() == 1
