"""``tmin = -inf`` in ray-hit queries (session 22, helper tmin22).

DESIGN.md: ``intersect`` and ``shadow_test`` count a hit for ``tmin < t < tmax`` (open); with
``tmin = -inf`` that is every hit with ``t < tmax``: a backward half-line, or the whole line with
``tmax = inf``. Was: every such ray a miss in ``intersect``, ``shadow_test``, ``intersect_all``,
``count_intersections`` and ``trace_reflections``' first segment (the engine starts each search at
``o + tmin d``). Now the search starts just before the ray enters the scene's box
(:func:`rayd.core.rays.search_start`); ``t`` stays measured from ``o``.

Checked against a float64 brute force (``tests/reference.py``, ``tests/allhits_reference.py``), against
the same query with a finite ``tmin`` before the scene, on both CPU paths (Embree, Warp), float32 and
float64, with transformed meshes and instances; gradients against float64 central differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD

import rayd.torch as rt
from allhits_reference import all_hits
from rayd.engine import cpu_embree
from reference import closest_hit, icosphere

INF = math.inf
F64 = torch.float64
DTYPES = [torch.float32, F64]


@pytest.fixture(params=["embree", "warp"])
def accel(request):
    """The CPU search path (``RAYD_CPU_ACCEL``): Embree, or rayd's Warp kernels."""
    before = cpu_embree._enabled
    cpu_embree.set_enabled(request.param == "embree")
    yield request.param
    cpu_embree.set_enabled(before)


def _matrix(angle: float, axis: int, scale: float, shift) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    i, j = [k for k in range(3) if k != axis]
    m = np.eye(4)
    m[i, i], m[i, j], m[j, i], m[j, j] = c, -s, s, c
    m[:3, :3] *= scale
    m[:3, 3] = shift
    return m


M_MESH = _matrix(0.4, 2, 0.8, (2.5, 0.3, -0.4))  # the second mesh's own to_world
M_INST = _matrix(-0.7, 0, 1.2, (-2.2, 1.0, 0.5))  # an instance of it: world = M_INST @ M_MESH


def _scene(dtype, device, instances=True):
    """A sphere, a transformed sphere and (optionally) an instance of it; returns (scene, world v, faces).

    The brute-force triangles are numbered ``shape_id * F + prim_id``."""
    v, f = icosphere(2)
    scene = rt.Scene()
    tv = torch.tensor(v, dtype=dtype, device=device)
    tf = torch.tensor(f, device=device)
    scene.add_mesh(rt.Mesh(tv, tf))
    scene.add_mesh(rt.Mesh(tv, tf, to_world=torch.tensor(M_MESH, dtype=dtype, device=device)))
    placed = [v, v @ M_MESH[:3, :3].T + M_MESH[:3, 3]]
    if instances:
        scene.add_instance(1, torch.tensor(M_INST, dtype=dtype, device=device))
        m = M_INST @ M_MESH
        placed.append(v @ m[:3, :3].T + m[:3, 3])
    scene.build()
    world = np.concatenate(placed)
    faces = np.concatenate([f + k * len(v) for k in range(len(placed))])
    return scene, world, faces, len(f)


CENTRES = np.array([[0.0, 0.0, 0.0], M_MESH[:3, 3], (M_INST @ M_MESH)[:3, 3]])


def _rays(n, dtype, device, seed=0, spread=4.0):
    """Origins around the scene, lines aimed near a sphere's centre, half of them pointing away from it."""
    rng = np.random.default_rng(seed)
    o = rng.uniform(-spread, spread, (n, 3))
    target = CENTRES[rng.integers(0, 3, n)] + rng.uniform(-1.2, 1.2, (n, 3))
    d = (target - o) * rng.uniform(0.3, 2.0, (n, 1)) * np.where(rng.random((n, 1)) < 0.5, -1.0, 1.0)
    return o, d, torch.tensor(o, dtype=dtype, device=device), torch.tensor(d, dtype=dtype, device=device)


def _clear(o, d, world, faces, tmin, tmax, dtype):
    """All hits, and the rays the float32 search (of float64 rays too) cannot decide otherwise: none near
    an edge (a tie of two faces) or a bound."""
    hits, clear = all_hits(o, d, world, faces, tmin, tmax, margin=1e-5)
    return hits, clear


def _before(o, d, world, faces, dtype, device):
    """A finite per-ray ``tmin`` a little before each line's first hit (-10 where it has none): the
    query the ``-inf`` one must equal. (A far finite ``tmin``, e.g. -100, starts the float32 search far
    away, where rounding of ``o + tmin d`` may pick a face beside a nearby edge.)"""
    t = closest_hit(o, d, world, faces, -INF, INF)["t"]
    return torch.tensor(np.where(np.isfinite(t), t - 0.25, -10.0), dtype=dtype, device=device)


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-11)


# ------------------------------------------------------------ intersect / shadow_test
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tmax", [INF, 0.0, -0.7, 1.5])
def test_intersect_behind_origin_and_whole_line(device, accel, dtype, tmax):
    """Closest hit of ``(-inf, tmax)`` = the float64 brute force, = the query with a finite tmin
    before the scene (same winners, same ``t``), and ``shadow_test`` agrees. Was: all misses."""
    scene, world, faces, nf = _scene(dtype, device)
    o, d, to, td = _rays(1500, dtype, device)
    hit = scene.intersect(rt.Ray(to, td, tmax, tmin=-INF))
    ref = closest_hit(o, d, world, faces, -INF, tmax)
    _, clear = _clear(o, d, world, faces, -INF, tmax, dtype)
    valid = hit.is_valid().cpu().numpy()
    assert clear.sum() > 1400
    assert (ref["prim"] >= 0).sum() > 300 and (ref["t"][ref["prim"] >= 0] < 0).sum() > 100  # hits behind o
    np.testing.assert_array_equal(valid[clear], ref["prim"][clear] >= 0)
    t = hit.t.cpu().double().numpy()
    np.testing.assert_allclose(t[clear & valid], ref["t"][clear & valid], **_tol(dtype))
    gid = (hit.shape_id * nf + hit.prim_id).cpu().numpy()
    # the face reported is one at that t (ties on a shared edge may pick either face)
    for i in np.nonzero(clear & valid)[0][:200]:
        one = closest_hit(o[i:i + 1], d[i:i + 1], world, faces[gid[i]:gid[i] + 1], -INF, tmax)
        assert abs(one["t"][0] - t[i]) <= 1e-4 * (1 + abs(t[i])), i
    # p = o + t d in the caller's parametrisation
    p = hit.p.cpu().double().numpy()
    np.testing.assert_allclose(p[valid], o[valid] + t[valid, None] * d[valid], rtol=1e-4, atol=1e-4)
    # the same hits as a finite tmin before the scene
    before = _before(o, d, world, faces, dtype, device)
    finite = scene.intersect(rt.Ray(to, td, tmax, tmin=before))
    keep = torch.as_tensor(clear, device=device)
    assert torch.equal(finite.global_prim_id[keep], hit.global_prim_id[keep])
    assert torch.equal(finite.t[keep], hit.t[keep])
    torch.testing.assert_close(finite.t, hit.t, **_tol(dtype))  # (ties on an edge: either face, the same t)
    # shadow_test: any hit in (-inf, tmax)
    assert torch.equal(scene.shadow_test(rt.Ray(to, td, tmax, tmin=-INF)), hit.is_valid())


@pytest.mark.parametrize("dtype", DTYPES)
def test_far_origins_and_the_entry_face(device, accel, dtype):
    """Origins far from a flat scene (its box has no thickness), rays pointing away from it: every hit
    lies behind ``o`` at the box's entry face, which the float32 start must not pass. ``tmin = -1e30``
    loses such hits to rounding of ``o + tmin d`` for slanted rays; ``-inf`` finds each one."""
    v = np.array([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [1.0, 1.0, 0.0], [-1.0, 1.0, 0.0]]) * 3.0 + [10.0, -5.0, 2.0]
    f = np.array([[0, 1, 2], [0, 2, 3]])
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype, device=device), torch.tensor(f, device=device)))
    scene.build()
    rng = np.random.default_rng(3)
    target = np.concatenate([rng.uniform(-2.5, 2.5, (600, 2)), np.zeros((600, 1))], 1) + [10.0, -5.0, 2.0]
    d = rng.normal(size=(600, 3))
    d[:, 2] = np.abs(d[:, 2]) + 0.05  # away from the plane, upwards
    dist = rng.uniform(10.0, 3e4, (600, 1))
    o = target + dist * d / np.linalg.norm(d, axis=1, keepdims=True)
    to, td = (torch.tensor(x, dtype=dtype, device=device) for x in (o, d))
    ref = closest_hit(to.cpu().double().numpy(), td.cpu().double().numpy(), v, f, -INF, INF)
    assert (ref["prim"] >= 0).all() and (ref["t"] < 0).all()
    hit = scene.intersect(rt.Ray(to, td, tmin=-INF))
    assert hit.is_valid().all()
    np.testing.assert_allclose(hit.t.cpu().double().numpy(), ref["t"], rtol=1e-4 if dtype == torch.float32 else 1e-9)
    assert scene.shadow_test(rt.Ray(to, td, 0.0, tmin=-INF)).all()
    assert not scene.shadow_test(rt.Ray(to, td, tmin=0.0)).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_per_ray_tmin_tensor_nan_and_inactive(device, accel, dtype):
    """A ``tmin`` tensor mixing ``-inf``, finite values and NaN: ``-inf`` rows search the whole line
    before ``tmax``, finite rows are unchanged, NaN rows stay misses (malformed), inactive rows miss."""
    scene, world, faces, _ = _scene(dtype, device)
    o, d, to, td = _rays(900, dtype, device, seed=5)
    kind = np.arange(900) % 3
    tmin_np = np.where(kind == 0, -INF, np.where(kind == 1, 0.0, np.nan))
    tmin = torch.tensor(tmin_np, dtype=dtype, device=device)
    hit = scene.intersect(rt.Ray(to, td, tmin=tmin))
    whole = scene.intersect(rt.Ray(to, td, tmin=-INF))
    forward = scene.intersect(rt.Ray(to, td))
    k = torch.tensor(kind, device=device)
    assert torch.equal(hit.t[k == 0], whole.t[k == 0]) and torch.equal(hit.t[k == 1], forward.t[k == 1])
    assert (~hit.is_valid()[k == 2]).all() and (whole.is_valid()[k == 2]).any()
    assert torch.equal(scene.shadow_test(rt.Ray(to, td, tmin=tmin)), hit.is_valid())
    active = torch.tensor(np.arange(900) % 2 == 0, device=device)
    masked = scene.intersect(rt.Ray(to, td, tmin=-INF), active)
    assert torch.equal(masked.is_valid(), whole.is_valid() & active)
    # a miss of the box: any start, still a miss; rays beside the scene miss
    far = scene.intersect(rt.Ray(to + 50.0, td * 0 + torch.tensor([0.0, 0.0, 1.0], dtype=dtype, device=device),
                                 tmin=-INF))
    assert not far.is_valid().any()


# ------------------------------------------------------------ intersect_all, count_intersections
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tmax", [INF, 0.5])
def test_intersect_all_order_and_count_parity(device, accel, dtype, tmax):
    """All crossings of ``(-inf, tmax)`` in increasing ``t`` = the brute force; the count is theirs, and
    a whole line crosses each closed sphere an even number of times."""
    scene, world, faces, nf = _scene(dtype, device)
    o, d, to, td = _rays(500, dtype, device, seed=1)
    ray = rt.Ray(to, td, tmax, tmin=-INF)
    hits, clear = _clear(o, d, world, faces, -INF, tmax, dtype)
    got = scene.intersect_all(ray, 8)
    count = scene.count_intersections(ray).cpu().numpy()
    t = got.t.cpu().double().numpy()
    gid = (got.shape_id * nf + got.prim_id).cpu().numpy()
    assert sum(len(h) > 1 for h in hits) > 50
    for i in np.nonzero(clear)[0]:
        want = hits[i]
        assert count[i] == len(want), i
        assert got.is_valid()[i].sum().item() == min(len(want), 8), i
        np.testing.assert_allclose(t[i, :len(want)], [x[0] for x in want[:8]], **_tol(dtype))
        assert (np.diff(t[i, :len(want)]) > 0).all()
        assert [int(x) for x in gid[i, :len(want)]] == [x[1] for x in want[:8]], i
    if tmax == INF:
        assert (count[clear] % 2 == 0).all()
    before = _before(o, d, world, faces, dtype, device)
    finite = scene.intersect_all(rt.Ray(to, td, tmax, tmin=before), 8)
    assert torch.equal(finite.global_prim_id, got.global_prim_id) and torch.equal(finite.t, got.t)
    assert torch.equal(scene.count_intersections(rt.Ray(to, td, tmax, tmin=before)).cpu(), torch.as_tensor(count))
    # the first of them is intersect's hit
    first = scene.intersect(ray)
    assert torch.equal(first.global_prim_id, got.global_prim_id[:, 0])


# ------------------------------------------------------------ trace_reflections
@pytest.mark.parametrize("dtype", DTYPES)
def test_trace_reflections_first_segment(device, accel, dtype):
    """Segment 0 of a chain with ``tmin = -inf`` is ``intersect``'s hit (behind ``o`` too); the chain
    equals the chain with a finite tmin before the scene. Was: empty chains."""
    scene, world, faces, _ = _scene(dtype, device)
    o, d, to, td = _rays(800, dtype, device, seed=2)
    chain = scene.trace_reflections(rt.Ray(to, td, tmin=-INF), 3)
    hit = scene.intersect(rt.Ray(to, td, tmin=-INF))
    assert hit.is_valid().sum() > 100 and (hit.t < 0).sum() > 50
    assert torch.equal(chain.global_prim_id[:, 0], hit.global_prim_id)
    torch.testing.assert_close(chain.t[:, 0], hit.t, **_tol(dtype))
    finite = scene.trace_reflections(rt.Ray(to, td, tmin=_before(o, d, world, faces, dtype, device)), 3)
    assert torch.equal(finite.global_prim_id, chain.global_prim_id)
    torch.testing.assert_close(finite.p, chain.p)
    assert (chain.num_bounces > 1).any()


# ------------------------------------------------------------ gradients
def _two_triangles(device):
    v = torch.tensor([[0.1, -0.2, 0.05], [1.3, 0.1, -0.2], [0.2, 1.1, 0.3],
                      [0.3, 0.0, -2.0], [1.4, 0.2, -2.3], [0.4, 1.2, -1.9]], dtype=F64, device=device)
    f = torch.tensor([[0, 1, 2], [3, 4, 5]], device=device)
    # rays pointing away from both triangles (hits behind o), and one through both (the whole line)
    o = torch.tensor([[0.4, 0.3, 2.0], [0.5, 0.2, 1.0], [0.6, 0.3, -3.0]], dtype=F64, device=device)
    d = torch.tensor([[0.05, 0.02, 1.0], [-0.1, 0.1, 0.8], [0.02, -0.03, -1.1]], dtype=F64, device=device)
    return v, f, o, d


def _t_p(v, f, o, d, tmin, m=None):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f, to_world=m))
    scene.build()
    hit = scene.intersect(rt.Ray(o, d, tmin=tmin))
    return hit.t, hit.p, hit.geo_n


def test_gradients_reverse_forward_and_central_differences(device):
    """``t``, ``p``, ``geo_n`` of hits found with ``tmin = -inf``: gradcheck (float64 central differences)
    for vertices, ``o``, ``d`` and ``to_world``; reverse and forward mode equal those of a finite ``tmin = -10`` (before the scene; ``-1e30``
    loses the slanted rays to float32 rounding of ``o + tmin d``)."""
    v, f, o, d = _two_triangles(device)
    m = torch.tensor(_matrix(0.3, 1, 1.1, (0.1, -0.2, 0.3)), dtype=F64, device=device)
    t, _, _ = _t_p(v, f, o, d, -INF, m)
    assert torch.isfinite(t).all() and (t < 0).all()
    inputs = tuple(x.clone().requires_grad_() for x in (v, o, d, m))

    def fn(v, o, d, m):
        return _t_p(v, f, o, d, -INF, m)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    # reverse mode: the same gradients as with a finite tmin
    grads = {}
    for tmin in (-INF, -10.0):
        xs = tuple(x.clone().requires_grad_() for x in (v, o, d, m))
        t, p, n = _t_p(*xs[:1], f, *xs[1:3], tmin, xs[3])
        (t.sum() + (p * 0.3).sum() + n.sum()).backward()
        grads[tmin] = [x.grad for x in xs]
    for a, b in zip(grads[-INF], grads[-10.0]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # forward mode
    tangents = [torch.randn_like(x, generator=torch.Generator(device=device).manual_seed(k))
                for k, x in enumerate((v, o, d))]
    jv = {}
    for tmin in (-INF, -10.0):
        with fwAD.dual_level():
            dual = [fwAD.make_dual(x, tx) for x, tx in zip((v, o, d), tangents)]
            t, p, _ = _t_p(dual[0], f, dual[1], dual[2], tmin)
            jv[tmin] = (fwAD.unpack_dual(t).tangent, fwAD.unpack_dual(p).tangent)
    for a, b in zip(jv[-INF], jv[-10.0]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # float32 rays and scene: the float64 evaluation's gradient of o, to float32 accuracy
    xs = [x.float().requires_grad_() for x in (v, o, d)]
    t32, _, _ = _t_p(xs[0], f, xs[1], xs[2], -INF)
    t32.sum().backward()
    o64 = o.clone().requires_grad_()
    _t_p(v, f, o64, d, -INF)[0].sum().backward()
    torch.testing.assert_close(xs[1].grad.double(), o64.grad, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------ other queries unchanged
def test_visible_and_nearest_edge_unaffected(device):
    """``visible`` (segments, finite bounds) answers as ``shadow_test`` of its segment; ``nearest_edge`` of a
    ray with ``tmin = -inf`` keeps its own rule (the whole line) and does not go through the hit search."""
    scene, world, faces, _ = _scene(F64, device)
    o, d, to, td = _rays(400, F64, device, seed=4)
    end = to + td
    vis = scene.visible(to, end)
    ref = closest_hit(o, d, world, faces, 1e-4, 1 - 1e-4)
    assert torch.equal(vis.cpu(), torch.as_tensor(ref["prim"] < 0))
    whole = scene.nearest_edge(rt.Ray(to, td, tmin=-INF))
    far = scene.nearest_edge(rt.Ray(to, td, tmin=-1e6, tmax=1e6))
    assert whole.is_valid().all()
    torch.testing.assert_close(whole.distance, far.distance, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------ lifecycle: the box follows the scene
def test_box_follows_sync_and_transforms(device):
    """The start is taken before the box of the scene as synced: a dynamic mesh moved far away, a
    transform changed, a disabled shape; each time the hits behind ``o`` are found."""
    v, f = icosphere(1)
    tv = torch.tensor(v, dtype=F64, device=device)
    tf = torch.tensor(f, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(tv, tf), dynamic=True)
    scene.add_mesh(rt.Mesh(tv, tf, to_world=torch.eye(4, dtype=F64, device=device)))
    scene.build()
    o = torch.tensor([[0.0, 0.0, 0.0]], dtype=F64, device=device)
    d = torch.tensor([[0.0, 0.0, 1.0]], dtype=F64, device=device)
    ray = rt.Ray(o, d, 0.0, tmin=-INF)
    assert torch.allclose(scene.intersect(ray).t, torch.tensor([-1.0], dtype=F64, device=device), atol=1e-9)
    scene.update_mesh_vertices(0, tv + torch.tensor([0.0, 0.0, -500.0], dtype=F64, device=device))
    m = torch.eye(4, dtype=F64, device=device)
    m[2, 3] = -40.0
    scene.set_mesh_transform(1, m)
    scene.sync()
    got = scene.intersect(ray)  # the first hit along the line: the smallest t
    assert torch.allclose(got.t, torch.tensor([-501.0], dtype=F64, device=device), atol=1e-9)
    assert scene.count_intersections(ray).item() == 4
    hits = scene.intersect_all(ray, 4).t
    assert torch.allclose(hits, torch.tensor([[-501.0, -499.0, -41.0, -39.0]], dtype=F64, device=device), atol=1e-9)
    scene.set_shape_enabled(0, False)
    scene.sync()
    assert torch.allclose(scene.intersect(ray).t, torch.tensor([-41.0], dtype=F64, device=device), atol=1e-9)


def test_embree_and_warp_answer_alike(device):
    """The two CPU search paths give the same hits for ``tmin = -inf`` (closest, any, all, counts)."""
    scene, world, faces, _ = _scene(torch.float32, device)
    o, d, to, td = _rays(1200, torch.float32, device, seed=7)
    _, clear = _clear(o, d, world, faces, -INF, 0.3, torch.float32)
    keep = torch.as_tensor(clear, device=device)
    ray = rt.Ray(to, td, 0.3, tmin=-INF)
    answers = {}
    before = cpu_embree._enabled
    try:
        for path in (True, False):
            cpu_embree.set_enabled(path)
            hit = scene.intersect(ray)
            answers[path] = (hit.global_prim_id, hit.t, scene.shadow_test(ray), scene.count_intersections(ray),
                             scene.intersect_all(ray, 4).global_prim_id)
    finally:
        cpu_embree.set_enabled(before)
    for a, b in zip(answers[True], answers[False]):
        assert torch.equal(a[keep], b[keep])
    assert answers[True][0][keep].ge(0).sum() > 300


def test_compiled_query_follows_sync(device):
    """Under ``torch.compile`` (fullgraph) the box is computed in the graph: after a ``sync()`` that moved
    the mesh far away, the compiled query finds the hits behind ``o`` there, without recompiling."""
    from torch._dynamo.testing import CompileCounterWithBackend

    v, f = icosphere(1)
    tv = torch.tensor(v, dtype=F64, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(tv, torch.tensor(f, device=device)), dynamic=True)
    scene.build()
    o = torch.tensor([[0.1, 0.05, 0.0]], dtype=F64, device=device)
    d = torch.tensor([[0.0, 0.0, 1.0]], dtype=F64, device=device)

    def fn(o, d):
        return scene.intersect(rt.Ray(o, d, 0.0, tmin=-INF)).t

    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    torch.testing.assert_close(compiled(o, d), fn(o, d))
    assert fn(o, d).item() < -0.9
    with torch.no_grad():
        tv += torch.tensor([0.0, 0.0, -50.0], dtype=F64, device=device)
    scene.sync()
    want = fn(o, d)
    assert -51.0 < want.item() < -50.9
    torch.testing.assert_close(compiled(o, d), want)
    assert counter.frame_count == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_box_equals_the_core_box(dtype):
    """On a GPU the box is computed on the device from the placed vertices (no host read): the tight box
    of the world vertices (instances, transforms, minus the search centre of a scene far from the origin),
    inside the core's (which places the corners of each mesh's box)."""
    from rayd.torch import _trace

    v, f = icosphere(1)
    far = np.array([3e3, -2e3, 1e3])
    scene = rt.Scene()
    tv, tf = torch.tensor(v + far, dtype=dtype), torch.tensor(f)
    scene.add_mesh(rt.Mesh(tv, tf))
    scene.add_mesh(rt.Mesh(tv, tf, to_world=torch.tensor(M_MESH, dtype=dtype)))
    scene.add_instance(1, torch.tensor(M_INST, dtype=dtype))
    scene.build()
    centre = scene._core.centre
    assert centre is not None
    on_device = [np.array([float(x) for x in b]) for b in _trace._search_box(scene, torch.device("cuda"))]
    assert not scene._core.has_search_box  # (the device path made no host box)
    vv = tv.double().numpy()
    m1, mi = (torch.tensor(x, dtype=dtype).double().numpy() for x in (M_MESH, M_INST))  # as registered
    m2 = mi @ m1
    world = np.concatenate([vv, vv @ m1[:3, :3].T + m1[:3, 3], vv @ m2[:3, :3].T + m2[:3, 3]]) - centre
    np.testing.assert_allclose(on_device[0], world.min(0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(on_device[1], world.max(0), rtol=0, atol=1e-9)
    lower, upper = scene._core.search_box()
    assert (np.array(lower) <= on_device[0] + 1e-9).all() and (np.array(upper) >= on_device[1] - 1e-9).all()
    # the starts from either box lie before every ray's first hit (torch ops and NumPy alike)
    from rayd.core.rays import search_start

    rng = np.random.default_rng(9)
    o = world.mean(0) + rng.uniform(-30, 30, (500, 3))
    d = world[rng.integers(0, len(world), 500)] + rng.uniform(-0.5, 0.5, (500, 3)) - o
    d *= np.where(rng.random((500, 1)) < 0.5, -1.0, 1.0)
    to, td = torch.tensor(o), torch.tensor(d)
    s_device = search_start(torch.where, to.unbind(-1), td.unbind(-1), _trace._search_box(scene, torch.device("cuda")))
    s_host = search_start(np.where, tuple(o.T), tuple(d.T), (lower, upper))
    first = closest_hit(o, d, world, np.concatenate([f + k * len(v) for k in range(3)]), -INF, INF)["t"]
    hit = np.isfinite(first)
    assert hit.sum() > 200 and np.isfinite(s_host).all() and torch.isfinite(s_device).all()
    assert (s_device.numpy()[hit] < first[hit]).all() and (s_host[hit] < first[hit]).all()
    assert (s_host[hit] <= s_device.numpy()[hit] + 1e-9).all()  # (the core's box is the larger)
