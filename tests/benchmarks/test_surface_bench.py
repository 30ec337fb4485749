"""Smoke test of benchmarks/surface.py on a generated closed mesh (seconds, CPU; CUDA if present)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import surface  # noqa: E402

trimesh = pytest.importorskip("trimesh")


def test_surface_bench_agrees(tmp_path):
    mesh = trimesh.creation.torus(1.0, 0.35, major_sections=32, minor_sections=16)
    np.savez(tmp_path / "torus.npz", vertices=mesh.vertices.astype(np.float32), faces=mesh.faces.astype(np.int32))
    out = tmp_path / "rows.jsonl"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = surface.main(["--device", device, "--meshes", str(tmp_path), "--mesh", "torus", "--points", "600",
                         "--brute-points", "60", "--repeats", "1", "--engines", "rayd", "warp", "brute",
                         "--json", str(out)])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == rows
    first = [r for r in rows if r["query"] == "occupancy_first_call"]
    assert len(first) == 1 and first[0]["engine"] == "rayd" and first[0]["ms"] > 0
    second = [r for r in rows if r["query"] == "occupancy_second_call"]
    assert len(second) == 1 and second[0]["engine"] == "rayd" and second[0]["ms"] > 0
    timed = [r for r in rows if r["query"] not in ("build", "occupancy_first_call", "occupancy_second_call")]
    assert all(r["cpu_ms"] > 0 for r in timed)
    assert {(r["engine"], r["query"]) for r in timed} == {(e, q) for e in ("rayd", "warp", "brute")
                                                          for q in surface.QUERIES}
    for r in timed:
        assert r["ms"] > 0 and r["points"] == 600
        if "inside_agree" in r:
            assert r["inside_agree"] == 1.0, r
        if r["engine"] == "rayd" and r["query"] != "occupancy":
            assert r["max_rel_err_f64"] < 1e-6, r  # rayd's distances vs the float64 brute force
        if r["engine"] == "brute" and r["query"] == "distance":
            assert r["scaled"] and r["ran_points"] == 60 and r["max_rel_diff"] < 1e-4, r
