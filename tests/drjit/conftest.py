"""rayd.drjit tests: parametrised over Dr.Jit's LLVM backend and, when present, CUDA.

The whole folder skips cleanly when Dr.Jit is not installed (each module calls
``pytest.importorskip("drjit")``; nothing here imports it unguarded).
"""

from __future__ import annotations

import importlib

import pytest

try:
    import drjit as _dr
except ImportError:  # pragma: no cover - exercised only without drjit
    _dr = None


def _backends() -> list[str]:
    if _dr is None:
        return []
    found = []
    if _dr.has_backend(_dr.JitBackend.LLVM):
        found.append("llvm")
    if _dr.has_backend(_dr.JitBackend.CUDA):
        found.append("cuda")
    return found


BACKENDS = _backends()


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", BACKENDS or [pytest.param("llvm", marks=pytest.mark.skip("no Dr.Jit"))])


@pytest.fixture
def m(backend):
    """The differentiable Dr.Jit namespace of the backend, e.g. ``drjit.llvm.ad``."""
    return importlib.import_module(f"drjit.{backend}.ad")


@pytest.fixture
def plain(backend):
    """The non-differentiable Dr.Jit namespace of the backend, e.g. ``drjit.llvm``."""
    return importlib.import_module(f"drjit.{backend}")
