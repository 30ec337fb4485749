"""rayd.engine imports only Warp and NumPy; ``import rayd`` imports no backend at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_engine_imports_with_torch_and_drjit_blocked():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['drjit'] = None\n"
        "import rayd.engine as e\n"
        "assert e.TriangleScene and e.closest_hit\n"
        "import rayd\n"
        "assert isinstance(rayd.__version__, str)\n"
        "print('ok')\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_engine_builds_and_queries_without_torch(device):
    # Not just importable: a scene can be built and traced with Warp arrays alone.
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['drjit'] = None\n"
        "import numpy as np, warp as wp\n"
        "import rayd.engine as e\n"
        f"dev = e.warp_device({'cuda:0' if device == 'cuda' else 'cpu'!r})\n"
        "pts = wp.array(np.array([[0,0,0],[1,0,0],[0,1,0]], np.float32), dtype=wp.vec3, device=dev)\n"
        "idx = wp.array(np.array([0,1,2], np.int32), dtype=wp.int32, device=dev)\n"
        "scene = e.TriangleScene(pts, idx)\n"
        "o = wp.array(np.array([[0.2,0.2,1],[2,2,1]], np.float32), dtype=wp.vec3, device=dev)\n"
        "d = wp.array(np.array([[0,0,-1]], np.float32), dtype=wp.vec3, device=dev)\n"
        "tmin = wp.array(np.zeros(1, np.float32), device=dev)\n"
        "tmax = wp.array(np.full(1, np.inf, np.float32), device=dev)\n"
        "act = wp.array(np.ones(1, np.uint8), device=dev)\n"
        "out = wp.zeros(2, dtype=wp.int32, device=dev)\n"
        "e.closest_hit(scene, o, d, tmin, tmax, act, out)\n"
        "print(out.numpy().tolist())\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[0, -1]"


def test_import_rayd_imports_no_backend():
    code = (
        "import sys\n"
        "import rayd\n"
        "loaded = sorted(m for m in ('torch', 'drjit', 'warp', 'rayd.torch', 'rayd.drjit', 'rayd.engine')"
        " if m in sys.modules)\n"
        "print(repr(rayd.__version__), loaded)\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    version, loaded = result.stdout.strip().split(" ", 1)
    assert version.startswith("'") and len(version) > 2
    assert loaded == "[]"
