"""The fused refit (rayd.engine.refit): after moving every vertex, the same boxes bit for bit
as Warp's refit followed by a copy into the pair nodes (Warp's node boxes, the pair nodes,
the triangle boxes, the leaf-ordered corners), the magnitude reduction equals the maximum,
and queries after the fused refit match a fresh build."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from rayd.engine import refit, triangles


def _tri(v, f, kind, face_base=0, order="climb", device="cpu"):
    was, was_order = triangles.refit_kind(), refit.refit_order()
    triangles.set_refit(kind)
    refit.set_refit_order(order)
    try:
        return triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device=device),
                                       wp.array(f.ravel(), dtype=wp.int32, device=device),
                                       num_triangles=len(f) - face_base, face_base=face_base, layout="pair",
                                       bvh_constructor="sah")  # Warp's tree: the one both refits apply to
    finally:
        triangles.set_refit(was)
        refit.set_refit_order(was_order)


def _state(tri):
    return [tri.nodes.lowers.numpy(), tri.nodes.uppers.numpy(), tri.pairs.boxes.numpy(), tri.lowers.numpy(),
            tri.uppers.numpy(), tri.pairs.tris.numpy(), tri.magnitude.numpy()]


@pytest.mark.parametrize("order", refit.ORDERS)
@pytest.mark.parametrize("count,face_base", [(1, 0), (2, 0), (300, 0), (300, 17), (5000, 3)])
def test_fused_refit_equals_warp_refit(count, face_base, order, device):
    rng = np.random.default_rng(count)
    v = rng.uniform(-1, 1, (3 * count, 3)).astype(np.float32)
    f = rng.permutation(3 * count).reshape(-1, 3).astype(np.int32)
    fused = _tri(v, f, "fused", face_base, order, device)
    plain = _tri(v, f, "warp", face_base, order, device)
    assert fused.fused.order == order
    assert fused.fused is not None and plain.fused is None
    for a, b in zip(_state(fused), _state(plain)):
        np.testing.assert_array_equal(a, b)
    moved = (v * rng.uniform(0.5, 3.0, (len(v), 1)) + 7.0).astype(np.float32)
    for tri in (fused, plain):
        tri.points.assign(moved)
        tri.refit()
    for a, b in zip(_state(fused), _state(plain)):
        np.testing.assert_array_equal(a, b)
    assert fused.magnitude.numpy()[0] == np.abs(moved).max()


def test_refit_order_is_checked():
    with pytest.raises(ValueError, match="set_refit_order"):
        refit.set_refit_order("sideways")


def test_magnitude_reduction_many_points():
    rng = np.random.default_rng(0)
    pts = rng.standard_normal((200_003, 3)).astype(np.float32)
    pts[123_456, 1] = -50.0
    # (refit.magnitude, the same reduction with memsets, was removed: magnitude_zeroed is the one refits use)
    from rayd.engine.runtime import LaunchCache

    out = wp.full(1, 7.0, dtype=float, device="cpu")  # cleared by the first pass
    partial = wp.zeros(256, dtype=float, device="cpu")
    refit.magnitude_zeroed(wp.array(pts, dtype=wp.vec3, device="cpu"), out, partial, None, LaunchCache())
    assert out.numpy()[0] == 50.0
    assert not partial.numpy().any()  # left zero for the next call


@pytest.mark.parametrize("threads", [256, 65536, 262144])
def test_magnitude_threads_leave_the_same_magnitude(threads, device):
    """``refit.set_magnitude_threads``: the refit's first pass and the placement that folds it give the same
    magnitude (a maximum) for any number of threads, with the partial maxima left zero."""
    from rayd.engine.assemble import DeferredChecks, place_points
    from rayd.engine.runtime import LaunchCache

    rng = np.random.default_rng(threads)
    pts = rng.standard_normal((100_003, 3)).astype(np.float32)
    pts[77_777, 2] = -40.0
    was = refit.magnitude_threads()
    refit.set_magnitude_threads(threads)
    try:
        launches, checks = LaunchCache(), DeferredChecks()
        src = wp.array(pts, dtype=wp.vec3, device=device)
        placed = wp.zeros(len(pts), dtype=wp.vec3, device=device)
        for fold in (False, True):
            out = wp.full(1, 7.0, dtype=float, device=device)
            partial = wp.zeros(256, dtype=float, device=device)
            if fold:
                place_points(src, None, 0, placed, checks=(checks.begin(1, device), 0), launches=launches,
                             magnitude=(partial, out, True))
            refit.magnitude_zeroed(placed if fold else src, out, partial, None, launches, partials_ready=fold)
            assert out.numpy()[0] == 40.0
            assert not partial.numpy().any()
        np.testing.assert_array_equal(placed.numpy(), pts)
    finally:
        refit.set_magnitude_threads(was)
    with pytest.raises(ValueError, match="set_magnitude_threads"):
        refit.set_magnitude_threads(255)
