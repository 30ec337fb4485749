"""The per-face ids of the flat BVH (``flat_global``, ``flat_shape``) written at ``build()``: by a
kernel per mesh (scenes of a few meshes) or from host arrays (many meshes), the same values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.core.scene as core_scene
import rayd.torch as rt


def _expected(sizes, instance_after):
    """(flat_global, flat_shape) for meshes of ``sizes`` faces, an instance of mesh 0 after mesh ``instance_after``."""
    glob, shape, offset, shape_id = [], [], 0, 0
    for k, n in enumerate(sizes):
        glob.append(np.arange(n) + offset)
        shape.append(np.full(n, shape_id))
        offset += n
        shape_id += 1
        if k == instance_after:
            offset += sizes[0]  # the instance's faces are numbered globally, not in the flat BVH
            shape_id += 1
    return np.concatenate(glob), np.concatenate(shape)


@pytest.mark.parametrize("limit", [16, 0])
def test_flat_face_ids(device, limit, monkeypatch):
    monkeypatch.setattr(core_scene, "_DEVICE_IDS_MAX_MESHES", limit)
    rng = np.random.default_rng(0)
    sizes = [5, 1, 12]
    scene = rt.Scene()
    for k, n in enumerate(sizes):
        v = torch.tensor(rng.standard_normal((3 * n, 3)).astype(np.float32), device=device)
        f = torch.arange(3 * n, dtype=torch.int32, device=device).reshape(n, 3)
        scene.add_mesh(rt.Mesh(v, f))
        if k == 1:
            scene.add_instance(0, torch.eye(4, device=device))
    scene.build()
    core = scene._core
    glob, shape = _expected(sizes, 1)
    np.testing.assert_array_equal(core.flat_global.numpy(), glob)
    np.testing.assert_array_equal(core.flat_shape.numpy(), shape)
    hit = scene.intersect(rt.Ray(torch.tensor([[0.0, 0.0, 5.0]], device=device),
                                 torch.tensor([[0.0, 0.0, -1.0]], device=device)))
    assert hit.prim_id.shape == (1,)
