"""float64 queries decide the open interval on the float64 t (break-it t48): a hit within float32
rounding of tmin/tmax is neither dropped by the float32 search nor kept outside (tmin, tmax)."""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

F64 = torch.float64


def _two_planes(dtype=F64):
    # Triangles z = 0.3 (face 0) and z = 0.1 (face 1); rays straight down from z = 1: t = 0.7 and 0.9
    # in float64 (not float32-exact: the float32 search sees t = 0.69999998...).
    v = torch.tensor([[0, 0, 0.3], [1, 0, 0.3], [0, 1, 0.3], [0, 0, 0.1], [1, 0, 0.1], [0, 1, 0.1]], dtype=dtype)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2], [3, 4, 5]])))
    scene.build()
    return scene


@pytest.mark.parametrize("rel", [1e-15, 1e-12, 1e-9, 1e-8])
def test_tmax_just_above_and_below_the_float64_hit(rel):
    scene = _two_planes()
    o = torch.tensor([0.2, 0.2, 1.0], dtype=F64).expand(2, 3)
    d = torch.tensor([0.0, 0.0, -1.0], dtype=F64).expand(2, 3)
    t = scene.intersect(rt.Ray(o[:1], d[:1])).t[0].item()
    assert t == 1.0 - 0.3
    ray = rt.Ray(o, d, torch.tensor([t * (1 + rel), t * (1 - rel)], dtype=F64))
    hit = scene.intersect(ray)
    assert hit.prim_id.tolist() == [0, -1]
    assert hit.t[0].item() == t
    assert scene.shadow_test(ray).tolist() == [True, False]


@pytest.mark.parametrize("rel", [1e-15, 1e-12, 1e-9, 1e-8])
def test_tmin_just_below_and_above_the_float64_hit(rel):
    scene = _two_planes()
    o = torch.tensor([0.2, 0.2, 1.0], dtype=F64).expand(2, 3)
    d = torch.tensor([0.0, 0.0, -1.0], dtype=F64).expand(2, 3)
    t = 1.0 - 0.3
    ray = rt.Ray(o, d, tmin=torch.tensor([t * (1 - rel), t * (1 + rel)], dtype=F64))
    hit = scene.intersect(ray)
    assert hit.prim_id.tolist() == [0, 1]  # above tmin: the face behind (t = 0.9)
    assert hit.t.tolist() == [t, 1.0 - 0.1]
    assert scene.shadow_test(rt.Ray(o, d, torch.tensor(0.8, dtype=F64), tmin=ray.tmin)).tolist() == [True, False]


def test_float32_queries_keep_the_float32_interval():
    scene = _two_planes(torch.float32)
    o, d = torch.tensor([[0.2, 0.2, 1.0]]), torch.tensor([[0.0, 0.0, -1.0]])
    t = scene.intersect(rt.Ray(o, d)).t
    up = torch.nextafter(t, torch.tensor(1.0))
    assert scene.intersect(rt.Ray(o, d, up)).prim_id.item() == 0
    assert scene.intersect(rt.Ray(o, d, t)).prim_id.item() == -1
    assert scene.intersect(rt.Ray(o, d, tmin=t)).prim_id.item() == 1
