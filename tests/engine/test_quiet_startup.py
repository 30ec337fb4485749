"""Importing rayd prints nothing: no Warp banner, and no CUDA no-driver line on machines without a GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300)


def test_import_rayd_torch_and_query_print_nothing():
    out = _run("""
        import torch
        import rayd.torch as rt
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])))
        scene.build()
        hit = scene.intersect(rt.Ray(torch.tensor([0.2, 0.2, 1.0]), torch.tensor([0.0, 0, -1])))
        print("t", hit.t.item())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "t 1.0\n"
    assert "Could not find or load the NVIDIA CUDA driver" not in out.stderr
    assert out.stderr == ""


@pytest.mark.skipif(importlib.util.find_spec("drjit") is None, reason="needs drjit")
def test_import_rayd_drjit_prints_nothing():
    out = _run("import rayd.drjit")
    assert out.returncode == 0, out.stderr
    assert (out.stdout, out.stderr) == ("", "")


def test_other_native_messages_still_appear():
    # Warp's init replaced by one that writes, as its C code does, to file descriptor 2
    out = _run("""
        import os
        import warp as wp
        import rayd.engine.runtime as runtime
        def noisy_init():
            os.write(2, (runtime.NO_DRIVER_MESSAGE + " GPU execution will not be available.\\n").encode())
            os.write(2, b"Warp CUDA error: something real\\n")
        wp.init = noisy_init
        runtime._cuda_driver_loadable = lambda: False
        runtime._init_warp()
        os.write(2, b"-- with a driver --\\n")
        runtime._cuda_driver_loadable = lambda: True
        runtime._init_warp()
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines == [
        "Warp CUDA error: something real",
        "-- with a driver --",
        "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver. GPU execution will not be available.",
        "Warp CUDA error: something real",
    ]

