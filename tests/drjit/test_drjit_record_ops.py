"""rayd.drjit records: ``detach()`` and selecting queries (mask, integer array, int, slice)."""

from __future__ import annotations

import pytest

pytest.importorskip("drjit")

import rayd.drjit as rd  # noqa: E402


def _scene(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(m.Array3f([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2])))
    scene.build()
    return scene


def _close(value, expected, tol=1e-6):
    import numpy as np

    got = np.array(value, dtype=np.float64)
    want = np.array(expected, dtype=np.float64)
    return got.shape == want.shape and np.allclose(got, want, atol=tol, rtol=0)


def test_records_select_detach(m):
    import drjit as dr

    scene = _scene(m)
    o = m.Array3f([0.2, 5.0, 0.1], [0.2, 5.0, 0.3], [1.0, 1.0, 2.0])
    dr.enable_grad(o)
    hit = scene.intersect(rd.Ray(o, m.Array3f(0.0, 0.0, -1.0)))
    sel = hit[hit.is_valid()]
    assert type(sel) is rd.Intersection and sel.flags == hit.flags and sel.fields == hit.fields
    assert sel.shape == (2,) and _close(sel.t, [1.0, 2.0])
    assert _close(sel.p, [[0.2, 0.1], [0.2, 0.3], [0.0, 0.0]])  # Array3f prints as (3, N)
    assert list(sel.prim_id) == [0, 0]
    dr.backward(dr.sum(sel.t))  # gathered fields stay differentiable: t = o_z
    assert _close(dr.grad(o), [[0, 0, 0], [0, 0, 0], [1, 0, 1]])
    assert not dr.grad_enabled(hit.detach().t) and dr.grad_enabled(hit.t)
    picked = hit[m.UInt32([2, 1])]
    assert _close(picked.t, [2.0, float("inf")]) and list(picked.shape_id) == [0, -1]
    assert _close(hit[-1].t, [2.0]) and _close(hit[0:2].t, [1.0, float("inf")])
    with pytest.raises(IndexError, match=r"rayd.drjit.Intersection\[mask\]: a mask must have the record's width 3"):
        hit[m.Bool([True, False])]
    with pytest.raises(IndexError, match="out of range"):
        hit[m.UInt32([3])]
    with pytest.raises(TypeError, match=r"rayd.drjit.Intersection\[...\]: the index must be"):
        hit["a"]


def test_nearest_edges_select_keeps_k_slots(m):
    scene = _scene(m)
    near = scene.nearest_edges(m.Array3f([0.5, 0.2], [-1.0, 0.2], [0.0, 0.0]), 2)
    assert near.shape == (2, 2)
    sel = near[m.Bool([False, True])]
    assert sel.shape == (1, 2) and _close(sel.distance, [0.2, 0.2])
    assert list(sel.global_edge_id) == list(near.global_edge_id)[2:]
    first = near[m.Bool([True, False])]
    assert first.shape == (1, 2) and _close(first.distance[0:1], [1.0])
