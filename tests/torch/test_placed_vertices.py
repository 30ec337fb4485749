"""``rayd.torch.edges.placed_vertices`` (``LiveState.placed_vertices``) against a per-shape reference.

Meshes of mixed dtypes with and without matrices, instances, a batch of matrices given to
``set_mesh_transform``: the batched placement equals ``M_instance @ M_mesh @ [p, 1]`` per shape,
gradients (reverse and forward mode) reach every vertex and matrix tensor, and ``detach=True``
gives plain values.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD

import rayd.torch as rt
from rayd.torch.edges import placed_vertices

F64 = torch.float64
FACES = torch.tensor([[0, 1, 2], [0, 2, 3], [0, 3, 1], [1, 3, 2]], dtype=torch.int32)


def _matrix(gen, dtype):
    m = torch.eye(4, dtype=F64)
    m[:3, :3] += 0.3 * torch.randn(3, 3, generator=gen, dtype=F64)
    m[:3, 3] = torch.randn(3, generator=gen, dtype=F64)
    return m.to(dtype)


def _scene(device):
    gen = torch.Generator().manual_seed(5)
    scene, leaves, meshes = rt.Scene(), [], []
    for k, dtype in enumerate((torch.float32, F64, F64)):
        v = torch.randn(4, 3, generator=gen, dtype=dtype).to(device).requires_grad_()
        m = None if k == 1 else _matrix(gen, dtype).to(device).requires_grad_()
        leaves += [x for x in (v, m) if x is not None]
        meshes.append((v, m))
        scene.add_mesh(rt.Mesh(v, FACES.to(device), to_world=m), dynamic=True)
    single = _matrix(gen, F64).to(device).requires_grad_()
    ids = [scene.add_instance(1, single)] + [scene.add_instance(k % 3, torch.eye(4, device=device)) for k in range(3)]
    scene.build()
    batch = torch.stack([_matrix(gen, torch.float32) for _ in ids[1:]]).to(device).requires_grad_()
    scene.set_mesh_transform(ids[1:], batch)
    scene.sync()
    instances = [(1, single)] + [(k % 3, batch[k]) for k in range(3)]
    return scene, leaves + [single, batch], meshes, instances


def _reference(meshes, instances):
    def place(v, ms):
        v = v.to(F64)
        for m in ms:  # applied in order: M_mesh first
            if m is not None:
                v = v @ m[:3, :3].to(F64).T + m[:3, 3].to(F64)
        return v
    parts = [place(v, [m]) for v, m in meshes]
    parts += [place(meshes[b][0], [meshes[b][1], m]) for b, m in instances]
    return torch.cat(parts)


def test_placed_vertices_match_per_shape_placement_with_gradients(device):
    scene, leaves, meshes, instances = _scene(device)
    want = _reference(meshes, instances)
    got = placed_vertices(scene._state, F64)
    assert got.shape == (4 * 7, 3) and got.dtype == F64
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    w = torch.randn(got.shape, generator=torch.Generator().manual_seed(1), dtype=F64).to(device)
    g_got = torch.autograd.grad((got * w).sum(), leaves)
    g_want = torch.autograd.grad((want * w).sum(), leaves)
    for a, b in zip(g_got, g_want):
        tol = 1e-5 if a.dtype == torch.float32 else 1e-10
        assert a.dtype == b.dtype and torch.allclose(a, b, rtol=tol, atol=tol)
    f32 = placed_vertices(scene._state, torch.float32)
    assert f32.dtype == torch.float32 and torch.allclose(f32, want.float(), rtol=1e-5, atol=1e-5)
    plain = placed_vertices(scene._state, F64, detach=True)
    assert not plain.requires_grad and torch.allclose(plain, want.detach(), rtol=1e-12, atol=1e-12)


def test_placed_vertices_forward_mode(device):
    scene, leaves, meshes, instances = _scene(device)
    v0 = leaves[0]  # the float32 mesh's vertices (mesh 0, also instanced)
    tangent = torch.randn(v0.shape, generator=torch.Generator().manual_seed(2), dtype=v0.dtype).to(device)
    with fwAD.dual_level():
        dual = fwAD.make_dual(v0.detach(), tangent)
        scene.update_mesh_vertices(0, dual)
        scene.sync()
        got = fwAD.unpack_dual(placed_vertices(scene._state, F64)).tangent
        meshes = [(dual, meshes[0][1])] + meshes[1:]
        want = fwAD.unpack_dual(_reference(meshes, instances)).tangent
    assert got is not None and torch.allclose(got, want, rtol=1e-6, atol=1e-6)
