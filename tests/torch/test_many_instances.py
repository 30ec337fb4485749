"""Per-query cost with many instances (issue 19, item 10), and gradients into transforms.

The world transforms are composed at ``build()`` / ``sync()``; a query does a fixed
number of torch ops however many shapes the scene has (per-shape Python work was
0.6-0.9 s for one ray among 10,000 instances). Gradients into instance (and mesh)
matrices must stay right: the composed table holds no autograd graph, and matrices that
require gradients are re-placed in each query.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch.overrides import TorchFunctionMode

import rayd.torch as rt

TRI = [[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]


class _CountOps(TorchFunctionMode):
    """Counts torch calls, attribute reads (``__get__``: version counters, flags) apart."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "__get__":
            self.reads += 1
        else:
            self.ops += 1
        return func(*args, **(kwargs or {}))


def _scene(device, count, *, batched, grad=False, dtype=torch.float32):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(TRI, dtype=dtype, device=device), torch.tensor([[0, 1, 2]], device=device)))
    mats = torch.eye(4, dtype=dtype, device=device).repeat(count, 1, 1)
    mats[:, 0, 3] = torch.arange(count, dtype=dtype, device=device) * 2.0 + 2.0
    if batched:
        ids = [scene.add_instance(0, torch.eye(4, dtype=dtype, device=device)) for _ in range(count)]
        scene.build()
        scene.set_mesh_transform(ids, mats.requires_grad_(grad))
        scene.sync()
        return scene, mats
    singles = [mats[k].clone().requires_grad_(grad) for k in range(count)]
    for m in singles:
        scene.add_instance(0, m)
    scene.build()
    return scene, singles


def _ray(device, dtype=torch.float32):
    return rt.Ray(torch.tensor([2.2, 0.2, 1.0], dtype=dtype, device=device),
                  torch.tensor([0.0, 0, -1], dtype=dtype, device=device))


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_ops_per_query_do_not_grow_with_shapes(device, batched, grad):
    counts = {}
    for n in (10, 2000):
        scene, _ = _scene(device, n, batched=batched, grad=grad)
        ray = _ray(device)
        hit = scene.intersect(ray)
        assert int(hit.shape_id) == 1 and float(hit.t.detach()) == pytest.approx(1.0)
        with _CountOps() as intersect:
            scene.intersect(ray)
        with _CountOps() as shadow:
            scene.shadow_test(ray)
        counts[n] = (intersect.ops, shadow.ops, intersect.reads, shadow.reads)
    assert counts[10][:2] == counts[2000][:2]  # torch ops: none per shape
    if batched:  # one registered tensor: not even a version read per shape
        assert counts[10] == counts[2000]


def test_query_time_does_not_grow_with_shapes(device):
    def best(scene, call, repeat=7):
        ray = _ray(device)
        call(scene, ray)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            call(scene, ray)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return min(times)

    small, _ = _scene(device, 10, batched=True)
    large, _ = _scene(device, 10_000, batched=True)
    for call in (lambda s, r: s.intersect(r), lambda s, r: s.shadow_test(r)):
        # Generous (the old code took ~150x longer at 10,000 instances), as the host is shared.
        assert best(large, call) < 5 * best(small, call) + 2e-3


def _loss(scene, device, dtype):
    o = torch.tensor([[2.2, 0.2, 1.0], [4.3, 0.3, 1.5], [0.2, 0.3, 2.0], [6.25, 0.25, 1.5]], dtype=dtype,
                     device=device)
    d = torch.tensor([[0.05, 0.02, -1.0], [0.0, 0.1, -1.2], [0.1, 0.0, -1.0], [0.0, 0.0, -1.0]], dtype=dtype,
                     device=device)
    hit = scene.intersect(rt.Ray(o, d))
    assert bool(hit.is_valid().all())
    return (hit.t ** 2).sum() + (hit.p ** 2).sum() + hit.geo_n[:, 0].sum()


@pytest.mark.parametrize("batched", [False, True])
def test_gradients_into_instance_and_mesh_transforms(device, batched):
    dtype = torch.float64
    scene, mats = _scene(device, 3, batched=batched, dtype=dtype)
    # Tilt the instances and the mesh itself, so that every entry matters.
    tilt = torch.tensor([[1.0, 0.1, 0.0, 0.0], [-0.05, 1.0, 0.2, 0.1], [0.1, -0.2, 1.0, -0.3], [0, 0, 0, 1]],
                        dtype=dtype, device=device)
    mesh_m = tilt.clone().requires_grad_(True)
    scene.set_mesh_transform(0, mesh_m)
    if batched:
        mats = (mats.detach() @ tilt).requires_grad_(True)
        scene.set_mesh_transform([1, 2, 3], mats)
        leaves = [mats, mesh_m]
    else:
        mats = [(m.detach() @ tilt).requires_grad_(True) for m in mats]
        scene.set_mesh_transform([1, 2, 3], torch.stack([m.detach() for m in mats]))  # plain first ...
        for k, m in enumerate(mats):
            scene.set_mesh_transform(1 + k, m)  # ... then the differentiable ones, one by one
        leaves = [*mats, mesh_m]
    scene.sync()
    for _ in range(2):  # twice: nothing from the first backward may be reused stale
        for leaf in leaves:
            leaf.grad = None
        _loss(scene, device, dtype).backward()
        grads = [leaf.grad.clone() for leaf in leaves]
    for leaf, grad in zip(leaves, grads):
        fd = torch.zeros_like(grad)
        for idx in [(i, j) for i in range(3) for j in range(4)]:
            for rows in ([()] if leaf.dim() == 2 else [(k,) for k in range(leaf.shape[0])]):
                at = rows + idx
                with torch.no_grad():
                    keep = leaf[at].item()
                    leaf[at] = keep + 1e-6
                scene.sync()
                up = _loss(scene, device, dtype).item()
                with torch.no_grad():
                    leaf[at] = keep - 1e-6
                scene.sync()
                down = _loss(scene, device, dtype).item()
                with torch.no_grad():
                    leaf[at] = keep
                scene.sync()
                fd[at] = (up - down) / 2e-6
        torch.testing.assert_close(grad, fd, rtol=1e-5, atol=1e-6)
        assert (grad[..., :3, :].abs().amax((-1, -2)) > 0.01).all()  # every matrix is hit


def test_requires_grad_set_after_sync_still_gets_gradients(device):
    # Whether a matrix requires gradients is read per query, not frozen at sync().
    scene, singles = _scene(device, 3, batched=False, dtype=torch.float64)
    t_plain = _loss(scene, device, torch.float64)
    singles[0].requires_grad_(True)
    loss = _loss(scene, device, torch.float64)
    loss.backward()
    assert singles[0].grad is not None and singles[0].grad[:3].abs().max() > 0.01
    assert float(loss) == pytest.approx(float(t_plain))
