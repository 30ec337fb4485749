"""``count_intersections`` counts crossings: a ray that only touches a surface there counts 0 (rayd.torch).

Session 20 (helper limits20) fixed docs/known-limitations.md's "A ray that only touches a
closed mesh counts the touch once": each merged hit of a shared edge or vertex counts the
crossings of the ray displaced by an infinitesimal (``rayd.engine.watertight.watertight_hit``),
so a tangential touch counts 0 and a ray through a closed mesh keeps the parity of its
origin (inside: odd). ``intersect_all`` still lists the touch (one hit, as ``intersect``
finds it). Every test runs on the CPU's Embree and Warp paths (``RAYD_CPU_ACCEL``), in
float32 and float64; the all-hits search itself is one Warp kernel on the CPU and CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayd.torch as rt
from rayd.engine import cpu_embree
from reference import grid
from touch_reference import (OCTA_F, OCTA_V, bumpy_sphere, edge_rays, inside, oriented_cube, rotation,
                             rays_through, vertex_and_edge_rays)

DTYPES = [torch.float32, torch.float64]


@pytest.fixture(params=["embree", "warp"])
def accel(request):
    """The CPU search path of the scene's other queries (the all-hits search is Warp's on both)."""
    before = cpu_embree._enabled
    cpu_embree.set_enabled(request.param == "embree")
    yield request.param
    cpu_embree.set_enabled(before)


def _scene(meshes, device, dtype):
    scene = rt.Scene()
    for v, f in meshes:
        scene.add_mesh(rt.Mesh(torch.tensor(np.asarray(v), dtype=dtype, device=device),
                               torch.tensor(np.asarray(f), device=device)))
    scene.build()
    return scene


def _ray(o, d, device, dtype):
    return rt.Ray(torch.tensor(o, dtype=dtype, device=device), torch.tensor(d, dtype=dtype, device=device))


def _octahedron(rng, offset=0.0):
    r = rotation(rng)
    c = rng.normal(size=3) * 0.1 + offset
    return OCTA_V @ r.T + c, r, c


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0.0, 100.0])
def test_octahedron_apex_touches_count_zero_and_crossings_two(device, dtype, accel, offset):
    rng = np.random.default_rng(1)
    v, r, c = _octahedron(rng, offset)
    scene = _scene([(v, OCTA_F)], device, dtype)
    apex = np.repeat(v, 40, 0)
    axis = np.repeat(v - c, 40, 0)
    d = rng.normal(size=apex.shape)
    d -= axis * (np.einsum("nk,nk->n", d, axis) / np.einsum("nk,nk->n", axis, axis))[:, None]  # tangent
    o, d = rays_through(apex, d, 3.0)
    touch = _ray(o, d, device, dtype)
    assert (scene.count_intersections(touch) == 0).all()
    listed = scene.intersect_all(touch, 4).is_valid().sum(-1)
    assert (listed <= 1).all()  # a touch (where rounding leaves one) is listed as one hit
    into = -axis + 0.15 * rng.normal(size=axis.shape) * np.linalg.norm(axis, axis=1, keepdims=True)
    o, d = rays_through(apex, into, 3.0)
    assert (scene.count_intersections(_ray(o, d, device, dtype)) == 2).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_rays_through_vertices_and_edges_keep_the_parity_of_their_origin(device, dtype, accel, seed):
    rng = np.random.default_rng(seed)
    v, f = bumpy_sphere(seed)
    v = v @ rotation(rng).T + rng.normal(size=3)
    o, d = vertex_and_edge_rays(v, f, rng)
    want, clear = inside(o, v, f)
    assert clear.sum() > 0.95 * len(o) and 0.05 < want.mean() < 0.95
    count = _scene([(v, f)], device, dtype).count_intersections(_ray(o, d, device, dtype)).cpu().numpy()
    bad = clear & ((count % 2 == 1) != want)
    assert not bad.any(), (np.nonzero(bad)[0][:10], count[bad][:10])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0.0, 50.0])
def test_grazing_an_edge_of_a_cube_counts_zero(device, dtype, accel, offset):
    rng = np.random.default_rng(3)
    v, f, _ = oriented_cube(rng, 2.0, offset)
    scene = _scene([(v, f)], device, dtype)
    o, d = edge_rays(v, f, rng, "touch")
    assert (scene.count_intersections(_ray(o, d, device, dtype)) == 0).all()
    o, d = edge_rays(v, f, rng, "cross")
    assert (scene.count_intersections(_ray(o, d, device, dtype)) == 2).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_rays_along_the_edges_of_a_cube_count_evenly(device, dtype, accel):
    from touch_reference import CUBE_F, CUBE_V

    scene = _scene([(CUBE_V, CUBE_F)], device, dtype)
    o, d = [], []
    for a, b in ((0, 1), (0, 2), (0, 4), (3, 7), (5, 7), (6, 7), (1, 3), (4, 6)):
        o += [CUBE_V[a] - 2 * (CUBE_V[b] - CUBE_V[a]), CUBE_V[b] + 2 * (CUBE_V[b] - CUBE_V[a])]
        d += [CUBE_V[b] - CUBE_V[a], CUBE_V[a] - CUBE_V[b]]
    count = scene.count_intersections(_ray(np.array(o), np.array(d), device, dtype))
    assert (count % 2 == 0).all(), count


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_touch_and_a_crossing_in_one_scene(device, dtype, accel):
    """The strict xfail of session 19 (now ``test_all_hits_parity.py``'s) with ``intersect_all``'s view:
    the touch stays one hit there; the count is that of the crossings."""
    scene = _scene([(OCTA_V, OCTA_F), (OCTA_V + [3.0, 0.1, -0.95], OCTA_F)], device, dtype)
    o = np.array([[-3.0, 0.1, 0.05], [0.5, -2.0, 0.5], [-3.0, 0.0, 1.0]])
    d = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ray = _ray(o, d, device, dtype)
    assert scene.count_intersections(ray).tolist() == [2, 0, 0]
    hits = scene.intersect_all(ray, 8)
    assert hits.is_valid().sum(-1).tolist() == [3, 1, 1]
    torch.testing.assert_close(hits.t[:, 0], scene.intersect(ray).t)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_touch_at_the_origin_is_not_taken_off_twice(device, dtype, accel):
    """A ray from the apex of one octahedron (a touch at ``t = 0``, outside ``(tmin, tmax)``) through another:
    a float64 count is searched below ``tmin`` and takes off the crossings at or before it; the touch is none."""
    scene = _scene([(OCTA_V, OCTA_F), (OCTA_V + [3.0, 0.0, 1.0], OCTA_F)], device, dtype)
    o = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [-2.0, 0.0, 1.0]])
    d = np.array([[1.0, 0.0, 0.0], [0.3, 0.1, -1.0], [1.0, 0.0, 0.0]])
    assert scene.count_intersections(_ray(o, d, device, dtype)).tolist() == [2, 1, 2]


@pytest.mark.parametrize("dtype", DTYPES)
def test_open_meshes_count_a_boundary_edge_once_and_a_fold_zero(device, dtype, accel):
    """Open surfaces: a ray through an interior vertex or a boundary edge of a flat grid counts 1; through
    a boundary vertex, as the ray displaced by an infinitesimal (0 or 1); a ray over the ridge of an
    open roof (two faces folded over the ray) counts 0, through it 1. ``intersect_all`` lists each as a hit."""
    v, f = grid(4)
    roof_v = np.array([[0.0, -1, 0], [0, 1, 0], [-1, 0, -1], [1, 0, -1]]) + [10.0, 0, 0]
    roof_f = np.array([[0, 1, 2], [1, 0, 3]])
    scene = _scene([(v, f), (roof_v, roof_f)], device, dtype)
    targets = np.array([[0.0, 0.0, 0.0], [0.5, -0.5, 0.0], [0.25, -1.0, 0.0], [1.0, 0.3, 0.0],
                        [10.0, 0.3, 0.0], [10.0, -0.2, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [-1.0, -1.0, 0.0]])
    d = np.array([[0.25, 0.25, -1.0], [-0.25, 0.125, 1.0], [0.0, 0.5, -1.0], [0.25, 0.125, -1.0],
                  [1.0, 0.125, 0.0], [0.0, 0.125, -1.0], [-0.25, 0.125, -1.0], [-0.25, -0.25, -1.0],
                  [0.125, 0.25, 1.0]])
    ray = _ray(targets - 2.0 * d, d, device, dtype)  # exact in float32: through the targets at t = 2
    count = scene.count_intersections(ray).tolist()
    listed = scene.intersect_all(ray, 4).is_valid().sum(-1).tolist()
    assert listed == scene.intersect(ray).is_valid().to(torch.int64).tolist()
    assert count[:6] == [1, 1, listed[2], 1, 0, 1] and all(c in (0, 1) for c in count[6:])
    if dtype == torch.float32:
        assert listed == [1] * 9  # (float64 searches from the widened tmin's origin: [2] may miss)
