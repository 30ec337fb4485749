"""The one-kernel record of ``Scene.closest_point`` (float32, no gradient): same values as the op-by-op path.

``engine.closest_point_fields`` evaluates the op-by-op path's float64 formulas and rounds
once; these tests hold it to that path (forced by monkeypatching ``_closest_fused.usable``)
to one float32 ulp, to a float64 brute force, and count the torch passes a query makes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
trimesh = pytest.importorskip("trimesh")  # (the GPU machine has none unless staged)
from test_surface import brute_force
from torch.utils._python_dispatch import TorchDispatchMode

import rayd.torch as rt
from rayd.torch import _closest_fused

_FLOAT = ("distance", "p", "barycentric", "geo_n")
_IDS = ("prim_id", "shape_id", "global_prim_id")


def uv_sphere(subdivisions, device="cpu"):
    """An icosphere: no zero-area faces (a UV sphere's pole faces have an ill-conditioned ``geo_n``,
    whose float64 rounding, FMA contraction included, differs between any two implementations)."""
    mesh = trimesh.creation.icosphere(subdivisions=max(1, subdivisions // 4))
    return (torch.as_tensor(mesh.vertices, dtype=torch.float32, device=device),
            torch.as_tensor(mesh.faces, dtype=torch.int64, device=device))


def _reference(monkeypatch, query):
    with monkeypatch.context() as m:
        m.setattr(_closest_fused, "usable", lambda *args: False)
        return query()


def _ulps(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Float32 ulps between ``x`` and ``y`` (equal values, +-0 and equal infinities: 0)."""
    x, y = x.float().cpu(), y.float().cpu()
    key = lambda z: torch.where(z.view(torch.int32) < 0, -(z.view(torch.int32) & 0x7FFFFFFF), z.view(torch.int32))
    gap = (key(x).long() - key(y).long()).abs()
    return torch.where(x == y, torch.zeros_like(gap), gap)


def _assert_same(got, want):
    assert set(got._fields) == set(want._fields)
    for name in _IDS:
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    for name in _FLOAT:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape
        # one float32 ulp; or 1e-12 absolute for components that are float64 rounding noise
        # around 0 (corners placed by a matmul in torch, by the kernel's own sums: a normal's
        # exact-zero component comes out as 0 or as 2e-17)
        bad = (_ulps(a, b) > 1) & ((a - b).abs().cpu() > 1e-12)
        assert not bool(bad.any()), (name, a[bad.any(-1) if bad.dim() > 1 else bad][:4],
                                     b[bad.any(-1) if bad.dim() > 1 else bad][:4])


def _soup(seed=0, n=300):
    """Random triangles, plus a sliver, an exactly collinear and a point-like face."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-2, 2, (n, 1, 3))
    tri = centres + rng.normal(0, 0.3, (n, 3, 3))
    extra = np.array([[[0, 0, 3], [1, 0, 3], [2, 1e-4, 3]], [[0, 1, 3], [1, 1, 3], [2, 1, 3]],
                      [[3, 3, 3], [3, 3, 3], [3, 3, 3]]], dtype=np.float64)
    tri = np.concatenate([tri, extra]).astype(np.float32)
    return tri.reshape(-1, 3), np.arange(tri.shape[0] * 3).reshape(-1, 3)


def _points(device, n=4000, seed=1, spread=2.5):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(n, 3, generator=g) * 2 - 1) * spread + torch.tensor([0.0, 0.0, 0.5])).to(device)


def test_soup_matches_op_by_op_and_brute_force(device, monkeypatch):
    """Two meshes (a soup with slivers, a sphere), misses by max_distance, an active mask: same record."""
    v, f = _soup()
    sv, sf = uv_sphere(12)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(v, device=device), torch.as_tensor(f, device=device)))
    scene.add_mesh(rt.Mesh((0.5 * sv + torch.tensor([0.0, 0.0, 3.0])).to(device), sf.to(device)))
    scene.build()
    q = _points(device)
    q[:64] = torch.tensor([[1.0, 0.02, 3.0], [0.5, 1.3, 3.0], [3.0, 3.0, 3.2], [1.9, 0.0, 3.0]],
                          device=device).repeat(16, 1)  # next to the sliver, collinear and point-like faces
    active = torch.rand(q.shape[0], generator=torch.Generator().manual_seed(3)).to(device) > 0.1
    for kwargs in ({}, {"max_distance": 0.2}, {"active": active}):
        got = scene.closest_point(q, **kwargs)
        want = _reference(monkeypatch, lambda: scene.closest_point(q, **kwargs))
        _assert_same(got, want)
    hit = got.is_valid()
    assert 0 < int(hit.sum()) < q.shape[0]
    assert set(scene.closest_point(q).shape_id.tolist()) == {0, 1}
    assert {300, 301, 302} <= set(scene.closest_point(q[:4]).prim_id.tolist())  # the sliver, collinear, point faces
    # float64 brute force over both meshes' faces
    world = np.concatenate([v, (0.5 * sv + torch.tensor([0.0, 0.0, 3.0])).numpy()])
    faces = np.concatenate([f, sf.numpy() + len(v)])
    ref = brute_force(q.double().cpu().numpy(), world, faces).min(1)
    np.testing.assert_allclose(scene.closest_point(q).distance.double().cpu().numpy(), ref, rtol=1e-5, atol=1e-6)


def test_broadcast_batch_and_signed_distance(device, monkeypatch):
    """One point row broadcast by an active mask, a (2, N) batch, and signed_distance: as the op-by-op path."""
    v, f = uv_sphere(12)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.to(device), f.to(device)))
    scene.build()
    q = _points(device, n=2000, spread=1.5).reshape(2, 1000, 3)
    _assert_same(scene.closest_point(q), _reference(monkeypatch, lambda: scene.closest_point(q)))
    one = torch.tensor([0.3, 0.2, 2.0], device=device)
    mask = torch.tensor([True, False, True], device=device)
    _assert_same(scene.closest_point(one, active=mask),
                 _reference(monkeypatch, lambda: scene.closest_point(one, active=mask)))
    got = scene.signed_distance(q)
    want = _reference(monkeypatch, lambda: scene.signed_distance(q))
    assert int(_ulps(got, want).max()) <= 1
    assert (got < 0).any() and (got > 0).any()


def _placed_scene(device):
    """A transformed mesh (shape 0), two instances of it (1, 2) and an untransformed mesh (3)."""
    v, f = uv_sphere(8, device=device)
    rot = torch.tensor([[0.0, -0.8, 0.0, 0.3], [0.8, 0.0, 0.0, 0.0], [0.0, 0.0, 0.8, 0.1], [0.0, 0.0, 0.0, 1.0]],
                       device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.set_mesh_transform(0, rot)
    for shift in (2.5, -2.5):
        m = torch.eye(4, device=device)
        m[:3, :3] *= 0.6
        m[0, 3] = shift
        scene.add_instance(0, m)
    scene.add_mesh(rt.Mesh(0.4 * v + torch.tensor([0.0, 2.5, 0.0], device=device), f))
    scene.build()
    return scene


def test_instances_and_transforms_match_op_by_op_path(device, monkeypatch):
    scene = _placed_scene(device)
    q = _points(device, n=3000, spread=3.5)
    got = scene.closest_point(q)
    _assert_same(got, _reference(monkeypatch, lambda: scene.closest_point(q)))
    assert set(got.shape_id.tolist()) == {0, 1, 2, 3}


def test_gradients_keep_the_op_by_op_path(device):
    """Vertices or points that require grad: the differentiable path runs, with the fused path's values."""
    v, f = uv_sphere(10)
    leaf = v.to(device).requires_grad_(True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(leaf, f.to(device)))
    scene.build()
    q = _points(device, n=500, spread=1.5)
    mode = _FullPasses(500)
    with torch.no_grad(), mode:  # grad mode off: the kernel runs whatever requires grad
        plain = scene.closest_point(q)
    assert mode.ops == [] and not plain.distance.requires_grad
    cp = scene.closest_point(q)
    assert cp.distance.requires_grad
    _assert_same(cp.detach(), plain)
    cp.distance.sum().backward()
    assert leaf.grad is not None and leaf.grad.abs().sum() > 0
    qg = q.clone().requires_grad_(True)
    with torch.no_grad():
        leaf.requires_grad_(False)
    scene.closest_point(qg).distance.sum().backward()
    torch.testing.assert_close(qg.grad.norm(dim=-1)[plain.distance > 0],
                               torch.ones_like(plain.distance[plain.distance > 0]), rtol=1e-5, atol=1e-5)


class _FullPasses(TorchDispatchMode):
    """Counts torch ops (not views or allocations) that read or write a tensor of at least ``n`` elements."""

    _FREE = {"view", "_unsafe_view", "expand", "alias", "slice", "select", "unsqueeze", "squeeze", "t",
             "transpose", "permute", "as_strided", "detach", "_reshape_alias", "empty", "empty_strided"}

    def __init__(self, n):
        super().__init__()
        self.n, self.ops = n, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        leaves = torch.utils._pytree.tree_leaves((args, kwargs, out))
        name = func.overloadpacket.__name__
        if name not in self._FREE and any(isinstance(x, torch.Tensor) and x.numel() >= self.n for x in leaves):
            self.ops.append(name)
        return out


@pytest.mark.parametrize("placed", [False, True])
def test_closest_point_makes_no_torch_pass_over_the_points(device, placed):
    """The search and the fields kernel are the only passes (the op-by-op evaluation made 285 torch passes)."""
    if placed:
        scene = _placed_scene(device)
    else:
        v, f = uv_sphere(10)
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v.to(device), f.to(device)))
        scene.build()
    q = _points(device, n=4096)
    scene.closest_point(q)
    mode = _FullPasses(4096)
    with mode:
        cp = scene.closest_point(q)
    assert mode.ops == []
    assert cp.is_valid().all()
    mode = _FullPasses(4096)
    with mode:
        scene.signed_distance(q)
    assert len(mode.ops) <= 4, mode.ops  # winding cast, inside compare, negation, select (was 289)
