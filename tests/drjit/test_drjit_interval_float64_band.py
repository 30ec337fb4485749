"""rayd.drjit float64 queries decide the open interval on the float64 t (break-it t49): a hit within
float32 rounding of tmin/tmax is neither dropped by the float32 search nor kept outside."""

from __future__ import annotations

import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
llvm = pytest.importorskip("drjit.llvm.ad")


def _two_planes():
    # Triangles z = 0.3 (face 0) and z = 0.1 (face 1); rays straight down from z = 1: t = 0.7 and 0.9.
    v = llvm.Array3f64([0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 1], [0.3, 0.3, 0.3, 0.1, 0.1, 0.1])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, llvm.Array3u([0, 3], [1, 4], [2, 5])))
    scene.build()
    return scene


@pytest.mark.parametrize("rel", [1e-15, 1e-12, 1e-9, 1e-8])
def test_bounds_within_float32_rounding_of_the_hit(rel):
    scene = _two_planes()
    t = 1.0 - 0.3
    o, d = llvm.Array3f64(0.2, 0.2, 1.0), llvm.Array3f64(0.0, 0.0, -1.0)
    tmax = llvm.Float64([t * (1 + rel), t * (1 - rel), float("inf"), float("inf")])
    tmin = llvm.Float64([0.0, 0.0, t * (1 - rel), t * (1 + rel)])
    ray = rd.Ray(o, d, tmax, tmin=tmin)
    hit = scene.intersect(ray)
    assert list(hit.prim_id) == [0, -1, 0, 1]
    assert list(hit.t) == [t, float("inf"), t, 1.0 - 0.1]
    assert list(scene.shadow_test(ray)) == [True, False, True, True]
    assert list(scene.shadow_test(rd.Ray(o, d, llvm.Float64(0.8), tmin=tmin))) == [True, True, True, False]
    assert list(scene.intersect_all(ray, 2).prim_id) == [0, -1, -1, -1, 0, 1, 1, -1]
