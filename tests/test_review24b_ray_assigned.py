"""Assigned ``Ray`` attributes in both frontends (helper review24b, session 24).

Found: ``Ray()`` checked ``o``, ``d``, ``tmax`` and ``tmin`` once, and the attributes can be assigned
afterwards; a query then read them unchecked: ``ray.o = torch.zeros(5, 3)`` on a ray of 3 stopped with
torch's "The expanded size of the tensor (3) must match the existing size (5)", ``ray.o = "x"`` with
``AttributeError: 'str' object has no attribute 'device'`` (rayd.drjit: ``KeyError:
JitBackend.Invalid``, ``IndexError``, or answers for the old width). Every query now checks a ray's
arrays again when one of them was replaced or changed its extent (``rayd.core.rays.RayBase._current``,
shared by both frontends): arrays that broadcast give the new batch, others the contract's
``TypeError``/``ValueError`` naming the query and ``'ray.o'``, ``'ray.d'``, ``'ray.tmax'``, ``'ray.tmin'``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt

# The unit square in z = 0, two faces.
SQUARE = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], float)
FACES = np.array([[0, 1, 2], [0, 2, 3]])
XS = [0.2, 0.5, 0.7, 2.0, 2.0]  # origins' x: three over the square, two beside it


def _torch():
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(SQUARE, dtype=torch.float32), torch.tensor(FACES)))
    scene.build()

    def origins(k):
        return torch.tensor([[x, 0.5, 1.0] for x in XS[:k]])

    return scene, rt.Ray, origins, lambda: torch.tensor([0.0, 0.0, -1.0]), lambda v: torch.tensor(v), \
        lambda a: np.asarray(a.detach().cpu()).reshape(-1), lambda: torch.zeros(3, dtype=torch.int32), "rayd.torch"


def _drjit():
    dr = pytest.importorskip("drjit")
    import rayd.drjit as rd
    from drjit.llvm.ad import Array3f, Array3i, Array3u, Float

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(Array3f(np.ascontiguousarray(SQUARE.T, dtype=np.float32)),
                           Array3u(np.ascontiguousarray(FACES.T, dtype=np.uint32))))
    scene.build()

    def origins(k):
        return Array3f(Float(XS[:k]), Float(0.5), Float(1.0))

    return scene, rd.Ray, origins, lambda: Array3f(0.0, 0.0, -1.0), lambda v: Float(v), \
        lambda a: np.asarray(dr.detach(a)).reshape(-1), lambda: Array3i(0, 0, 0), "rayd.drjit"


FRONTENDS = {"torch": _torch, "drjit": _drjit}


@pytest.mark.parametrize("frontend", sorted(FRONTENDS))
def test_assigned_arrays_that_broadcast_give_the_new_batch(frontend):
    scene, Ray, origins, down, flat, host, _, _ = FRONTENDS[frontend]()
    ray = Ray(origins(3), down())
    ray.o = origins(5)
    np.testing.assert_array_equal(host(scene.intersect(ray).t), [1, 1, 1, np.inf, np.inf])
    np.testing.assert_array_equal(host(scene.shadow_test(ray)), [True, True, True, False, False])
    ray.tmax = flat([0.5, 2.0, 0.5, 2.0, 2.0])
    np.testing.assert_array_equal(host(scene.intersect(ray).t), [np.inf, 1, np.inf, np.inf, np.inf])
    ray.tmin = flat([1.5, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(host(scene.count_intersections(ray)), [0, 1, 0, 0, 0])


@pytest.mark.parametrize("frontend", sorted(FRONTENDS))
def test_assigned_arrays_that_do_not_fit_are_the_contracts_errors(frontend):
    scene, Ray, origins, down, flat, host, ints, prefix = FRONTENDS[frontend]()
    call = prefix.replace(".", r"\.") + r"\.Scene\.intersect\(\): "
    ray = Ray(origins(3), down())
    ray.d = down()
    ray.tmax = flat([2.0] * 4)
    with pytest.raises(ValueError, match="^" + call + r"batch shapes do not broadcast: .*'ray\.tmax' \(4,\)"):
        scene.intersect(ray)
    ray.tmax = 2.0
    ray.o = "x"
    with pytest.raises(TypeError, match="^" + call + r"'ray\.o' must be"):
        scene.intersect(ray)
    ray.o = origins(3)
    ray.d = ints()
    with pytest.raises(TypeError, match="^" + call + r"'ray\.d' must have dtype float32 or float64"):
        scene.intersect(ray)
    ray.d = down()
    ray.tmin = True
    with pytest.raises(TypeError, match="^" + call + r"'ray\.tmin' must be a float or"):
        scene.intersect(ray)
    ray.tmin = 0.0
    np.testing.assert_array_equal(host(scene.intersect(ray).t), [1, 1, 1])
