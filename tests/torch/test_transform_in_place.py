"""In-place changes of registered transforms (issue 19, item 8).

One rule (DESIGN.md: transforms may change on any shape, dynamic or not): an in-place
write into a registered ``to_world`` (a mesh's own, an instance's, or one given to
``set_mesh_transform``) marks the scene pending, ``has_pending_updates()`` says so,
queries ask for ``sync()``, and ``sync()`` applies it. ``has_pending_updates()``
reports exactly what ``sync()`` would apply: a static mesh's vertices changed in
place need ``build()`` and are not "pending".
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

TRI = [[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]


def _translate(z, device):
    m = torch.eye(4, device=device)
    m[2, 3] = z
    return m


def _ray(device, x=0.2):
    return rt.Ray(torch.tensor([x, 0.2, 5.0], device=device), torch.tensor([0.0, 0, -1], device=device))


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("where", ["Mesh", "set_mesh_transform"])
def test_mesh_transform_written_in_place(device, dynamic, where):
    v = torch.tensor(TRI, device=device)
    f = torch.tensor([[0, 1, 2]], device=device)
    m = _translate(1.0, device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f, to_world=m if where == "Mesh" else None), dynamic=dynamic)
    scene.build()
    if where == "set_mesh_transform":
        scene.set_mesh_transform(0, m)
        scene.sync()
    assert float(scene.intersect(_ray(device)).t) == pytest.approx(4.0)
    assert scene.is_ready() and not scene.has_pending_updates()
    m[2, 3] = 2.0  # in place
    assert scene.has_pending_updates() and not scene.is_ready()
    for call in (lambda: scene.intersect(_ray(device)), lambda: scene.nearest_edge(v)):
        with pytest.raises(RuntimeError, match=r"the vertices or transform of mesh 0 changed in place since the last sync\(\); "
                                               r"call sync\(\) first"):
            call()
    scene.sync()
    assert scene.is_ready() and not scene.has_pending_updates()
    assert float(scene.intersect(_ray(device)).t) == pytest.approx(3.0)
    p = torch.tensor([0.5, -1.0, 2.0], device=device)  # 1 from edge (0, 1) lifted to z = 2
    assert float(scene.nearest_edge(p).distance) == pytest.approx(1.0)


@pytest.mark.parametrize("which", ["mesh", "instance"])
def test_instance_placement_written_in_place(device, which):
    v = torch.tensor(TRI, device=device)
    f = torch.tensor([[0, 1, 2]], device=device)
    m_mesh = _translate(1.0, device)
    m_inst = torch.eye(4, device=device)
    m_inst[0, 3] = 3.0  # the instance sits at x + 3
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f, to_world=m_mesh))  # static
    scene.add_instance(0, m_inst)
    scene.build()
    assert float(scene.intersect(_ray(device, 3.2)).t) == pytest.approx(4.0)
    (m_mesh if which == "mesh" else m_inst)[2, 3] += 1.0
    assert scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"call sync\(\) first"):
        scene.shadow_test(_ray(device, 3.2))
    scene.sync()
    assert not scene.has_pending_updates() and scene.is_ready()
    hit = scene.intersect(_ray(device, 3.2))
    assert int(hit.shape_id) == 1 and float(hit.t) == pytest.approx(3.0)
    # The mesh itself moved only when its own matrix did.
    assert float(scene.intersect(_ray(device)).t) == pytest.approx(3.0 if which == "mesh" else 4.0)


def test_static_vertices_in_place_are_not_pending_and_need_build(device):
    v = torch.tensor(TRI, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    v[:, 2] += 1.0
    # sync() cannot apply it, so it is not a pending update; queries and sync() say build().
    assert not scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"static mesh 0 changed in place; call build\(\)"):
        scene.intersect(_ray(device))
    with pytest.raises(RuntimeError, match=r"static mesh 0 changed in place; call build\(\)"):
        scene.sync()
    scene.build()
    assert float(scene.intersect(_ray(device)).t) == pytest.approx(4.0)


@pytest.mark.parametrize("name", ["vertices", "faces", "normals", "uv", "to_world"])
def test_assigning_a_mesh_array_is_refused_never_stale(device, name):
    """Assigning ``mesh.to_world = M`` (or any other array) after ``Mesh()`` used to be silently
    ignored by the scene, before and after ``build()`` (it holds the arrays given to ``Mesh()``):
    stale answers. It is refused, naming the call to use; the scene keeps answering for what
    it holds, and the documented route applies the change."""
    v = torch.tensor(TRI, device=device)
    f = torch.tensor([[0, 1, 2]], device=device)
    mesh = rt.Mesh(v, f, to_world=_translate(1.0, device))
    scene = rt.Scene()
    scene.add_mesh(mesh, dynamic=True)
    scene.build()
    new = {"vertices": v + 1.0, "faces": f.flip(-1), "normals": torch.ones_like(v), "uv": v[:, :2],
           "to_world": _translate(2.0, device)}[name]
    how = {"vertices": r"update_mesh_vertices", "to_world": r"rayd\.torch\.Scene\.set_mesh_transform"}.get(name, "new Mesh")
    before = mesh.__getattribute__(name)
    with pytest.raises(AttributeError, match=rf"rayd\.torch\.Mesh: '{name}' cannot be assigned.*{how}"):
        setattr(mesh, name, new)
    assert mesh.__getattribute__(name) is before
    scene.build()
    assert float(scene.intersect(_ray(device)).t) == pytest.approx(4.0)
    scene.set_mesh_transform(0, _translate(2.0, device))
    scene.sync()
    assert float(scene.intersect(_ray(device)).t) == pytest.approx(3.0)
