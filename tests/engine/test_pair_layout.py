"""rayd's child-pair node layout (rayd.engine.pair_nodes / pair_walk) against Warp's layout
and the float64 reference: the same winners on every scene shape (one leaf, soups, grids,
several meshes with disabled shapes and ignored faces, instances), after refits, for closest
and any hit; and the node encoding itself."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import reference
import torch

import rayd.torch as rt
from rayd.engine import instances, triangles
from rayd.engine.pair_nodes import PairNodes


@contextlib.contextmanager
def layout(name):
    was = triangles.bvh_layout()
    triangles.set_bvh_layout(name)
    try:
        yield
    finally:
        triangles.set_bvh_layout(was)


def _scene(meshes, device, instances=()):
    scene = rt.Scene()
    for v, f in meshes:
        scene.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device)), dynamic=True)
    for mesh_id, m in instances:
        scene.add_instance(mesh_id, torch.tensor(m, dtype=torch.float32, device=device))
    scene.build()
    return scene


def _soup(seed, count):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-1, 1, (count, 1, 3))
    v = (centres + 0.3 * rng.standard_normal((count, 3, 3))).reshape(-1, 3).astype(np.float32)
    return v, np.arange(3 * count, dtype=np.int32).reshape(-1, 3)


def _rays(seed, n, device, spread=1.0, aim=None):
    """Rays from a radius-3 cloud toward a box of half-size ``spread`` (or points of the triangles ``aim``)."""
    rng = np.random.default_rng(seed)
    o = (3.0 * rng.standard_normal((n, 3))).astype(np.float32)
    target = rng.uniform(-spread, spread, (n, 3))
    if aim is not None:
        w = rng.dirichlet((1.0, 1.0, 1.0), n)
        tri = aim[rng.integers(0, len(aim), n)]
        target = np.where(rng.uniform(size=(n, 1)) < 0.7, np.einsum("nk,nkc->nc", w, tri), target)
    d = (target - o).astype(np.float32)
    return o, d, rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))


def _both(meshes, device, ray, instances=(), **kw):
    out = {}
    for name in ("warp", "pair"):
        with layout(name):
            scene = _scene(meshes, device, instances)
        assert scene._core.accel.layout == name
        hit = scene.intersect(ray, flags=rt.RayFlags.Minimal, **kw)
        out[name] = (hit.prim_id.cpu().numpy(), hit.shape_id.cpu().numpy(), hit.t.cpu().numpy(),
                     scene.shadow_test(ray, **kw).cpu().numpy(), scene, hit.global_prim_id)
    return out


def _same(out):
    a, b = out["warp"], out["pair"]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])
    np.testing.assert_array_equal(a[3], b[3])


@pytest.mark.parametrize("count", [1, 2, 3, 57, 800])
def test_soup_matches_warp_layout_and_reference(device, count):
    v, f = _soup(count, count)
    o, d, ray = _rays(count + 1, 3000, device, aim=v[f])
    out = _both([(v, f)], device, ray)
    _same(out)
    ref = reference.closest_hit(o.astype(np.float64), d.astype(np.float64), v.astype(np.float64), f)
    prim = out["pair"][0]
    assert (prim >= 0).sum() > 1000
    # Soups have no shared edges: any disagreement would be a rounding tie at a triangle rim.
    assert (prim != ref["prim"]).mean() < 2e-3
    np.testing.assert_array_equal(out["pair"][3], prim >= 0)


def test_grid_several_meshes_disabled_ignore_and_refit(device):
    v1, f1 = reference.grid(24)
    v2, f2 = _soup(5, 300)
    meshes = [(v1.astype(np.float32), f1.astype(np.int32)), (v2, f2)]
    o, d, ray = _rays(7, 4000, device, spread=0.8)
    out = _both(meshes, device, ray)
    _same(out)
    # ignore the winners: the next face behind them (same in both layouts)
    gid = out["warp"][5]
    assert (gid >= 0).sum() > 1000
    _same(_both(meshes, device, ray, ignore=gid))
    res = {}
    for name in ("warp", "pair"):
        scene = out[name][4]
        scene.set_shape_enabled(0, False)
        scene.update_mesh_vertices(1, torch.tensor(v2 * 1.3 + 0.2, device=device))
        scene.sync()
        hit = scene.intersect(ray, flags=rt.RayFlags.Minimal)
        res[name] = (hit.prim_id.cpu().numpy(), hit.t.cpu().numpy(), scene.shadow_test(ray).cpu().numpy())
        assert (hit.shape_id.cpu().numpy() != 0).all()
    for k in range(3):
        np.testing.assert_array_equal(res["warp"][k], res["pair"][k])
    ref = reference.closest_hit(o.astype(np.float64), d.astype(np.float64), (v2 * 1.3 + 0.2).astype(np.float32)
                                .astype(np.float64), f2)
    assert (res["pair"][0] != ref["prim"]).mean() < 2e-3


def test_instances_with_flat_part(device):
    v, f = reference.icosphere(2)
    v = v.astype(np.float32)
    f = f.astype(np.int32)
    m = np.eye(4, dtype=np.float32)
    m[:3, 3] = (2.5, 0.0, 0.0)
    o, d, ray = _rays(3, 3000, device, spread=2.5)
    m2 = np.diag([0.5, 0.7, 1.5, 1.0]).astype(np.float32)
    m2[:3, 3] = (-2.0, 0.3, 0.1)
    out = _both([(v, f)], device, ray, instances=[(0, m), (0, m2)])
    _same(out)
    assert set(np.unique(out["pair"][1])) == {-1, 0, 1, 2}
    walk = instances.instance_walk()  # RAYD_INSTANCE_WALK: the shared-stack walks have their own kernels
    if walk == "auto":  # the default: the wide_blas walk on CUDA (session 20), the nested one on the CPU
        walk = "wide_blas" if str(device).startswith("cuda") else "nested"
    suffix = "pair" if walk == "nested" else walk
    assert out["pair"][4]._core.accel.search_walk == "both_" + suffix
    # only the instances (the mesh itself disabled), then a refit of the shared mesh
    res = {}
    for name in ("warp", "pair"):
        scene = out[name][4]
        scene.set_shape_enabled(0, False)
        scene.sync()
        assert scene._core.accel.search_walk == ("instances_" + suffix if name == "pair" else "instances")
        first = scene.intersect(ray, flags=rt.RayFlags.Minimal)
        scene.update_mesh_vertices(0, torch.tensor(v * 1.2, device=device))
        scene.sync()
        second = scene.intersect(ray, flags=rt.RayFlags.Minimal)
        res[name] = [x.cpu().numpy() for x in (first.prim_id, first.shape_id, first.t, second.prim_id, second.t,
                                                scene.shadow_test(ray))]
    for a, b in zip(res["warp"], res["pair"]):
        np.testing.assert_array_equal(a, b)
    assert (res["pair"][1] != 0).all() and (res["pair"][3] >= 0).sum() > 300


def test_watertight_grid_straight_rays(device):
    """Rays through every vertex and edge midpoint of a grid: the pair walk never leaks."""
    v, f = reference.grid(16)
    v = v.astype(np.float32)
    xs = np.linspace(-1.0, 1.0, 33)[1:-1]
    gx, gy = np.meshgrid(xs, xs, indexing="ij")
    o = np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, 2.0)], 1).astype(np.float32)
    d = np.tile(np.array([[0.0, 0.0, -1.0]], np.float32), (len(o), 1))
    d[1::2] += np.array([1e-3, -2e-3, 0.0], np.float32)
    ray = rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device))
    out = _both([(v, f.astype(np.int32))], device, ray)
    assert (out["pair"][0] >= 0).all()
    assert out["pair"][3].all()


def test_pair_encoding_single_leaf_and_counts():
    """A one-triangle BVH is a single leaf: the root ref encodes slot 0, count 1."""
    import warp as wp

    pts = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), dtype=wp.vec3, device="cpu")
    idx = wp.array(np.array([0, 1, 2], np.int32), dtype=wp.int32, device="cpu")
    tri = triangles.TriangleScene(pts, idx, layout="pair")
    assert tri.pairs.root == -1
    v, f = _soup(11, 40)
    tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device="cpu"),
                                  wp.array(f.ravel(), dtype=wp.int32, device="cpu"), layout="pair",
                                  bvh_constructor="sah")  # leaves of one triangle (RAYD_BVH_CONSTRUCTOR aside)
    pairs: PairNodes = tri.pairs
    links = pairs.links.numpy()[3::4, :2]
    assert pairs.root == 0 and links.shape[0] == 39  # F - 1 inner nodes with one triangle per leaf
    leaves = links[links < 0]
    code = -1 - leaves
    assert sorted((code >> 3).tolist()) == list(range(40)) and ((code & 7) == 0).all()
    inner = links[links >= 0]
    assert sorted(inner.tolist()) == list(range(1, 39))


def test_leaf_tris_follow_points_after_refit():
    """The leaf-ordered triangle copy holds the corners of ``primitives[slot]``, also after a refit."""
    import warp as wp

    v, f = _soup(12, 64)
    pts = wp.array(v, dtype=wp.vec3, device="cpu")
    tri = triangles.TriangleScene(pts, wp.array(f.ravel(), dtype=wp.int32, device="cpu"), layout="pair")

    def check(points):
        prim = tri.nodes.primitives.numpy()
        tris = tri.pairs.tris.numpy().reshape(-1, 3, 4)[:, :, :3]
        np.testing.assert_array_equal(tris, points[f[prim]])

    check(v)
    moved = (v * 2.0 - 0.5).astype(np.float32)
    pts.assign(moved)
    tri.refit()
    check(moved)


def test_cubql_option_guards_cpu_and_small_scenes(device):
    """``set_bvh_constructor("cubql")``: CPU scenes and scenes below CUBQL_MIN_TRIANGLES keep SAH;
    on CUDA a large scene is built by cuBQL (leaf 2) and finds the same hits."""
    v, f = reference.grid(8)
    big_v, big_f = reference.grid(64)  # 8192 triangles
    o, d, ray = _rays(9, 4000, device, spread=0.9)
    was = triangles.bvh_constructor()
    try:
        triangles.set_bvh_constructor("cubql")
        small = _scene([(v.astype(np.float32), f.astype(np.int32))], device)
        big = _scene([(big_v.astype(np.float32), big_f.astype(np.int32))], device)
    finally:
        triangles.set_bvh_constructor(was)
    assert small._core.accel.flat.constructor == "sah"
    assert big._core.accel.flat.constructor == ("sah" if device == "cpu" else "cubql")
    sah = _scene([(big_v.astype(np.float32), big_f.astype(np.int32))], device)
    a = big.intersect(ray, flags=rt.RayFlags.Minimal)
    b = sah.intersect(ray, flags=rt.RayFlags.Minimal)
    assert (b.prim_id >= 0).sum() > 1000
    # ties on shared edges may pick either triangle; t agrees everywhere
    assert (a.prim_id == b.prim_id).float().mean() > 0.999
    torch.testing.assert_close(a.t, b.t, rtol=1e-6, atol=0)
    torch.testing.assert_close(big.shadow_test(ray), sah.shadow_test(ray))
    with pytest.raises(ValueError, match="set_bvh_constructor"):
        triangles.set_bvh_constructor("bogus")
