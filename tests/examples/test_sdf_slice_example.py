"""The signed-distance slice example runs, writes a PNG and its values check out (skips without the bunny)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MESH = ROOT / ".device" / "meshes" / "bunny.npz"


def _winding(points, tri):
    p = points[:, None, :]
    x, y, z = tri[None, :, 0] - p, tri[None, :, 1] - p, tri[None, :, 2] - p
    lx, ly, lz = (np.linalg.norm(u, axis=-1) for u in (x, y, z))
    num = (x * np.cross(y, z)).sum(-1)
    den = lx * ly * lz + (x * y).sum(-1) * lz + (y * z).sum(-1) * lx + (z * x).sum(-1) * ly
    return (2 * np.arctan2(num, den)).sum(-1) / (4 * math.pi)


def _vertex_distance(points, vertices):
    """Distance to the nearest vertex: an upper bound of the distance to the surface."""
    return np.sqrt(((points[:, None, :] - vertices[None]) ** 2).sum(-1)).min(1)


def test_sdf_slice_writes_png_and_values(tmp_path):
    pytest.importorskip("matplotlib")
    if not MESH.exists():
        pytest.skip("bunny.npz not downloaded (python examples/get_bunny.py)")
    out, values = tmp_path / "sdf.png", tmp_path / "sdf.npz"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples/surface/sdf_slice.py"), "--res", "40", "--device", "cpu",
         "--out", str(out), "--save-values", str(values)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "1839 vertices, 3674 faces" in result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data, mesh = np.load(values), np.load(MESH)
    pts, sdf = data["points"].reshape(-1, 3).astype(np.float64), data["sdf"].ravel().astype(np.float64)
    vertices = mesh["vertices"].astype(np.float64)
    tri = vertices[mesh["faces"]]
    # the corners of the padded slice are outside
    corners = data["sdf"][[0, 0, -1, -1], [0, -1, 0, -1]]
    assert (corners > 0).all()
    # the sign is the exact inside test (float64 NumPy winding number) away from the surface
    diag = np.linalg.norm(vertices.max(0) - vertices.min(0))
    away = np.abs(sdf) > 1e-3 * diag
    w = np.concatenate([_winding(chunk, tri) for chunk in np.array_split(pts[away], 16)])
    assert ((sdf[away] < 0) == (w > 0.5)).all()
    assert 0.05 < (w > 0.5).mean() < 0.8  # the slice cuts through the body
    # |sdf| never exceeds the distance to the nearest vertex, and is close to it on a coarse mesh
    bound = _vertex_distance(pts, vertices)
    assert (np.abs(sdf) <= bound + 1e-6).all()
    assert np.median(bound - np.abs(sdf)) < 0.05 * diag
    assert "|d sdf / d point| in [" in result.stdout
