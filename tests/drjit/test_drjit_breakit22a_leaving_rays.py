"""rayd.drjit twin of ``tests/torch/test_breakit22a_leaving_rays.py`` (session 22, helper breakit22a): a ray that
leaves a face at a grazing angle finds the neighbouring face it crosses on the CPU's Embree path too (it was a miss
from the second query on: Embree's near-tangent winner, the ray's own face behind ``tmin``, passed the rounding band)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402
from rayd.engine import cpu_embree  # noqa: E402
from breakit22a_reference import leaving_rays  # noqa: E402
from reference import closest_hit  # noqa: E402


@pytest.mark.parametrize("double", [False, True])
def test_rays_leaving_a_face_find_the_neighbour_on_every_path(m, double):
    v, f, o, d, own = leaving_rays(2000, seed=0)
    ref = closest_hit(o.astype(np.float64), d.astype(np.float64), v, f)
    clear = (ref["t"] > 1e-3) & (np.abs(own) > 1e-12)
    kind = m.Array3f64 if double else m.Array3f
    before = cpu_embree._enabled
    try:
        for accel in (True, False):
            cpu_embree.set_enabled(accel)
            scene = rd.Scene()
            scene.add_mesh(rd.Mesh(vec(kind, v), vec(m.Array3u, f)))
            scene.build()
            ray = rd.Ray(vec(kind, o.astype(np.float64)), vec(kind, d.astype(np.float64)))
            for call in range(3):  # Warp answers the first query on a geometry, Embree the later ones (CPU)
                hit = scene.intersect(ray)
                lost = clear & (rows(hit.prim_id) < 0)
                assert not lost.any(), f"accel={accel} call {call}: {int(lost.sum())} of {int(clear.sum())} rays miss"
                np.testing.assert_allclose(rows(hit.t).astype(np.float64)[clear], ref["t"][clear], rtol=1e-5)
    finally:
        cpu_embree.set_enabled(before)


@pytest.mark.parametrize("double", [False, True])
def test_rays_leaving_a_face_outwards_are_not_shadowed_by_it(m, double):
    v, f, o, d, own = leaving_rays(4000, seed=3)
    d = -d
    ref = closest_hit(o.astype(np.float64), d.astype(np.float64), v, f)
    clear = (ref["prim"] < 0) & (np.abs(own) > 1e-12)
    kind = m.Array3f64 if double else m.Array3f
    before = cpu_embree._enabled
    try:
        for accel in (True, False):
            cpu_embree.set_enabled(accel)
            scene = rd.Scene()
            scene.add_mesh(rd.Mesh(vec(kind, v), vec(m.Array3u, f)))
            scene.build()
            ray = rd.Ray(vec(kind, o.astype(np.float64)), vec(kind, d.astype(np.float64)))
            for call in range(3):
                shadowed = np.array(scene.shadow_test(ray)).astype(bool) & clear
                assert not shadowed.any(), f"accel={accel} call {call}: {int(shadowed.sum())} of {int(clear.sum())}"
    finally:
        cpu_embree.set_enabled(before)
