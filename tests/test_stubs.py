"""The type stubs ``src/rayd/{torch,drjit}/__init__.pyi`` say what the run-time API says (tools/make_stubs.py).

Static tools (pyright/Pylance, mypy, Jedi) read the stubs instead of the source, where core's
methods carry no frontend annotations or docstrings; so the stubs must be current (regenerated
text equals the committed file), complete (every public name and member), faithful (each
docstring is the run-time one) and name every field a real query's record holds.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRONTENDS = ["torch", "drjit"]
#: Slots of run-time classes that are internal state, not API (no leading underscore, undocumented).
INTERNAL_SLOTS = {("drjit", "EdgeSamples"): {"m", "count"}}


def _generator():
    spec = importlib.util.spec_from_file_location("make_stubs", ROOT / "tools" / "make_stubs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stub(frontend: str) -> ast.Module:
    return ast.parse((ROOT / "src" / "rayd" / frontend / "__init__.pyi").read_text(encoding="utf-8"))


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _members(cls: ast.ClassDef) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            out.setdefault(node.name, node)  # a property's getter, not its setter
        elif isinstance(node, ast.AnnAssign):
            out[node.target.id] = node
    return out


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_committed_stub_is_what_the_generator_makes(frontend):
    pytest.importorskip("torch")
    pytest.importorskip("drjit")  # the generator reads rayd.torch's record docs for rayd.drjit's
    committed = (ROOT / "src" / "rayd" / frontend / "__init__.pyi").read_text(encoding="utf-8")
    if _generator().made_with() not in committed:  # e.g. the GPU machine's Python 3.12 / torch 2.11
        pytest.skip("the committed stubs were made with other versions: " + committed.splitlines()[2])
    assert _generator().make_stub(frontend) == committed, \
        "stale stub: run `PYTHONPATH=src python tools/make_stubs.py` and commit the result"


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_stub_lists_every_public_name_and_member(frontend):
    module = pytest.importorskip(f"rayd.{frontend}")
    tree = _stub(frontend)
    top = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    top |= {alias.asname for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert set(module.__all__) <= top
    declared = next(node.value for node in tree.body if isinstance(node, ast.Assign) and node.targets[0].id == "__all__")
    assert sorted(ast.literal_eval(declared)) == sorted(module.__all__)
    classes = _classes(tree)
    missing = []
    for name in module.__all__:
        runtime = getattr(module, name)
        if name not in classes:  # a function, or RayFlags re-exported from rayd.flags
            continue
        stub = _members(classes[name])
        for member in dir(runtime):
            home = next((k for k in runtime.__mro__ if member in vars(k)), object)
            if member.startswith("_") or not home.__module__.startswith("rayd."):
                continue
            if member in INTERNAL_SLOTS.get((frontend, name), ()):
                continue
            if member not in stub:
                missing.append(f"{name}.{member}")
    assert missing == []


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_stub_docstrings_are_the_run_time_ones(frontend):
    module = pytest.importorskip(f"rayd.{frontend}")
    tree = _stub(frontend)
    assert ast.get_docstring(tree) == inspect.getdoc(module)
    checked, properties, missing = 0, 0, []
    for name, cls in _classes(tree).items():
        runtime = getattr(module, name)
        assert ast.get_docstring(cls) == inspect.getdoc(runtime), name
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) is not None:
                raw = inspect.getattr_static(runtime, node.name)
                doc = raw.__doc__ if isinstance(raw, property) else getattr(raw, "__func__", raw).__doc__
                assert ast.get_docstring(node) == inspect.cleandoc(doc), f"{name}.{node.name}"
                checked += 1
                properties += isinstance(raw, property)
            elif isinstance(node, ast.FunctionDef) and node.name != "__init__" and not (
                    node.decorator_list and ast.unparse(node.decorator_list[0]).endswith(".setter")):
                missing.append(f"{name}.{node.name}")
    assert checked > 60 and properties > 10  # the Scene queries alone are ~30; Mesh.vertices is a property
    assert {entry.split(".")[1] for entry in missing} <= {"__len__"}, missing  # len() needs no words


def _scene_records(frontend: str) -> dict[str, object]:
    """One record of each kind from real queries on a two-triangle mirror scene: class name -> record."""
    module = pytest.importorskip(f"rayd.{frontend}")
    verts = [[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 0.0], [-1.0, -1.0, 2.0], [1.0, -1.0, 2.0], [0.0, 1.0, 2.0]]
    faces = [[0, 1, 2], [3, 4, 5]]
    if frontend == "torch":
        import torch

        array3, ints = (lambda rows: torch.tensor(rows, dtype=torch.float32)), (lambda rows: torch.tensor(rows))
        to_world, sequence = torch.eye(4), torch.tensor([[0]])
    else:
        from drjit.llvm.ad import Array3f, Array3i, Matrix4f, TensorXi

        array3 = lambda rows: Array3f(*map(list, zip(*rows)))  # noqa: E731
        ints = lambda rows: Array3i(*map(list, zip(*rows)))  # noqa: E731
        to_world, sequence = Matrix4f(1.0), TensorXi([0], shape=(1, 1))
    scene = module.Scene()
    scene.add_mesh(module.Mesh(array3(verts), ints(faces)))
    scene.build()
    ray = module.Ray(array3([[0.0, 0.0, 1.0]]), array3([[0.0, 0.0, 1.0]]))
    points = array3([[0.0, 0.0, 1.0]])
    camera = module.Camera(16, 16, fov_y=60.0, to_world=to_world)
    records = {
        "Intersection": scene.intersect(ray, flags=module.RayFlags.All),
        "NearestEdge": scene.nearest_edge(ray),
        "ClosestPoint": scene.closest_point(points),
        "ReflectionChain": scene.trace_reflections(ray, 2),
        "SpecularPaths": scene.specular_paths(points, points, sequence),
        "SpecularPathSet": module.find_specular_paths(scene, points, points, 1, num_rays=64),
        "EdgeSamples": camera.sample_edges(scene, 8),
        "EdgeTopology": scene.edge_topology(),
    }
    if frontend == "drjit":
        records["Intersections"] = scene.intersect_all(ray, 2)
    return records


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_stub_declares_every_field_of_real_records(frontend):
    # Fields are read through __getattr__ at run time; the stub declares them as attributes, taken
    # from the class docstrings' Attributes sections: this checks those sections against real records.
    records = _scene_records(frontend)
    classes = _classes(_stub(frontend))
    array = {"torch": "torch.Tensor", "drjit": "drjit.ArrayBase"}[frontend]
    for name, record in records.items():
        stub = {node.target.id: ast.unparse(node.annotation) for node in classes[name].body
                if isinstance(node, ast.AnnAssign)}
        held = record.fields if hasattr(record, "fields") else tuple(vars(record) if hasattr(record, "__dict__") else ())
        if name == "EdgeTopology":
            held = ("v", "faces", "opposite", "is_boundary", "shape_id", "edge_id", "global_edge_id")
        assert held and set(held) <= set(stub), (name, sorted(set(held) - set(stub)))
        for field in held:
            value = getattr(record, field)
            expected = {"ray_inside": "Ray", "ray_outside": "Ray"}.get(field, array)
            assert stub[field] == expected, (name, field)
            assert isinstance(value, getattr(pytest.importorskip(f"rayd.{frontend}"), "Ray")) if expected == "Ray" \
                else type(value).__module__.split(".")[0] == frontend, (name, field, type(value))


def test_read_only_mesh_arrays_have_no_setter_in_the_stub():
    # Mesh.vertices refuses assignment at run time (AttributeError); the stub says so to type checkers.
    mesh = _members(_classes(_stub("torch"))["Mesh"])
    text = (ROOT / "src" / "rayd" / "torch" / "__init__.pyi").read_text(encoding="utf-8")
    assert "vertices" in mesh and "@vertices.setter" not in text and "@fx.setter" in text


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_mypy_reads_the_stubs(frontend, tmp_path):
    # A typed user script: mypy sees the fields' types through the stubs (Any without them) and flags a typo.
    api = pytest.importorskip("mypy.api")
    pytest.importorskip(frontend)
    script = {
        "torch": """
import torch
import rayd.torch as rt

scene = rt.Scene()
ray = rt.Ray(torch.zeros(3), torch.ones(3))
hit = scene.intersect(ray, flags=rt.RayFlags.Geometric)
reveal_type(hit.t)
reveal_type(hit[hit.is_valid()].to(torch.float64))
reveal_type(scene.nearest_edge(ray).distance)
reveal_type(rt.Mesh.from_trimesh)
hit.tt
""",
        "drjit": """
from drjit.llvm.ad import Array3f
import rayd.drjit as rd

scene = rd.Scene()
ray = rd.Ray(Array3f(0, 0, 0), Array3f(0, 0, 1))
hit = scene.intersect(ray)
reveal_type(hit.t)
reveal_type(hit[hit.is_valid()])
reveal_type(scene.intersect_all(ray, 4))
reveal_type(scene.closest_point(Array3f(0, 0, 0)).distance)
hit.tt
""",
    }[frontend]
    path = tmp_path / "use.py"
    path.write_text(script)
    env_path = os.environ.get("MYPYPATH")
    os.environ["MYPYPATH"] = str(ROOT / "src")  # ahead of any installed rayd
    try:
        out, err, status = api.run([str(path), "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"])
    finally:
        if env_path is None:
            os.environ.pop("MYPYPATH")
        else:
            os.environ["MYPYPATH"] = env_path
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(path))]
    if frontend == "torch":
        assert lines == [
            'note: Revealed type is "torch._tensor.Tensor"',
            'note: Revealed type is "rayd.torch.Intersection"',
            'note: Revealed type is "torch._tensor.Tensor"',
            'note: Revealed type is "def (mesh: object, *, device: torch._C.device | str | None =, '
            'dtype: torch._C.dtype =, normals: bool =, uv: bool =, to_world: torch._tensor.Tensor | None =) '
            '-> rayd.torch.Mesh"',
            'error: "Intersection" has no attribute "tt"  [attr-defined]',
        ], out
    else:
        array = 'note: Revealed type is "drjit.ArrayBase[Any, Any, Any, Any, Any, Any, Any]"'
        assert lines == [array, 'note: Revealed type is "rayd.drjit.Intersection"',
                         'note: Revealed type is "rayd.drjit.Intersections"', array,
                         'error: "Intersection" has no attribute "tt"  [attr-defined]'], out
    assert status == 1


def test_pyright_reads_the_stubs(tmp_path):
    # Pylance's checker: the field types and the misspelt field, through the stub of rayd.torch.
    pytest.importorskip("pyright")
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys

    (tmp_path / "use.py").write_text("""
import torch
import rayd.torch as rt

scene = rt.Scene()
ray = rt.Ray(torch.zeros(3), torch.ones(3))
hit = scene.intersect(ray)
reveal_type(hit.t)
reveal_type(hit[hit.is_valid()].detach())
reveal_type(scene.trace_reflections(ray, 2).image_source)
hit.tt
""")
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({"extraPaths": [str(ROOT / "src")], "include": ["use.py"]}))
    run = subprocess.run([sys.executable, "-m", "pyright", "--outputjson"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    if not run.stdout.startswith("{"):
        pytest.skip(f"pyright did not run: {run.stdout[:200]} {run.stderr[:200]}")
    found = [(d["severity"], d["message"].splitlines()[0]) for d in json.loads(run.stdout)["generalDiagnostics"]]
    assert found == [("information", 'Type of "hit.t" is "Tensor"'),
                     ("information", 'Type of "hit[hit.is_valid()].detach()" is "Intersection"'),
                     ("information", 'Type of "scene.trace_reflections(ray, 2).image_source" is "Tensor"'),
                     ("error", 'Cannot access attribute "tt" for class "Intersection"')]


def test_jedi_shows_the_stub_signature_and_docstring():
    # IDE hover through Jedi: the frontend's signature and docstring of a method written in rayd.core.
    jedi = pytest.importorskip("jedi")
    rt = pytest.importorskip("rayd.torch")
    import site

    code = "import rayd.torch as rt\nscene = rt.Scene()\nhit = scene.intersect(None)\nhit.t\n"
    project = jedi.Project(ROOT, sys_path=[str(ROOT / "src"), *site.getsitepackages()], smart_sys_path=False)
    script = jedi.Script(code, path=ROOT / "jedi_probe.py", project=project)
    (name,) = script.infer(3, 14, prefer_stubs=True)
    signature, _, doc = name.docstring().partition("\n\n")
    assert signature == ("intersect(ray: Ray, active: torch.Tensor | None=None, flags: RayFlags=..., *, "
                         "ignore: torch.Tensor | int | None=None) -> Intersection")
    assert doc == inspect.getdoc(rt.Scene.intersect)
    assert [n.full_name for n in script.infer(4, 5, prefer_stubs=True)] == ["torch._tensor.Tensor"]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_scene_content_methods_name_the_frontend_types(frontend):
    # Written once in rayd.core with Any; each frontend's Scene (and so its stub) names its own types.
    import typing

    from rayd.core.frontend import SceneBase

    module = pytest.importorskip(f"rayd.{frontend}")
    array = {"torch": "Tensor", "drjit": "ArrayBase"}[frontend]
    array = getattr(importlib.import_module(frontend), array)
    assert typing.get_type_hints(module.Scene.add_mesh)["mesh"] is module.Mesh
    assert typing.get_type_hints(module.Scene.add_instance)["to_world"] is array
    assert typing.get_type_hints(module.Scene.update_mesh_vertices)["vertices"] is array
    assert typing.get_type_hints(module.Scene.set_mesh_transform)["to_world"] is array
    assert typing.get_type_hints(module.Camera.sample_edges)["scene"] is module.Scene
    assert module.Scene.add_mesh.__doc__ == SceneBase.add_mesh.__doc__  # the docstring stays core's
    assert typing.get_type_hints(SceneBase.add_mesh)["mesh"] is typing.Any  # and core's own method is untouched
