"""rayd.drjit twin of ``tests/torch/test_review24a_id_range.py``: more faces than int32 ids is a ValueError.

The check lives in ``rayd.core.scene.SceneCore.build`` (shared); before session 24 both
frontends stopped with NumPy's ``OverflowError`` there.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("drjit")

import rayd.drjit as rd  # noqa: E402
from drjit_testutil import vec  # noqa: E402

FACES_PER_MESH = 2 ** 20


def test_more_global_prim_ids_than_int32_is_a_value_error(m):
    v = vec(m.Array3f, [[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    f = vec(m.Array3i, np.tile(np.array([[0, 1, 2]], dtype=np.int32), (FACES_PER_MESH, 1)))
    scene = rd.Scene()
    mesh_id = scene.add_mesh(rd.Mesh(v, f))
    for _ in range(2 ** 31 // FACES_PER_MESH):  # with the mesh itself: 2^31 + 2^20 faces
        scene.add_instance(mesh_id, m.Matrix4f(1.0))
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.build\(\): .*2,148,532,224 faces.*int32"):
        scene.build()
    assert not scene.is_ready()
