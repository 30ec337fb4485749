"""rayd.drjit's intersect / shadow_test / visible run rayd.core.queries.RayQueries' code, with Dr.Jit docstrings."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("drjit")

import rayd.drjit as rd  # noqa: E402
from rayd.core import queries  # noqa: E402
from rayd.drjit import scene as drjit_scene  # noqa: E402


def test_methods_run_the_core_code_with_frontend_docstrings():
    for name in ("intersect", "shadow_test", "visible"):
        method = getattr(rd.Scene, name)
        assert getattr(method, '_rayd_serialised', False)  # run under the engine lock
        assert inspect.unwrap(method).__code__ is getattr(queries.RayQueries, name).__code__
        assert method.__doc__ and "Bool" in method.__doc__
    assert drjit_scene.VISIBILITY_EPSILON == queries.VISIBILITY_EPSILON
