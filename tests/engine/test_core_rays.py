"""rayd.core.rays: the ignore-id and Ray-bound rules both frontends share (one message text)."""

from __future__ import annotations

import numpy as np
import pytest

from rayd.core.rays import interval_bound, scalar_ignore

CALL = "rayd.x.Scene.intersect()"


def test_scalar_ignore_values():
    assert scalar_ignore(CALL, 5, "an array") == 5
    assert scalar_ignore(CALL, np.int64(-1), "an array") == -1
    assert type(scalar_ignore(CALL, np.int16(7), "an array")) is int
    assert scalar_ignore(CALL, [1, 2], "an array") is None  # not a number: the frontend's array path


@pytest.mark.parametrize("value", [True, np.bool_(False)])
def test_scalar_ignore_bool(value):
    with pytest.raises(TypeError, match=r"^rayd.x.Scene.intersect\(\): 'ignore' must be an int or an array, got bool$"):
        scalar_ignore(CALL, value, "an array")


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_scalar_ignore_range(value):
    with pytest.raises(ValueError, match=rf"'ignore' must be a global_prim_id \(or -1\), got {value}$"):
        scalar_ignore(CALL, value, "an array")


def test_interval_bound():
    def no(_):
        return False

    def never(name, value):
        raise AssertionError

    assert interval_bound("R()", "tmax", 2, "a float array", no, never, str) == 2.0
    assert isinstance(interval_bound("R()", "tmax", 2, "a float array", no, never, str), float)
    assert interval_bound("R()", "tmin", "x", "a float array", lambda v: True, lambda n, v: (n, v), str) == ("tmin", "x")
    with pytest.raises(TypeError, match=r"^R\(\): 'tmin' must be a float or a float array, got bool$"):
        interval_bound("R()", "tmin", True, "a float array", no, never, str)
    with pytest.raises(TypeError, match=r"^R\(\): 'tmax' must be a float or a float array, got list$"):
        interval_bound("R()", "tmax", [1.0], "a float array", no, never, lambda v: type(v).__name__)


def test_torch_numpy_bool_ignore_is_a_type_error():
    torch = pytest.importorskip("torch")
    import rayd.torch as rt

    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])))
    scene.build()
    ray = rt.Ray(torch.tensor([0.2, 0.2, 1.0]), torch.tensor([0.0, 0.0, -1.0]))
    with pytest.raises(TypeError, match=r"^rayd.torch.Scene.intersect\(\): 'ignore' must be an int or an integer "
                                        r"tensor, got bool$"):
        scene.intersect(ray, ignore=np.bool_(True))
    assert scene.intersect(ray, ignore=np.int64(-1)).prim_id.item() == 0
    assert scene.intersect(ray, ignore=np.int32(0)).prim_id.item() == -1


def test_check_ignore_none_one_many():
    from rayd.core.rays import check_ignore

    def many(call, batch, ignore):
        return batch + 1, list(ignore)

    assert check_ignore("rayd.x.f()", 3, None, "an array", lambda one: ("one", one), many) == (3, None)
    assert check_ignore("rayd.x.f()", 3, 7, "an array", lambda one: ("one", one), many) == (3, ("one", 7))
    assert check_ignore("rayd.x.f()", 3, (1, 2), "an array", lambda one: ("one", one), many) == (4, [1, 2])
    message = r"^rayd.x.f\(\): 'ignore' must be a global_prim_id \(or -1\), got 2147483648$"
    with pytest.raises(ValueError, match=message):
        check_ignore("rayd.x.f()", 3, 2**31, "an array", lambda one: one, many)
