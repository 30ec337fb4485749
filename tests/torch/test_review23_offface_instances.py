"""review23: float64 queries of an instance whose mesh lies far from its local origin lose true hits.

An instance is searched in its mesh's local frame (``engine/instance_walk.py``: ``confirmed_face_t`` on
the float32 local corners, tolerance ``OFF_FACE * big`` with ``big`` in local coordinates). The float64
re-evaluation (``rayd.core.hits.off_face``, offface23) measures ``big`` in world coordinates relative
to the search centre. A mesh at local x ~ 1e4 placed by its instance at the origin is searched to
float32's 1e-3 there, but re-checked to 2^-20 * 1: a ray that truly hits one of two faces 1e-5 from
their shared edge is given the other one by the search, dropped as off its face, and the walk-on
finds no other crossing (the float32 search never saw the true face). Before 6600105: all hits.
"""

from __future__ import annotations

import pytest
import torch

import rayd.torch as rt

X = 1.0e4


def _grid(n=4):
    xs = torch.linspace(0, 1, n + 1, dtype=torch.float64)
    v = torch.stack([torch.stack([X + x, y, torch.zeros((), dtype=torch.float64)]) for y in xs for x in xs])
    f = []
    for j in range(n):
        for i in range(n):
            a = j * (n + 1) + i
            f += [[a, a + 1, a + n + 2], [a, a + n + 2, a + n + 1]]
    return v, torch.tensor(f)


def _scene(kind, device):
    v, f = _grid()
    v = v.to(device)
    f = f.to(device)
    m = torch.eye(4, dtype=torch.float64, device=device)
    m[0, 3] = -X
    scene = rt.Scene()
    if kind == "instance":
        mesh = scene.add_mesh(rt.Mesh(v, f))
        scene.add_instance(mesh, m)
        scene.set_shape_enabled(mesh, False)
    else:  # the same world geometry as one mesh: never lost
        scene.add_mesh(rt.Mesh(v, f, to_world=m))
    scene.build()
    return scene


def _rays(device):
    # straight down onto the diagonals x = y of the 4 x 4 cells, 1e-5 either side of them
    s = torch.linspace(0.02, 0.98, 97, dtype=torch.float64)
    off = torch.tensor([-1e-5, 1e-5], dtype=torch.float64)
    x = (s[:, None] + off).reshape(-1)
    y = s.repeat_interleave(2)
    o = torch.stack([x, y, torch.ones_like(x)], -1).to(device)
    d = torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64, device=device).expand_as(o)
    return rt.Ray(o, d)


@pytest.mark.parametrize("kind", ["to_world", "instance"])
def test_float64_rays_onto_an_instance_near_its_edges_all_hit(device, kind):
    scene, ray = _scene(kind, device), _rays(device)
    hit = scene.intersect(ray)
    assert int((~hit.is_valid()).sum()) == 0, f"{int((~hit.is_valid()).sum())} of {hit.t.numel()} rays lost"
    assert torch.allclose(hit.t, torch.ones_like(hit.t))
    assert bool(scene.shadow_test(ray).all())
    assert not bool(scene.visible(ray.o, ray.o + 2 * ray.d).any())
