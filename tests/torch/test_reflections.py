"""Scene.trace_reflections and Scene.specular_paths (rayd.torch): analytic oracles, consistency
between the two, validity rules, float64 gradcheck, forward = reverse mode, errors, empty batches."""

from __future__ import annotations

import math

import pytest
import torch

import rayd.torch as rt

F64 = torch.float64


def _scene(vertices, faces, device, to_world=None):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vertices, torch.as_tensor(faces, device=device), to_world=to_world))
    scene.build()
    return scene


def _t(x, device, dtype=F64, grad=False):
    return torch.tensor(x, dtype=dtype, device=device, requires_grad=grad)


def _plane(z, half=100.0):
    return [[-half, -half, z], [half, -half, z], [half, half, z], [-half, half, z]]


# A 90-degree corner: wall A (x ~ 0) and wall B (y ~ 0), each one large triangle, slightly
# out of axis alignment (general position for the gradient checks).
CORNER_V = [[0.0, -1.0, -10.0], [0.01, 20.0, -10.0], [-0.01, -1.0, 20.0],
            [-1.0, 0.0, -10.0], [20.0, 0.01, -10.0], [-1.0, -0.01, 20.0]]
CORNER_F = [[0, 1, 2], [3, 4, 5]]
CORNER_O = [[3.0, 2.0, 0.2], [2.5, 3.0, -0.3]]
CORNER_D = [[-1.0, -0.4, 0.05], [-0.8, -0.5, 0.1]]


# ---------------------------------------------------------------- trace_reflections oracles
def test_one_mirror_plane(device):
    scene = _scene(_t(_plane(0.0)[:4], device), [[0, 1, 2], [0, 2, 3]], device)
    o = _t([[0.5, -1.0, 2.0], [1.0, 2.0, 3.0]], device)
    d = _t([[0.3, 0.2, -1.0], [-0.1, 0.4, -0.5]], device)
    chain = scene.trace_reflections(rt.Ray(o, d), 2)
    mirrored = o * torch.tensor([1.0, 1.0, -1.0], dtype=F64, device=device)
    assert chain.num_bounces.tolist() == [1, 1]
    assert chain.is_valid().tolist() == [[True, False], [True, False]]
    torch.testing.assert_close(chain.image_source[:, 0], mirrored, rtol=0, atol=1e-12)
    torch.testing.assert_close(chain.t[:, 0], -o[:, 2] / d[:, 2], rtol=1e-12, atol=0)
    torch.testing.assert_close(chain.d_out[:, 0], d * torch.tensor([1.0, 1.0, -1.0], dtype=F64, device=device))
    assert torch.isinf(chain.t[:, 1]).all() and (chain.global_prim_id[:, 1] == -1).all()
    assert (chain.p[:, 1] == 0).all() and (chain.d_out[:, 1] == 0).all() and (chain.image_source[:, 1] == 0).all()
    # A point further along the outgoing ray: path length to it = |target - image|.
    s = 1.7
    target = chain.p[:, 0] + s * chain.d_out[:, 0]
    total = chain.path_length + s * d.norm(dim=-1)
    torch.testing.assert_close(total, (target - mirrored).norm(dim=-1), rtol=1e-12, atol=0)
    torch.testing.assert_close(chain.path_length, (chain.p[:, 0] - mirrored).norm(dim=-1), rtol=1e-12, atol=0)


def test_corner_reflector_reverses_direction(device):
    scene = _scene(_t([[0.0, -1.0, -10.0], [0.0, 20.0, -10.0], [0.0, -1.0, 20.0],
                       [-1.0, 0.0, -10.0], [20.0, 0.0, -10.0], [-1.0, 0.0, 20.0]], device), CORNER_F, device)
    gen = torch.Generator().manual_seed(1)
    n = 64
    o = torch.cat([torch.rand(n, 2, generator=gen, dtype=F64) * 4 + 1, torch.zeros(n, 1, dtype=F64)], -1)
    angle = (torch.rand(n, generator=gen, dtype=F64) * 50 + 20) * math.pi / 180  # stays on the walls
    d = -torch.stack([torch.cos(angle), torch.sin(angle), torch.zeros(n, dtype=F64)], -1)
    chain = scene.trace_reflections(rt.Ray(o.to(device), d.to(device)), 3)
    assert (chain.num_bounces == 2).all()
    torch.testing.assert_close(chain.d_out[:, 1], -d.to(device), rtol=1e-12, atol=1e-12)
    assert set(chain.global_prim_id[:, :2].flatten().tolist()) == {0, 1}
    # Image after two bounces: the origin mirrored across both walls = -o (in x, y).
    torch.testing.assert_close(chain.image_source[:, 1], -o.to(device), rtol=0, atol=1e-12)


@pytest.mark.parametrize("bounces", [1, 5, 16])
def test_parallel_plates(device, bounces):
    h = 0.75
    z0 = 0.3
    v = _t(_plane(0.0, 1e3) + _plane(h, 1e3), device)
    scene = _scene(v, [[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]], device)
    d = torch.tensor([[0.2, 0.1, 1.0], [-0.3, 0.05, -1.0], [0.0, 0.4, 0.7]], dtype=F64)
    d = (d / d.norm(dim=-1, keepdim=True)).to(device)
    o = _t([[0.1, 0.2, z0]] * 3, device)
    chain = scene.trace_reflections(rt.Ray(o, d), bounces)
    assert (chain.num_bounces == bounces).all()
    dz = d[:, 2].abs()
    first = torch.where(d[:, 2] > 0, (h - z0) / dz, z0 / dz)
    torch.testing.assert_close(chain.t[:, 0], first, rtol=1e-10, atol=0)
    if bounces > 1:
        torch.testing.assert_close(chain.t[:, 1:], (h / dz).unsqueeze(-1).expand(-1, bounces - 1), rtol=1e-10, atol=0)
    # Images: mirroring z0 alternately across z = h and z = 0 (first across the plate hit first).
    for i in range(3):
        z, up = z0, bool(d[i, 2] > 0)
        for b in range(bounces):
            z = 2 * h - z if up else -z
            up = not up
            torch.testing.assert_close(chain.image_source[i, b, 2].item(), z, rtol=0, atol=1e-10)
            torch.testing.assert_close(chain.image_source[i, b, :2], o[i, :2], rtol=0, atol=1e-10)
    # |z - z0| = 2kh or 2kh - 2 z0 ... the images of an origin between the plates sit at +-2kh +- z0.
    total = chain.path_length
    torch.testing.assert_close(total, first + (bounces - 1) * h / dz, rtol=1e-10, atol=0)
    # path_length is the distance from the last image to the last hit.
    torch.testing.assert_close(total, (chain.p[:, -1] - chain.image_source[:, -1]).norm(dim=-1), rtol=1e-10, atol=0)


def _uv_sphere(radius=2.0, rings=24, segments=48):
    verts = [[0.0, 0.0, radius], [0.0, 0.0, -radius]]
    for i in range(1, rings):
        theta = math.pi * i / rings
        for j in range(segments):
            phi = 2 * math.pi * j / segments
            verts.append([radius * math.sin(theta) * math.cos(phi), radius * math.sin(theta) * math.sin(phi),
                          radius * math.cos(theta)])
    faces = []

    def ring(i, j):
        return 2 + (i - 1) * segments + j % segments

    for j in range(segments):
        faces.append([0, ring(1, j), ring(1, j + 1)])
        faces.append([1, ring(rings - 1, j + 1), ring(rings - 1, j)])
    for i in range(1, rings - 1):
        for j in range(segments):
            faces += [[ring(i, j), ring(i + 1, j), ring(i + 1, j + 1)], [ring(i, j), ring(i + 1, j + 1), ring(i, j + 1)]]
    return verts, faces


def test_sphere_interior(device):
    verts, faces = _uv_sphere()
    v = _t(verts, device)
    scene = _scene(v, faces, device)
    gen = torch.Generator().manual_seed(3)
    n = 200
    o = (torch.rand(n, 3, generator=gen, dtype=F64) - 0.5).to(device)
    d = torch.randn(n, 3, generator=gen, dtype=F64).to(device)
    chain = scene.trace_reflections(rt.Ray(o, d), 8)
    assert (chain.num_bounces == 8).all()
    r = chain.p.norm(dim=-1)
    cos_half = math.cos(math.pi / 24)  # a tessellated sphere: hits between the inscribed and the vertex radius
    assert (r <= 2.0 + 1e-9).all() and (r >= 2.0 * cos_half * cos_half - 1e-9).all()
    tri = torch.tensor(faces, device=device)[chain.prim_id.long()]  # (n, 8, 3)
    v0 = v.detach()[tri[..., 0]]
    assert ((chain.p - v0) * chain.geo_n).sum(-1).abs().max() < 1e-12  # on the hit face's plane
    d_in = torch.cat([d.unsqueeze(1), chain.d_out[:, :-1]], dim=1)
    g = chain.geo_n
    torch.testing.assert_close((d_in * g).sum(-1), -(chain.d_out * g).sum(-1), rtol=0, atol=1e-12)
    assert torch.linalg.cross(chain.d_out - d_in, g).norm(dim=-1).max() < 1e-12
    torch.testing.assert_close(chain.d_out.norm(dim=-1), d.norm(dim=-1, keepdim=True).expand(-1, 8))
    # Consecutive hits are joined by the outgoing directions.
    torch.testing.assert_close(chain.p[:, 1:], chain.p[:, :-1] + chain.t[:, 1:, None] * chain.d_out[:, :-1])


def test_input_interval_active_and_ignore(device):
    v = _t(_plane(0.0) + _plane(1.0), device)
    scene = _scene(v, [[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]], device)
    o = _t([[0.3, -0.2, 0.5]] * 4, device)
    d = _t([[0.1, 0.0, -1.0]] * 4, device)
    active = torch.tensor([True, True, True, False], device=device)
    ignore = torch.tensor([-1, 0, -1, -1], device=device)
    tmax = torch.tensor([10.0, 10.0, 0.2, 10.0], dtype=F64, device=device)
    chain = scene.trace_reflections(rt.Ray(o, d, tmax=tmax), 3, active, ignore=ignore)
    # Row 0 bounces 0 -> 2 -> 0; row 1 skips face 0 and leaves; row 2 stops at tmax; row 3 inactive.
    assert chain.num_bounces.tolist() == [3, 0, 0, 0]
    assert chain.global_prim_id[0].tolist() == [0, 2, 0]
    torch.testing.assert_close(chain.t[0], torch.tensor([0.5, 1.0, 1.0], dtype=F64, device=device))
    torch.testing.assert_close(chain.path_length[0], 2.5 * d[0].norm())
    assert (chain.path_length[1:] == 0).all() and (chain.global_prim_id[1:] == -1).all()


# ---------------------------------------------------------------- specular_paths
def test_specular_paths_match_chain_and_reciprocity(device):
    scene = _scene(_t(CORNER_V, device), CORNER_F, device)
    o, d = _t(CORNER_O, device), _t(CORNER_D, device)
    chain = scene.trace_reflections(rt.Ray(o, d), 3)
    assert chain.num_bounces.tolist() == [2, 2]
    target = chain.p[:, 1] + 1.3 * chain.d_out[:, 1]
    paths = scene.specular_paths(o, target, chain.global_prim_id[:, :2])
    assert paths.valid.all() and paths.num_bounces.tolist() == [2, 2]
    torch.testing.assert_close(paths.points, chain.p[:, :2], rtol=0, atol=1e-10)
    torch.testing.assert_close(paths.length, chain.path_length + 1.3 * d.norm(dim=-1), rtol=1e-12, atol=0)
    back = scene.specular_paths(target, o, chain.global_prim_id[:, :2].flip(-1))
    assert back.valid.all()
    torch.testing.assert_close(back.length, paths.length, rtol=1e-12, atol=0)
    torch.testing.assert_close(back.points, paths.points.flip(-2), rtol=0, atol=1e-10)
    # Padding and line of sight.
    padded = scene.specular_paths(o, target, torch.cat([chain.global_prim_id[:, :2],
                                                        torch.full((2, 2), -1, device=device)], -1))
    assert padded.valid.all() and padded.num_bounces.tolist() == [2, 2]
    torch.testing.assert_close(padded.length, paths.length)
    assert (padded.points[:, 2:] == 0).all()
    los = scene.specular_paths(o, target, torch.empty((2, 0), dtype=torch.long, device=device))
    assert los.valid.all() and los.points.shape == (2, 0, 3)
    torch.testing.assert_close(los.length, (target - o).norm(dim=-1))
    los2 = scene.specular_paths(o, target, torch.full((2, 3), -1, device=device))
    torch.testing.assert_close(los2.length, los.length)
    # Interior padding is not a sequence: invalid.
    bad = scene.specular_paths(o, target, torch.tensor([[0, -1, 1]], device=device))
    assert not bad.valid.any() and torch.isinf(bad.length).all()


def test_specular_paths_invalid_cases(device):
    # A small mirror triangle at z = 0 around the origin, a blocker above x = 3.
    v = _t([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 0.0],
            [2.5, -1.0, 0.5], [3.5, -1.0, 0.5], [3.0, 1.0, 0.5]], device)
    scene = _scene(v, [[0, 1, 2], [3, 4, 5]], device)
    src = _t([[-0.5, 0.0, 1.0], [-0.5, 0.0, 1.0], [2.0, 0.0, 1.0], [-0.5, 0.0, 1.0], [-0.5, 0.0, 1.0]], device)
    dst = _t([[0.5, 0.0, 1.0], [5.0, 0.0, 1.0], [4.0, 0.0, 0.25], [0.5, 0.0, -1.0], [0.5, 0.0, 1.0]], device)
    seq = torch.tensor([[0], [0], [1], [0], [1]], device=device)
    paths = scene.specular_paths(src, dst, seq)
    # 0: valid, reflection at the origin. 1: reflection point (2.25, 0, 0) outside the triangle.
    # 2: off face 1 (z = 0.5) from below... target under the blocker plane: opposite sides.
    # 3: target below the mirror: opposite sides. 4: face 1's point is outside it.
    assert paths.valid.tolist() == [True, False, False, False, False]
    torch.testing.assert_close(paths.points[0, 0], torch.zeros(3, dtype=F64, device=device), rtol=0, atol=1e-12)
    torch.testing.assert_close(paths.length[0], torch.tensor(2 * math.sqrt(1.25), dtype=F64, device=device))
    assert torch.isinf(paths.length[1:]).all() and (paths.points[1:] == 0).all()
    # Blocked segments: a mirror at z = 0 and a narrow blocker at z = 0.3 around x = 0.3.
    blocker_scene = _scene(_t([[-2.0, -2.0, 0.0], [2.0, -2.0, 0.0], [0.0, 2.0, 0.0],
                               [0.2, -1.0, 0.3], [0.4, -1.0, 0.3], [0.3, 1.0, 0.3]], device), [[0, 1, 2], [3, 4, 5]],
                           device)
    src = _t([[-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0]], device)
    dst = _t([[1.0, 0.0, 1.0], [1.0, 0.5, 1.0], [-0.5, 0.0, 1.0]], device)
    p = blocker_scene.specular_paths(src, dst, torch.tensor([[0], [0], [0]], device=device))
    # Rows 0, 1: the outgoing leg crosses z = 0.3 at x = 0.3, inside the blocker. Row 2 stays at x < 0.
    assert p.valid.tolist() == [False, False, True]
    torch.testing.assert_close(p.points[2, 0], _t([-0.75, 0.0, 0.0], device), rtol=0, atol=1e-12)
    los = blocker_scene.specular_paths(_t([[0.3, 0.0, 0.5], [0.3, 0.0, 0.5]], device),
                                       _t([[0.3, 0.0, 0.1], [0.3, 0.0, 0.35]], device),
                                       torch.empty((2, 0), dtype=torch.long, device=device))
    assert los.valid.tolist() == [False, True]
    torch.testing.assert_close(los.length[1], torch.tensor(0.15, dtype=F64, device=device))
    # Reciprocal of the blocked paths is blocked too (both ends' faces are skipped only for themselves).
    q = blocker_scene.specular_paths(dst, src, torch.tensor([[0], [0], [0]], device=device))
    assert q.valid.tolist() == [False, False, True]


def test_specular_paths_blocked_between_two_faces(device):
    # The corner's first path runs p0 ~ (0, 0.8, 0.35) -> p1 ~ (2, 0, 0.45); a small triangle at
    # x = 1 across that middle segment blocks it (both of whose ends are faces); the trace hits it.
    blocker = [[1.0, 0.2, 0.2], [1.0, 0.6, 0.2], [1.0, 0.4, 0.7]]
    scene = _scene(_t(CORNER_V + blocker, device), CORNER_F + [[6, 7, 8]], device)
    o, d = _t(CORNER_O, device), _t(CORNER_D, device)
    free = _scene(_t(CORNER_V, device), CORNER_F, device).trace_reflections(rt.Ray(o, d), 2)
    target = free.p[:, 1] + 1.3 * free.d_out[:, 1]
    paths = scene.specular_paths(o, target, free.global_prim_id)
    assert paths.valid.tolist() == [False, True]
    chain = scene.trace_reflections(rt.Ray(o, d), 2)
    assert chain.global_prim_id[0].tolist() == [0, 2] and chain.global_prim_id[1].tolist() == [0, 1]


def test_instances(device):
    # The corner placed twice: as the mesh itself and as a shifted instance; global ids 2, 3 are the instance's.
    v = _t(CORNER_V, device)
    scene = rt.Scene()
    mesh_id = scene.add_mesh(rt.Mesh(v, torch.tensor(CORNER_F, device=device)))
    shift = torch.eye(4, dtype=F64, device=device)
    shift[2, 3] = 100.0
    scene.add_instance(mesh_id, shift)
    scene.build()
    o, d = _t(CORNER_O, device), _t(CORNER_D, device)
    base = scene.trace_reflections(rt.Ray(o, d), 2)
    lifted = scene.trace_reflections(rt.Ray(o + torch.tensor([0.0, 0.0, 100.0], dtype=F64, device=device), d), 2)
    assert lifted.global_prim_id.tolist() == (base.global_prim_id + 2).tolist()
    assert (lifted.shape_id == 1).all() and lifted.prim_id.tolist() == base.prim_id.tolist()
    torch.testing.assert_close(lifted.p[..., 2] - 100.0, base.p[..., 2])
    torch.testing.assert_close(lifted.path_length, base.path_length)
    target = lifted.p[:, 1] + 0.5 * lifted.d_out[:, 1]
    paths = scene.specular_paths(o + torch.tensor([0.0, 0.0, 100.0], dtype=F64, device=device), target,
                                 lifted.global_prim_id)
    assert paths.valid.all()
    torch.testing.assert_close(paths.points, lifted.p)
    # Out-of-range ids are invalid, not errors.
    assert not scene.specular_paths(o, target, torch.tensor([[4, 1], [0, 99]], device=device)).valid.any()


# ---------------------------------------------------------------- gradients
def _chain_fields(v, o, d, m=None):
    device = v.device
    scene = _scene(v, CORNER_F, device, to_world=m)
    chain = scene.trace_reflections(rt.Ray(o, d), 3)
    return (chain.t[:, :2], chain.p[:, :2], chain.geo_n[:, :2], chain.d_out[:, :2], chain.image_source[:, :2],
            chain.path_length)


def test_chain_gradcheck(device):
    v, o, d = _t(CORNER_V, device, grad=True), _t(CORNER_O, device, grad=True), _t(CORNER_D, device, grad=True)
    assert torch.autograd.gradcheck(_chain_fields, (v, o, d), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_chain_gradcheck_transform(device):
    v, o, d = _t(CORNER_V, device, grad=True), _t(CORNER_O, device, grad=True), _t(CORNER_D, device, grad=True)
    m = torch.eye(4, dtype=F64, device=device)
    m[:3, 3] = torch.tensor([0.1, -0.05, 0.2], dtype=F64)
    m[0, 1], m[1, 0] = 0.02, -0.02
    m.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda m, o, d: _chain_fields(v.detach(), o, d, m), (m, o, d),
                                    eps=1e-6, atol=1e-6, rtol=1e-6)


def _path_fields(v, src, dst):
    scene = _scene(v, CORNER_F, v.device)
    paths = scene.specular_paths(src, dst, torch.tensor([[0, 1], [0, 1]], device=v.device))
    assert paths.valid.all()
    return paths.points, paths.length


def _targets(device):
    return _t([[3.1, 1.2, 0.5], [3.5, 1.0, 0.2]], device, grad=True)


def test_paths_gradcheck(device):
    v, src = _t(CORNER_V, device, grad=True), _t(CORNER_O, device, grad=True)
    assert torch.autograd.gradcheck(_path_fields, (v, src, _targets(device)), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_forward_equals_reverse(device):
    v, o, d = _t(CORNER_V, device, grad=True), _t(CORNER_O, device, grad=True), _t(CORNER_D, device, grad=True)
    dst = _targets(device)
    gen = torch.Generator().manual_seed(5)
    tangents = tuple(torch.randn(x.shape, generator=gen, dtype=F64).to(device) for x in (v, o, d, dst))
    weights = [torch.randn(x.shape, generator=gen, dtype=F64).to(device) for x in _chain_fields(v, o, d)]
    w_path = [torch.randn(x.shape, generator=gen, dtype=F64).to(device) for x in _path_fields(v, o, dst)]

    def scalar(v, o, d, dst):
        total = sum((w * f).sum() for w, f in zip(weights, _chain_fields(v, o, d)))
        return total + sum((w * f).sum() for w, f in zip(w_path, _path_fields(v, o, dst)))

    value = scalar(v, o, d, dst)
    grads = torch.autograd.grad(value, (v, o, d, dst))
    reverse = sum((g * t).sum() for g, t in zip(grads, tangents))
    primal, forward = torch.func.jvp(scalar, tuple(x.detach() for x in (v, o, d, dst)), tangents)
    torch.testing.assert_close(primal, value.detach())
    torch.testing.assert_close(forward, reverse, rtol=1e-10, atol=1e-12)


def test_misses_and_invalid_paths_have_zero_gradient(device):
    v, o = _t(CORNER_V, device, grad=True), _t([[3.0, 2.0, 0.2]], device, grad=True)
    d = _t([[1.0, 0.0, 0.0]], device, grad=True)  # leaves the corner: no hit
    scene = _scene(v, CORNER_F, device)
    chain = scene.trace_reflections(rt.Ray(o, d), 2)
    assert chain.num_bounces.item() == 0 and chain.path_length.item() == 0
    (chain.path_length.sum() + chain.p.sum() + chain.d_out.sum() + chain.image_source.sum()).backward()
    assert (v.grad == 0).all() and (o.grad == 0).all() and (d.grad == 0).all()
    src = _t([3.0, 2.0, 0.2], device, grad=True)
    paths = scene.specular_paths(src, _t([-3.0, 2.0, 0.2], device), torch.tensor([0], device=device))
    assert not paths.valid
    torch.where(paths.valid, paths.length, 0.0).backward()
    assert (src.grad == 0).all() and not torch.isnan(v.grad).any()


# ---------------------------------------------------------------- errors, dtypes, empty batches
def test_errors(device):
    scene = _scene(_t(CORNER_V, device), CORNER_F, device)
    ray = rt.Ray(_t(CORNER_O, device), _t(CORNER_D, device))
    prefix = r"rayd\.torch\.Scene\.trace_reflections\(\): 'max_bounces' must be"
    for bad in (0, 17, -1):
        with pytest.raises(ValueError, match=prefix):
            scene.trace_reflections(ray, bad)
    for bad in (2.0, True, None):
        with pytest.raises(TypeError, match=prefix):
            scene.trace_reflections(ray, bad)
    with pytest.raises(TypeError, match=r"trace_reflections\(\): 'ray'"):
        scene.trace_reflections(None, 2)
    call = r"rayd\.torch\.Scene\.specular_paths\(\): "
    s, t = _t([1.0, 1.0, 0.0], device), _t([2.0, 1.0, 0.0], device)
    with pytest.raises(ValueError, match=call + "'prim_sequence' must have at most 16"):
        scene.specular_paths(s, t, torch.zeros(17, dtype=torch.long, device=device))
    with pytest.raises(TypeError, match=call + "'prim_sequence'"):
        scene.specular_paths(s, t, torch.zeros(2, device=device))
    with pytest.raises(TypeError, match=call + "'source'"):
        scene.specular_paths(torch.zeros(3, dtype=torch.long), t, torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match=call):
        scene.specular_paths(_t([[1.0, 1, 0]] * 2, device), _t([[1.0, 1, 0]] * 3, device),
                             torch.zeros((1, 1), dtype=torch.long, device=device))
    with pytest.raises(TypeError, match=call + "'active'"):
        scene.specular_paths(s, t, torch.zeros(1, dtype=torch.long, device=device), active=torch.ones(()))
    unbuilt = rt.Scene()
    unbuilt.add_mesh(rt.Mesh(_t(CORNER_V, device), torch.tensor(CORNER_F, device=device)))
    with pytest.raises(RuntimeError, match=r"trace_reflections\(\)"):
        unbuilt.trace_reflections(ray, 1)
    with pytest.raises(RuntimeError, match=r"specular_paths\(\)"):
        unbuilt.specular_paths(s, t, torch.zeros(1, dtype=torch.long, device=device))


def test_empty_batches_and_float32(device):
    scene = _scene(_t(CORNER_V, device, dtype=torch.float32), CORNER_F, device)
    empty = torch.empty((0, 3), device=device)
    chain = scene.trace_reflections(rt.Ray(empty, empty), 4)
    assert chain.t.shape == (0, 4) and chain.p.shape == (0, 4, 3) and chain.num_bounces.shape == (0,)
    paths = scene.specular_paths(empty, empty, torch.zeros((0, 2), dtype=torch.long, device=device))
    assert paths.points.shape == (0, 2, 3) and paths.valid.shape == (0,)
    o, d = _t(CORNER_O, device, torch.float32), _t(CORNER_D, device, torch.float32)
    chain = scene.trace_reflections(rt.Ray(o, d), 3)
    assert chain.t.dtype == torch.float32 and chain.num_bounces.tolist() == [2, 2]
    assert chain.num_bounces.dtype == torch.int32 and chain.global_prim_id.dtype == torch.int32
    sub = chain[torch.tensor([False, True], device=device)]
    assert sub.p.shape == (1, 3, 3) and sub.detach().shape == (1,)


def test_chain_equals_repeated_intersect(device):
    # Random rays in the room of a sphere with a mirror plane through it: every slot is the
    # intersect() of the explicit next ray (from p_b along d_out, ignoring the face left).
    verts, faces = _uv_sphere(rings=12, segments=20)
    v = _t(verts + [[-3.0, -3.0, 0.3], [3.0, -3.0, 0.4], [0.0, 3.0, 0.2]], device, dtype=torch.float32)
    scene = _scene(v, faces + [[len(verts), len(verts) + 1, len(verts) + 2]], device)
    gen = torch.Generator().manual_seed(7)
    o = ((torch.rand(300, 3, generator=gen) - 0.5) * 2).to(device)
    d = torch.randn(300, 3, generator=gen).to(device)
    chain = scene.trace_reflections(rt.Ray(o, d), 5)
    origin, direction, ignore = o, d, -1
    for b in range(5):
        hit = scene.intersect(rt.Ray(origin, direction), ignore=ignore)
        assert hit.global_prim_id.tolist() == chain.global_prim_id[:, b].tolist()
        torch.testing.assert_close(hit.t, chain.t[:, b])
        torch.testing.assert_close(hit.p, chain.p[:, b])
        origin, direction, ignore = chain.p[:, b], chain.d_out[:, b], chain.global_prim_id[:, b]
    assert (chain.num_bounces == 5).all()


def test_float32_fused_path_gradients_match_float64(device):
    # float32, untransformed scenes take the fused chain kernel (rayd.engine.evaluate_chain).
    def grads(dtype):
        v, o, d = (_t(x, device, dtype, grad=True) for x in (CORNER_V, CORNER_O, CORNER_D))
        chain = _scene(v, CORNER_F, device).trace_reflections(rt.Ray(o, d), 3)
        assert chain.p.dtype == dtype and torch.isinf(chain.t[:, 2]).all() and (chain.p[:, 2] == 0).all()
        (chain.path_length.sum() + chain.image_source.sum() + chain.d_out.sum() + chain.p.sum()).backward()
        return chain, v.grad, o.grad, d.grad

    single, double = grads(torch.float32), grads(F64)
    torch.testing.assert_close(single[0].path_length.double(), double[0].path_length, rtol=1e-6, atol=0)
    for a, b in zip(single[1:], double[1:]):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("placement", ["mesh", "mirrored instance"])
def test_reflection_on_the_shared_edge_of_a_planar_quad_bounces_once(device, dtype, placement):
    # A tilted planar quad split along its diagonal, hit on that diagonal: the reflected ray
    # leaves the plane, so it can meet the other triangle only at t = 0 (not a hit). The
    # float32 rounding of the next segment's origin used to put it behind the plane for some
    # rays, which then reflected a second time off the neighbour at t ~ 1e-9 (and went
    # through the floor): 72 of 2,000 rays in float32, 80 in float64.
    gen = torch.Generator().manual_seed(3)
    rot = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=F64))[0]
    quad = torch.tensor([[-3.0, -3, 0], [3, -3, 0], [3, 3, 0], [-3, 3, 0]], dtype=F64) @ rot.T
    quad = quad + torch.tensor([0.3, 0.1, 0.2], dtype=F64)
    scene = rt.Scene()
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]], device=device)
    if placement == "mesh":
        scene.add_mesh(rt.Mesh(quad.to(dtype).to(device), faces))
        world = quad
    else:
        mirror = torch.diag(torch.tensor([-1.0, 1.0, 1.0, 1.0], dtype=F64))
        mirror[:3, 3] = torch.tensor([0.5, -0.2, 0.1], dtype=F64)
        base = scene.add_mesh(rt.Mesh(quad.to(dtype).to(device), faces))
        scene.set_shape_enabled(base, False)
        scene.add_instance(base, mirror.to(dtype).to(device))
        world = quad @ mirror[:3, :3].T + mirror[:3, 3]
    scene.build()
    n = 2000
    target = world[0] + torch.rand(n, 1, generator=gen, dtype=F64) * (world[2] - world[0])
    normal = torch.linalg.cross(world[1] - world[0], world[2] - world[0])
    o = target + 2.0 * normal / normal.norm() + 0.5 * torch.randn(n, 3, generator=gen, dtype=F64)
    chain = scene.trace_reflections(rt.Ray(o.to(dtype).to(device), (target - o).to(dtype).to(device)), 3)
    assert bool((chain.num_bounces == 1).all())
    assert bool((chain.global_prim_id[:, 1:] == -1).all())
    # The one bounce is the mirror image of the incoming direction about the quad's plane.
    unit = (normal / normal.norm()).to(dtype).to(device)
    d = (target - o).to(dtype).to(device)
    want = d - 2.0 * (d @ unit)[:, None] * unit
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(chain.d_out[:, 0], want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_rays_aimed_at_quad_diagonals_never_leave_a_closed_rotated_room(device, dtype):
    # Inside a closed (welded) box in general orientation every chain has all 16 bounces. A
    # spurious second reflection off the coplanar neighbour of a quad's diagonal turned the ray
    # back through the wall, out of the room: 314 (float32) and 323 (float64) of 1,000-3,000 rays.
    gen = torch.Generator().manual_seed(0)
    rot = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=F64))[0]
    shift = torch.tensor([0.3, -0.2, 0.1], dtype=F64)
    half = torch.tensor([1.0, 2.0, 1.5], dtype=F64)
    corners = torch.tensor([[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)], dtype=F64)
    corners = (corners * half) @ rot.T + shift
    box = torch.tensor([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                        [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(corners.to(dtype).to(device), box.to(device)))
    scene.build()
    n = 1500
    tri = corners[box[2 * torch.randint(0, 6, (n,), generator=gen)]]  # even faces: (v0, v2) is the quad diagonal
    target = tri[:, 0] + torch.rand(n, 1, generator=gen, dtype=F64) * (tri[:, 2] - tri[:, 0])
    o = ((torch.rand(n, 3, generator=gen, dtype=F64) * 1.8 - 0.9) * half) @ rot.T + shift
    chain = scene.trace_reflections(rt.Ray(o.to(dtype).to(device), (target - o).to(dtype).to(device)), 16)
    assert bool((chain.num_bounces == 16).all())
    local = ((chain.p.double().cpu() - shift) @ rot).abs()
    assert bool((local <= half + 1e-4).all())
