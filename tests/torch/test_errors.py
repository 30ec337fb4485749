"""Every error of DESIGN.md's table: type, and a message that names the call and the argument."""

from __future__ import annotations

import math
import re

import pytest
import torch

import rayd.torch as rt
from rayd.torch import RayFlags

MESH = "rayd.torch.Mesh()"
RAY = "rayd.torch.Ray()"
ADD = "rayd.torch.Scene.add_mesh()"
BUILD = "rayd.torch.Scene.build()"
UPDATE = "rayd.torch.Scene.update_mesh_vertices()"
SYNC = "rayd.torch.Scene.sync()"
INTERSECT = "rayd.torch.Scene.intersect()"


def _raises(exc, call, argument, fn):
    """``fn()`` raises ``exc`` whose message starts with ``call`` and names ``argument``."""
    with pytest.raises(exc) as info:
        fn()
    message = str(info.value)
    assert message.startswith(call + ":"), message
    if argument is not None:
        assert re.search(argument, message), message
    return message


def _parts(device):
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], device=device)
    f = torch.tensor([[0, 1, 2]], device=device)
    return v, f


def _built(device, dynamic=True):
    v, f = _parts(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=dynamic)
    scene.build()
    return scene, v


def _ray(device, n=2):
    return rt.Ray(torch.full((n, 3), 0.25, device=device), torch.tensor([0.0, 0.0, -1.0], device=device))


def test_mesh_type_errors(device):
    v, f = _parts(device)
    cases = [
        (lambda: rt.Mesh(v.tolist(), f), "'vertices'"),
        (lambda: rt.Mesh(v.half(), f), "'vertices'.*float16"),
        (lambda: rt.Mesh(v.long(), f), "'vertices'.*int64"),
        (lambda: rt.Mesh(v, f.tolist()), "'faces'"),
        (lambda: rt.Mesh(v, f.float()), "'faces'.*float32"),
        (lambda: rt.Mesh(v, f.to(torch.int16)), "'faces'.*int16"),
        (lambda: rt.Mesh(v, f.to(torch.uint8)), "'faces'.*uint8"),
        (lambda: rt.Mesh(v, f, normals=v.long()), "'normals'"),
        (lambda: rt.Mesh(v, f, uv=v[:, :2].tolist()), "'uv'"),
        (lambda: rt.Mesh(v, f, to_world=torch.eye(4, dtype=torch.int32, device=device)), "'to_world'"),
    ]
    for fn, argument in cases:
        _raises(TypeError, MESH, argument, fn)


def test_mesh_value_errors(device):
    v, f = _parts(device)
    cases = [
        (lambda: rt.Mesh(v[:, :2], f), r"'vertices'.*\(3, 2\)"),
        (lambda: rt.Mesh(v.reshape(-1), f), "'vertices'"),
        (lambda: rt.Mesh(v[None], f), "'vertices'"),
        (lambda: rt.Mesh(v, f[:, :2]), "'faces'"),
        (lambda: rt.Mesh(v, f.reshape(-1)), "'faces'"),
        (lambda: rt.Mesh(v, f + 1), r"'faces'.*\[0, 3\)"),
        (lambda: rt.Mesh(v, f - 1), "'faces'"),
        (lambda: rt.Mesh(v, f, normals=v[:2]), "'normals'"),
        (lambda: rt.Mesh(v, f, uv=v), "'uv'"),
        (lambda: rt.Mesh(v, f, to_world=torch.eye(3, device=device)), "'to_world'"),
        (lambda: rt.Mesh(v.to("meta"), f.to("meta")), "'vertices'"),
    ]
    for fn, argument in cases:
        _raises(ValueError, MESH, argument, fn)


def test_mesh_device_mismatch(device):
    other = "cpu" if device == "cuda" else "meta"
    v, f = _parts(device)
    _raises(ValueError, MESH, "'faces'", lambda: rt.Mesh(v, f.to(other)))
    _raises(ValueError, MESH, "'normals'", lambda: rt.Mesh(v, f, normals=v.to(other)))
    _raises(ValueError, MESH, "'uv'", lambda: rt.Mesh(v, f, uv=v[:, :2].to(other)))
    _raises(ValueError, MESH, "'to_world'", lambda: rt.Mesh(v, f, to_world=torch.eye(4, device=other)))


def test_ray_errors(device):
    o = torch.zeros(4, 3, device=device)
    d = torch.ones(4, 3, device=device)
    _raises(TypeError, RAY, "'o'", lambda: rt.Ray(o.tolist(), d))
    _raises(TypeError, RAY, "'o'", lambda: rt.Ray(o.long(), d))
    _raises(TypeError, RAY, "'d'", lambda: rt.Ray(o, d.to(torch.int32)))
    _raises(TypeError, RAY, "'tmax'", lambda: rt.Ray(o, d, "inf"))
    _raises(TypeError, RAY, "'tmax'", lambda: rt.Ray(o, d, torch.ones(4, dtype=torch.int64, device=device)))
    _raises(TypeError, RAY, "'tmin'", lambda: rt.Ray(o, d, tmin=True))
    _raises(ValueError, RAY, "'o'", lambda: rt.Ray(o[:, :2], d))
    _raises(ValueError, RAY, "'d'", lambda: rt.Ray(o, torch.ones(4, 4, device=device)))
    _raises(ValueError, RAY, "'o'.*'d'", lambda: rt.Ray(o, torch.ones(3, 3, device=device)))
    _raises(ValueError, RAY, "'tmax'", lambda: rt.Ray(o, d, torch.ones(5, device=device)))
    _raises(ValueError, RAY, "'tmin'", lambda: rt.Ray(o, d, tmin=torch.ones(2, 2, device=device)))
    _raises(ValueError, RAY, "'d'", lambda: rt.Ray(o, d.to("meta")))


def test_scene_add_and_build_errors(device):
    v, f = _parts(device)
    scene = rt.Scene()
    _raises(TypeError, ADD, "'mesh'", lambda: scene.add_mesh((v, f)))
    _raises(TypeError, ADD, "'dynamic'", lambda: scene.add_mesh(rt.Mesh(v, f), dynamic="yes"))
    _raises(ValueError, BUILD, "empty", scene.build)
    scene.add_mesh(rt.Mesh(v, f[:0]))  # a mesh without faces: the scene is still empty
    _raises(ValueError, BUILD, "empty", scene.build)
    bad = v.clone()
    bad[1, 0] = math.nan
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.add_mesh(rt.Mesh(bad, f))
    _raises(ValueError, BUILD, "vertices.*mesh 1|mesh 1.*vertices", scene.build)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v * math.inf, f))
    _raises(ValueError, BUILD, "vertices", scene.build)
    if device == "cuda":
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, f))
        _raises(ValueError, ADD, "'mesh'", lambda: scene.add_mesh(rt.Mesh(v.cpu(), f.cpu())))


def test_update_errors(device):
    scene, v = _built(device)
    _raises(TypeError, UPDATE, "'mesh_id'", lambda: scene.update_mesh_vertices("0", v))
    _raises(TypeError, UPDATE, "'mesh_id'", lambda: scene.update_mesh_vertices(True, v))
    _raises(ValueError, UPDATE, "'mesh_id'", lambda: scene.update_mesh_vertices(1, v))
    _raises(ValueError, UPDATE, "'mesh_id'", lambda: scene.update_mesh_vertices(-1, v))
    _raises(TypeError, UPDATE, "'vertices'", lambda: scene.update_mesh_vertices(0, v.tolist()))
    _raises(TypeError, UPDATE, "'vertices'", lambda: scene.update_mesh_vertices(0, v.long()))
    _raises(ValueError, UPDATE, r"'vertices'.*\(3, 3\)", lambda: scene.update_mesh_vertices(0, v[:2]))
    _raises(ValueError, UPDATE, "'vertices'", lambda: scene.update_mesh_vertices(0, v[:, :2]))
    assert scene.is_ready()  # failed calls leave the scene as it was
    nan = v.clone()
    nan[0, 0] = math.nan
    scene.update_mesh_vertices(0, nan)
    _raises(ValueError, SYNC, "vertices", scene.sync)
    static, v2 = _built(device, dynamic=False)
    _raises(RuntimeError, UPDATE, "dynamic", lambda: static.update_mesh_vertices(0, v2))


def test_intersect_errors(device):
    scene, _ = _built(device)
    ray = _ray(device)
    _raises(TypeError, INTERSECT, "'ray'", lambda: scene.intersect((ray.o, ray.d)))
    _raises(TypeError, INTERSECT, "'active'", lambda: scene.intersect(ray, [True, False]))
    _raises(TypeError, INTERSECT, "'active'", lambda: scene.intersect(ray, torch.ones(2, device=device)))
    _raises(ValueError, INTERSECT, "'active'", lambda: scene.intersect(ray, torch.ones(3, dtype=torch.bool,
                                                                                         device=device)))
    _raises(TypeError, INTERSECT, "'flags'", lambda: scene.intersect(ray, flags="All"))
    _raises(TypeError, INTERSECT, "'flags'", lambda: scene.intersect(ray, flags=1.0))
    _raises(ValueError, INTERSECT, "'flags'", lambda: scene.intersect(ray, flags=8))
    other = "cpu" if device == "cuda" else "meta"
    far = rt.Ray(ray.o.to(other), ray.d.to(other))
    _raises(ValueError, INTERSECT, "'ray", lambda: scene.intersect(far))
    mixed = rt.Ray(ray.o, ray.d, torch.ones(2, device=device))
    assert scene.intersect(mixed).is_valid().all()
    if device == "cuda":
        _raises(ValueError, INTERSECT, "'active'",
                lambda: scene.intersect(ray, torch.ones(2, dtype=torch.bool, device="cpu")))


def test_lifecycle_errors_are_runtime_errors(device):
    v, f = _parts(device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    _raises(RuntimeError, INTERSECT, r"build\(\)", lambda: scene.intersect(_ray(device)))
    _raises(RuntimeError, SYNC, r"build\(\)", scene.sync)
    scene.build()
    v.add_(1.0)
    _raises(RuntimeError, INTERSECT, r"mesh 0.*sync\(\)|sync\(\).*mesh 0", lambda: scene.intersect(_ray(device)))
    scene.sync()
    scene.update_mesh_vertices(0, v)
    _raises(RuntimeError, INTERSECT, r"sync\(\)", lambda: scene.intersect(_ray(device)))


def test_attribute_error_names_the_flag(device):
    scene, _ = _built(device)
    hit = scene.intersect(_ray(device), flags=RayFlags.Minimal)
    for name, flag in (("p", "Geometric"), ("geo_n", "Geometric"), ("barycentric", "Geometric"),
                       ("n", "ShadingN"), ("uv", "UV")):
        with pytest.raises(AttributeError, match=rf"RayFlags\.{flag}"):
            getattr(hit, name)
    with pytest.raises(AttributeError):
        hit.no_such_field  # noqa: B018
    assert not hasattr(hit, "uv") and hasattr(hit, "t")


def test_malformed_rays_are_misses_not_errors(device):
    scene, _ = _built(device)
    nan, inf = math.nan, math.inf
    o = torch.tensor([[0.25, 0.25, 1.0]] * 6, device=device)
    o[0, 0] = nan
    o[1, 2] = inf
    d = torch.tensor([[0.0, 0.0, -1.0]] * 6, device=device)
    d[2] = 0.0
    d[3, 1] = nan
    d[4, 2] = -inf
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.prim_id.tolist() == [-1, -1, -1, -1, -1, 0]
    assert torch.isposinf(hit.t[:5]).all() and hit.t[5].item() == 1.0
    for name in ("t", "p", "n", "geo_n", "uv", "barycentric"):
        assert not torch.isnan(getattr(hit, name)).any(), name


def test_visible_names_its_segments_not_a_ray():
    """``visible(start, end, active, ignore=...)`` has no ``ray`` argument: a batch mismatch of
    ``active`` or ``ignore`` named ``'ray' (2,)``; it names ``'start/end'`` now, and the ray
    queries keep ``'ray'``."""
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])))
    scene.build()
    start = torch.tensor([[0.2, 0.2, 1.0], [0.3, 0.2, 1.0]])
    end = start * torch.tensor([1.0, 1.0, -1.0])
    for kw, name in ((dict(active=torch.tensor([True, False, True])), "active"),
                     (dict(ignore=torch.tensor([0, 1, 1])), "ignore")):
        with pytest.raises(ValueError, match=r"^rayd\.torch\.Scene\.visible\(\): batch shapes do not broadcast: "
                                             rf"'start/end' \(2,\), '{name}' \(3,\)$"):
            scene.visible(start, end, **kw)
        with pytest.raises(ValueError, match=rf"^rayd\.torch\.Scene\.shadow_test\(\): .*'ray' \(2,\), '{name}' \(3,\)$"):
            scene.shadow_test(rt.Ray(start, end - start), **kw)
    assert scene.visible(start, end, torch.tensor([True, True])).tolist() == [False, False]
