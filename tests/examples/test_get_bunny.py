"""examples/get_bunny.py reads the npm package's index.js into the .npz the examples load (no network here)."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "get_bunny.py"


def _load():
    spec = importlib.util.spec_from_file_location("get_bunny", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_bunny_reads_positions_and_cells():
    source = b"exports.positions=[[1.5,0,2],[0,1,0],[0,0,1]];\nexports.cells=[[0,1,2],[2,1,0]];\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("package/index.js")
        info.size = len(source)
        archive.addfile(info, io.BytesIO(source))
    vertices, faces = _load().parse_bunny(buffer.getvalue())
    assert vertices.dtype == np.float32 and vertices.shape == (3, 3) and vertices[0, 0] == 1.5
    assert faces.dtype == np.int32 and faces.tolist() == [[0, 1, 2], [2, 1, 0]]
