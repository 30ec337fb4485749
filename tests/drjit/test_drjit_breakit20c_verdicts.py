"""The deferred content verdict of rayd.drjit names the call the user made (session 20, helper breakit20c).

On CUDA with ``RAYD_CONTENT_CHECK=1`` a query leaves its content comparison's verdict to its one
fence and, if an array changed, repeats the lifecycle check there to raise its precise error
(:mod:`rayd.drjit._verdicts`). A float64 ``intersect`` / ``shadow_test`` runs ``intersect_all``
inside itself (the walk-on, :mod:`rayd.drjit._walk_on`), whose own check replaced the recheck:
the error named ``intersect_all()`` (22 cases of ``test_drjit_unseen_writes.py`` on an H100,
session 19). The recheck also outlived its query (holding its scene). Exercised here on the CPU
with the deferral forced (``_contents.DEFER_ON_CPU``), the same code path as CUDA's.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
wp = pytest.importorskip("warp")


@pytest.fixture(autouse=True, params=["read_at_end", "read_at_fence"])
def _deferred(monkeypatch, request):
    """The deferral forced on the CPU; ``read_at_fence``: the verdicts are read by the query's fence, as on
    CUDA (on the CPU the fence is a no-op and the query's end reads them)."""
    from rayd.core import contents
    from rayd.drjit import _contents, _convert

    monkeypatch.setattr(contents, "MODE", "1")
    monkeypatch.setattr(_contents, "DEFER_ON_CPU", True)
    if request.param == "read_at_fence":
        fence = _convert.fence

        def cuda_like_fence(device):
            fence(device)
            if getattr(_convert._query, "verdicts", None):
                _convert.after_fence()

        monkeypatch.setattr(_convert, "fence", cuda_like_fence)


def _scene(m, dtype, dynamic=True):
    v3 = m.Array3f64 if dtype == "float64" else m.Array3f
    v = v3([0.0, 1, 0], [0.0, 0, 1], [0.0, 0, 0])
    f = m.Array3i([0], [1], [2])
    dr.eval(v, f)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, f), dynamic=dynamic)
    scene.build()
    ray = rd.Ray(v3(0.2, 0.2, 1.0), v3(0.0, 0.0, -1.0))
    return scene, v, ray


def _lower_by_half(component):
    """Write ``component - 0.5`` through a Warp view (no Dr.Jit write: only the content check sees it)."""
    view = wp.from_dlpack(component)
    values = view.numpy().copy() - 0.5
    view.assign(values)


QUERIES = {
    "intersect": lambda s, r: s.intersect(r).t,
    "shadow_test": lambda s, r: s.shadow_test(r),
    "intersect_all": lambda s, r: s.intersect_all(r, 2).t,
    "count_intersections": lambda s, r: s.count_intersections(r),
    "visible": lambda s, r: s.visible(r.o, r.o + 2 * r.d),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("query", sorted(QUERIES))
@pytest.mark.parametrize("dynamic", [False, True])
def test_deferred_error_names_the_query_called(m, backend, dtype, query, dynamic):
    scene, v, ray = _scene(m, dtype, dynamic)
    dr.eval(QUERIES[query](scene, ray))
    _lower_by_half(v.z)
    what = "changed in place since the last sync" if dynamic else "static mesh 0 changed in place"
    with pytest.raises(RuntimeError, match=rf"^rayd\.drjit\.Scene\.{query}\(\): .*{what}"):
        dr.eval(QUERIES[query](scene, ray))
    (scene.sync if dynamic else scene.build)()
    assert float(scene.intersect(ray).t[0]) == pytest.approx(1.5)


def test_recheck_does_not_outlive_its_query(m, backend):
    """An unchanged query leaves no recheck behind: it held its scene (GPU memory) and could raise later."""
    from rayd.drjit._convert import _query

    scene, v, ray = _scene(m, "float64")
    dr.eval(scene.intersect(ray).t)
    assert getattr(_query, "recheck", None) is None
    ref = weakref.ref(scene)
    del scene
    gc.collect()
    assert ref() is None


def test_a_later_query_of_another_scene_names_its_own_call(m, backend):
    """A scene left stale by one query never answers for the next query of another scene."""
    stale, v_stale, ray = _scene(m, "float64", dynamic=False)
    dr.eval(stale.intersect_all(ray, 2).t)
    _lower_by_half(v_stale.z)
    with pytest.raises(RuntimeError, match=r"^rayd\.drjit\.Scene\.intersect_all\(\)"):
        stale.intersect_all(ray, 2)
    scene, v, ray2 = _scene(m, "float32")
    np.testing.assert_allclose(np.asarray(scene.intersect(ray2).t), [1.0])
    _lower_by_half(v.z)
    with pytest.raises(RuntimeError, match=r"^rayd\.drjit\.Scene\.intersect\(\): the vertices .* mesh 0"):
        scene.intersect(ray2)
