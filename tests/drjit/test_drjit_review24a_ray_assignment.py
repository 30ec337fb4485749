"""rayd.drjit twin of ``tests/torch/test_review24a_ray_assignment.py``: ``Ray`` field assignment is checked.

The rule lives in ``rayd.core.rays.RayBase._current`` (shared): a query checks a reassigned field
as ``Ray()`` checks its arguments (naming the query and ``'ray.<field>'``) and takes its width.
"""

from __future__ import annotations

import pytest

pytest.importorskip("drjit")

import rayd.drjit as rd  # noqa: E402
from drjit_testutil import rows, vec  # noqa: E402


def test_ray_assignment_is_checked(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, [[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]]),
                           vec(m.Array3i, [[0, 1, 2], [0, 2, 3]])))
    scene.build()
    ray = rd.Ray(vec(m.Array3f, [[0.5, 0.5, 2.0]]), m.Array3f(0, 0, -1))
    ray.o = vec(m.Array3f, [[0.2, 0.2, 1.0], [0.5, 0.5, 3.0], [0.7, 0.1, 0.5]])
    assert rows(scene.intersect(ray).t).tolist() == [1.0, 3.0, 0.5]
    ray.tmax = 2.0
    assert rows(scene.intersect(ray).t).tolist() == [1.0, float("inf"), 0.5]
    ray.tmin = "near"
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Scene\.intersect\(\): 'ray\.tmin'"):
        scene.intersect(ray)
    ray.tmin = 0.0
    ray.d = vec(m.Array3f, [[0.0, 0, -1]] * 2)  # width 2 against 3
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.intersect\(\): batch shapes do not broadcast"):
        scene.intersect(ray)
    ray.d = m.Array3f(0, 0, -1)
    assert rows(scene.intersect(ray).t).tolist() == [1.0, float("inf"), 0.5]
