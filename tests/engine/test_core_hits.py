"""rayd.core.hits is backend-neutral: Moeller-Trumbore over a NumPy ops namespace, hand-derived values."""

from __future__ import annotations

import math
import types

import numpy as np

from rayd.core import hits
from rayd.flags import RayFlags

NP = types.SimpleNamespace(
    dot=lambda a, b: (a * b).sum(-1),
    cross=np.cross,
    scale=lambda x, v: x[..., None] * v,
    where=np.where,
    where3=lambda m, a, b: np.where(m[..., None], a, b),
    const3=lambda like, x, y, z: np.array([x, y, z], dtype=like.dtype),
    sqrt=np.sqrt,
    rsqrt=lambda x: 1.0 / np.sqrt(x),
    all_zero=lambda v: (v == 0).all(-1),
    stack=lambda *xs: np.stack(xs, -1),
)


def _run(flags=RayFlags.All, normals=None, uv=None):
    # Triangle (0,0,0), (2,0,0), (0,2,0) (row 0), a degenerate one (row 1), a miss (row 2).
    v0 = np.array([[0.0, 0, 0], [0, 0, 0], [5, 5, 5]])
    v1 = np.array([[2.0, 0, 0], [1, 1, 1], [6, 5, 5]])
    v2 = np.array([[0.0, 2, 0], [2, 2, 2], [5, 6, 5]])
    o = np.array([[0.5, 0.25, 3.0], [0.5, 0.5, 3.0], [0, 0, 0]])
    d = np.array([[0.0, 0, -2.0], [0, 0, -1.0], [1, 0, 0]])
    hit = np.array([True, True, False])
    ids = {"prim_id": np.array([4, 7, -1]), "shape_id": np.array([0, 1, -1]), "global_prim_id": np.array([4, 9, -1])}
    return hits.evaluate(NP, flags, hit, o, d, (v0, v1, v2), ids, lambda x: x.astype(np.float32), normals, uv)


def test_values_singular_and_miss():
    out = _run()
    assert out["t"][0] == 1.5 and out["t"][1] == math.inf and out["t"][2] == math.inf
    np.testing.assert_allclose(out["p"][0], [0.5, 0.25, 0.0])
    np.testing.assert_allclose(out["barycentric"][0], [0.625, 0.25, 0.125])
    np.testing.assert_allclose(out["geo_n"][0], [0, 0, 1])
    np.testing.assert_allclose(out["n"][0], [0, 0, 1])
    np.testing.assert_allclose(out["uv"][0], [0.25, 0.125])
    assert list(out["prim_id"]) == [4, -1, -1] and list(out["global_prim_id"]) == [4, -1, -1]
    for name in ("p", "geo_n", "barycentric", "n", "uv"):
        assert not out[name][1:].any() and out[name].dtype == np.float32


def test_minimal_flags_and_interpolated_attributes():
    assert set(_run(RayFlags.Minimal)) == {"t", "prim_id", "shape_id", "global_prim_id"}
    flipped = np.array([[0.0, 0.0, -3.0]] * 3, dtype=np.float32)
    out = _run(normals=lambda w: (flipped, np.array([True, True, True])),
               uv=lambda w: (np.tile(np.float32([[9, 8]]), (3, 1)), np.array([False, True, True])))
    np.testing.assert_allclose(out["n"][0], [0, 0, -1])  # normalised, never flipped back
    np.testing.assert_allclose(out["uv"][0], [0.25, 0.125])  # face without uv: (w1, w2)
