"""Gradients of rayd.drjit.Scene.intersect through Dr.Jit AD vs central finite differences.

Reverse mode (``dr.backward``) and forward mode (``dr.forward_to``) are both checked
against float64 finite differences of a loss that touches every differentiable
field; the winning triangles are held fixed by keeping perturbations small.
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import grad_rtol, rows, vec  # noqa: E402

# A bent quad (two faces, non-coplanar), per-vertex normals and uv; rays hit
# both faces at generic points, plus one ray that misses.
VERTICES = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.1], [0.0, 1.0, -0.1], [1.0, 1.0, 0.3]])
FACES = np.array([[0, 1, 2], [1, 3, 2]])
NORMALS = np.array([[0.1, 0.0, 1.0], [0.0, 0.2, 1.0], [-0.1, 0.1, 1.0], [0.0, 0.0, 1.0]])
UV = np.array([[0.0, 0.0], [1.0, 0.2], [0.1, 1.0], [0.9, 0.8]])
ORIGINS = np.array([[0.2, 0.3, 1.0], [0.7, 0.8, 1.5], [0.45, 0.2, 2.0], [3.0, 3.0, 1.0]])
DIRECTIONS = np.array([[0.05, -0.02, -1.0], [0.0, 0.03, -1.2], [0.02, 0.04, -0.9], [0.0, 0.0, -1.0]])
RNG = np.random.default_rng(7)
WEIGHTS = {
    "t": RNG.normal(size=4),
    "p": RNG.normal(size=(4, 3)),
    "geo_n": RNG.normal(size=(4, 3)),
    "barycentric": RNG.normal(size=(4, 3)),
    "n": RNG.normal(size=(4, 3)),
    "uv": RNG.normal(size=(4, 2)),
}


def _loss(m, hit):
    """Weighted sum of every float field; misses contribute nothing (t = inf is masked)."""
    valid = hit.is_valid()
    total = dr.sum(dr.select(valid, hit.t, 0) * m.Float64(WEIGHTS["t"]))
    for name in ("p", "geo_n", "barycentric", "n", "uv"):
        value = getattr(hit, name)
        weight = vec(type(value), WEIGHTS[name])
        total += dr.sum(dr.sum(value * weight))
    return total


def _evaluate(m, v, o, d, n=None, uv=None, to_world=None):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u(FACES.T.astype(np.uint32)), normals=n, uv=uv, to_world=to_world))
    scene.build()
    return scene.intersect(rd.Ray(o, d))


def _numeric(m, x0: dict[str, np.ndarray], tangent: dict[str, np.ndarray], h: float = 1e-6) -> float:
    """Central difference of the loss along ``tangent`` (float64 arrays, NumPy in, NumPy out)."""

    def at(sign):
        args = {k: x0[k] + sign * h * tangent.get(k, 0.0) for k in x0}
        hit = _evaluate(
            m,
            vec(m.Array3f64, args["v"]),
            vec(m.Array3f64, args["o"]),
            vec(m.Array3f64, args["d"]),
            n=vec(m.Array3f64, args["n"]),
            uv=vec(m.Array2f64, args["uv"]),
            to_world=m.Matrix4f64(args["M"].tolist()),
        )
        return float(_loss(m, hit)[0])

    return (at(+1) - at(-1)) / (2 * h)


def _base():
    M = np.eye(4)
    M[:3, :3] = [[1.1, 0.1, 0.0], [0.0, 0.9, 0.05], [0.02, 0.0, 1.0]]
    M[:3, 3] = [0.01, -0.02, 0.03]
    return {"v": VERTICES, "o": ORIGINS, "d": DIRECTIONS, "n": NORMALS, "uv": UV, "M": M}


def _ad_inputs(m, x0):
    inputs = {
        "v": vec(m.Array3f64, x0["v"]),
        "o": vec(m.Array3f64, x0["o"]),
        "d": vec(m.Array3f64, x0["d"]),
        "n": vec(m.Array3f64, x0["n"]),
        "uv": vec(m.Array2f64, x0["uv"]),
        "M": m.Matrix4f64(x0["M"].tolist()),
    }
    for value in inputs.values():
        dr.enable_grad(value)
    return inputs


def _run(m, inputs):
    return _loss(
        m,
        _evaluate(m, inputs["v"], inputs["o"], inputs["d"], n=inputs["n"], uv=inputs["uv"], to_world=inputs["M"]),
    )


def _as_array(m, key, value):
    if key == "M":
        return m.Matrix4f64(value.tolist())
    return vec(m.Array2f64 if key == "uv" else m.Array3f64, value)


def _grad_rows(key, grad):
    if key == "M":
        return np.array([[grad[i][j][0] for j in range(4)] for i in range(4)])
    return rows(grad)


@pytest.mark.parametrize("wrt", ["v", "o", "d", "n", "uv", "M"])
def test_reverse_mode_matches_finite_differences(m, wrt):
    x0 = _base()
    inputs = _ad_inputs(m, x0)
    loss = _run(m, inputs)
    dr.backward(loss)
    grad = _grad_rows(wrt, dr.grad(inputs[wrt]))
    assert not np.isnan(grad).any()
    tangent = np.random.default_rng(1).normal(size=x0[wrt].shape)
    if wrt == "M":
        tangent[3] = 0.0  # the bottom row does not act on points
    expected = _numeric(m, x0, {wrt: tangent})
    np.testing.assert_allclose(np.sum(grad * tangent), expected, rtol=grad_rtol(m), atol=1e-7)


@pytest.mark.parametrize("wrt", ["v", "o", "d", "n", "uv", "M"])
def test_forward_mode_matches_finite_differences(m, wrt):
    x0 = _base()
    inputs = _ad_inputs(m, x0)
    tangent = np.random.default_rng(2).normal(size=x0[wrt].shape)
    if wrt == "M":
        tangent[3] = 0.0
    dr.set_grad(inputs[wrt], _as_array(m, wrt, tangent))
    loss = _run(m, inputs)
    dr.forward_to(loss)
    expected = _numeric(m, x0, {wrt: tangent})
    np.testing.assert_allclose(dr.grad(loss)[0], expected, rtol=grad_rtol(m), atol=1e-7)


def test_vertex_gradient_per_coordinate(m):
    """Every vertex coordinate separately, reverse mode, t only."""
    v = vec(m.Array3f64, VERTICES)
    dr.enable_grad(v)
    o, d = vec(m.Array3f64, ORIGINS), vec(m.Array3f64, DIRECTIONS)
    hit = _evaluate(m, v, o, d)
    dr.backward(dr.sum(dr.select(hit.is_valid(), hit.t, 0)))
    grad = rows(dr.grad(v))
    h = 1e-6
    for i in range(4):
        for k in range(3):
            step = np.zeros_like(VERTICES)
            step[i, k] = h
            ts = []
            for sign in (1, -1):
                hit = _evaluate(m, vec(m.Array3f64, VERTICES + sign * step), o, d)
                ts.append(float(dr.sum(dr.select(hit.is_valid(), hit.t, 0))[0]))
            np.testing.assert_allclose(grad[i, k], (ts[0] - ts[1]) / (2 * h), rtol=grad_rtol(m), atol=1e-7)


def test_misses_get_zero_gradient_never_nan(m):
    v = vec(m.Array3f, VERTICES)
    o = vec(m.Array3f, ORIGINS)
    d = vec(m.Array3f, DIRECTIONS)
    dr.enable_grad(v, o, d)
    hit = _evaluate(m, v, o, d)
    assert rows(hit.is_valid()).tolist() == [True, True, True, False]
    # Every field, misses included (p, normals, ... are 0 there; t is inf and masked).
    loss = dr.sum(dr.select(hit.is_valid(), hit.t, 0)) + dr.sum(dr.sum(hit.p + hit.geo_n + hit.n + hit.barycentric))
    loss += dr.sum(dr.sum(hit.uv))
    dr.backward(loss)
    go, gd = rows(dr.grad(o)), rows(dr.grad(d))
    assert not np.isnan(go).any() and not np.isnan(gd).any() and not np.isnan(rows(dr.grad(v))).any()
    assert np.all(go[3] == 0) and np.all(gd[3] == 0)
    # Forward mode: a tangent on the missing ray's origin changes nothing.
    o2 = vec(m.Array3f, ORIGINS)
    dr.enable_grad(o2)
    dr.set_grad(o2, vec(m.Array3f, [[0, 0, 0]] * 3 + [[1, 1, 1]]))
    hit = _evaluate(m, vec(m.Array3f, VERTICES), o2, vec(m.Array3f, DIRECTIONS))
    t = dr.select(hit.is_valid(), hit.t, 0)
    dr.forward_to(t, hit.p)
    assert np.all(rows(dr.grad(t)) == 0) and np.all(rows(dr.grad(hit.p)) == 0)


def test_gradient_through_dynamic_update(m):
    """The array passed to update_mesh_vertices is the one gradients reach."""
    v = vec(m.Array3f, VERTICES)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u(FACES.T.astype(np.uint32))), dynamic=True)
    scene.build()
    w = v + m.Array3f(0, 0, 0.25)
    dr.enable_grad(w)
    scene.update_mesh_vertices(0, w)
    scene.sync()
    hit = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1.0), m.Array3f(0, 0, -1)))
    dr.backward(hit.t)
    # t = 1 - z(p) and p = sum w_i v_i: dt/dz_i = -w_i (a downward ray).
    grad = rows(dr.grad(w))
    np.testing.assert_allclose(grad[:, 2].sum(), -1.0, rtol=1e-5)
    assert dr.grad(v) is None or np.all(rows(dr.grad(v)) == 0)
