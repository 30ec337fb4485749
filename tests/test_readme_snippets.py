"""The README's Python snippets run as written, in order, in one namespace (as a reader runs them).

A block that imports an optional package that is not installed (trimesh, drjit) is
skipped with the rest of the file's blocks still run; a block whose first line is
``# not run`` is never executed. The quick start's printed values are checked against
the numbers in its comments.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
OPTIONAL = ("trimesh", "drjit")


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of ``text``, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def _missing(block: str) -> list[str]:
    return [name for name in OPTIONAL
            if re.search(rf"^\s*(import|from) {name}\b", block, flags=re.M) and importlib.util.find_spec(name) is None]


def test_readme_has_snippets():
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 4
    assert "import rayd.torch as rt" in blocks[0]


def test_readme_snippets_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict = {"__name__": "__readme__"}
    outputs = []
    for number, block in enumerate(python_blocks(README.read_text())):
        if block.lstrip().startswith("# not run") or _missing(block):
            outputs.append(None)
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"README.md python block {number}", "exec"), namespace)
        outputs.append(out.getvalue())
        if number == 0:  # the quick start: the values its comments state
            hit, vertices = namespace["hit"], namespace["vertices"]
            assert hit.t.tolist() == [1.0, 1.0] and hit.prim_id.tolist() == [0, 1]
            assert torch.allclose(vertices.grad[:, 2], torch.tensor([-0.5, -0.55, -0.45, -0.5]))
            assert out.getvalue().splitlines()[-1] == "tensor(True)"
        if "from_trimesh" in block:
            t = float(re.search(r"tensor\(\[?([0-9.]+)", out.getvalue().splitlines()[-1]).group(1))
            assert abs(t - 4.0) < 0.01  # the icosphere of radius 1 seen from z = 5
            hits = namespace["hits"]
            assert hits.shape == (2,) and hits.p.shape == (2, 3)
        if "import rayd.drjit" in block:
            import drjit as dr

            near, points = namespace["near"], namespace["points"]
            assert [round(x, 5) for x in near.distance] == [1.0, 0.2]
            grad = dr.grad(points)
            # point 0 is 1 below the edge y = 0 (x in [0, 1]): moving it in -y moves it away
            assert abs(float(grad.y[0]) + 1.0) < 1e-5 and abs(float(grad.x[0])) < 1e-5
            # point 1 (0.2, 0.2) is 0.2 from the edges x = 0 and y = 0: the winner's unit direction
            g1 = (float(grad.x[1]), float(grad.y[1]), float(grad.z[1]))
            assert min(max(abs(a - b) for a, b in zip(g1, want)) for want in ((1, 0, 0), (0, 1, 0))) < 1e-5
        if "fit.update_mesh_vertices" in block:  # the rayd.drjit fitting loop: the value its comment states
            assert abs(float(namespace["fit"].intersect(namespace["ray"]).t[0]) - 0.5538667) < 1e-5
    assert outputs[0] is not None
