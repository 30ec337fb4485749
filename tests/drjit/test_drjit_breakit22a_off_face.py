"""Break-it session 22 (helper breakit22a), rayd.drjit twin of ``tests/torch/test_breakit22a_off_face.py``:
a ray along a mesh edge can be reported hitting a face it lies (nearly) in the plane of, at a point far
outside that face (fixed for float32 in session 22, for float64 in session 23: ``rayd.core.hits.off_face``)."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402
from breakit22a_reference import along_edges, distance_to_face, torus  # noqa: E402
from rayd.engine import cpu_embree  # noqa: E402

SLACK = 1e-5


@pytest.fixture(params=["embree", "warp"])
def accel(request):
    before = cpu_embree._enabled
    cpu_embree.set_enabled(request.param == "embree")
    yield request.param
    cpu_embree.set_enabled(before)


def _off_face(m, double, n=2000, seed=1):
    v, f = torus()
    kind = m.Array3f64 if double else m.Array3f
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(kind, v), vec(m.Array3u, f)))
    scene.build()
    o, d = along_edges(v, f, n, seed)
    ray = rd.Ray(vec(kind, o.astype(np.float64)), vec(kind, d.astype(np.float64)))
    for _ in range(2):  # Warp answers the first query on a geometry, Embree the later ones
        hit = scene.intersect(ray)
    ok = np.array(hit.is_valid()).astype(bool)
    corners = (v if double else v.astype(np.float32).astype(np.float64))[f[rows(hit.prim_id)[ok]]]
    return ok, distance_to_face(rows(hit.p).astype(np.float64)[ok], corners)


def test_the_rays_mostly_hit_on_their_face(m):
    ok, gap = _off_face(m, False)
    assert ok.mean() > 0.6
    assert (gap <= SLACK).mean() > 0.95


@pytest.mark.parametrize("double", [False, True])
def test_every_reported_hit_point_lies_on_its_face(m, double, accel):
    ok, gap = _off_face(m, double)
    bad = gap > SLACK
    assert not bad.any(), f"{int(bad.sum())} of {int(ok.sum())} hits lie off their face, up to {gap.max():.3g}"
