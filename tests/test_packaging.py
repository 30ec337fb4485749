"""What a non-editable install ships: every package, the py.typed marker, the docs' links."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_py_typed_is_package_data():
    assert (ROOT / "src" / "rayd" / "py.typed").exists()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["rayd"]


def test_type_stubs_are_package_data():
    # tools/make_stubs.py writes src/rayd/<frontend>/__init__.pyi; a wheel without them gives IDEs untyped queries.
    from fnmatch import fnmatch

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    stubs = sorted((ROOT / "src").rglob("*.pyi"))
    assert [stub.relative_to(ROOT / "src").as_posix() for stub in stubs] == ["rayd/drjit/__init__.pyi",
                                                                             "rayd/torch/__init__.pyi"]
    for stub in stubs:
        package = ".".join(stub.parent.relative_to(ROOT / "src").parts)
        assert any(fnmatch(stub.name, pattern) for pattern in config.get(package, [])), stub


def test_every_rayd_folder_is_a_package():
    # setuptools' find_packages only ships folders with an __init__.py.
    for folder in (ROOT / "src" / "rayd").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
            assert (folder / "__init__.py").exists(), folder


def test_markdown_links_to_repository_files_resolve():
    # README.md, docs/ and examples/: every relative [text](path) link names a file in the repository.
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.md")]
    dead = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not target.startswith(("http://", "https://")) and not (page.parent / target).exists():
                dead.append(f"{page.relative_to(ROOT)}: {target}")
    assert not dead, dead


def test_docs_python_blocks_parse_and_import_what_they_use():
    # docs/ and examples/ code blocks are meant to be pasted: each parses, and names the
    # modules it uses (docs/compile.md's loop once used rt, v and ray without defining them).
    import ast

    aliases = {"rt": "rayd.torch", "rd": "rayd.drjit", "torch": "torch", "dr": "drjit", "np": "numpy"}
    pages = [*(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.md")]
    problems = []
    for page in pages:
        for block in re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M):
            tree = ast.parse(block)
            bound = {alias.asname or alias.name.split(".")[0]
                     for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
            bound |= {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                      for target in node.targets if isinstance(target, ast.Name)}
            used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
            for name in sorted((used & set(aliases)) - bound):
                problems.append(f"{page.relative_to(ROOT)}: uses {name} ({aliases[name]}) without importing it")
    assert not problems, problems


def test_version_matches_pyproject():
    import rayd

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert rayd.__version__ == config["project"]["version"]


def test_documented_error_messages_are_the_real_ones():
    # README.md and docs/api.md quote these messages word for word.
    import pytest

    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    with pytest.raises(ValueError) as error:
        rt.Ray(torch.zeros(1024, 3), torch.ones(1024, 4))
    assert str(error.value) == "rayd.torch.Ray(): 'd' must have shape (..., 3), got (1024, 4)"
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])))
    scene.build()
    with pytest.raises(ValueError) as error:
        scene.nearest_edge(torch.zeros(1024, 4))
    assert str(error.value) == "rayd.torch.Scene.nearest_edge(): 'points' must have shape (..., 3), got (1024, 4)"
    for page in ("README.md", "docs/api.md"):
        text = (ROOT / page).read_text()
        assert "rayd.torch.Ray(): 'd' must have shape (..., 3), got (1024, 4)" in text
