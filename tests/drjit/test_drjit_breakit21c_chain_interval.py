"""Break-it session 21 (helper breakit21c): rayd.drjit float64 ``trace_reflections`` keeps a hit
within float32 rounding below ``tmax``, as ``intersect`` does (was: an empty chain)."""

from __future__ import annotations

import math

import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
llvm = pytest.importorskip("drjit.llvm.ad")


@pytest.mark.parametrize("rel", [1e-15, 1e-12, 1e-9, 1e-8])
def test_float64_chain_keeps_a_hit_just_inside_tmax(rel):
    # z = 0.3 (face 0) and z = 0.1 (face 1); rays straight down from z = 1: t = 0.7 and 0.9
    v = llvm.Array3f64([0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 1], [0.3, 0.3, 0.3, 0.1, 0.1, 0.1])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, llvm.Array3u([0, 3], [1, 4], [2, 5])))
    scene.build()
    t = 1.0 - 0.3
    ray = rd.Ray(llvm.Array3f64(0.2, 0.2, 1.0), llvm.Array3f64(0.0, 0.0, -1.0),
                 llvm.Float64([t * (1 + rel), t * (1 - rel)]))
    assert list(scene.intersect(ray).prim_id) == [0, -1]
    chain = scene.trace_reflections(ray, 2)
    assert list(chain.global_prim_id) == [0, -1, -1, -1]  # was all -1
    assert list(chain.t) == [t, math.inf, math.inf, math.inf]
    assert list(chain.path_length) == [t, 0.0]
