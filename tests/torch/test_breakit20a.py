"""Break-it session 20, helper breakit20a: rayd.torch scene lifecycle and triangle ray queries.

torch's version counter belongs to a tensor's storage, not to a view of it: a write into
another part of the storage (a neighbouring mesh's rows of one packed parameter, the
fourth column of a ``(V, 4)`` buffer whose first three columns are the vertices, another
instance's matrix of one ``(K, 4, 4)`` batch) moved the stamp of every view, so a static
mesh whose values had not changed was reported changed and every query raised until
``build()``. Where the content check runs (the CPU by default, CUDA with
``RAYD_CONTENT_CHECK=1``), an array whose stamp moved but whose values equal the copy
taken at the last ``build()``/``sync()`` is no change now (``rayd.core.shapes``).
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt


@pytest.fixture(autouse=True)
def _content_check_everywhere(monkeypatch):
    """Run the comparison on every device (on CUDA it is opt-in: ``RAYD_CONTENT_CHECK=1``)."""
    from rayd.core import contents

    monkeypatch.setattr(contents, "MODE", "1")


TRI = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]


def _down(device, dtype=torch.float32):
    """Two rays straight down (from z = 5) over (0.2, 0.2) and (3.2, 0.2)."""
    o = torch.tensor([[0.2, 0.2, 5.0], [3.2, 0.2, 5.0]], dtype=dtype, device=device)
    return rt.Ray(o, torch.tensor([0.0, 0.0, -1.0], dtype=dtype, device=device))


def _packed(device, dtype):
    """One (6, 3) tensor: rows 0-2 a triangle at z = 0 over x in [0, 1], rows 3-5 one over x in [3, 4]."""
    tri = torch.tensor(TRI, dtype=dtype, device=device)
    return torch.cat([tri, tri + torch.tensor([3.0, 0.0, 0.0], dtype=dtype, device=device)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dynamic_a", [False, True])
def test_mesh_in_a_packed_tensor_is_not_changed_by_its_neighbours_write(device, dtype, dynamic_a):
    """Meshes 0 and 1 are views of one packed tensor; moving mesh 1's rows leaves mesh 0 as it was.

    Before (mesh 0 static): 'the vertices of static mesh 0 changed in place; call build() to
    rebuild' from every query and from sync(). A dynamic mesh 0 is pending too (a dynamic mesh's
    moved stamp stays a change: sync() refits it), with the same answers after sync().
    """
    packed = _packed(device, dtype)
    faces = torch.tensor([[0, 1, 2]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(packed[:3], faces), dynamic=dynamic_a)
    scene.add_mesh(rt.Mesh(packed[3:], faces), dynamic=True)
    scene.build()
    assert scene.intersect(_down(device, dtype)).t.tolist() == [5.0, 5.0]
    packed[3:, 2] += 0.5  # mesh 1 moves up by 0.5
    assert scene.has_pending_updates() and not scene.is_ready()
    changed = "mesh 0" if dynamic_a else "mesh 1"
    with pytest.raises(RuntimeError, match=changed + r" changed in place since the last sync\(\); call sync\(\) first"):
        scene.intersect(_down(device, dtype))
    scene.sync()
    assert scene.is_ready() and not scene.has_pending_updates()
    hit = scene.intersect(_down(device, dtype))
    assert hit.t.tolist() == [5.0, 4.5]
    assert hit.shape_id.tolist() == [0, 1]


def test_static_mesh_whose_neighbour_is_static_too_names_the_mesh_that_changed(device):
    """Both static: the write into mesh 1's rows needs build(), and the error names mesh 1 (it named mesh 0)."""
    packed = _packed(device, torch.float32)
    faces = torch.tensor([[0, 1, 2]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(packed[:3], faces))
    scene.add_mesh(rt.Mesh(packed[3:], faces))
    scene.build()
    packed[3:, 2] -= 1.0
    with pytest.raises(RuntimeError, match=r"the vertices of static mesh 1 changed in place; call build\(\)"):
        scene.intersect(_down(device))
    scene.build()
    assert scene.intersect(_down(device)).t.tolist() == [5.0, 6.0]


def test_vertices_as_three_columns_of_a_homogeneous_buffer(device):
    """Vertices ``buf[:, :3]`` of a (V, 4) buffer: writing the w column changes no geometry."""
    buf = torch.cat([torch.tensor(TRI, device=device), torch.ones(3, 1, device=device)], 1)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(buf[:, :3], torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    buf[:, 3] = 2.0
    assert scene.is_ready() and not scene.has_pending_updates()
    assert scene.intersect(_down(device)).t.tolist() == [5.0, float("inf")]
    buf[:, 2] = 1.0  # now the vertices move: static, so build() is needed
    assert not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"static mesh 0 changed in place"):
        scene.intersect(_down(device))
    scene.build()
    assert scene.intersect(_down(device)).t.tolist() == [4.0, float("inf")]


def test_faces_sharing_storage_with_other_integers(device):
    """Faces ``table[:1]`` of a larger int tensor: writing the other rows is no change of the faces."""
    table = torch.tensor([[0, 1, 2], [7, 7, 7]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(TRI, device=device), table[:1]))
    scene.build()
    table[1] = 9
    assert scene.is_ready()
    assert scene.intersect(_down(device)).prim_id.tolist() == [0, -1]
    table[0, 0] = 2  # a real change of the faces: stale until build()
    with pytest.raises(RuntimeError, match=r"the faces of mesh 0 changed in place since build\(\)"):
        scene.intersect(_down(device))


def test_instance_matrices_as_views_of_one_batch(device):
    """Two instances placed by ``batch[0]`` and ``batch[1]`` of a static mesh: writing one matrix moves
    that instance only (both are re-read at sync(): a matrix's moved stamp stays a change)."""
    batch = torch.eye(4, device=device).repeat(2, 1, 1)
    batch[1, 0, 3] = 3.0
    scene = rt.Scene()
    mesh = scene.add_mesh(rt.Mesh(torch.tensor(TRI, device=device), torch.tensor([[0, 1, 2]], device=device)))
    scene.set_shape_enabled(mesh, False)
    scene.add_instance(mesh, batch[0])
    scene.add_instance(mesh, batch[1])
    scene.build()
    assert scene.intersect(_down(device)).shape_id.tolist() == [1, 2]
    batch[1, 2, 3] = -1.0  # instance 2 moves down
    assert scene.has_pending_updates()
    scene.sync()
    assert scene.intersect(_down(device)).t.tolist() == [5.0, 6.0]


# ----------------------------------------------------------------- unsigned faces
@pytest.mark.parametrize("unsigned, signed", [(torch.uint32, torch.int32), (torch.uint64, torch.int64)])
def test_unsigned_faces_are_accepted_as_views(device, unsigned, signed):
    """DESIGN.md: faces of "any 32- or 64-bit integer type". torch.uint32/uint64 (``torch.from_numpy`` of a
    PLY file's uint32 faces) raised TypeError; now the mesh holds a signed view of the caller's memory."""
    import numpy as np

    faces_np = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.uint32 if unsigned == torch.uint32 else np.uint64)
    faces = torch.from_numpy(faces_np).to(device)
    assert faces.dtype == unsigned
    v = _packed(device, torch.float32)
    mesh = rt.Mesh(v, faces)
    assert mesh.faces.dtype == signed and mesh.faces.data_ptr() == faces.data_ptr()
    scene = rt.Scene()
    scene.add_mesh(mesh)
    scene.build()
    reference = rt.Scene()
    reference.add_mesh(rt.Mesh(v, faces.to(torch.int64)))
    reference.build()
    ray = _down(device)
    hit, expected = scene.intersect(ray), reference.intersect(ray)
    assert hit.prim_id.tolist() == expected.prim_id.tolist() == [0, 1]
    assert torch.equal(hit.t, expected.t) and torch.equal(hit.barycentric, expected.barycentric)
    assert torch.equal(scene.edge_topology().v, reference.edge_topology().v)
    faces[1, 0] = 4  # an in-place write into the caller's unsigned tensor is seen
    with pytest.raises(RuntimeError, match=r"the faces of mesh 0 changed in place since build\(\)"):
        scene.intersect(ray)


def test_unsigned_faces_out_of_range(device):
    """An unsigned index beyond the signed range reads negative: the contract's ValueError, not a wrapped index."""
    v = torch.tensor(TRI, device=device)
    for bad in ([0, 1, 3], [0, 1, 2**32 - 1]):
        with pytest.raises(ValueError, match=r"^rayd\.torch\.Mesh\(\): 'faces' must index vertices in \[0, 3\)"):
            rt.Mesh(v, torch.tensor([bad], dtype=torch.uint32, device=device))
    with pytest.raises(TypeError, match=r"'faces' must have dtype int32 or int64, got torch.int16"):
        rt.Mesh(v, torch.tensor([[0, 1, 2]], dtype=torch.int16, device=device))


# ----------------------------------------------------------------- float64 directions
@pytest.mark.xfail(strict=True, reason="docs/known-limitations.md: float64 directions beyond float32's range miss")
def test_float64_directions_beyond_float32_range_hit(device):
    """A float64 ray with |d| = 1e39 (t = 1e-39 is a float64 number) misses: the search rounds d to float32 (inf)."""
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(TRI, dtype=torch.float64, device=device),
                           torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    o = torch.tensor([[0.2, 0.2, 1.0]], dtype=torch.float64, device=device)
    d = torch.tensor([[0.0, 0.0, -1e39]], dtype=torch.float64, device=device)
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.t.item() == pytest.approx(1e-39, rel=1e-12)
    assert scene.shadow_test(rt.Ray(o, d)).item()
