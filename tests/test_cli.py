"""``python -m rayd``: info, help, unknown commands, and where ``bench`` finds the benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rayd
from rayd import __main__ as cli

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "rayd", *args], capture_output=True, text=True, env=env, timeout=300)


def test_info_names_rayd_warp_and_the_frontends():
    result = _run("info")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"rayd {rayd.__version__}")
    for word in ("warp", "torch", "drjit", "CPU accelerator"):
        assert word in result.stdout


def test_help_and_unknown_command():
    assert "python -m rayd info" in _run("--help").stdout
    result = _run("frobnicate")
    assert result.returncode == 2 and "unknown command 'frobnicate'" in result.stderr


def test_bench_without_a_checkout_says_where_to_run(tmp_path, monkeypatch, capsys):
    # A non-editable install: no benchmarks/ beside the package, none in the current directory.
    monkeypatch.setattr(rayd, "__file__", str(tmp_path / "site-packages" / "rayd" / "__init__.py"))
    monkeypatch.chdir(tmp_path)
    assert cli.bench([]) == 2
    assert "repository root of a checkout" in capsys.readouterr().err


def test_bench_finds_the_checkout_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(rayd, "__file__", str(tmp_path / "site-packages" / "rayd" / "__init__.py"))
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as stop:  # benchmarks/run.py's argparse answers --help
        cli.bench(["--help"])
    assert stop.value.code == 0
