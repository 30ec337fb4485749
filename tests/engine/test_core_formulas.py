"""rayd.core.segments and rayd.core.hits are backend-neutral: run them over a NumPy ops namespace.

Checked against brute force (segment distances) and hand-derived values (Moeller-Trumbore).
"""

from __future__ import annotations

import math
import types

import numpy as np

from rayd.core import hits, segments
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
    clamp=lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
)


def _brute_point(p, a, b):
    t = np.linspace(0.0, 1.0, 200001)
    q = a[None] + t[:, None] * (b - a)[None]
    return np.sqrt(((q - p) ** 2).sum(-1)).min()


def test_point_fields_match_brute_force():
    rng = np.random.default_rng(3)
    p, a, b = rng.normal(size=(3, 64, 3))
    found = np.ones(64, dtype=bool)
    found[::7] = False
    a, b = segments.stand_in_edge(NP, found, a, b)
    out = segments.point_fields(NP, found, p, a, b)
    for i in range(64):
        if not found[i]:
            assert out["distance"][i] == math.inf and out["edge_t"][i] == 0 and not out["edge_point"][i].any()
            continue
        assert abs(out["distance"][i] - _brute_point(p[i], a[i], b[i])) < 1e-6
        q = a[i] + out["edge_t"][i] * (b[i] - a[i])
        np.testing.assert_allclose(out["edge_point"][i], q, atol=1e-12)


def test_ray_fields_match_brute_force():
    rng = np.random.default_rng(4)
    o, d, a, b = rng.normal(size=(4, 40, 3))
    s0 = np.where(np.arange(40) % 2 == 0, 0.0, 0.3)
    s1 = np.where(np.arange(40) % 3 == 0, np.inf, 1.7)
    found = np.ones(40, dtype=bool)
    found[5] = False
    a, b = segments.stand_in_edge(NP, found, a, b)
    out = segments.ray_fields(NP, found, o, d, s0, s1, a, b)
    t = np.linspace(0.0, 1.0, 1001)
    for i in range(40):
        if not found[i]:
            assert out["distance"][i] == math.inf and out["ray_t"][i] == 0
            continue
        hi = s1[i] if np.isfinite(s1[i]) else 50.0
        s = np.linspace(s0[i], hi, 4001)
        ray = o[i][None, None] + s[:, None, None] * d[i][None, None]
        edge = a[i][None, None] + t[None, :, None] * (b[i] - a[i])[None, None]
        brute = np.sqrt(((ray - edge) ** 2).sum(-1)).min()
        assert out["distance"][i] <= brute + 1e-9
        assert out["distance"][i] > brute - 5e-3
        assert s0[i] <= out["ray_t"][i] <= s1[i] and 0 <= out["edge_t"][i] <= 1
        np.testing.assert_allclose(out["ray_point"][i], o[i] + out["ray_t"][i] * d[i], atol=1e-12)


def test_safe_div_and_norm_at_zero():
    assert segments.safe_div(NP, np.array([1.0]), np.array([0.0]))[0] == 0
    assert segments.norm(NP, np.zeros((1, 3)))[0] == 0


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


def test_new_core_modules_import_without_torch_and_drjit():
    import subprocess
    import sys

    code = ("import sys\nsys.modules['torch'] = None\nsys.modules['drjit'] = None\n"
            "import rayd.core.hits, rayd.core.segments, rayd.core.rays, rayd.core.topology\nprint('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
