"""Backend-neutral scene logic shared by rayd.torch and rayd.drjit (NumPy and rayd.engine only).

- :mod:`rayd.core.protocol`: the small array protocol each frontend implements;
- :mod:`rayd.core.shapes`: shape ids, numbering, change tracking and lifecycle rules;
- :mod:`rayd.core.transforms`: the host transform table and the rules matrices must meet;
- :mod:`rayd.core.scene`: :class:`SceneCore`, the build/sync orchestration over the engine.

This package never imports torch or drjit (tests/engine/test_import_isolation.py).
"""

from rayd.core.protocol import ArrayProtocol
from rayd.core.scene import SceneCore
from rayd.core.shapes import Shape, ShapeTable
from rayd.core.transforms import TransformTable, check_matrices, transform_problem

__all__ = ["ArrayProtocol", "SceneCore", "Shape", "ShapeTable", "TransformTable", "check_matrices",
           "transform_problem"]
