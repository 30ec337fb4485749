"""rayd.core.specular: the image method written once over a frontend's ops (here NumPy ops)."""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from rayd.core import specular

#: ImageOps on (n, 3) NumPy rows; scalars are (n, 1).
NP_OPS = SimpleNamespace(dot=lambda a, b: (a * b).sum(-1, keepdims=True), cross=np.cross, select=np.where,
                         sqrt=np.sqrt, divide=lambda a, b: a / b)


def _floor(z: float = 0.0):
    """Corners of one large triangle in the plane ``z`` (counter-clockwise from above)."""
    return tuple(np.array([p]) for p in ([-10.0, -10.0, z], [10.0, -10.0, z], [0.0, 10.0, z]))


def test_one_bounce_off_a_floor_hand_derived():
    src, dst = np.array([[0.0, 0.0, 1.0]]), np.array([[2.0, 0.0, 3.0]])
    points, length = specular.image_method(NP_OPS, src, dst, [_floor()], [np.array([[True]])])
    # image of src: (0, 0, -1); the line from dst to it meets z = 0 at s = 3/4: (0.5, 0, 0)
    np.testing.assert_allclose(points[0], [[0.5, 0.0, 0.0]], atol=1e-15)
    np.testing.assert_allclose(length, [[math.sqrt(0.25 + 1.0) + math.sqrt(2.25 + 9.0)]], rtol=1e-15)


def test_two_bounces_between_parallel_planes_and_padding():
    # floor z = 0 and ceiling z = 2 (its normal points down: the sign of n does not matter)
    ceiling = tuple(np.array([p]) for p in ([-10.0, -10.0, 2.0], [0.0, 10.0, 2.0], [10.0, -10.0, 2.0]))
    src, dst = np.array([[0.0, 0.0, 1.0]]), np.array([[4.0, 0.0, 1.0]])
    used = [np.array([[True]]), np.array([[True]]), np.array([[False]])]
    points, length = specular.image_method(NP_OPS, src, dst, [_floor(), ceiling, _floor()], used)
    # unfolded: src -> floor -> ceiling -> dst travels 4 in x and 4 in z
    np.testing.assert_allclose(points[0], [[1.0, 0.0, 0.0]], atol=1e-14)
    np.testing.assert_allclose(points[1], [[3.0, 0.0, 2.0]], atol=1e-14)
    np.testing.assert_allclose(points[2], dst)  # a padding slot holds the target
    np.testing.assert_allclose(length, [[math.sqrt(32.0)]], rtol=1e-14)


def test_line_of_sight_and_degenerate_faces_are_finite():
    src, dst = np.array([[0.0, 0.0, 1.0]]), np.array([[3.0, 4.0, 1.0]])
    points, length = specular.image_method(NP_OPS, src, dst, [], [])
    assert points == [] and length.tolist() == [[5.0]]
    flat = tuple(np.array([[1.0, 1.0, 1.0]]) for _ in range(3))  # zero-area face
    points, length = specular.image_method(NP_OPS, src, dst, [flat], [np.array([[True]])])
    assert np.isfinite(points[0]).all() and np.isfinite(length).all()


def test_safe_norm_zero():
    assert specular.safe_norm(NP_OPS, np.zeros((2, 3))).tolist() == [[0.0], [0.0]]


def test_chain_fields_match_the_contract():
    assert list(specular.CHAIN_FIELDS) == ["t", "p", "geo_n", "d_out", "image_source", "prim_id", "shape_id",
                                           "global_prim_id", "num_bounces", "path_length"]


def test_specular_imports_without_torch_or_drjit():
    code = ("import sys\nsys.modules['torch'] = None\nsys.modules['drjit'] = None\n"
            "import rayd.core.specular\nprint('ok')\n")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ)
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_frontend_reflection_methods_run_the_core_code():
    import pytest  # noqa: PLC0415

    for module in ("rayd.torch", "rayd.drjit"):
        frontend = pytest.importorskip(module)
        for name in ("trace_reflections", "specular_paths"):
            method = getattr(frontend.Scene, name)
            assert getattr(method, '_rayd_serialised', False)  # run under the engine lock
            assert inspect.unwrap(method).__code__ is getattr(specular.ReflectionQueries, name).__code__
            assert method.__doc__ and (module in method.__doc__ or "Dr.Jit" in method.__doc__)


class _NpChainOps:
    """bounce_chain's ops on (n, 3) NumPy rows, scalars (n,), float64 output."""

    dot = staticmethod(lambda a, b: (a * b).sum(-1))
    select = staticmethod(np.where)
    divide = staticmethod(lambda a, b: a / b)
    madd = staticmethod(lambda x, a, y, scale: x + scale * a[:, None] * y)
    compared = staticmethod(lambda t: t)
    reported = staticmethod(lambda x: x)


def test_bounce_chain_between_two_mirrors_hand_derived():
    # floor z = 0 (normal +z) and ceiling z = 2 (normal -z); ray from (0, 0, 1) along (1, 0, -1)
    planes = [(np.array([[0.0, 0, 1]]), np.array([[0.0, 0, 1]]), np.array([0.0]), np.array([True])),
              (np.array([[0.0, 0, -1]]), np.array([[0.0, 0, -1]]), np.array([-2.0]), np.array([True])),
              (np.array([[0.0, 0, 1]]), np.array([[0.0, 0, 1]]), np.array([0.0]), np.array([False]))]
    out = []
    specular.bounce_chain(_NpChainOps, 3, lambda b: planes[b], np.array([[0.0, 0, 1]]), np.array([[1.0, 0, -1]]),
                          (0.0, math.inf), lambda *args: out.append(args))
    (_, t0, v0, p0, g0, d0, i0), (_, t1, v1, p1, g1, d1, i1), (_, t2, v2, *_rest) = out
    assert t0.tolist() == [1.0] and v0.tolist() == [True]
    assert p0.tolist() == [[1.0, 0, 0]] and d0.tolist() == [[1.0, 0, 1]] and i0.tolist() == [[0.0, 0, -1]]
    assert t1.tolist() == [2.0] and p1.tolist() == [[3.0, 0, 2]] and d1.tolist() == [[1.0, 0, -1]]
    assert i1.tolist() == [[0.0, 0, 5]]  # (0, 0, -1) mirrored across z = 2
    assert v2.tolist() == [False] and t2.tolist() == [0.0]  # the third winner does not count: the chain ends


def test_bounce_chain_first_segment_interval_is_open():
    plane = (np.array([[0.0, 0, 1]]), np.array([[0.0, 0, 1]]), np.array([0.0]), np.array([True]))
    out = []
    specular.bounce_chain(_NpChainOps, 1, lambda b: plane, np.array([[0.0, 0, 1]]), np.array([[0.0, 0, -1]]),
                          (0.0, 1.0), lambda *args: out.append(args))  # t = 1 = tmax: outside (tmin, tmax)
    assert out[0][2].tolist() == [False] and out[0][1].tolist() == [0.0]


def test_slot_planes_hand_derived():
    # Face (0,0,2), (2,0,2), (0,1,2): normal = (2,0,0) x (0,1,0) = (0,0,2), plane z = 2 (offset 4);
    # a degenerate face (all corners equal) has no plane; a slot without a winner does not count.
    ops = SimpleNamespace(dot=lambda a, b: (a * b).sum(-1), cross=np.cross, where=np.where,
                          rsqrt=lambda x: 1 / np.sqrt(x), scale=lambda x, v: x[..., None] * v,
                          reported=lambda x: x.astype(np.float32).astype(np.float64))
    v0 = np.array([[0.0, 0.0, 2.0], [1.0, 1.0, 1.0], [0.0, 0.0, 2.0]])
    v1 = np.array([[2.0, 0.0, 2.0], [1.0, 1.0, 1.0], [2.0, 0.0, 2.0]])
    v2 = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [0.0, 1.0, 2.0]])
    hit = np.array([True, True, False])
    normal, unit, offset, ok = specular.slot_planes(ops, v0, v1, v2, hit)
    np.testing.assert_array_equal(normal, [[0, 0, 2], [0, 0, 0], [0, 0, 2]])
    np.testing.assert_array_equal(unit, [[0, 0, 1], [0, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(offset, [4, 0, 4])
    np.testing.assert_array_equal(ok, [True, False, False])
