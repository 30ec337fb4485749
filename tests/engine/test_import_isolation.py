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


def test_core_imports_with_torch_and_drjit_blocked():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['drjit'] = None\n"
        "import rayd.core as c\n"
        "assert c.SceneCore and c.ShapeTable and c.TransformTable\n"
        "import rayd.core.frontend\n"
        "import rayd.core.paths\n"
        "import rayd.core.camera\n"
        "print('ok')\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def _import_graph() -> dict[str, set[str]]:
    """Module -> rayd modules it imports (module level and inside functions), from the sources."""
    import ast  # noqa: PLC0415

    root = Path(SRC)
    modules = {}
    for path in (root / "rayd").rglob("*.py"):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rayd"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    graph[name].add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
    return graph


def test_no_import_cycles():
    # A package importing its own submodules (re-exports) is not a cycle of concepts.
    graph = _import_graph()

    def related(a: str, b: str) -> bool:
        return a.startswith(b + ".") or b.startswith(a + ".")

    found = []

    def walk(node: str, path: list[str], done: set[str]) -> None:
        for nxt in graph.get(node, ()):
            if related(node, nxt):
                continue
            if nxt in path:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                done.add(nxt)
                walk(nxt, path + [nxt], done)

    for start in graph:
        walk(start, [start], {start})
    assert not found, found[:3]


def test_core_never_imports_a_frontend():
    graph = _import_graph()
    for name, targets in graph.items():
        if name.startswith(("rayd.core", "rayd.engine")):
            assert not any(t.startswith(("rayd.torch", "rayd.drjit")) for t in targets), (name, targets)


def test_frontend_without_its_array_library_names_the_extra():
    # A user who installed only one extra gets an ImportError naming the missing package and
    # the pip extra, not a bare ModuleNotFoundError from inside rayd.
    for frontend, blocked, package in (("rayd.torch", "torch", "PyTorch"), ("rayd.drjit", "drjit", "Dr.Jit")):
        code = (
            "import sys\n"
            f"sys.modules[{blocked!r}] = None\n"
            "try:\n"
            f"    import {frontend}\n"
            "except ImportError as error:\n"
            "    print(type(error).__name__, error)\n"
        )
        result = _run(code)
        assert result.returncode == 0, result.stderr
        out = result.stdout.strip()
        assert out.startswith("ImportError"), out
        assert package in out and f"rayd-geom[{blocked}]" in out, out


def test_each_frontend_imports_without_the_other_library():
    for frontend, blocked in (("rayd.torch", "drjit"), ("rayd.drjit", "torch")):
        code = f"import sys\nsys.modules[{blocked!r}] = None\nimport {frontend} as m\nprint(len(m.__all__))\n"
        result = _run(code)
        assert result.returncode == 0, result.stderr
        assert int(result.stdout.strip().splitlines()[-1]) > 5
