"""Smoke test of benchmarks/traversal_ab.py (issue 18's A/B of traversal variants): tiny
workloads on the CPU, every variant finds the same winners, the JSON holds every metric."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import traversal_ab  # noqa: E402


def test_traversal_ab_tiny(tmp_path, capsys):
    out = tmp_path / "ab.json"
    traversal_ab.main(["--device", "cpu", "--workloads", "terrain_C8_S16,sphere_256_2000rays", "--variants",
                       "warp,pair+warprefit,pair,wide4", "--engines", "", "--repeats", "2", "--warmup", "1",
                       "--build-repeats", "1", "--output", str(out)])
    data = json.loads(out.read_text())
    assert data["clock"] == "cpu" and len(data["results"]) == 2
    for res in data["results"]:
        assert set(res["variants"]) == {"warp", "pair+warprefit", "pair", "wide4"}
        for spec, rec in res["variants"].items():
            assert rec["same_winner"] == 1.0 and rec["same_hit_miss"] == 1.0, spec
            assert rec["max_t_rel_diff"] == 0.0, spec
            for metric in traversal_ab.METRICS:
                assert rec[f"{metric}_ms"] >= 0.0
        assert "pair_layout" in res["variants"]["pair"]["accel_bytes"]
        assert "pair_layout" not in res["variants"]["warp"]["accel_bytes"]
        assert "wide_layout" in res["variants"]["wide4"]["accel_bytes"]
    assert "| closest_all |" in capsys.readouterr().out
