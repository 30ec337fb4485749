"""rayd.drjit regressions found in the session-8 fresh-user pass (bad and edge-case input)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")


def _quad(m):
    scene = rd.Scene()
    vertices = m.Array3f([0, 1, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0])
    scene.add_mesh(rd.Mesh(vertices, m.Array3u([0, 1], [1, 3], [2, 2])))
    scene.build()
    return scene


def test_shadow_test_of_zero_rays(m):
    """A width-0 batch gives a width-0 Bool (it raised Dr.Jit's 'incompatible sizes (0, 1)')."""
    scene = _quad(m)
    blocked = scene.shadow_test(rd.Ray(m.Array3f(), m.Array3f()))
    assert dr.width(blocked) == 0
    # The same scene still answers a real ray: straight down onto the quad is blocked.
    assert np.array_equal(np.asarray(scene.shadow_test(rd.Ray(m.Array3f(0.25, 0.25, 1.0), m.Array3f(0, 0, -1)))),
                          [True])
