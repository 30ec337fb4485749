"""Scenes of many meshes in rayd.drjit (session 20, helper breakit20c).

Every query gathers the winners' live geometry from the meshes' registered arrays, concatenated
in mesh order. ``dr.concat`` of K arrays traces one kernel whose size grows with K, and its LLVM
compilation grows faster than K: the first ``intersect`` on 300 boxes took 23 s (rayd.torch:
0.1 s; 2-core VM). The concatenation (:mod:`rayd.drjit._concat`) now copies each part with one
cached kernel. These tests check that no kernel grows with the number of meshes, and that values
and gradients (reverse and forward mode, vertices, normals, uv, transforms) of a scene of many
meshes equal those of the same triangles merged into one mesh.
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import vec  # noqa: E402

K = 24  # meshes: above rayd.drjit._concat.FEW


def _grids(rng, count):
    """``count`` small bumpy 2x2-quad grids spread over [-2, 2]^2, each (V, F, normals, uv)."""
    out = []
    axis = np.linspace(0.0, 0.5, 3)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    idx = np.arange(9).reshape(3, 3)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, c], -1), np.stack([b, d, c], -1)]).astype(np.int32)
    for k in range(count):
        corner = np.array([-2 + 0.6 * (k % 6), -2 + 0.6 * (k // 6), 0.0])
        v = np.stack([x.ravel(), y.ravel(), 0.05 * rng.normal(size=9)], -1) + corner
        n = np.concatenate([rng.normal(scale=0.2, size=(9, 2)), np.ones((9, 1))], -1)
        out.append((v, f, n, rng.uniform(size=(9, 2))))
    return out


def _rays(m, Array3, rng, n=600):
    o = np.concatenate([rng.uniform(-2.1, 1.7, size=(n, 2)), np.full((n, 1), 1.0)], -1)
    d = np.concatenate([rng.normal(scale=0.05, size=(n, 2)), -np.ones((n, 1))], -1)
    return o, d, rd.Ray(vec(Array3, o), vec(Array3, d))


def _scene(m, Array3, meshes, merged, attributes, grad):
    """The scene (many meshes, or their merge into one) and the AD arrays a gradient lands on."""
    Array2 = m.Array2f64 if Array3 is m.Array3f64 else m.Array2f
    if merged:
        offsets = np.cumsum([0] + [len(v) for v, *_ in meshes])
        meshes = [(np.concatenate([v for v, *_ in meshes]), np.concatenate([f + o for (_, f, *_), o in zip(meshes, offsets)]),
                   np.concatenate([n for *_, n, _ in meshes]), np.concatenate([uv for *_, uv in meshes]))]
    scene, leaves = rd.Scene(), []
    for v, f, n, uv in meshes:
        arrays = {"vertices": vec(Array3, v)}
        if attributes:
            arrays.update(normals=vec(Array3, n), uv=vec(Array2, uv))
        if grad:
            for a in arrays.values():
                dr.enable_grad(a)
        leaves.append(arrays)
        scene.add_mesh(rd.Mesh(arrays["vertices"], vec(m.Array3i, f), normals=arrays.get("normals"), uv=arrays.get("uv")))
    scene.build()
    return scene, leaves


def _loss(h, weights):
    fields = [dr.select(h.is_valid(), h.t, 0)] + [h.p[i] for i in range(3)] + [h.n[i] for i in range(3)]
    fields += [h.uv[i] for i in range(2)] + [h.barycentric[i] for i in range(3)]
    Float = type(fields[0])
    return sum(dr.sum(x * Float(w)) for x, w in zip(fields, weights))


def _grads(leaves, name):
    return np.concatenate([np.asarray(dr.grad(a[name])).T for a in leaves])


@pytest.mark.parametrize("double", [False, True], ids=["f32", "f64"])
@pytest.mark.parametrize("attributes", [False, True], ids=["plain", "normals_uv"])
def test_many_meshes_equal_their_merge_in_values_and_gradients(m, double, attributes):
    rng = np.random.default_rng(11)
    Array3 = m.Array3f64 if double else m.Array3f
    meshes = _grids(rng, K)
    o, d, ray = _rays(m, Array3, rng)
    weights = rng.normal(size=(12, len(o)))
    results = {}
    for merged in (False, True):
        scene, leaves = _scene(m, Array3, meshes, merged, attributes, grad=True)
        h = scene.intersect(ray)
        values = {k: np.asarray(getattr(h, k)) for k in ("t", "p", "n", "uv", "barycentric", "prim_id")}
        values["global"] = np.asarray(h.global_prim_id)
        dr.backward(_loss(h, weights))
        grads = {k: _grads(leaves, k) for k in leaves[0]}
        results[merged] = (values, grads)
    (many, g_many), (one, g_one) = results[False], results[True]
    assert np.isfinite(many["t"]).sum() > 200  # many rays hit a grid
    np.testing.assert_array_equal(many["global"], one["prim_id"])  # one face numbering
    for k in ("t", "p", "n", "uv", "barycentric"):
        np.testing.assert_array_equal(many[k], one[k])
    for k in g_one:
        np.testing.assert_allclose(g_many[k], g_one[k], rtol=1e-6 if double else 1e-5, atol=1e-9 if double else 1e-5)
    assert np.abs(g_one["vertices"]).max() > 0.1


def test_forward_mode_through_many_meshes(m):
    rng = np.random.default_rng(12)
    meshes = _grids(rng, K)
    o, d, ray = _rays(m, m.Array3f64, rng)
    tangents = [rng.normal(size=(9, 3)) for _ in range(K)]
    weights = rng.normal(size=(12, len(o)))
    out = {}
    for merged in (False, True):
        scene, leaves = _scene(m, m.Array3f64, meshes, merged, True, grad=False)
        tan = tangents if not merged else [np.concatenate(tangents)]
        for a, t in zip(leaves, tan):
            dr.enable_grad(a["vertices"])
            dr.set_grad(a["vertices"], vec(m.Array3f64, t))
        loss = _loss(scene.intersect(ray), weights)
        dr.forward_to(loss)
        out[merged] = float(dr.grad(loss)[0])
    assert out[False] == pytest.approx(out[True], rel=1e-9)
    # against a float64 central difference of the merged scene
    eps = 1e-6

    def value(shift):
        moved = [(v + shift * t, f, n, uv) for (v, f, n, uv), t in zip(meshes, tangents)]
        scene, _ = _scene(m, m.Array3f64, moved, True, True, grad=False)
        return float(_loss(scene.intersect(ray), weights)[0])

    assert out[False] == pytest.approx((value(eps) - value(-eps)) / (2 * eps), rel=1e-6)


def test_no_kernel_grows_with_the_number_of_meshes(m):
    """The live concatenation compiles one copy kernel for all parts (old: one kernel of size ~K)."""
    rng = np.random.default_rng(13)
    small, large = _grids(rng, 12), _grids(rng, 48)
    counts = []
    for meshes in (small, large):
        scene, _ = _scene(m, m.Array3f, meshes, False, True, grad=False)
        _, _, ray = _rays(m, m.Array3f, rng, 64)
        with dr.scoped_set_flag(dr.JitFlag.KernelHistory, True):
            dr.kernel_history()  # (clears it)
            h = scene.intersect(ray)
            dr.eval(h.t, h.p, h.n, h.uv)
            history = dr.kernel_history()
        counts.append(max(k["operation_count"] for k in history if "operation_count" in k))
    # the largest kernel grows only with the search for the shape (log K): before, 306 -> 969 operations
    assert counts[1] <= 1.15 * counts[0], counts


def test_nearest_edge_gradients_over_many_meshes_equal_their_merge(m):
    rng = np.random.default_rng(14)
    meshes = _grids(rng, K)
    p = np.concatenate([rng.uniform(-2.1, 1.7, size=(200, 2)), rng.uniform(-0.2, 0.3, size=(200, 1))], -1)
    out = {}
    for merged in (False, True):
        scene, leaves = _scene(m, m.Array3f64, meshes, merged, False, grad=True)
        e = scene.nearest_edge(vec(m.Array3f64, p))
        dr.backward(dr.sum(e.distance) + dr.sum(e.edge_point.x))
        out[merged] = (np.asarray(e.distance), _grads(leaves, "vertices"))
    np.testing.assert_allclose(out[False][0], out[True][0], rtol=1e-12)
    np.testing.assert_allclose(out[False][1], out[True][1], rtol=1e-9, atol=1e-12)
