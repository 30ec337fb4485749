"""The per-ray-sheared watertight test (rayd.engine.watertight.ray_shear / sheared_t): the same
answers as the all-float64 test away from edges, no leaks through shared edges and vertices
(float32 edge functions with the float64 fall-back at exact zeros), both faces counted."""

from __future__ import annotations

import numpy as np
import reference
import warp as wp

from rayd.engine import runtime  # noqa: F401  (starts Warp quietly)
from rayd.engine.watertight import ray_shear, sheared_t, watertight_t

wp.set_module_options({"enable_backward": False})


@wp.kernel
def _both_kernel(o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), tris: wp.array(dtype=wp.vec3),
                 t_new: wp.array2d(dtype=float), t_old: wp.array2d(dtype=float)):
    i, j = wp.tid()
    k, sh = ray_shear(d[i])
    a = tris[3 * j]
    b = tris[3 * j + 1]
    c = tris[3 * j + 2]
    t_new[i, j] = sheared_t(o[i], k, sh, a, b, c)
    t_old[i, j] = watertight_t(o[i], d[i], a, b, c)


def _run(o, d, tris):
    n, m = len(o), len(tris)
    t_new = wp.empty((n, m), dtype=float, device="cpu")
    t_old = wp.empty((n, m), dtype=float, device="cpu")
    wp.launch(_both_kernel, (n, m), [wp.array(o.astype(np.float32), dtype=wp.vec3, device="cpu"),
                                     wp.array(d.astype(np.float32), dtype=wp.vec3, device="cpu"),
                                     wp.array(tris.reshape(-1, 3).astype(np.float32), dtype=wp.vec3, device="cpu")],
              [t_new, t_old], device="cpu")
    return t_new.numpy(), t_old.numpy()


def test_matches_float64_test_on_random_triangles():
    rng = np.random.default_rng(3)
    tris = rng.uniform(-1, 1, (200, 3, 3)).astype(np.float32)
    o = rng.uniform(-3, 3, (300, 3)).astype(np.float32)
    d = (rng.uniform(-0.5, 0.5, (300, 3)) - o).astype(np.float32)
    d[::7, 1] = 0.0  # zero direction components
    d[::11] *= -1.0  # negative dominant axes
    t_new, t_old = _run(o, d, tris)
    hit_new, hit_old = np.isfinite(t_new), np.isfinite(t_old)
    # Hit/miss may differ only within rounding of a triangle's rim (here: never, at these sizes)
    assert (hit_new != hit_old).mean() < 1e-4
    both = hit_new & hit_old
    assert both.sum() > 1000 and (t_new[both] < 0).any()  # hits behind the origin are returned too
    np.testing.assert_allclose(t_new[both], t_old[both], rtol=2e-5, atol=1e-6)


def _fan_rays(vertices, faces, rng, count):
    """Rays through shared vertices and points of shared edges (float32), from outside roughly toward the centre."""
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    pick = edges[rng.integers(0, len(edges), count)]
    s = rng.choice(np.array([0.0, 0.5, 0.25, 1.0 / 3.0]), count)[:, None]
    target = ((1 - s) * vertices[pick[:, 0]] + s * vertices[pick[:, 1]]).astype(np.float32)
    o = (3.0 * target + 0.6 * rng.standard_normal((count, 3))).astype(np.float32)
    return o, (target - o).astype(np.float32)


def test_no_leaks_through_shared_edges_and_vertices_of_a_closed_mesh():
    v, f = reference.icosphere(2)
    v = v.astype(np.float32)
    rng = np.random.default_rng(5)
    o, d = _fan_rays(v, f, rng, 1500)
    t_new, t_old = _run(o, d, v[f])
    # Each ray enters the convex, closed surface at its target (t = 1): it must hit at least
    # one triangle around that point (a leak would hit none there).
    for t in (t_new, t_old):
        assert (np.abs(t - 1.0) < 1e-4).any(axis=1).all()
    np.testing.assert_array_equal(np.isfinite(t_new).sum(1) >= 2, True)  # entry and exit


def test_float64_fallback_on_axis_aligned_grid():
    """Straight-down rays through grid vertices and edges make float32 edge functions exactly 0."""
    v, f = reference.grid(8)
    v = v.astype(np.float32)
    xs = np.linspace(-1.0, 1.0, 17)[1:-1].astype(np.float32)
    gx, gy = np.meshgrid(xs, xs, indexing="ij")
    o = np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, 1.0, np.float32)], 1)
    d = np.tile(np.array([[0.0, 0.0, -1.0]], np.float32), (len(o), 1))
    t_new, t_old = _run(o, d, v[f])
    assert np.isfinite(t_new).any(axis=1).all()
    np.testing.assert_array_equal(np.isfinite(t_new), np.isfinite(t_old))
    np.testing.assert_allclose(t_new[np.isfinite(t_new)], 1.0, rtol=0, atol=1e-6)
    # from below: the back faces count as well
    t_up, _ = _run(o * np.array([1, 1, -1], np.float32), -d, v[f])
    assert np.isfinite(t_up).any(axis=1).all()
