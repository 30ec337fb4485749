"""Break-it session 21 (helper breakit21c): rayd.drjit places transformed float32 meshes in float32.

A float32 mesh near the origin placed by an exactly representable translation of 3e4 has exact
world geometry; rayd.torch places it in float64 (``rayd.torch._geometry.gather``,
``placed_vertices(torch.float64)``) and reports ``t`` and distances to about 1e-7. rayd.drjit
gathered the transform columns as ``Array3f`` and placed in float32 first (half an ulp of 3e4 is
1e-3): ``intersect``'s ``t`` was 3.6e-4 off and ``closest_point``'s distance 4.6e-4. Fixed by
helper drjit21 (float64 placement, ``rayd.drjit._geometry.place``); the parity tests of every
query are in ``test_drjit21_placement.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
llvm = pytest.importorskip("drjit.llvm.ad")

OFFSET = np.array([1.0e4, -2.0e4, 3.0e4])


def test_far_transformed_float32_mesh_is_placed_exactly():
    v = np.array([[-1.0, -1.0, 0.1], [1.2, -0.9, -0.1], [0.1, 1.1, 0.2]], dtype=np.float32)
    matrix = np.eye(4, dtype=np.float32)
    matrix[:3, 3] = OFFSET
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(llvm.Array3f(*v.T), llvm.Array3u([0], [1], [2]), to_world=llvm.Matrix4f(matrix)))
    scene.build()
    o = np.array([0.125, 0.0625, -2.0]) + OFFSET  # exact in float32
    hit = scene.intersect(rd.Ray(llvm.Array3f(*(float(x) for x in o.astype(np.float32))), llvm.Array3f(0.0, 0.0, 1.0)))
    # the plane of the exact world triangle at (x, y) = (0.125, 0.0625) relative to its placement
    a, b, c = v.astype(np.float64)
    n = np.cross(b - a, c - a)
    z = a[2] - (n[0] * (0.125 - a[0]) + n[1] * (0.0625 - a[1])) / n[2]
    assert abs(float(hit.t[0]) - (z + 2.0)) < 1e-5  # was 3.6e-4 off
