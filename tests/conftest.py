"""Shared fixtures: every test runs on each available device; CUDA skips cleanly."""

from __future__ import annotations

import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES)


@pytest.fixture
def cuda_device():
    """A CUDA device, or skip."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return "cuda"
