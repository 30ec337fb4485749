"""``set_mesh_transform`` with no ids (issue 19, item 9): a no-op, as in rayd.drjit.

It used to raise a raw NumPy reshape message. Every empty form is the same no-op;
the checks that do not depend on the count still apply.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt


def _scene(device):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device),
                           torch.tensor([[0, 1, 2]], device=device)))
    scene.add_instance(0, torch.eye(4, device=device))
    scene.build()
    return scene


@pytest.mark.parametrize("ids", [[], (), "int64", "int32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_id_list_is_a_no_op(device, ids, dtype):
    scene = _scene(device)
    if isinstance(ids, str):
        ids = torch.tensor([], dtype=getattr(torch, ids), device=device)
    scene.set_mesh_transform(ids, torch.zeros((0, 4, 4), dtype=dtype, device=device))
    assert scene.is_ready() and not scene.has_pending_updates()
    ray = rt.Ray(torch.tensor([0.2, 0.2, 1.0], device=device), torch.tensor([0.0, 0, -1], device=device))
    assert float(scene.intersect(ray).t) == pytest.approx(1.0)
    # Also before build(), on a scene without shapes (no device yet).
    rt.Scene().set_mesh_transform([], torch.zeros((0, 4, 4), dtype=dtype, device=device))


def test_empty_id_list_still_checks_the_matrix(device):
    scene = _scene(device)
    call = r"^rayd\.torch\.Scene\.set_mesh_transform\(\): "
    with pytest.raises(ValueError, match=call + r"'to_world' must have shape \(0, 4, 4\).*got \(1, 4, 4\)"):
        scene.set_mesh_transform([], torch.eye(4, device=device)[None])
    with pytest.raises(ValueError, match=call + r"'to_world' must have shape \(0, 4, 4\)"):
        scene.set_mesh_transform([], torch.zeros(0, device=device))
    with pytest.raises(TypeError, match=call + r"'to_world' must have dtype float32 or float64"):
        scene.set_mesh_transform([], torch.zeros((0, 4, 4), dtype=torch.int32, device=device))
    with pytest.raises(TypeError, match=call + r"'shape_id' must be an int"):
        scene.set_mesh_transform(torch.zeros(0, device=device), torch.zeros((0, 4, 4), device=device))


def test_parity_with_drjit():
    dr = pytest.importorskip("drjit")
    import rayd.drjit as rd  # noqa: PLC0415

    from drjit.llvm.ad import Array3f, Array3u, Matrix4f  # noqa: PLC0415

    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), Array3u([0], [1], [2])))
    scene.build()
    scene.set_mesh_transform([], dr.zeros(Matrix4f, 0))
    assert scene.is_ready() and not scene.has_pending_updates()
