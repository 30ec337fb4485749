"""Smoke test of the instance benchmarks in a tiny configuration (CPU; seconds).

``benchmarks/instances.py`` must write one complete JSON line whose hit fraction matches
a float64 brute force over pre-transformed copies; with Mitsuba installed (a benchmark
extra), the ``--mitsuba`` run and ``instances_agreement.py`` must agree with rayd.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import instances, instances_agreement  # noqa: E402

ARGS = ["--device", "cpu", "--instances", "8", "--tris", "300", "--rays", "2048"]


def test_instances_benchmark_line(tmp_path):
    out = tmp_path / "inst.jsonl"
    assert instances.main([*ARGS, "--json", str(out)]) == 0
    record = json.loads(out.read_text().splitlines()[-1])
    for key in ("update_in_place_sync_ms", "update_all_transforms_sync_ms", "update_batched_sync_ms",
                "closest_all_ms", "closest_minimal_ms", "any_hit_ms"):
        assert record[key] > 0, key
    v, f, first, _, o, d = instances.workload(8, 300, 2048)
    hit = np.zeros(2048, dtype=bool)
    for k in range(8):
        world = v.double().numpy() @ first[k, :3, :3].double().numpy().T + first[k, :3, 3].double().numpy()
        for i in range(2048):
            if not hit[i]:
                hit[i] = np.isfinite(instances_agreement.brute_force_t(o[i].double().numpy(), d[i].double().numpy(),
                                                                        world, f.long().numpy()))
    assert abs(record["hit_fraction"] - hit.mean()) <= 2 / 2048  # grazing rays may differ


@pytest.mark.skipif(importlib.util.find_spec("mitsuba") is None, reason="mitsuba (benchmark extra) not installed")
def test_instances_against_mitsuba(tmp_path):
    out = tmp_path / "inst.jsonl"
    assert instances.main([*ARGS, "--mitsuba", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["agreement_hit_miss"] >= 0.999
    assert instances_agreement.main([*ARGS, "--json", str(out)]) == 0
    referee = json.loads(out.read_text().splitlines()[-1])
    assert referee["rayd_wrong"] <= referee["mitsuba_wrong"]
