"""A scene whose ``global_prim_id`` range exceeds int32 (session 24, helper review24a).

Each shape, instances included, owns its own range of ``global_prim_id`` (DESIGN.md), and ids
are int32. 2,049 instances of a mesh of 2^20 faces number 2^31 + 2^20 faces: ``build()``
stopped with NumPy's ``OverflowError: Python integer 2147483648 out of bounds for int32`` deep
in ``rayd.core.scene`` (shared by both frontends). It now raises the contract's ``ValueError``
naming the call before building anything, and the scene can be built again once instances
are removed (a new scene) or fewer are added.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

FACES_PER_MESH = 2 ** 20


def _big_mesh(device):
    """2^20 faces (one triangle repeated: an expanded tensor, no memory) over three vertices."""
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    f = torch.tensor([[0, 1, 2]], device=device).expand(FACES_PER_MESH, 3)
    return rt.Mesh(v, f)


def test_more_global_prim_ids_than_int32_is_a_value_error(device):
    scene = rt.Scene()
    mesh_id = scene.add_mesh(_big_mesh(device))
    count = 2 ** 31 // FACES_PER_MESH  # with the mesh itself: 2^31 + 2^20 faces
    for k in range(count):
        scene.add_instance(mesh_id, torch.eye(4, device=device))
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Scene\.build\(\): .*2,148,532,224 faces.*int32"):
        scene.build()
    assert not scene.is_ready()


def test_the_largest_id_range_that_fits_builds(device):
    """2^31 - 2^20 faces in all (2,047 instances): ids up to 2^31 - 2^20 - 1 fit int32 and hit as expected."""
    scene = rt.Scene()
    mesh_id = scene.add_mesh(_big_mesh(device))
    count = 2 ** 31 // FACES_PER_MESH - 2
    for k in range(count):
        m = torch.eye(4, device=device)
        m[0, 3] = 2.0 * (k + 1)
        scene.add_instance(mesh_id, m)
    scene.build()
    hit = scene.intersect(rt.Ray(torch.tensor([2.0 * count + 0.25, 0.25, 1.0], device=device),
                                 torch.tensor([0.0, 0, -1], device=device)))
    assert hit.shape_id.item() == count
    assert hit.t.item() == 1.0
    assert hit.global_prim_id.item() == count * FACES_PER_MESH + hit.prim_id.item()
