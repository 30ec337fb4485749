"""examples/cameras/fit_bunny_silhouettes.py: a few iterations raise the IoU of every view.

The first test fits a generated target (a rotated box, so CI needs no download) on small
images; the second runs the example's ``--quick`` mode on the bunny and skips when
``bunny.npz`` is not there (``$RAYD_MESH_DIR`` or ``.device/meshes``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cameras" / "fit_bunny_silhouettes.py"


@pytest.fixture(scope="module")
def example():
    pytest.importorskip("trimesh")
    spec = importlib.util.spec_from_file_location("fit_bunny_silhouettes", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_fit_box_raises_iou(example, one_thread):
    import trimesh

    box = trimesh.creation.box(extents=[1.5, 0.8, 1.1])
    box.apply_transform(trimesh.transformations.rotation_matrix(0.5, [1.0, 2.0, 0.3]))
    v = example.normalise(np.asarray(box.vertices, np.float64))
    result = example.fit(v, np.asarray(box.faces, np.int64), size=40, iterations=8, subdivisions=2,
                         edge_samples=1024, lr=0.02, log=lambda *_: None)
    history = np.asarray(result["history"])
    assert history.shape == (9, 8)
    # Real IoUs of the pixel-centre masks: the sphere starts well off the box and moves onto it.
    assert 0.3 < history[0].mean() < 0.9
    assert history[-1].mean() > history[0].mean() + 0.05
    assert (history[-1] > history[0]).all()


def test_quick_bunny(example, one_thread):
    meshes = Path(os.environ.get("RAYD_MESH_DIR", ROOT / ".device" / "meshes"))
    if not (meshes / "bunny.npz").exists():
        pytest.skip(f"{meshes / 'bunny.npz'} not downloaded (python examples/get_bunny.py --out {meshes / 'bunny.npz'})")
    result = example.main(["--quick", "--meshes", str(meshes), "--iterations", "6", "--threads", "0"])
    history = np.asarray(result["history"])
    assert history[-1].mean() > history[0].mean() + 0.03
    assert result["summary"]["final_mean_iou"] == pytest.approx(history[-1].mean())
