"""The bunny distance-slice example runs and writes a PNG (skips without the mesh or matplotlib)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MESH = ROOT / ".device" / "meshes" / "bunny.npz"


def test_bunny_distance_slice_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    if not MESH.exists():
        pytest.skip("bunny.npz not downloaded (python examples/get_bunny.py)")
    out = tmp_path / "slice.png"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples/edges/bunny_distance_slice.py"), "--res", "48", "--device", "cpu",
         "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "5511 edges" in result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
