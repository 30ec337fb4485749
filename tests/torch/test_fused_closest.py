"""The one-kernel forward of ``Scene.intersect`` (issue 18): same record as the op-by-op path, no torch passes.

``engine.closest_fields`` writes every requested field, the ids and the hit interval in
their final layout. These tests hold it to the reference computations it replaced
(``evaluate_fused`` + ``ids`` + ``_interval.enforce``, and the op-by-op evaluation under
``torch.use_deterministic_algorithms``), values and gradients, and count the torch ops a
query makes over its rays.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from sphere_mesh import uv_sphere
from torch.utils._python_dispatch import TorchDispatchMode

import rayd.torch as rt
from rayd.torch import _interval, _intersect_fused
from rayd.torch._geometry import ids

_FLOAT = ("t", "p", "geo_n", "n", "barycentric", "uv")
_IDS = ("prim_id", "shape_id", "global_prim_id")


@contextlib.contextmanager
def _op_by_op():
    """The reference path: deterministic algorithms switch the fused kernels off."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def _two_spheres(device, requires_grad=False):
    """Two meshes (ids 0, 1): a unit sphere and a smaller one shifted along x."""
    v, f = uv_sphere(10, device=device)
    meshes = [v.clone(), 0.5 * v + torch.tensor([2.5, 0.0, 0.0], device=device)]
    meshes = [m.requires_grad_(requires_grad) for m in meshes]
    scene = rt.Scene()
    for m in meshes:
        scene.add_mesh(rt.Mesh(m, f))
    scene.build()
    return scene, meshes


def _rays(device, n=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    o = torch.tensor([1.25, 0.0, 0.0]) + torch.randn(n, 3, generator=g) * torch.tensor([0.2, 3.0, 3.0])
    o[:, 2] = 4.0
    target = torch.rand(n, 3, generator=g) * torch.tensor([4.5, 2.4, 2.4]) - torch.tensor([1.0, 1.2, 1.2])
    return o.to(device), (target - o).to(device)


def _assert_same(got, want):
    assert set(got._fields) == set(want._fields)
    for name in _IDS:
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    for name in _FLOAT:
        if name in want._fields:
            torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("flags", [rt.RayFlags.All, rt.RayFlags.Minimal, rt.RayFlags.Geometric, rt.RayFlags.UV])
def test_fields_match_op_by_op_path(device, flags):
    """Two meshes (shape ids by offset), misses, per-ray float64 tmax cutting some hits: same record."""
    scene, _ = _two_spheres(device)
    o, d = _rays(device)
    tmax = torch.rand(o.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(device) + 0.5
    for ray in (rt.Ray(o, d), rt.Ray(o, d, tmax), rt.Ray(o, d, 0.9, tmin=0.6)):
        got = scene.intersect(ray, flags=flags)
        with _op_by_op():
            want = scene.intersect(ray, flags=flags)
        _assert_same(got, want)
        hit = want.is_valid()
        assert 0 < int(hit.sum()) < hit.numel()
        assert set(want.shape_id[hit].tolist()) == {0, 1} or ray.tmax is not math.inf


def _unit_triangle_scene(device):
    scene = rt.Scene()
    v = torch.tensor([[-1.0, -1.0, 0.0], [2.0, -1.0, 0.0], [-1.0, 2.0, 0.0]], device=device)
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)))
    scene.build()
    return scene, v


@pytest.mark.parametrize("bound", ["float", "float_above", "scalar_f64", "rows_f64", "rows_f32", "tmin_rows"])
def test_interval_in_kernel_compares_as_enforce_does(device, bound):
    """A winner at t = 1 exactly against bounds at and just beside 1, given as numbers, 0-d and per-ray tensors.

    ``_interval.enforce`` compares float32 ``t`` with a number or one-element tensor in float32
    and with per-ray tensors in the promoted dtype; the kernel must decide alike.
    """
    scene, v = _unit_triangle_scene(device)
    n = 4
    o = torch.tensor([[0.0, 0.0, 1.0]], device=device).expand(n, 3)
    d = torch.tensor([[0.0, 0.0, -1.0]], device=device).expand(n, 3)
    up = 1.0 + 1e-12  # rounds to 1.0 in float32
    tmin, tmax = 0.0, {
        "float": 1.0, "float_above": up, "scalar_f64": torch.tensor(up, dtype=torch.float64, device=device),
        "rows_f64": torch.tensor([up, 1.0, 2.0, up], dtype=torch.float64, device=device),
        "rows_f32": torch.tensor([1.0, 1.5, 2.0, 1.0], device=device),
        "tmin_rows": math.inf,
    }[bound]
    if bound == "tmin_rows":
        tmin = torch.tensor([1.0 - 1e-12, 1.0, 0.5, 1.0 - 1e-9], dtype=torch.float64, device=device)
    ray = rt.Ray(o, d, tmax, tmin=tmin)
    batch = torch.Size([n])
    state = scene._state
    # the reference: the evaluation of the old path, its ids, then the interval on the torch side
    winners = torch.zeros(n, dtype=torch.int32, device=device)
    want = _intersect_fused.evaluate_fused(o, d, batch, winners, v, state.indices)
    want["shape_id"], want["prim_id"] = ids(state.table, winners)
    want["global_prim_id"] = winners
    want = _interval.enforce(want, tmin, tmax, batch)
    got = _intersect_fused.intersect_fused(ray, batch, winners.clone(), v, state, rt.RayFlags.All)
    assert want["t"][0].item() in (1.0, math.inf)
    for name in _IDS:
        assert torch.equal(got[name], want[name]), (name, got[name], want[name])
    for name in _FLOAT:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)
    expected_hits = {"float": 0, "float_above": 0, "scalar_f64": 0, "rows_f64": 3, "rows_f32": 2, "tmin_rows": 3}
    assert int((got["global_prim_id"] >= 0).sum()) == expected_hits[bound]


@pytest.mark.parametrize("flags", [rt.RayFlags.Minimal, rt.RayFlags.All])
@pytest.mark.parametrize("use", ["t", "p", "all"])
def test_gradients_match_op_by_op_path(device, flags, use):
    """Vertex, origin and direction gradients: t alone (the adjoint of t) and with the other fields."""
    if flags == rt.RayFlags.Minimal and use != "t":
        pytest.skip("Minimal has t only")
    grads = []
    for reference in (False, True):
        scene, meshes = _two_spheres(device, requires_grad=True)
        o, d = _rays(device, n=800, seed=3)
        o.requires_grad_(True)
        d.requires_grad_(True)
        with _op_by_op() if reference else contextlib.nullcontext():
            hit = scene.intersect(rt.Ray(o, d), flags=flags)
            valid = hit.is_valid()
            loss = torch.where(valid, hit.t, 0.0).sum()
            if use == "p":
                loss = (hit.p * torch.tensor([0.3, -0.2, 0.7], device=device)).sum()
            elif use == "all":
                loss = loss + hit.p.sum() + (hit.geo_n * hit.p).sum() + (hit.barycentric ** 2).sum() + hit.uv.sum()
            loss.backward()
        grads.append([x.grad for x in (*meshes, o, d)])
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert grads[0][0].abs().sum() > 0 and grads[0][2].abs().sum() > 0


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


@pytest.mark.parametrize("flags", [rt.RayFlags.All, rt.RayFlags.Minimal])
def test_intersect_makes_no_torch_pass_over_the_rays(device, flags):
    """The search and the fields kernel are the only passes over the rays (the op-by-op
    masks, id mapping and interval checks made 12-17 torch passes before)."""
    scene, _ = _two_spheres(device)
    o, d = _rays(device, n=4096)
    ray = rt.Ray(o, d)
    scene.intersect(ray, flags=flags)
    mode = _FullPasses(4096)
    with mode:
        hit = scene.intersect(ray, flags=flags)
    assert mode.ops == []
    assert hit.is_valid().any()


def _placed_scene(device, requires_grad=False):
    """A transformed mesh (shape 0), two instances of it (1, 2) and an untransformed mesh (3)."""
    v, f = uv_sphere(8, device=device)
    rot = torch.tensor([[0.0, -0.8, 0.0, 0.3], [0.8, 0.0, 0.0, 0.0], [0.0, 0.0, 0.8, 0.1], [0.0, 0.0, 0.0, 1.0]],
                       device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.set_mesh_transform(0, rot.clone().requires_grad_(requires_grad))
    for shift in (2.5, -2.5):
        m = torch.eye(4, device=device)
        m[:3, :3] *= 0.6
        m[0, 3] = shift
        scene.add_instance(0, m)
    scene.add_mesh(rt.Mesh(0.4 * v + torch.tensor([0.0, 2.5, 0.0], device=device), f))
    scene.build()
    return scene


@pytest.mark.parametrize("flags", [rt.RayFlags.All, rt.RayFlags.Minimal])
def test_instances_and_transforms_match_op_by_op_path(device, flags):
    """Instances and a transformed mesh, nothing needing a gradient: the placed kernel's record is the reference's."""
    scene = _placed_scene(device)
    g = torch.Generator().manual_seed(5)
    n = 4000
    o = (torch.randn(n, 3, generator=g) * 0.5 + torch.tensor([0.0, 0.0, 6.0])).to(device)
    target = (torch.rand(n, 3, generator=g) * torch.tensor([7.0, 7.0, 1.0]) - torch.tensor([3.5, 3.5, 0.5]))
    d = target.to(device) - o
    tmax = (torch.rand(n, dtype=torch.float64, generator=g) * 0.3 + 0.75).to(device)
    for ray in (rt.Ray(o, d), rt.Ray(o, d, tmax)):
        got = scene.intersect(ray, flags=flags)
        with _op_by_op():
            want = scene.intersect(ray, flags=flags)
        _assert_same(got, want)
        hit = want.is_valid()
        assert 0 < int(hit.sum()) < n
    assert set(scene.intersect(rt.Ray(o, d)).shape_id.tolist()) == {-1, 0, 1, 2, 3}
    mode = _FullPasses(n)
    with mode:
        scene.intersect(rt.Ray(o, d), flags=flags)
    assert mode.ops == []  # the op-by-op evaluation made ~60-95 passes over the rays here


def test_instances_with_gradients_keep_the_op_by_op_path(device):
    """A transform that requires grad: the record still carries its gradient (the placed kernel has none)."""
    scene = _placed_scene(device, requires_grad=True)
    o = torch.tensor([[0.3, 0.0, 5.0], [2.5, 0.0, 5.0]], device=device)
    d = torch.tensor([[0.0, 0.0, -1.0]], device=device).expand(2, 3)
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.shape_id.tolist() == [0, 1]
    hit.t.sum().backward()
    m = scene._core.table.shapes[0].matrix
    assert m.grad is not None and m.grad.abs().sum() > 0
    with torch.no_grad():
        again = scene.intersect(rt.Ray(o, d))
    torch.testing.assert_close(again.t, hit.t.detach())


def test_default_query_launches_nothing_before_the_search(device):
    """No mask and the default interval: the search reads rows made at build() (no fill launch per query)."""
    scene, _ = _two_spheres(device)
    o, d = _rays(device, n=64)
    mode = _FullPasses(1)  # every op that touches any tensor
    with mode:
        scene.shadow_test(rt.Ray(o, d))
    # Only the blocker test after the search (ones/full/full before). On the CPU the test runs in
    # NumPy (no OpenMP spin), so the one op is wrapping its result (`torch.from_numpy`).
    assert mode.ops == (["lift_fresh"] if str(device).startswith("cpu") else ["ge"])
    hit = scene.intersect(rt.Ray(o, d, tmin=0.0))
    torch.testing.assert_close(hit.t, scene.intersect(rt.Ray(o, d, tmin=-0.0, tmax=float("inf"))).t)
    got = scene.intersect(rt.Ray(o, d, 2.5, tmin=0.5))  # other bounds: rows made per query, as before
    with _op_by_op():
        _assert_same(got, scene.intersect(rt.Ray(o, d, 2.5, tmin=0.5)))
