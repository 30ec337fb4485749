"""examples/reflections/street_canyon.py in its fast mode (--quick): real values, pictures written."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "reflections" / "street_canyon.py"


def _load():
    spec = importlib.util.spec_from_file_location("street_canyon", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_street_canyon_quick(tmp_path):
    pytest.importorskip("matplotlib")
    summary = _load().run(quick=True, out=tmp_path)
    assert summary["receivers"] == 15 and summary["paths_total"] > 0
    assert summary["paths_per_receiver_min"] >= 1  # every receiver sees at least its line of sight
    # The line of sight of the chosen receiver is |tx - rx|.
    assert math.isclose(summary["los_length"], summary["los_expected"], rel_tol=1e-12)
    # The delay profile starts at the line of sight's delay and is sorted.
    delays = summary["delays_ns"]
    assert delays == sorted(delays) and math.isclose(delays[0], summary["los_length"] / 299_792_458.0 * 1e9)
    # One unit-length gradient step of 0.5 m shortens the path by 0.5 m to first order (the image
    # method's length is |rx - image(tx)|, whose gradient wrt tx has unit length).
    assert summary["path_valid_after"]
    assert summary["length_after"] < summary["length_before"]
    assert abs(summary["length_before"] - summary["length_after"] - 0.5) < 1e-6
    for name in ("paths_top.png", "delay_profile.png", "gradient_step.png"):
        assert (tmp_path / name).stat().st_size > 10_000
