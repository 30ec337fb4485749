"""rayd.engine.cpu_fields (the CPU closest-hit fields in C++, 16 rays at a time) against the Warp kernel
of rayd.engine.evaluate.closest_fields: the same bits in every field, for several shapes (a binary
search over the offsets), a degenerate face, rays in a face's plane, misses, per-ray and broadcast
tmin / tmax, a batch that is not a multiple of 16, with and without the geometric fields."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_fields, evaluate

FIELDS = ("t", "prim_id", "shape_id", "global_prim_id")
GEOMETRIC = ("p", "geo_n", "barycentric")


def _scene():
    g = torch.Generator().manual_seed(2)
    scene = rt.Scene()
    for k in range(3):  # three meshes of random triangles in the unit box, shifted apart
        v = torch.rand(60, 3, generator=g) + torch.tensor([1.5 * k, 0.0, 0.0])
        f = torch.randint(0, 60, (80, 3), generator=g, dtype=torch.int32)
        f[0] = torch.tensor([0, 0, 1], dtype=torch.int32)  # a degenerate face (a repeated corner)
        scene.add_mesh(rt.Mesh(v, f))
    # one flat square in z = 0.5 (rays along it lie in its plane)
    sq = torch.tensor([[0.0, 0.0, 0.5], [4.0, 0.0, 0.5], [4.0, 1.0, 0.5], [0.0, 1.0, 0.5]])
    scene.add_mesh(rt.Mesh(sq, torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)))
    scene.build()
    return scene


def _records(scene, ray, flags, mode):
    was, real = evaluate._CPU_FIELDS, cpu_fields.closest_fields
    calls = []
    evaluate._CPU_FIELDS = mode
    cpu_fields.closest_fields = lambda *a: calls.append(1) or real(*a)
    try:
        record = scene.intersect(ray, flags=flags)
    finally:
        evaluate._CPU_FIELDS, cpu_fields.closest_fields = was, real
    assert bool(calls) == mode  # the C++ fields ran exactly when asked for
    return record


@pytest.mark.parametrize("flags", [rt.RayFlags.All, rt.RayFlags.Minimal])
@pytest.mark.parametrize("bounds", ["rows", "scalars", "broadcast_origin"])
def test_cpp_fields_equal_warp_kernel(flags, bounds):
    scene = _scene()
    g = torch.Generator().manual_seed(7)
    n = 5003
    o = torch.rand(n, 3, generator=g) * torch.tensor([4.5, 1.0, 1.0]) + torch.tensor([0.0, 0.0, -1.5])
    d = torch.randn(n, 3, generator=g)
    d[:200, 2] = 0.0  # some rays parallel to the square
    o[:200, 2] = 0.5  # ... and in its plane
    tmin, tmax = 0.0, float("inf")
    if bounds == "rows":
        tmin = torch.rand(n, generator=g) * 0.3
        tmax = 0.5 + 2.0 * torch.rand(n, generator=g)
    if bounds == "broadcast_origin":
        o = torch.tensor([2.0, 0.5, -1.0])
    ray = rt.Ray(o, d, tmax, tmin=tmin)
    scene.intersect(ray, flags=flags)  # the first query on a geometry is Warp's (WARM_QUERIES)
    warp, cpp = _records(scene, ray, flags, False), _records(scene, ray, flags, True)
    valid = warp.is_valid()
    assert 0.05 < float(valid.float().mean()) < 0.95
    assert len(set(warp.shape_id[valid].tolist())) >= 3  # several shapes hit
    for name in FIELDS + (GEOMETRIC if flags == rt.RayFlags.All else ()):
        a, b = getattr(warp, name), getattr(cpp, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
