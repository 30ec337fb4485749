"""rayd.core.segments is backend-neutral: run it over a NumPy ops namespace against brute force."""

from __future__ import annotations

import math
import types

import numpy as np

from rayd.core import segments

NP = types.SimpleNamespace(
    dot=lambda a, b: (a * b).sum(-1),
    cross=np.cross,
    scale=lambda x, v: x[..., None] * v,
    where=np.where,
    where3=lambda m, a, b: np.where(m[..., None], a, b),
    const3=lambda like, x, y, z: np.array([x, y, z], dtype=like.dtype),
    sqrt=np.sqrt,
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
