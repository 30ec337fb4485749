"""Smoke test of the benchmark suite in a tiny configuration (seconds, CPU; CUDA if present).

Every installed engine must agree on hits with a float64 brute-force reference, and
``benchmarks/run.py`` must write complete JSON lines. Engines that are not installed
(Mitsuba, embreex are benchmark-only extras) are skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import measure, run, workloads  # noqa: E402
from benchmarks.engines import ENGINES  # noqa: E402

TINY = workloads.tiny()


def brute_force(wl) -> tuple[np.ndarray, np.ndarray]:
    """Closest hit ``(prim_id, t)`` of every ray against every triangle, float64 (Moeller-Trumbore)."""
    v = wl.vertices.astype(np.float64)[wl.faces.astype(np.int64)]  # (F, 3, 3)
    o = wl.o.astype(np.float64)[:, None, :]
    d = wl.d.astype(np.float64)[:, None, :]
    e1, e2 = v[None, :, 1] - v[None, :, 0], v[None, :, 2] - v[None, :, 0]
    p = np.cross(d, e2)
    det = (e1 * p).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / det
        s = o - v[None, :, 0]
        u = (s * p).sum(-1) * inv
        q = np.cross(s, e1)
        w = (d * q).sum(-1) * inv
        t = (e2 * q).sum(-1) * inv
    ok = (np.abs(det) > 1e-12) & (u >= 0) & (w >= 0) & (u + w <= 1) & (t > 0)
    t = np.where(ok, t, np.inf)
    prim = np.argmin(t, axis=1)
    best = t[np.arange(len(prim)), prim]
    return np.where(np.isfinite(best), prim, -1), best


@pytest.fixture(scope="module", params=sorted(TINY))
def tiny_workload(request):
    wl = TINY[request.param]()
    return wl, brute_force(wl)


@pytest.mark.parametrize("engine_key", list(ENGINES))
def test_engine_agrees_on_hits(engine_key, device, tiny_workload):
    wl, reference = tiny_workload
    engine_cls = ENGINES[engine_key]
    reason = engine_cls.missing(device)
    if reason:
        pytest.skip(f"{engine_cls.name} on {device}: {reason}")
    engine = engine_cls(device)
    engine.load(wl)
    try:
        for minimal in (False, True):
            hits = engine.hits(engine.closest(minimal=minimal))
            engine.synchronize()
            result = measure.agreement(reference, hits)
            assert result["ok"], (engine_cls.name, minimal, result)
        engine.update(1)
        engine.update(0)
        engine.build()
        engine.synchronize()
        assert measure.agreement(reference, engine.hits(engine.closest()))["ok"]
    finally:
        engine.close()


def test_run_writes_json_lines(tmp_path):
    out = tmp_path / "tiny.jsonl"
    records = run.main(
        ["--tiny", "--device", "cpu", "--repeats", "2", "--warmup", "1", "--output", str(out), "--no-progress"]
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == len(records) > 0
    ran = [r for r in lines if "metrics" in r]
    assert {r["engine"] for r in ran} >= {"rayd.torch"}
    for r in lines:
        assert {"machine", "versions", "command", "workload", "engine"} <= set(r)
        assert "error" not in r, r["error"]
    for r in ran:
        assert r["agreement"]["ok"], r["agreement"]
        assert r["metrics"]["closest_all_ms"] > 0
        assert r["metrics"]["build_ms"] > 0
        if r.get("gradient", {}) and "rel_l2_vs_reference" in r["gradient"]:
            assert r["gradient"]["rel_l2_vs_reference"] < 1e-4
    rayd = [r for r in ran if r["engine"] == "rayd.torch"]
    assert all(r["metrics"]["forward_backward_ms"] > 0 and r["metrics"]["update_ms"] > 0 for r in rayd)
