"""Session 21, helper breakit21a: rayd.torch against other engines and float64 brute force.

One scene of several meshes with their own ``to_world`` (rotations, non-uniform scales),
vertex normals and uv on some, a random triangle soup, a terrain grid, two instances and a
disabled shape; float32 and float64. Every query is compared with a NumPy float64 brute
force over the world-space triangles (edges) built here, and ``intersect`` / ``shadow_test``
with Mitsuba 3 where it is installed. Grazing rays (nearly in a face's plane) and exact
ties are left out where the contract lets either answer stand (docs/precision.md).

Conventions found to differ from Mitsuba, not bugs: Mitsuba normalises each world-space
vertex normal before interpolating; rayd interpolates the normals mapped by ``L^-T`` and
normalises once (docs/api.md, ``n``), so under a non-uniform scale the two differ (up to
0.016 on the icosphere below); they agree under similarity transforms. Without texture
coordinates both report ``uv = (w1, w2)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.core.queries import VISIBILITY_EPSILON
from reference import grid, icosphere

DTYPES = [torch.float32, torch.float64]


# ---------------------------------------------------------------------- the scene
def _matrix(axis, angle, scale, shift) -> np.ndarray:
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    m = np.eye(4)
    m[:3, :3] = (np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * k @ k) @ np.diag(scale)
    m[:3, 3] = shift
    return m


def _box():
    v = np.array([[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)])
    f = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                  [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    return v, f


def _parts():
    """(vertices, faces, normals or None, uv or None, to_world) per mesh, float64."""
    rng = np.random.default_rng(5)
    ico_v, ico_f = icosphere(2)
    box_v, box_f = _box()
    soup_v = (rng.uniform(-1, 1, (60, 1, 3)) + 0.25 * rng.standard_normal((60, 3, 3))).reshape(-1, 3)
    soup_f = np.arange(180).reshape(60, 3)
    ter_v, ter_f = grid(8)
    ter_v = np.asarray(ter_v, float).copy()
    ter_v[:, 2] = 0.15 * np.sin(3 * ter_v[:, 0]) * np.cos(2 * ter_v[:, 1])
    return [
        (ico_v, ico_f, ico_v.copy(), rng.uniform(0, 1, (len(ico_v), 2)), _matrix([1, 2, 3], 0.7, (1.0, 0.6, 0.8), (0, 0, 0))),
        (box_v, box_f, None, None, _matrix([0, 1, 1], 0.4, (0.7, 1.5, 0.5), (2.5, 0.2, -0.3))),
        (soup_v, soup_f, None, None, _matrix([1, 0, 0], 0.0, (1, 1, 1), (-2.5, 0, 0))),
        (ter_v, ter_f, None, rng.uniform(0, 1, (len(ter_v), 2)), _matrix([1, 0, 0], -1.2, (1.5, 1.5, 1), (0, -2.5, 0.3))),
        (ico_v, ico_f, ico_v.copy(), None, _matrix([0, 0, 1], 0.3, (0.8, 0.8, 0.8), (0.3, 2.4, -0.2))),  # similarity
    ]


INSTANCES = [(0, _matrix([0, 0, 1], 0.9, (0.5, 0.5, 1.2), (-2.0, 2.5, 0))),
             (1, _matrix([1, 1, 0], 2.0, (0.4, 0.9, 0.6), (2.5, 2.5, 0.5)))]
DISABLED = 2  # the soup


def _scene(dtype):
    """``(scene, shapes)``: shapes[s] = dict(V world (F,3,3) triangles from the dtype-rounded inputs,
    faces, N world vertex normals per face corner or None, U per corner or None, enabled)."""
    scene, shapes = rt.Scene(), []

    def rounded(x):
        return torch.tensor(x, dtype=dtype).double().numpy()

    def place(m, v, f, n, u):
        m, v = rounded(m), rounded(v)
        world = v @ m[:3, :3].T + m[:3, 3]
        normals = None if n is None else (rounded(n) @ np.linalg.inv(m[:3, :3]))[f]
        return dict(V=world[f], faces=f, N=normals, U=None if u is None else rounded(u)[f], enabled=True, m=m)

    parts = _parts()
    for v, f, n, u, m in parts:
        scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype), torch.tensor(f),
                               normals=None if n is None else torch.tensor(n, dtype=dtype),
                               uv=None if u is None else torch.tensor(u, dtype=dtype),
                               to_world=torch.tensor(m, dtype=dtype)))
        shapes.append(place(m, v, f, n, u))
    for mesh_id, m in INSTANCES:
        scene.add_instance(mesh_id, torch.tensor(m, dtype=dtype))
        v, f, n, u, own = parts[mesh_id]
        shapes.append(place(rounded(m) @ rounded(own), v, f, n, u))
    scene.build()
    scene.set_shape_enabled(DISABLED, False)
    scene.sync()
    shapes[DISABLED]["enabled"] = False
    return scene, shapes


def _triangles(shapes):
    """(F, 3, 3) enabled world triangles, their (shape, prim, global_prim_id) rows."""
    tri, ids, offset = [], [], 0
    for s, sh in enumerate(shapes):
        count = len(sh["faces"])
        if sh["enabled"]:
            tri.append(sh["V"])
            ids += [(s, k, offset + k) for k in range(count)]
        offset += count
    return np.concatenate(tri), np.array(ids)


# ---------------------------------------------------------------------- float64 brute forces
def _ray_triangles(o, d, tri):
    """Moeller-Trumbore of rays (N, 3) against triangles (F, 3, 3): t (N, F) (inf: miss), u, v."""
    v0, e1, e2 = tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    p = np.cross(d[:, None], e2[None])
    det = (p * e1).sum(-1)
    with np.errstate(all="ignore"):
        s = o[:, None] - v0[None]
        u = (s * p).sum(-1) / det
        q = np.cross(s, e1[None])
        v = (d[:, None] * q).sum(-1) / det
        t = (q * e2).sum(-1) / det
    hit = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & np.isfinite(t)
    return np.where(hit, t, np.inf), u, v


def _grazing(d, tri):
    """(N, F) |cos| between each ray and each face's plane normal."""
    n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    return np.abs(d @ n.T) / np.linalg.norm(d, axis=1, keepdims=True)


def _point_triangles(p, tri):
    """(N, F) squared distances from points to triangles (Ericson 2004, 5.1.5, vectorised)."""
    a, b, c = tri[None, :, 0], tri[None, :, 1], tri[None, :, 2]
    ab, ac, ap = b - a, c - a, p[:, None] - a
    d1, d2 = (ab * ap).sum(-1), (ac * ap).sum(-1)
    bp, cp = p[:, None] - b, p[:, None] - c
    d3, d4, d5, d6 = (ab * bp).sum(-1), (ac * bp).sum(-1), (ab * cp).sum(-1), (ac * cp).sum(-1)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    with np.errstate(all="ignore"):
        inner = a + (vb / (va + vb + vc))[..., None] * ab + (vc / (va + vb + vc))[..., None] * ac
        on_ab = a + (d1 / (d1 - d3))[..., None] * ab
        on_ac = a + (d2 / (d2 - d6))[..., None] * ac
        on_bc = b + ((d4 - d3) / ((d4 - d3) + (d5 - d6)))[..., None] * (c - b)
    rules = [((d1 <= 0) & (d2 <= 0), a), ((d3 >= 0) & (d4 <= d3), b), ((vc <= 0) & (d1 >= 0) & (d3 <= 0), on_ab),
             ((d6 >= 0) & (d5 <= d6), c), ((vb <= 0) & (d2 >= 0) & (d6 <= 0), on_ac),
             ((va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0), on_bc)]
    q, done = inner.copy(), np.zeros(d1.shape, bool)
    for rule, point in rules:
        take = rule & ~done
        q[take] = np.broadcast_to(point, q.shape)[take]
        done |= take
    return ((q - p[:, None]) ** 2).sum(-1)


def _point_segments(p, a, b):
    ab = b - a
    s = np.clip(((p[:, None] - a[None]) * ab).sum(-1) / (ab * ab).sum(-1), 0, 1)
    return np.linalg.norm(p[:, None] - (a[None] + s[..., None] * ab), axis=-1)


def _surface_points(rng, tri, n):
    return np.einsum("kj,kjc->kc", rng.dirichlet([1, 1, 1], n), tri[rng.integers(0, len(tri), n)])


# ---------------------------------------------------------------------- intersect
def _rays(rng, tri, n, dtype):
    o = rng.uniform(-4, 4, (n, 3))
    d = _surface_points(rng, tri, n) - o
    d[::5] = rng.standard_normal((len(d[::5]), 3))
    d *= rng.uniform(0.1, 10, (n, 1))  # t in units of |d|
    tmin = np.where(rng.uniform(size=n) < 0.3, rng.uniform(0, 0.5, n), 0.0)
    tmax = np.where(rng.uniform(size=n) < 0.3, rng.uniform(0.3, 1.2, n), np.inf)
    ray = rt.Ray(*(torch.tensor(x, dtype=dtype) for x in (o, d, tmax)), tmin=torch.tensor(tmin, dtype=dtype))
    return ray, *(x.double().numpy() for x in (ray.o, ray.d, ray.tmin, ray.tmax))


@pytest.mark.parametrize("dtype", DTYPES)
def test_intersect_matches_float64_brute_force(dtype):
    scene, shapes = _scene(dtype)
    tri, ids = _triangles(shapes)
    rng = np.random.default_rng(0)
    ray, o, d, tmin, tmax = _rays(rng, tri, 3000, dtype)
    hit = scene.intersect(ray)
    t, u, v = _ray_triangles(o, d, tri)
    t = np.where((t > tmin[:, None]) & (t < tmax[:, None]), t, np.inf)
    best = t.argmin(1)
    t_best = t[np.arange(len(t)), best]
    # leave out rays whose decision is within float32 rounding: a grazed face, a tie, a hit at a bound
    cos = _grazing(d, tri)
    raw = _ray_triangles(o, d, tri)[0]
    with np.errstate(invalid="ignore"):
        close = np.abs(t - t_best[:, None]) <= 1e-4 * (1 + np.abs(t_best[:, None]))
        near_bound = (np.abs(raw - tmin[:, None]) < 1e-4) | (np.abs(raw - tmax[:, None]) < 1e-4)
    doubt = ((cos < 1e-3) & np.isfinite(raw)).any(1) | (close.sum(1) > 1) | near_bound.any(1)
    sure = ~doubt
    assert sure.sum() > 2500 and np.isfinite(t_best[sure]).sum() > 800
    valid = hit.is_valid().numpy()
    np.testing.assert_array_equal(valid[sure], np.isfinite(t_best[sure]))
    k = sure & valid
    np.testing.assert_array_equal(hit.shape_id.numpy()[k], ids[best[k], 0])
    np.testing.assert_array_equal(hit.prim_id.numpy()[k], ids[best[k], 1])
    np.testing.assert_array_equal(hit.global_prim_id.numpy()[k], ids[best[k], 2])
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    np.testing.assert_allclose(hit.t.double().numpy()[k], t_best[k], rtol=tol, atol=tol)
    np.testing.assert_allclose(hit.p.double().numpy()[k], o[k] + t_best[k, None] * d[k], atol=50 * tol)
    rows = np.arange(len(t))[k]
    w = np.stack([1 - u[rows, best[k]] - v[rows, best[k]], u[rows, best[k]], v[rows, best[k]]], 1)
    np.testing.assert_allclose(hit.barycentric.double().numpy()[k], w, atol=50 * tol)
    corners = tri[best[k]]
    g = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    np.testing.assert_allclose(hit.geo_n.double().numpy()[k], g, atol=10 * tol)
    n_ref, uv_ref = g.copy(), w[:, 1:].copy()
    for j, (s, prim, _) in enumerate(ids[best[k]]):
        if shapes[s]["N"] is not None:
            n = w[j] @ shapes[s]["N"][prim]
            n_ref[j] = n / np.linalg.norm(n)
        if shapes[s]["U"] is not None:
            uv_ref[j] = w[j] @ shapes[s]["U"][prim]
    np.testing.assert_allclose(hit.n.double().numpy()[k], n_ref, atol=100 * tol)
    np.testing.assert_allclose(hit.uv.double().numpy()[k], uv_ref, atol=100 * tol)
    miss = ~valid
    assert np.isinf(hit.t.numpy()[miss]).all() and (hit.global_prim_id.numpy()[miss] == -1).all()
    assert (hit.p.numpy()[miss] == 0).all() and not torch.isnan(hit.n).any()
    # shadow_test over the same windows is intersect's validity
    np.testing.assert_array_equal(scene.shadow_test(ray).numpy()[sure], np.isfinite(t_best[sure]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_intersect_and_shadow_test_match_mitsuba(dtype, tmp_path):
    mi = pytest.importorskip("mitsuba")
    dr = pytest.importorskip("drjit")
    mi.set_variant("llvm_ad_rgb")
    scene, shapes = _scene(dtype)
    tri, ids = _triangles(shapes)
    entries = {"type": "scene"}
    for s, sh in enumerate(shapes):
        if not sh["enabled"]:
            continue
        v = sh["V"].reshape(-1, 3).astype(np.float32)
        mesh = mi.Mesh(f"s{s}", len(v), len(sh["faces"]), has_vertex_normals=sh["N"] is not None)
        params = mi.traverse(mesh)
        params["vertex_positions"] = dr.ravel(mi.Point3f(*(mi.Float(v[:, c]) for c in range(3))))
        params["faces"] = dr.ravel(mi.Vector3u(*(mi.UInt32(np.arange(len(v), dtype=np.uint32).reshape(-1, 3)[:, c])
                                                 for c in range(3))))
        if sh["N"] is not None:
            n = sh["N"].reshape(-1, 3)
            n = (n / np.linalg.norm(n, axis=1, keepdims=True)).astype(np.float32)
            params["vertex_normals"] = dr.ravel(mi.Normal3f(*(mi.Float(n[:, c]) for c in range(3))))
        params.update()
        entries[f"s{s}"] = mesh
    mscene = mi.load_dict(entries)
    to_shape = dict(zip(dr.reinterpret_array(mi.UInt32, mscene.shapes_dr()).numpy().tolist(),
                        [int(x.id()[1:]) for x in mscene.shapes()]))
    rng = np.random.default_rng(1)
    n = 20000
    o = rng.uniform(-4, 4, (n, 3)).astype(np.float32)
    d = (_surface_points(rng, tri, n) + 0.05 * rng.standard_normal((n, 3)) - o)
    d = (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)
    tmax = rng.uniform(0.5, 8, n).astype(np.float32)
    hit = scene.intersect(rt.Ray(torch.tensor(o, dtype=dtype), torch.tensor(d, dtype=dtype)))
    mray = mi.Ray3f(mi.Point3f(*(mi.Float(o[:, c]) for c in range(3))), mi.Vector3f(*(mi.Float(d[:, c]) for c in range(3))))
    si = mscene.ray_intersect(mray)
    m_valid = si.is_valid().numpy()
    m_shape = np.array([to_shape.get(x, -1) for x in dr.reinterpret_array(mi.UInt32, si.shape).numpy().tolist()])
    valid = hit.is_valid().numpy()
    grazing = (_grazing(d.astype(np.float64), tri) < 1e-3).any(1) & np.isfinite(hit.t.numpy())
    assert ((valid != m_valid) & ~grazing).sum() == 0
    same = valid & m_valid & (m_shape == hit.shape_id.numpy()) & (si.prim_index.numpy() == hit.prim_id.numpy())
    assert (valid & m_valid & ~same).sum() <= 2  # a tie on a shared edge may pick either face
    t = hit.t.double().numpy()
    np.testing.assert_allclose(t[same], si.t.numpy()[same], rtol=2e-4, atol=2e-6)
    m_n = np.stack([x.numpy() for x in si.n], 1)
    np.testing.assert_allclose(hit.geo_n.double().numpy()[same], m_n[same], atol=1e-5)
    m_uv = np.stack([x.numpy() for x in si.uv], 1)
    no_uv = np.array([sh["U"] is None for sh in shapes])
    plain = same & no_uv[np.maximum(hit.shape_id.numpy(), 0)]  # no texture coordinates: (w1, w2) in both
    assert plain.sum() > 1000
    np.testing.assert_allclose(hit.uv.double().numpy()[plain], m_uv[plain], atol=1e-4)
    similar = same & (hit.shape_id.numpy() == 4)  # vertex normals under a similarity: the same n
    m_sn = np.stack([x.numpy() for x in si.sh_frame.n], 1)
    assert similar.sum() > 100
    np.testing.assert_allclose(hit.n.double().numpy()[similar], m_sn[similar], atol=1e-5)
    # ray_test against shadow_test with tmax windows
    mray.maxt = mi.Float(tmax)
    m_blocked = mscene.ray_test(mray).numpy()
    blocked = scene.shadow_test(rt.Ray(torch.tensor(o, dtype=dtype), torch.tensor(d, dtype=dtype),
                                       torch.tensor(tmax, dtype=dtype))).numpy()
    at_bound = np.abs(t - tmax) < 1e-4 * (1 + tmax)
    assert ((blocked != m_blocked) & ~grazing & ~at_bound).sum() == 0


# ---------------------------------------------------------------------- segments
@pytest.mark.parametrize("dtype", DTYPES)
def test_visible_matches_float64_brute_force(dtype):
    scene, shapes = _scene(dtype)
    tri, _ = _triangles(shapes)
    rng = np.random.default_rng(2)
    n = 3000
    ends = [np.where(rng.uniform(size=(n, 1)) < 0.5, _surface_points(rng, tri, n), rng.uniform(-4, 4, (n, 3)))
            for _ in range(2)]
    a, b = (torch.tensor(x, dtype=dtype) for x in ends)
    a64, b64 = a.double().numpy(), b.double().numpy()
    t = _ray_triangles(a64, b64 - a64, tri)[0]
    eps = VISIBILITY_EPSILON
    blocked = ((t > eps) & (t < 1 - eps)).any(1)
    # a face in whose plane the segment (nearly) lies, or a crossing within rounding of an end of the interior
    doubt = ((_grazing(b64 - a64, tri) < 1e-5) & np.isfinite(t)).any(1)
    doubt |= ((np.abs(t - eps) < 1e-5) | (np.abs(t - 1 + eps) < 1e-5)).any(1)
    assert doubt.sum() < 50
    visible, back = scene.visible(a, b).numpy(), scene.visible(b, a).numpy()
    np.testing.assert_array_equal(visible[~doubt], ~blocked[~doubt])
    np.testing.assert_array_equal(back[~doubt], ~blocked[~doubt])


# ---------------------------------------------------------------------- surface queries
def _probe_points(rng, tri, n):
    """Random points, points on faces, on edges, at vertices and very far ones."""
    p = rng.uniform(-4, 4, (n, 3))
    k = n // 8
    p[:k] = _surface_points(rng, tri, k)
    f = tri[rng.integers(0, len(tri), k)]
    s = rng.uniform(0, 1, (k, 1))
    p[k:2 * k] = s * f[:, 0] + (1 - s) * f[:, 1]
    p[2 * k:3 * k] = tri[rng.integers(0, len(tri), k), rng.integers(0, 3, k)]
    p[3 * k:3 * k + 20] = 1e4 * rng.standard_normal((20, 3))
    return p


@pytest.mark.parametrize("dtype", DTYPES)
def test_closest_point_and_signed_distance_match_brute_force(dtype):
    scene, shapes = _scene(dtype)
    tri, ids = _triangles(shapes)
    rng = np.random.default_rng(3)
    p = torch.tensor(_probe_points(rng, tri, 2400), dtype=dtype)
    p64 = p.double().numpy()
    d2 = _point_triangles(p64, tri)
    dist = np.sqrt(d2.min(1))
    # float32 search ranking: distances within float32 rounding of the scene (docs/known-limitations.md)
    tol = 2e-6 * (1 + dist) if dtype == torch.float32 else 5e-7 * (1 + dist) + 1e-12
    got = scene.closest_point(p)
    np.testing.assert_array_less(np.abs(got.distance.double().numpy() - dist), tol)
    # the reported face is at the reported distance, p is on it and w reproduces p
    g = got.global_prim_id.numpy()
    row = np.searchsorted(ids[:, 2], g)
    assert (ids[row, 2] == g).all()
    np.testing.assert_array_equal(got.shape_id.numpy(), ids[row, 0])
    np.testing.assert_array_equal(got.prim_id.numpy(), ids[row, 1])
    np.testing.assert_allclose(np.sqrt(d2[np.arange(len(g)), row]), got.distance.double().numpy(), atol=tol.max())
    w = got.barycentric.double().numpy()
    np.testing.assert_allclose(np.einsum("kj,kjc->kc", w, tri[row]), got.p.double().numpy(), atol=5 * tol.max())
    # max_distance: inclusive, misses beyond
    near = scene.closest_point(p, max_distance=0.2)
    inside = dist <= 0.2 - tol
    assert near.is_valid().numpy()[inside].all() and not near.is_valid().numpy()[dist > 0.2 + tol].any()
    assert np.isinf(near.distance.numpy()[~near.is_valid().numpy()]).all()
    # signed distance: |sd| = distance, negative exactly where the float64 winding number > 1/2 (off the surface)
    a, b, c = (tri[None, :, k] - p64[:, None] for k in range(3))
    la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (a, b, c))
    num = (a * np.cross(b, c)).sum(-1)
    den = la * lb * lc + (a * b).sum(-1) * lc + (b * c).sum(-1) * la + (c * a).sum(-1) * lb
    winding = (2 * np.arctan2(num, den)).sum(1) / (4 * np.pi)
    off = dist > 1e-3
    sd = scene.signed_distance(p).double().numpy()
    np.testing.assert_array_less(np.abs(np.abs(sd) - dist)[off], tol[off])
    np.testing.assert_array_equal((sd < 0)[off], (winding > 0.5)[off])
    np.testing.assert_array_equal(scene.contains(p).numpy()[off], (winding > 0.5)[off])
    np.testing.assert_allclose(scene.winding_number(p, exact=True).double().numpy()[off], winding[off], atol=1e-4)
    assert np.abs(scene.winding_number(p).double().numpy() - winding)[off].max() <= 1e-2


# ---------------------------------------------------------------------- edges
def _edges(scene, shapes, dtype):
    """World end points (E, 3) x2 of every edge record, and which records are usable (enabled shapes)."""
    topo = scene.edge_topology()
    shape, v = topo.shape_id.numpy(), topo.v.numpy()
    a, b = np.zeros((len(shape), 3)), np.zeros((len(shape), 3))
    parts = _parts()
    for s, sh in enumerate(shapes):
        k = shape == s
        local = torch.tensor(parts[s if s < len(parts) else INSTANCES[s - len(parts)][0]][0], dtype=dtype).double().numpy()
        a[k] = local[v[k, 0]] @ sh["m"][:3, :3].T + sh["m"][:3, 3]
        b[k] = local[v[k, 1]] @ sh["m"][:3, :3].T + sh["m"][:3, 3]
    usable = np.array([shapes[s]["enabled"] for s in shape])
    return a, b, usable


@pytest.mark.parametrize("dtype", DTYPES)
def test_nearest_edges_match_brute_force_with_masks_and_instances(dtype):
    scene, shapes = _scene(dtype)
    a, b, usable = _edges(scene, shapes, dtype)
    rng = np.random.default_rng(4)
    mask = rng.uniform(size=len(a)) > 0.15
    scene.set_edge_mask(torch.tensor(mask))
    scene.sync()
    usable &= mask
    p = torch.tensor(np.concatenate([rng.uniform(-4, 4, (1500, 3)), a[rng.integers(0, len(a), 200)]]), dtype=dtype)
    p64 = p.double().numpy()
    dist = _point_segments(p64, a, b)
    dist[:, ~usable] = np.inf
    k, reach = 4, 0.4
    got = scene.nearest_edges(p, k, max_distance=reach)
    order = np.sort(np.where(dist <= reach, dist, np.inf), axis=1)[:, :k]
    tol = 2e-6 if dtype == torch.float32 else 5e-7  # float32 ranking of near ties (docs/known-limitations.md)
    gd = got.distance.double().numpy()
    np.testing.assert_array_equal(np.isfinite(gd), np.isfinite(order))
    fin = np.isfinite(order)
    np.testing.assert_array_less(np.abs(gd[fin] - order[fin]), tol)
    g = got.global_edge_id.numpy()
    assert usable[g[fin]].all() and (g[~fin] == -1).all()
    np.testing.assert_allclose(dist[np.nonzero(fin)[0], g[fin]], gd[fin], atol=tol)
    # sorted by the reported distance, ties by global_edge_id; distinct edges per query
    keys = [list(zip(gd[i], g[i])) for i in range(len(g))]
    assert all(row == sorted(row) for row in keys)
    assert all(len(set(r[fin[i]])) == fin[i].sum() for i, r in enumerate(g))
    one = scene.nearest_edge(p)
    np.testing.assert_array_less(np.abs(one.distance.double().numpy() - dist.min(1)), tol)
    topo = scene.edge_topology()
    h = one.global_edge_id.numpy()
    np.testing.assert_array_equal(one.edge_id.numpy(), topo.edge_id.numpy()[h])
    np.testing.assert_array_equal(one.shape_id.numpy(), topo.shape_id.numpy()[h])
    point = a[h] + one.edge_t.double().numpy()[:, None] * (b[h] - a[h])
    np.testing.assert_allclose(one.edge_point.double().numpy(), point, atol=10 * tol)


def _ray_segment_distance(o, d, lo, hi, a, b):
    """min |o + s d - (a + u (b - a))| over s in [lo, hi], u in [0, 1] (float64; hi may be inf)."""
    e, w = b - a, o - a
    aa, bb, cc, dd, ee = d @ d, e @ d, (e * e).sum(1), w @ d, (w * e).sum(1)
    den = aa * cc - bb * bb

    def at(s, u):
        return np.linalg.norm(o + s[:, None] * d - (a + u[:, None] * e), axis=1)

    with np.errstate(all="ignore"):
        s, u = (bb * ee - cc * dd) / den, (aa * ee - bb * dd) / den
    ok = (den > 1e-12 * aa * cc) & (s >= lo) & (s <= hi) & (u >= 0) & (u <= 1)
    best = np.where(ok, at(np.where(ok, s, 0), np.where(ok, u, 0)), np.inf)
    for end in (0.0, 1.0):
        s = np.clip(((a + end * e - o) @ d) / aa, lo, hi)
        best = np.minimum(best, at(s, np.full(len(a), end)))
    for s in (lo, hi):
        if np.isfinite(s):
            u = np.clip((((o + s * d) - a) * e).sum(1) / cc, 0, 1)
            best = np.minimum(best, at(np.full(len(a), s), u))
    return best


@pytest.mark.parametrize("dtype", DTYPES)
def test_nearest_edge_of_rays_matches_brute_force(dtype):
    scene, shapes = _scene(dtype)
    a, b, usable = _edges(scene, shapes, dtype)
    rng = np.random.default_rng(9)
    n = 300
    o, d = rng.uniform(-4, 4, (n, 3)), rng.standard_normal((n, 3)) * rng.uniform(0.2, 3, (n, 1))
    tmin = np.where(rng.uniform(size=n) < 0.5, rng.uniform(-1, 1, n), 0.0)
    tmax = np.where(rng.uniform(size=n) < 0.5, tmin + rng.uniform(0, 2, n), np.inf)
    tmax[:20] = tmin[:20]  # a point
    ray = rt.Ray(*(torch.tensor(x, dtype=dtype) for x in (o, d, tmax)), tmin=torch.tensor(tmin, dtype=dtype))
    got = scene.nearest_edge(ray)
    o, d, tmin, tmax = (x.double().numpy() for x in (ray.o, ray.d, ray.tmin, ray.tmax))
    ref = np.array([_ray_segment_distance(o[i], d[i], tmin[i], tmax[i], a[usable], b[usable]).min() for i in range(n)])
    tol = 2e-6 if dtype == torch.float32 else 5e-7
    np.testing.assert_array_less(np.abs(got.distance.double().numpy() - ref), tol * (1 + ref))
    s = got.ray_t.double().numpy()
    assert ((s >= tmin - 1e-12) & (s <= tmax + 1e-12)).all()
    np.testing.assert_allclose(got.ray_point.double().numpy(), o + s[:, None] * d, atol=10 * tol)
    np.testing.assert_allclose(np.linalg.norm(got.ray_point.double().numpy() - got.edge_point.double().numpy(), axis=1),
                               got.distance.double().numpy(), atol=10 * tol)


# ---------------------------------------------------------------------- reflections
@pytest.mark.parametrize("dtype", DTYPES)
def test_trace_reflections_is_a_loop_of_intersect(dtype):
    scene, _ = _scene(dtype)
    rng = np.random.default_rng(11)
    n, bounces = 4000, 5
    o = torch.tensor(rng.uniform(-3, 3, (n, 3)), dtype=dtype)
    d = torch.tensor(rng.standard_normal((n, 3)) * rng.uniform(0.3, 3, (n, 1)), dtype=dtype)
    chain = scene.trace_reflections(rt.Ray(o, d), bounces)
    origin, direction, skip, image = o, d, torch.full((n,), -1, dtype=torch.int32), o
    alive = torch.ones(n, dtype=torch.bool)
    tol = 1e-9 if dtype == torch.float64 else 1e-5
    for k in range(bounces):
        # tmin: the chain starts each later segment on the leaving side of the plane (docs/api.md);
        # a hand-written walk needs a small tmin for the coplanar neighbour at a shared edge
        hit = scene.intersect(rt.Ray(origin, direction, tmin=0.0 if k == 0 else 1e-6), active=alive, ignore=skip)
        valid = chain.is_valid()[:, k]
        assert int((hit.global_prim_id != chain.global_prim_id[:, k]).sum()) <= (0 if k == 0 else 2)
        same = valid & (hit.global_prim_id == chain.global_prim_id[:, k])
        assert int(same.sum()) > (300 if k == 0 else 50)
        for field in ("t", "p", "geo_n"):
            np.testing.assert_allclose(getattr(chain, field)[:, k][same].double().numpy(),
                                       getattr(hit, field)[same].double().numpy(), atol=tol * 10)
        g = hit.geo_n
        out = direction - 2 * (direction * g).sum(-1, keepdim=True) * g
        image = image - 2 * ((image - hit.p) * g).sum(-1, keepdim=True) * g
        np.testing.assert_allclose(chain.d_out[:, k][same].double().numpy(), out[same].double().numpy(), atol=tol * 10)
        np.testing.assert_allclose(chain.image_source[:, k][same].double().numpy(), image[same].double().numpy(),
                                   atol=tol * 100)
        alive = valid
        origin = torch.where(valid[:, None], chain.p[:, k], origin)
        direction = torch.where(valid[:, None], chain.d_out[:, k], direction)
        image = torch.where(valid[:, None], chain.image_source[:, k], image)
        skip = torch.where(valid, chain.global_prim_id[:, k], skip)
    t = torch.where(chain.is_valid(), chain.t, torch.zeros((), dtype=dtype))
    np.testing.assert_allclose(chain.path_length.double().numpy(), (t * d.norm(dim=-1, keepdim=True)).sum(-1).double().numpy(),
                               rtol=tol)
    assert torch.equal(chain.num_bounces, chain.is_valid().sum(-1).to(torch.int32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_specular_paths_match_a_float64_image_method(dtype):
    room_v, room_f = _box()
    room_v = room_v * np.array([8.0, 8.0, 5.0])
    room_f = room_f[:, ::-1].copy()  # facing inwards
    box_v, box_f = _box()
    box_m = _matrix([0, 0, 1], 0.5, (1, 1.5, 2), (1, 0.5, -1.5))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(room_v, dtype=dtype), torch.tensor(room_f)))
    box_id = scene.add_mesh(rt.Mesh(torch.tensor(box_v, dtype=dtype), torch.tensor(box_f), to_world=torch.tensor(box_m, dtype=dtype)))
    scene.add_instance(box_id, torch.tensor(_matrix([1, 0, 0], 0.3, (0.5, 0.5, 0.5), (-1.5, -1, 0.5)), dtype=dtype))
    scene.build()
    rounded = [torch.tensor(x, dtype=dtype).double().numpy() for x in (room_v, box_v, box_m)]
    inst = torch.tensor(_matrix([1, 0, 0], 0.3, (0.5, 0.5, 0.5), (-1.5, -1, 0.5)), dtype=dtype).double().numpy() @ rounded[2]
    tri = np.concatenate([rounded[0][room_f], (rounded[1] @ rounded[2][:3, :3].T + rounded[2][:3, 3])[box_f],
                          (rounded[1] @ inst[:3, :3].T + inst[:3, 3])[box_f]])
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    rng = np.random.default_rng(3)
    n, bounces = 1500, 2
    src = torch.tensor(rng.uniform(-3.5, 3.5, (n, 3)) * [1, 1, 0.6], dtype=dtype)
    dst = torch.tensor(rng.uniform(-3.5, 3.5, (n, 3)) * [1, 1, 0.6], dtype=dtype)
    count = rng.integers(0, bounces + 1, n)
    seq = np.where(np.arange(bounces)[None] < count[:, None],
                   np.where(rng.uniform(size=(n, bounces)) < 0.7, rng.integers(0, 12, (n, bounces)),
                            rng.integers(0, len(tri), (n, bounces))), -1)
    paths = scene.specular_paths(src, dst, torch.tensor(seq))
    s64, d64 = src.double().numpy(), dst.double().numpy()
    valid, length, margin = np.zeros(n, bool), np.full(n, np.inf), np.full(n, np.inf)
    for i in range(n):
        faces = [f for f in seq[i] if f >= 0]
        images = [s64[i]]
        for f in faces:
            images.append(images[-1] - 2 * ((images[-1] - tri[f, 0]) @ normal[f]) * normal[f])
        points, cur, ok = [], d64[i], True
        for j in range(len(faces) - 1, -1, -1):
            f, ray = faces[j], images[j + 1] - cur
            s = ((tri[f, 0] - cur) @ normal[f]) / (ray @ normal[f])
            ok &= 0 < s < 1
            cur = cur + s * ray
            w = np.linalg.lstsq(np.stack([tri[f, 1] - tri[f, 0], tri[f, 2] - tri[f, 0]], 1), cur - tri[f, 0], rcond=None)[0]
            w = np.array([1 - w.sum(), *w])
            margin[i] = min(margin[i], np.abs(w).min())
            ok &= w.min() >= -1e-9
            points.insert(0, cur)
        chain = [s64[i], *points, d64[i]]
        for j, f in enumerate(faces):
            sides = [(chain[j] - tri[f, 0]) @ normal[f], (chain[j + 2] - tri[f, 0]) @ normal[f]]
            margin[i] = min(margin[i], *np.abs(sides))
            ok &= sides[0] * sides[1] > 0
        ends = [-1, *faces, -1]
        for j in range(len(chain) - 1):
            if ok and (chain[j] != chain[j + 1]).any():
                t = _ray_triangles(chain[j][None], (chain[j + 1] - chain[j])[None], tri)[0][0]
                t[[f for f in (ends[j], ends[j + 1]) if f >= 0]] = np.inf
                ok &= not ((t > 1e-4) & (t < 1 - 1e-4)).any()
        valid[i] = ok
        if ok:
            length[i] = sum(np.linalg.norm(chain[j + 1] - chain[j]) for j in range(len(chain) - 1))
    sure = margin > 1e-6
    assert valid.sum() > 300
    np.testing.assert_array_equal(paths.valid.numpy()[sure], valid[sure])
    both = paths.valid.numpy() & valid
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    np.testing.assert_allclose(paths.length.double().numpy()[both], length[both], rtol=tol)
    assert np.isinf(paths.length.numpy()[~paths.valid.numpy()]).all()
    np.testing.assert_array_equal(paths.num_bounces.numpy(), count)


# ---------------------------------------------------------------------- malformed rays, empty batches
@pytest.mark.parametrize("dtype", DTYPES)
def test_malformed_rays_are_misses_everywhere(dtype):
    scene, _ = _scene(dtype)
    nan, inf = float("nan"), float("inf")
    d = torch.tensor([[0, 0, 0], [nan, 0, 1], [inf, 0, 0], [0, -inf, 1], [0, 0, -1]], dtype=dtype)
    o = torch.tensor([0.0, 0.0, 3.9], dtype=dtype)
    hit = scene.intersect(rt.Ray(o, d))
    assert hit.is_valid().tolist() == [False] * 4 + [True]
    assert scene.shadow_test(rt.Ray(o, d)).tolist() == [False] * 4 + [True]
    assert not torch.isnan(hit.p).any() and not torch.isnan(hit.n).any()
    chain = scene.trace_reflections(rt.Ray(o, d), 3)
    assert chain.num_bounces[:4].tolist() == [0] * 4 and not torch.isnan(chain.p).any()
    edge = scene.nearest_edge(rt.Ray(o, d))
    assert edge.global_edge_id[:4].tolist() == [-1] * 4 and not torch.isnan(edge.ray_point).any()
    for shape in [(0, 3), (2, 0, 3)]:
        z = torch.zeros(shape, dtype=dtype)
        assert scene.intersect(rt.Ray(z, z)).t.shape == shape[:-1]
        assert scene.closest_point(z).p.shape == shape
        assert scene.nearest_edges(z, 3).distance.shape == shape[:-1] + (3,)
        assert scene.trace_reflections(rt.Ray(z, z), 2).t.shape == shape[:-1] + (2,)
