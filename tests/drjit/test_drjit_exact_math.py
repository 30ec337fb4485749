"""rayd.drjit's public calls run with ``drjit.JitFlag.FastMath`` off (``rayd.drjit._check.exact_math``).

Dr.Jit 1.5 emits ``drjit.rcp`` as PTX ``rcp.approx.ftz`` on CUDA for float64 too while FastMath is on
(its default), and weights the derivative of ``a / b`` by ``rcp(b)``: rayd.drjit's float64 gradients on
CUDA were ~1e-6 relative off (session 22's first H100 call: 12 failures of test_drjit21_placement.py and
test_drjit_breakit20c_many.py). The derivative weights are made while rayd's own code runs, so the flag
must be off there: checked here on every backend (the wrapper is the same), the CUDA figures by the
CUDA runs of those tests. The user's flag is restored after each call, also when the call raises.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")
from rayd.drjit import _check  # noqa: E402

from drjit_testutil import vec  # noqa: E402


def _public_functions(cls):
    return [name for name in dir(cls) if not name.startswith("_")
            and inspect.isfunction(inspect.getattr_static(cls, name))]


@pytest.mark.parametrize("cls", [rd.Scene, rd.Camera], ids=["Scene", "Camera"])
def test_every_public_method_is_wrapped(cls):
    names = _public_functions(cls)
    assert len(names) >= (20 if cls is rd.Scene else 4)
    for name in names:
        chain, fn = [], getattr(cls, name)
        while fn is not None:
            chain.append(getattr(fn, "__code__", None))
            fn = getattr(fn, "__wrapped__", None)
        assert _check.exact_math(lambda: None).__code__ in chain, f"{cls.__name__}.{name} is not run by exact_math"
    assert _check.exact_math(lambda: None).__code__ in [
        getattr(f, "__code__", None) for f in (rd.find_specular_paths, getattr(rd.find_specular_paths, "__wrapped__", None))]


def _scene(m):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=np.float64)
    vd = vec(m.Array3f64, v)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vd, m.Array3u([0], [1], [2])))
    scene.build()
    return scene, vd


def test_flag_off_inside_a_query_and_restored(m, monkeypatch):
    scene, vd = _scene(m)
    seen = []
    original = _check.outside_recording

    def spy(call):
        seen.append(dr.flag(dr.JitFlag.FastMath))
        return original(call)

    monkeypatch.setattr(_check, "outside_recording", spy)
    assert dr.flag(dr.JitFlag.FastMath)  # Dr.Jit's default, the user's here
    ray = rd.Ray(vec(m.Array3f64, [[0.2, 0.2, 1.0]]), vec(m.Array3f64, [[0.0, 0.0, -1.0]]))
    hit = scene.intersect(ray)
    assert seen and not any(seen)
    assert dr.flag(dr.JitFlag.FastMath)
    np.testing.assert_allclose(np.array(hit.t), [1.0])
    # restored when the call raises too
    with pytest.raises(ValueError):
        scene.nearest_edges(vec(m.Array3f64, [[0.2, 0.2, 1.0]]), 0)
    assert dr.flag(dr.JitFlag.FastMath)
    # and a user who turned it off keeps it off
    with dr.scoped_set_flag(dr.JitFlag.FastMath, False):
        scene.intersect(ray)
        assert not dr.flag(dr.JitFlag.FastMath)


def test_float64_gradient_of_t_is_exact(m):
    """d t / d z of a vertex for a ray straight down onto a tilted triangle: t = z(x, y) of the plane, hand-derived."""
    v = np.array([[0, 0, 0.3], [1, 0, 0.1], [0, 1, 0.7]], dtype=np.float64)
    vd = vec(m.Array3f64, v)
    dr.enable_grad(vd)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vd, m.Array3u([0], [1], [2])))
    scene.build()
    x, y = 0.25, 0.35
    hit = scene.intersect(rd.Ray(vec(m.Array3f64, [[x, y, 3.0]]), vec(m.Array3f64, [[0.0, 0.0, -1.0]])))
    dr.backward(hit.t)
    g = np.array(dr.grad(vd)).T
    # plane z = z0 (1 - x - y) + z1 x + z2 y, t = 3 - z: dt/dz_i = -barycentric_i
    want = -np.array([1 - x - y, x, y])
    np.testing.assert_allclose(g[:, 2], want, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(np.array(hit.t), [3.0 - (0.3 * (1 - x - y) + 0.1 * x + 0.7 * y)], rtol=1e-15)
