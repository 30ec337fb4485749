"""rayd.drjit twin of ``tests/torch/test_offface23_float64.py``: float64 queries never report a crossing off
its face (``rayd.core.hits.off_face`` on the float64 re-evaluation, then ``rayd.drjit._walk_on``), lose no hit
the float32 search can see, and answer as rayd.torch does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

import rayd.torch as rt  # noqa: E402
from drjit_testutil import rows, vec  # noqa: E402
from breakit22a_reference import along_edges, torus  # noqa: E402
from offface23_reference import brute_force, grazing_rays_near_corner, tilted_face_and_wall  # noqa: E402
from rayd.engine import cpu_embree  # noqa: E402


@pytest.fixture(params=["embree", "warp"])
def accel(request):
    before = cpu_embree._enabled
    cpu_embree.set_enabled(request.param == "embree")
    yield request.param
    cpu_embree.set_enabled(before)


def _scene(m, v, f):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f64, v), vec(m.Array3u, f)))
    scene.build()
    return scene


def _twice(query, *args):
    query(*args)  # Warp answers the first query on a geometry, Embree (when enabled) the later ones
    return query(*args)


def _ray(m, o, d, tmax=None):
    o, d = vec(m.Array3f64, np.atleast_2d(o)), vec(m.Array3f64, np.atleast_2d(d))
    return rd.Ray(o, d) if tmax is None else rd.Ray(o, d, m.Float64(np.atleast_1d(tmax)))


def test_tilted_face_off_face_winner_dropped_in_every_query(m, accel):
    v, f, o, d, t_wall = tilted_face_and_wall()
    scene = _scene(m, v, f)
    hit = _twice(scene.intersect, _ray(m, o, d))
    assert rows(hit.prim_id).tolist() == [1]
    assert rows(hit.t)[0] == pytest.approx(t_wall, rel=1e-12)
    for tmax, blocked in ((3.0, False), (t_wall - 1e-6, False), (t_wall + 1e-6, True)):
        assert rows(_twice(scene.shadow_test, _ray(m, o, d, tmax))).tolist() == [blocked], tmax
    assert rows(_twice(scene.visible, vec(m.Array3f64, [o]), vec(m.Array3f64, [o + 3.0 * d]))).tolist() == [True]
    hits = _twice(lambda r: scene.intersect_all(r, 4), _ray(m, o, d))
    assert rows(hits.is_valid()).tolist() == [True, False, False, False]
    assert rows(hits.prim_id)[0] == 1
    chain = _twice(lambda r: scene.trace_reflections(r, 2), _ray(m, o, d))
    valid = rows(chain.is_valid()).astype(bool)
    assert not (valid & (rows(chain.prim_id) == 0)).any()


def test_grazing_hits_near_edges_and_a_vertex_still_hit(m, accel):
    v, o, d, t = grazing_rays_near_corner()
    scene = _scene(m, v, np.array([[0, 1, 2]]))
    hit = _twice(scene.intersect, _ray(m, o, d))
    assert rows(hit.is_valid()).all()
    np.testing.assert_allclose(rows(hit.t), t, rtol=1e-9, atol=0)
    assert (rows(hit.barycentric) > 0).all()


def test_torus_parity_with_brute_force_and_rayd_torch(m, accel):
    v, f = torus()
    o32, d32 = along_edges(v, f, 1500, 3)
    o, d = o32.astype(np.float64), d32.astype(np.float64)
    tmax = np.random.default_rng(3).uniform(0.0, 3.0, len(o))
    scene = _scene(m, v, f)
    hit = _twice(scene.intersect, _ray(m, o, d))
    t = rows(hit.t)
    loose, strict = brute_force(o, d, v, f)
    assert not (t < loose * (1 - 1e-9)).any() and not (t > strict * (1 + 1e-9)).any()
    # shadow_test: blocked iff intersect hits inside (0, tmax)
    blocked = rows(_twice(scene.shadow_test, _ray(m, o, d, tmax))).astype(bool)
    valid = rows(_twice(scene.intersect, _ray(m, o, d, tmax)).is_valid()).astype(bool)
    assert (blocked == valid).all() and 100 < valid.sum() < len(o) - 100
    # rayd.torch, same rays: the same faces, t within the conditioning of grazing hits
    # (on the same device: rays along edges are ties that CPU and CUDA may break differently, both within
    # the brute force's bounds above; docs/known-limitations.md)
    dev = "cuda" if m.__name__.startswith("drjit.cuda") else "cpu"
    tscene = rt.Scene()
    tscene.add_mesh(rt.Mesh(torch.tensor(v, device=dev), torch.tensor(f, device=dev)))
    tscene.build()
    th = _twice(tscene.intersect, rt.Ray(torch.tensor(o, device=dev), torch.tensor(d, device=dev)))
    assert (th.prim_id.cpu().numpy() == rows(hit.prim_id)).all()
    np.testing.assert_allclose(th.t.cpu().numpy(), t, rtol=1e-6)
