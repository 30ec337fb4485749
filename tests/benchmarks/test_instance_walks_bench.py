"""Smoke test of the instance-walk benchmarks in a tiny configuration (CPU; seconds):
``instance_walks_ab.py`` writes one line per variant with the first variant's winners, and
the census (``instance_walk_counts.py``) finds the counting copies' winners equal to
``Scene.intersect`` and the same visits for the nested and unified walks; the wide walks' census
(``instance_wide_counts.py``) finds their winners equal too, with fewer node fetches."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import instance_walk_counts, instance_walks_ab, instance_wide_counts  # noqa: E402

ARGS = ["--device", "cpu", "--instances", "8", "--tris", "300", "--rays", "1024"]


def test_instance_walks_ab_lines(tmp_path, capsys):
    out = tmp_path / "walks.jsonl"
    variants = "nested,pairtop,unified,unified_cull,unified@64"
    assert instance_walks_ab.main([*ARGS, "--repeats", "2", "--variants", variants, "--json", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["variant"] for r in records] == variants.split(",")
    assert [r["search_walk"] for r in records] == ["instances_pair", "instances_pairtop", "instances_unified",
                                                 "instances_unified_cull", "instances_unified"]
    for r in records:
        assert r["same_prim_as_first"] == 1.0 and r["same_t_as_first"] and r["same_shadow_as_first"]
        assert r["closest_minimal_ms"] > 0 and r["any_hit_ms"] > 0
    assert records[-1]["max_registers"] == 64
    assert "| unified_cull | instances_unified_cull |" in capsys.readouterr().out


def test_census_winners_and_visits(capsys):
    assert instance_walk_counts.main(ARGS[:-2] + ["--rays", "512"]) == 0
    text = capsys.readouterr().out
    assert len(re.findall(r"winners equal to Scene.intersect on 100.000 % of rays", text)) == 3
    for name in ("top-level inner nodes", "instance entries", "BLAS inner nodes"):
        for line in [x for x in text.splitlines() if x.strip().startswith(name) and "per entry" not in x]:
            nested, unified, _ = line[len(name) + 2:].split("|")
            assert nested.split() == unified.split()  # the unified walk visits what the nested walk does


def test_wide_walks_ab_lines(tmp_path):
    out = tmp_path / "walks.jsonl"
    variants = "unified,wide_both,wide_blas,wide_both@128"
    assert instance_walks_ab.main([*ARGS, "--repeats", "2", "--variants", variants, "--json", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["search_walk"] for r in records] == ["instances_unified", "instances_wide_both",
                                                 "instances_wide_blas", "instances_wide_both"]
    for r in records:
        assert r["same_prim_as_first"] == 1.0 and r["same_t_as_first"] and r["same_shadow_as_first"]
        assert r["closest_all_ms"] > 0 and r["spread"] >= 1.0


def test_wide_census_winners_and_fewer_fetches(capsys):
    assert instance_wide_counts.main(ARGS[:-2] + ["--rays", "512"]) == 0
    text = capsys.readouterr().out
    assert len(re.findall(r"winners equal to Scene.intersect \(unified\) on 100.000 % of rays", text)) == 3
    for line in [x for x in text.splitlines() if x.strip().startswith("BLAS node fetches")]:
        unified, blas, both = (float(part.split()[0]) for part in line[len("  BLAS node fetches"):].split("|"))
        assert blas < unified and both < unified  # (the order of instances may differ: not equal)
