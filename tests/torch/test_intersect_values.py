"""Values of Scene.intersect: hand-derived hits, misses, batching, dtypes, flags, devices."""

from __future__ import annotations

import math

import numpy as np
import pytest
import reference
import torch

import rayd.torch as rt
from rayd.torch import RayFlags

F64 = torch.float64


def _t(values, device, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=device)


def _scene(device, *meshes, dtype=torch.float32):
    """A built scene of (vertices, faces[, kwargs]) tuples given as nested lists."""
    scene = rt.Scene()
    for m in meshes:
        kwargs = m[2] if len(m) > 2 else {}
        kwargs = {k: _t(v, device, dtype) for k, v in kwargs.items()}
        scene.add_mesh(rt.Mesh(_t(m[0], device, dtype), torch.tensor(m[1], device=device), **kwargs))
    scene.build()
    return scene


def _close(a, b, tol=1e-6):
    b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def _no_nan(hit):
    for name in ("t", "p", "n", "geo_n", "barycentric", "uv"):
        assert not torch.isnan(getattr(hit, name)).any(), name


# A unit quad at z = 1 split along its diagonal (0, 2): face 0 below the diagonal, face 1 above.
QUAD_V = [[0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]]
QUAD_F = [[0, 1, 2], [0, 2, 3]]


def test_single_triangle_hand_derived(device):
    scene = _scene(device, ([[0, 0, 0], [2, 0, 0], [0, 2, 0]], [[0, 1, 2]]))
    # |d| = 2, distance 3: t = 1.5 in multiples of |d|.
    hit = scene.intersect(rt.Ray(_t([0.5, 0.5, 3.0], device), _t([0.0, 0.0, -2.0], device)))
    _close(hit.t, 1.5)
    _close(hit.p, [0.5, 0.5, 0.0])
    _close(hit.barycentric, [0.5, 0.25, 0.25])  # p = 0.5 v0 + 0.25 v1 + 0.25 v2
    _close(hit.uv, [0.25, 0.25])  # (w1, w2) without texture coordinates
    _close(hit.geo_n, [0.0, 0.0, 1.0])
    _close(hit.n, [0.0, 0.0, 1.0])  # geometric when the mesh has no normals
    assert hit.prim_id.item() == 0 and hit.shape_id.item() == 0 and hit.global_prim_id.item() == 0
    assert hit.prim_id.dtype == hit.shape_id.dtype == hit.global_prim_id.dtype == torch.int32
    assert hit.is_valid().item() is True and hit.is_valid().dtype == torch.bool


def test_tilted_triangle_and_back_face(device):
    # Plane x + y + z = 1; winding (1,0,0) -> (0,1,0) -> (0,0,1) gives normal (1,1,1)/sqrt(3).
    verts = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    front = _scene(device, (verts, [[0, 1, 2]]))
    back = _scene(device, (verts, [[0, 2, 1]]))
    s = 1 / math.sqrt(3)
    o = _t([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], device)
    d = _t([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]], device)
    for scene, sign in ((front, 1.0), (back, -1.0)):
        hit = scene.intersect(rt.Ray(o, d))
        _close(hit.t, [1 / 3, 2 / 3])  # back faces count, from either side
        _close(hit.p, [[1 / 3] * 3] * 2)
        _close(hit.barycentric, [[1 / 3] * 3] * 2)
        _close(hit.geo_n, [[sign * s] * 3] * 2)  # never flipped towards the ray
        _close(hit.n, [[sign * s] * 3] * 2)


def test_quad_with_normals_and_uv(device):
    uv = [[0.0, 1.0], [2.0, 1.0], [2.0, 0.0], [0.0, 0.0]]  # uv = (2x, 1 - y), linear
    normals = [[0, 0, 1], [2, 0, 2], [0, 0, 3], [0, -1, 1]]  # any length; interpolated then normalised
    scene = _scene(device, (QUAD_V, QUAD_F, {"normals": normals, "uv": uv}))
    o = _t([[0.75, 0.25, 2.0], [0.25, 0.75, 0.0]], device)
    d = _t([[0.0, 0.0, -1.0], [0.0, 0.0, 0.5]], device)
    hit = scene.intersect(rt.Ray(o, d))
    _close(hit.t, [1.0, 2.0])
    _close(hit.p, [[0.75, 0.25, 1.0], [0.25, 0.75, 1.0]])
    assert hit.prim_id.tolist() == [0, 1]
    assert hit.global_prim_id.tolist() == [0, 1]
    # face 0 = (v0, v1, v2): x = w1 + w2, y = w2; face 1 = (v0, v2, v3): x = w1, y = w1 + w2.
    w = [[0.25, 0.5, 0.25], [0.25, 0.25, 0.5]]
    _close(hit.barycentric, w)
    _close(hit.uv, [[1.5, 0.75], [0.5, 0.25]])
    _close(hit.geo_n, [[0, 0, 1], [0, 0, 1]])
    n = np.array(normals, dtype=np.float64)
    raw0 = 0.25 * n[0] + 0.5 * n[1] + 0.25 * n[2]  # (1, 0, 2)
    raw1 = 0.25 * n[0] + 0.25 * n[2] + 0.5 * n[3]  # (0, -0.5, 1.5)
    expect = np.stack((raw0 / np.linalg.norm(raw0), raw1 / np.linalg.norm(raw1)))
    _close(hit.n, expect)
    _close(hit.n.norm(dim=-1), [1.0, 1.0])


def test_normals_are_not_flipped_and_fall_back_per_mesh(device):
    # Mesh 0 has vertex normals pointing down (against geo_n), mesh 1 has none.
    tri = [[0, 0, 0], [1, 0, 0], [0, 1, 0]]
    down = [[0, 0, -1]] * 3
    moved = [[5, 0, 0], [6, 0, 0], [5, 1, 0]]
    scene = _scene(device, (tri, [[0, 1, 2]], {"normals": down}), (moved, [[0, 1, 2]]))
    hit = scene.intersect(rt.Ray(_t([[0.2, 0.2, 1], [5.2, 0.2, 1]], device), _t([0.0, 0.0, -1.0], device)))
    _close(hit.n, [[0, 0, -1], [0, 0, 1]])
    _close(hit.geo_n, [[0, 0, 1], [0, 0, 1]])
    # Without uv on any mesh, uv = (w1, w2).
    _close(hit.uv, [[0.2, 0.2], [0.2, 0.2]])


def test_misses_encode_documented_values(device):
    scene = _scene(device, (QUAD_V, QUAD_F))
    o = _t([[2.0, 2.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 1.0]], device)
    d = _t([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], device)
    # beside; pointing away; parallel below; in the plane (grazing along the quad) is a miss
    hit = scene.intersect(rt.Ray(o, d))
    assert torch.isinf(hit.t[:3]).all() and (hit.t[:3] > 0).all()
    assert hit.is_valid()[:3].tolist() == [False] * 3
    for name in ("prim_id", "shape_id", "global_prim_id"):
        assert getattr(hit, name)[:3].tolist() == [-1] * 3
    for name in ("p", "n", "geo_n", "barycentric", "uv"):
        assert (getattr(hit, name)[:3] == 0).all(), name
    _no_nan(hit)


def test_closest_of_several_meshes(device):
    far_tri = [[50, 50, 0], [51, 50, 0], [50, 51, 0]]
    m0 = ([[x, y, 2] for x, y, _ in QUAD_V], QUAD_F)  # z = 2, 2 faces
    m1 = ([[x, y, 1] for x, y, _ in QUAD_V] + far_tri, QUAD_F + [[4, 5, 6]])  # z = 1, 3 faces
    m2 = ([[x, y, 3] for x, y, _ in QUAD_V], QUAD_F)  # z = 3, 2 faces
    scene = _scene(device, m0, m1, m2)
    assert scene.num_meshes == 3
    o = _t([[0.75, 0.25, 10], [0.25, 0.75, -10], [0.25, 0.75, 1.5], [0.75, 0.25, 2.5], [50.2, 50.2, 9]], device)
    d = _t([[0, 0, -1], [0, 0, 1], [0, 0, 1], [0, 0, -1], [0, 0, -1]], device)
    hit = scene.intersect(rt.Ray(o, d))
    _close(hit.t, [7, 11, 0.5, 0.5, 9])
    assert hit.shape_id.tolist() == [2, 1, 0, 0, 1]
    assert hit.prim_id.tolist() == [0, 1, 1, 0, 2]
    assert hit.global_prim_id.tolist() == [2 + 3 + 0, 2 + 1, 1, 0, 2 + 2]


def test_leading_batch_dims(device):
    scene = _scene(device, (QUAD_V, QUAD_F))
    # No batch dims: fields are scalars / (3,).
    hit = scene.intersect(rt.Ray(_t([0.5, 0.25, 0.0], device), _t([0.0, 0.0, 1.0], device)))
    assert hit.t.shape == () and hit.p.shape == (3,) and hit.uv.shape == (2,) and hit.prim_id.shape == ()
    _close(hit.t, 1.0)
    # (2, 3, 4) rays; ray (i, j, k) starts at a distinct height so t encodes the index.
    z = torch.arange(24, dtype=torch.float32, device=device).reshape(2, 3, 4) + 2.0
    xy = _t([0.3, 0.6], device).expand(2, 3, 4, 2)
    o = torch.cat((xy, z.unsqueeze(-1)), -1)
    hit = scene.intersect(rt.Ray(o, _t([0.0, 0.0, -1.0], device)))
    assert hit.shape == (2, 3, 4) and hit.p.shape == (2, 3, 4, 3) and hit.barycentric.shape == (2, 3, 4, 3)
    assert hit.uv.shape == (2, 3, 4, 2) and hit.global_prim_id.shape == (2, 3, 4)
    _close(hit.t, z - 1.0)
    assert (hit.prim_id == 1).all()
    # Zero-sized batches.
    for lead in ((0,), (2, 0), (0, 5)):
        hit = scene.intersect(rt.Ray(torch.zeros(lead + (3,), device=device), torch.ones(lead + (3,), device=device)))
        assert hit.t.shape == lead and hit.p.shape == lead + (3,) and hit.n.shape == lead + (3,)
        assert hit.uv.shape == lead + (2,) and hit.prim_id.shape == lead and hit.is_valid().shape == lead


def test_broadcasting_origin_against_directions(device):
    scene = _scene(device, (QUAD_V, QUAD_F))
    o = _t([0.5, 0.5, 0.0], device)
    d = _t([[0.0, 0.0, 1.0], [0.25, 0.0, 1.0], [0.0, 0.0, -1.0], [0.0, 0.0, 4.0]], device)
    hit = scene.intersect(rt.Ray(o, d))
    _close(hit.t, [1.0, 1.0, math.inf, 0.25])
    _close(hit.p, [[0.5, 0.5, 1.0], [0.75, 0.5, 1.0], [0, 0, 0], [0.5, 0.5, 1.0]])
    # (3, 1, 3) origins x (4, 3) directions -> (3, 4)
    o = _t([[[0.5, 0.5, 0.0]], [[0.5, 0.5, -1.0]], [[0.5, 0.5, 2.0]]], device)
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.shape == (3, 4)
    _close(hit.t, [[1, 1, math.inf, 0.25], [2, 2, math.inf, 0.5], [math.inf, math.inf, 1, math.inf]])
    # tmax broadcasts too: one per direction.
    hit = scene.intersect(rt.Ray(o, d, _t([1.5, 1.5, 1.5, 0.3], device)))
    _close(hit.t, [[1, 1, math.inf, 0.25], [math.inf] * 4, [math.inf, math.inf, 1, math.inf]])


@pytest.mark.parametrize("ray_dtype", [torch.float32, F64])
@pytest.mark.parametrize("mesh_dtype", [torch.float32, F64])
def test_dtypes_promote(device, ray_dtype, mesh_dtype):
    # 1/3 is not a float32 number: in float64 the answer is exact to float64 precision.
    third = 1.0 / 3.0
    scene = _scene(device, ([[0, 0, 0], [3, 0, 0], [0, 3, 0]], [[0, 1, 2]]), dtype=mesh_dtype)
    o = torch.tensor([third, third, 1.0], dtype=ray_dtype, device=device)
    d = torch.tensor([0.0, 0.0, -3.0], dtype=ray_dtype, device=device)
    hit = scene.intersect(rt.Ray(o, d))
    want = torch.promote_types(ray_dtype, mesh_dtype)
    for name in ("t", "p", "n", "geo_n", "barycentric", "uv"):
        assert getattr(hit, name).dtype == want, name
    tol = 1e-14 if want == F64 else 1e-6
    o64 = o.double()
    _close(hit.t.double(), 1.0 / 3.0, tol)
    _close(hit.p.double(), [o64[0].item(), o64[1].item(), 0.0], tol)
    _close(hit.barycentric.double(), [1 - 2 * o64[0].item() / 3, o64[0].item() / 3, o64[1].item() / 3], tol)


def test_faces_int32_and_int64_agree(device):
    v = _t(QUAD_V, device)
    o = _t([[0.75, 0.25, 2.0], [0.25, 0.75, 2.0]], device)
    d = _t([0.0, 0.0, -1.0], device)
    results = []
    for dtype in (torch.int32, torch.int64):
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, torch.tensor(QUAD_F, dtype=dtype, device=device)))
        scene.build()
        results.append(scene.intersect(rt.Ray(o, d)))
    assert results[0].prim_id.tolist() == results[1].prim_id.tolist() == [0, 1]
    torch.testing.assert_close(results[0].barycentric, results[1].barycentric, rtol=0, atol=0)


def test_non_contiguous_and_expanded_inputs(device):
    vbig = torch.zeros(4, 6, device=device)
    vbig[:, ::2] = _t(QUAD_V, device)
    vertices = vbig[:, ::2]  # non-contiguous (V, 3)
    faces = torch.tensor(QUAD_F, device=device).t().contiguous().t()  # transposed storage
    assert not vertices.is_contiguous() and not faces.is_contiguous()
    normals = _t([[0.0, 0.0, 1.0]], device).expand(4, 3)  # expanded, stride 0
    uv = _t([[0.0, 0.0, 9.0], [1.0, 0.0, 9.0], [1.0, 1.0, 9.0], [0.0, 1.0, 9.0]], device)[:, :2]
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, faces, normals=normals, uv=uv))
    scene.build()
    o = _t([0.75, 0.25, 3.0], device).expand(5, 3)  # expanded origins
    dbig = torch.zeros(3, 10, device=device)
    dbig[2, ::2] = -1.0
    dbig[0, 0] = 0.1
    d = dbig.t()[::2]  # (5, 3), non-contiguous, strided
    assert not d.is_contiguous() and o.stride(0) == 0
    hit = scene.intersect(rt.Ray(o, d))
    want = reference.closest_hit(o.cpu().numpy(), d.cpu().numpy(), np.array(QUAD_V), np.array(QUAD_F))
    _close(hit.t, want["t"], 1e-6)
    assert hit.prim_id.tolist() == want["prim"].tolist()
    _close(hit.uv, want["p"][:, :2], 1e-6)  # uv = (x, y) at the hit
    _close(hit.n, [[0, 0, 1]] * 5)


def test_ray_flags_subsets(device):
    scene = _scene(device, (QUAD_V, QUAD_F))
    ray = rt.Ray(_t([0.75, 0.25, 2.0], device), _t([0.0, 0.0, -1.0], device))
    full = scene.intersect(ray)
    cases = {
        RayFlags.Minimal: set(),
        RayFlags.Geometric: {"p", "geo_n", "barycentric"},
        RayFlags.ShadingN: {"n"},
        RayFlags.UV: {"uv"},
        RayFlags.Geometric | RayFlags.UV: {"p", "geo_n", "barycentric", "uv"},
        RayFlags.All: {"p", "geo_n", "barycentric", "n", "uv"},
    }
    needs = {"p": "Geometric", "geo_n": "Geometric", "barycentric": "Geometric", "n": "ShadingN", "uv": "UV"}
    for flags, present in cases.items():
        hit = scene.intersect(ray, flags=flags)
        for name in ("t", "prim_id", "shape_id", "global_prim_id"):
            torch.testing.assert_close(getattr(hit, name), getattr(full, name), rtol=0, atol=0)
        for name, flag in needs.items():
            if name in present:
                torch.testing.assert_close(getattr(hit, name), getattr(full, name), rtol=0, atol=0)
            else:
                with pytest.raises(AttributeError, match=flag):
                    getattr(hit, name)
    assert int(RayFlags.All) == 7 and RayFlags.Geometric | RayFlags.ShadingN | RayFlags.UV == RayFlags.All


def test_hit_interval_is_open(device):
    # Triangles at z = 0 and z = 2; rays start at z = 1 going down: t = 1 (z = 0), t = -1 (z = 2).
    tri = [[-1, -1], [3, -1], [-1, 3]]
    scene = _scene(device, ([[x, y, 0] for x, y in tri] + [[x, y, 2] for x, y in tri], [[0, 1, 2], [3, 4, 5]]))
    o = _t([0.25, 0.25, 1.0], device)
    d = _t([0.0, 0.0, -1.0], device)
    cases = [  # (tmin, tmax, expected t)
        (0.0, 1.0, math.inf),  # t == tmax is excluded
        (0.0, 1.0001, 1.0),
        (1.0, math.inf, math.inf),  # t == tmin is excluded
        (0.999, math.inf, 1.0),
        (-2.0, math.inf, -1.0),  # negative tmin: the closest hit in the interval is behind o
        (-1.0, math.inf, 1.0),
        (-2.0, -1.0, math.inf),
        (0.5, 0.5, math.inf),  # empty interval
        (2.0, 1.0, math.inf),  # reversed interval
    ]
    for tmin, tmax, want in cases:
        hit = scene.intersect(rt.Ray(o, d, tmax, tmin=tmin))
        _close(hit.t, want)
        assert hit.is_valid().item() == math.isfinite(want), (tmin, tmax)
    tmins = _t([c[0] for c in cases], device)
    tmaxs = _t([c[1] for c in cases], device)
    hit = scene.intersect(rt.Ray(o, d, tmaxs, tmin=tmins))
    _close(hit.t, [c[2] for c in cases])
    _close(hit.p[4], [0.25, 0.25, 2.0])
    # A ray leaving a surface (origin exactly on the z = 0 triangle, tmin = 0) finds the next one.
    on = _t([[0.25, 0.25, 0.0], [0.25, 0.25, 2.0], [0.5, 0.5, 0.0]], device)
    hit = scene.intersect(rt.Ray(on, _t([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [0.0, 0.0, 0.5]], device)))
    _close(hit.t, [2.0, 2.0, 4.0])
    assert hit.prim_id.tolist() == [1, 0, 1]


def test_active_mask(device):
    scene = _scene(device, (QUAD_V, QUAD_F))
    o = _t([[0.75, 0.25, 2.0], [0.25, 0.75, 2.0], [0.5, 0.1, 2.0]], device)
    d = _t([0.0, 0.0, -1.0], device)
    ray = rt.Ray(o, d)
    hit = scene.intersect(ray, torch.tensor([True, False, True], device=device))
    _close(hit.t, [1.0, math.inf, 1.0])
    assert hit.prim_id.tolist() == [0, -1, 0]
    assert (hit.p[1] == 0).all() and (hit.barycentric[1] == 0).all()
    # A scalar mask broadcasts; an all-False mask gives all misses.
    assert scene.intersect(ray, torch.tensor(False, device=device)).prim_id.tolist() == [-1] * 3
    assert scene.intersect(ray, torch.tensor(True, device=device)).prim_id.tolist() == [0, 1, 0]
    # A mask with more dims broadcasts the rays: (2, 3).
    mask = torch.tensor([[True], [False]], device=device).expand(2, 3)
    hit = scene.intersect(ray, mask)
    assert hit.shape == (2, 3)
    assert hit.prim_id.tolist() == [[0, 1, 0], [-1, -1, -1]]


def test_malformed_rays_are_misses(device):
    scene = _scene(device, (QUAD_V, QUAD_F))
    nan, inf = math.nan, math.inf
    o = _t([[nan, 0.5, 2], [0.5, 0.5, 2], [0.5, 0.5, 2], [inf, 0.5, 2], [0.5, 0.5, 2], [0.5, 0.5, 2]], device)
    d = _t([[0, 0, -1], [0, 0, 0], [nan, 0, -1], [0, 0, -1], [0, 0, -inf], [0, 0, -1]], device)
    tmax = _t([inf, inf, inf, inf, inf, nan], device)
    hit = scene.intersect(rt.Ray(o, d, tmax))
    assert hit.prim_id.tolist() == [-1] * 6
    assert torch.isposinf(hit.t).all()
    _no_nan(hit)


def _quad_scene_on(device):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(QUAD_V, dtype=torch.float32, device=device),
                           torch.tensor(QUAD_F, device=device)))
    scene.build()
    return scene


def test_cuda_side_stream_and_warp_default_device(cuda_device):
    """Work runs on torch's current stream and the tensors' device, whatever Warp's default is."""
    import warp as wp

    previous = wp.get_device()
    wp.set_device("cpu")
    try:
        scene = _quad_scene_on(cuda_device)
        o = torch.tensor([[0.75, 0.25, 2.0]] * 1000, device=cuda_device)
        d = torch.tensor([0.0, 0.0, -1.0], device=cuda_device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            hit = scene.intersect(rt.Ray(o, d))
            t = hit.t * 1.0
        stream.synchronize()
        assert t.device.type == "cuda" and (t == 1.0).all()
        assert (hit.prim_id == 0).all()
    finally:
        wp.set_device(previous)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_cuda_device():
    """torch.cuda.set_device(k) with tensors on cuda:k (the seed's ranks), and cuda:1 while 0 is current."""
    previous = torch.cuda.current_device()
    try:
        for current in (1, 0):
            torch.cuda.set_device(current)
            scene = _quad_scene_on("cuda:1")
            assert scene.device == torch.device("cuda:1")
            ray = rt.Ray(torch.tensor([0.25, 0.75, 2.0], device="cuda:1"), torch.tensor([0.0, 0.0, -1.0],
                                                                                         device="cuda:1"))
            hit = scene.intersect(ray)
            assert hit.t.device == torch.device("cuda:1") and hit.t.item() == 1.0 and hit.prim_id.item() == 1
            v = torch.tensor(QUAD_V, dtype=torch.float32, device="cuda:1", requires_grad=True)
            grad_scene = rt.Scene()
            grad_scene.add_mesh(rt.Mesh(v, torch.tensor(QUAD_F, device="cuda:1")), dynamic=True)
            grad_scene.build()
            grad_scene.intersect(ray).t.backward()
            assert v.grad.device == torch.device("cuda:1") and v.grad[:, 2].sum().item() == pytest.approx(-1.0)
    finally:
        torch.cuda.set_device(previous)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_vanishing_interpolated_normal_falls_back_to_geo_n(device, dtype):
    # w = (0.25, 0.25, 0.5) and normals (0,0,1), (0,0,1), (0,0,-1): the weighted sum is exactly 0.
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=dtype, device=device)
    normals = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, -1.0]], dtype=dtype, device=device,
                           requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device), normals=normals))
    scene.build()
    hit = scene.intersect(rt.Ray(torch.tensor([0.25, 0.5, 1.0], dtype=dtype, device=device),
                                 torch.tensor([0.0, 0.0, -1.0], dtype=dtype, device=device)))
    _close(hit.barycentric, [0.25, 0.25, 0.5])
    _close(hit.n, [0.0, 0.0, 1.0])
    hit.n.sum().backward()
    assert torch.isfinite(normals.grad).all()


@pytest.mark.parametrize("length", [1e-30, 1e-34])
def test_tiny_directions_hit_like_unit_ones(device, length):
    # d = length * (0, 0, -1) is a valid direction (DESIGN: ``d`` need not be unit length): the hits
    # are those of (0, 0, -1) at t / length. The slab tests replaced d's zero components by a fixed
    # 1e-30, which tilted such a ray by 45 degrees or more: its boxes were missed (break-it 17).
    grid = reference.grid(4)
    scene = rt.Scene()
    mesh_id = scene.add_mesh(rt.Mesh(torch.tensor(grid[0], dtype=torch.float32, device=device),
                                     torch.tensor(grid[1], device=device)))
    lift = torch.eye(4, device=device)
    lift[2, 3] = 1.0
    scene.add_instance(mesh_id, lift)
    scene.build()
    o = _t([[x, y, 3.0] for x in (-0.6, 0.1, 0.7) for y in (-0.3, 0.45)], device)
    unit = rt.Ray(o, _t([0.0, 0.0, -1.0], device))
    tiny = rt.Ray(o, _t([0.0, 0.0, -length], device))
    ref = scene.intersect(unit)
    assert ref.is_valid().all()
    hit = scene.intersect(tiny)
    assert hit.global_prim_id.tolist() == ref.global_prim_id.tolist()
    _close(hit.t * length, ref.t)
    assert scene.shadow_test(tiny).all()
    assert scene.count_intersections(tiny).tolist() == scene.count_intersections(unit).tolist() == [2] * 6
    assert scene.intersect_all(tiny, 2).global_prim_id.tolist() == scene.intersect_all(unit, 2).global_prim_id.tolist()
    assert scene.trace_reflections(tiny, 1).global_prim_id.tolist() == ref.global_prim_id[:, None].tolist()
    assert not scene.shadow_test(rt.Ray(o, tiny.d, 1.0 / length * 0.5)).any()  # the interval still counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_batches_with_any_strides(device, dtype):
    """An empty batch whose tensors keep non-unit strides (torch calls any empty tensor
    contiguous: ``x[:, ::2]`` of a (0, 6) tensor, or the camera centre ``to_world[:3, 3]``
    expanded to (0, 3), as ``sample_edges`` gives it with nothing on screen) raised Warp's
    "source inner strides are not contiguous" in the float32 ``intersect`` and
    ``closest_point`` paths; every query now returns its empty record, and non-empty strided
    inputs give the values of contiguous ones."""
    scene = _scene(device, ([[-1, -1, 0], [1, -1, 0], [0, 1, 0]], [[0, 1, 2]]), dtype=dtype)
    for n in (0, 4):
        base = torch.randn(n, 6, dtype=dtype, generator=torch.Generator().manual_seed(n)).to(device)
        o, d = base[:, ::2] * 0.1 - torch.tensor([0, 0, 2.0], dtype=dtype, device=device), base[:, 1::2] * 0.02
        d = d + torch.tensor([0, 0, 1.0], dtype=dtype, device=device)
        centre = torch.eye(4, dtype=dtype, device=device)[:3, 3].expand(n, 3)
        for o_ in (o, centre):
            ray, dense = rt.Ray(o_, d), rt.Ray(o_.contiguous().clone(), d.contiguous().clone())
            for got, want in [(scene.intersect(ray).t, scene.intersect(dense).t),
                              (scene.intersect(ray, flags=RayFlags.Minimal).t, scene.intersect(dense, flags=RayFlags.Minimal).t),
                              (scene.closest_point(o_).distance, scene.closest_point(o_.clone()).distance),
                              (scene.shadow_test(ray), scene.shadow_test(dense)),
                              (scene.intersect_all(ray, 2).t, scene.intersect_all(dense, 2).t),
                              (scene.trace_reflections(ray, 2).t, scene.trace_reflections(dense, 2).t),
                              (scene.nearest_edge(ray).distance, scene.nearest_edge(dense).distance),
                              (scene.signed_distance(o_), scene.signed_distance(o_.clone()))]:
                assert got.shape[0] == n
                torch.testing.assert_close(got, want, rtol=0, atol=0)
        if n == 4:
            assert bool(scene.intersect(rt.Ray(o, d)).is_valid().all())
    cam = rt.Camera(8, 8, fov_y=40.0, to_world=torch.eye(4, dtype=dtype, device=device))
    behind = _scene(device, ([[-1, -1, -3], [1, -1, -3], [0, 1, -3]], [[0, 1, 2]]), dtype=dtype)
    samples = cam.sample_edges(behind, 10)
    assert len(samples) == 0
    assert behind.intersect(samples.ray_inside).t.shape == (0,)
    assert behind.closest_point(samples.ray_outside.o).distance.shape == (0,)
