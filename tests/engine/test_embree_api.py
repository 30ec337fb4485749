"""Embree 4 called directly (rayd.engine.embree_api): scenes built through ctypes, rays traced
16 at a time from a Warp kernel; and the CPU chunk scheduler (rayd.engine.runtime.run_parallel)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import reference

from rayd.engine import cpu_embree, embree_api, runtime

needs_embree = pytest.mark.skipif(not cpu_embree.available(), reason="embreex (its Embree library) not installed")


def _closest_reference(vertices, faces, o, d):
    """Float64 brute force: (face, t) of the closest hit per ray (-1, inf on a miss)."""
    tris = vertices.astype(np.float64)[faces]
    best = np.full(len(o), -1)
    best_t = np.full(len(o), np.inf)
    for i, (oi, di) in enumerate(zip(o.astype(np.float64), d.astype(np.float64))):
        for f, (a, b, c) in enumerate(tris):
            e1, e2 = b - a, c - a
            p = np.cross(di, e2)
            det = e1.dot(p)
            if abs(det) < 1e-12:
                continue
            s = oi - a
            u = s.dot(p) / det
            q = np.cross(s, e1)
            v = di.dot(q) / det
            t = e2.dot(q) / det
            if u >= 0 and v >= 0 and u + v <= 1 and 0 < t < best_t[i]:
                best[i], best_t[i] = f, t
    return best, best_t


@needs_embree
@pytest.mark.parametrize("coherent_cos", [2.0, 0.99, -1.0])
def test_packets_match_brute_force(coherent_cos):
    # 37 rays (two full packets and a partial one), some skipped (tfar < 0), some missing,
    # incoherent and (coherent_cos = -1) every packet traced with the coherent flag.
    rng = np.random.default_rng(3)
    vertices, faces = reference.icosphere(1)
    vertices = vertices.astype(np.float32)
    n = 37
    o = (rng.normal(size=(n, 3)) * 3.0).astype(np.float32)
    target = rng.uniform(-1.2, 1.2, (n, 3))
    d = (target - o).astype(np.float32)
    far = np.full(n, np.inf, np.float32)
    far[::7] = -1.0
    scene = embree_api.Scene([(vertices, faces.astype(np.int32))], quality=embree_api.BUILD_QUALITY_LOW)
    got = cpu_embree.trace(scene, o, d, far, coherent_cos)
    face, t = _closest_reference(vertices, faces, o, d)
    skipped = np.zeros(n, bool)
    skipped[::7] = True
    assert (got["primID"][skipped] == -1).all() and (got["tfar"][skipped] == -1.0).all()
    live = ~skipped
    assert live.sum() == 31 and (face[live] >= 0).sum() >= 10 and (face[live] < 0).sum() >= 3
    np.testing.assert_array_equal(got["primID"][live], face[live])
    hit = live & (face >= 0)
    np.testing.assert_allclose(got["tfar"][hit], t[hit], rtol=1e-5)
    assert (got["geomID"][hit] == 0).all() and (got["geomID"][live & (face < 0)] == -1).all()
    # u, v: Embree's barycentric coordinates of the hit point.
    tris = vertices.astype(np.float64)[faces[face[hit]]]
    p = o[hit] + t[hit, None] * d[hit]
    u, v = got["u"][hit, None], got["v"][hit, None]
    np.testing.assert_allclose((1 - u - v) * tris[:, 0] + u * tris[:, 1] + v * tris[:, 2], p, atol=1e-5)


@needs_embree
def test_geometry_ids_follow_mesh_order():
    # Two meshes, geomID = position: a ray through both reports the nearer one's geomID.
    a = np.array([[-1, -1, 0], [1, -1, 0], [0, 1, 0]], np.float32)
    b = a + np.float32([0, 0, 2])
    tri = np.array([[0, 1, 2]], np.int32)
    scene = embree_api.Scene([(b, tri), (a, tri)])
    o = np.array([[0, 0, -1], [0, 0, 1]], np.float32)
    d = np.array([[0, 0, 1], [0, 0, 1]], np.float32)
    got = cpu_embree.trace(scene, o, d, np.full(2, 10.0, np.float32))
    np.testing.assert_array_equal(got["geomID"], [1, 0])
    np.testing.assert_allclose(got["tfar"], [1.0, 1.0])


def test_run_parallel_runs_every_chunk_once_and_raises():
    seen = []
    lock = threading.Lock()

    def run(k):
        with lock:
            seen.append(k)

    runtime.run_parallel(run, 37)
    assert sorted(seen) == list(range(37))

    def nested(k):  # a chunk that itself splits: no deadlock (unstarted tasks are cancelled)
        runtime.run_parallel(run, 3)

    seen.clear()
    runtime.run_parallel(nested, 4)
    assert len(seen) == 12

    def fail(k):
        if k == 5:
            raise ValueError("chunk 5")

    with pytest.raises(ValueError, match="chunk 5"):
        runtime.run_parallel(fail, 9)


def test_info_names_the_embree_library():
    line = cpu_embree.describe()
    if cpu_embree.active():
        # the width the search calls (8 where Embree's 16-ray packets are not native, e.g. AVX2)
        assert line.startswith("embree (Embree 4") and f"rtcIntersect{embree_api.packet_width()} " in line
    else:
        assert line.startswith("warp")


def test_default_packet_width_is_the_widest_native_one(monkeypatch):
    """Without RAYD_EMBREE_PACKET the search calls Embree's widest native packet (on AVX2 its rtcIntersect16
    traces one ray at a time): the library's own NATIVE_RAY{4,8,16} properties decide."""
    if embree_api.library() is None:
        pytest.skip("no Embree library")
    monkeypatch.delenv("RAYD_EMBREE_PACKET", raising=False)
    lib = embree_api.library()
    native = [w for w, prop in ((16, 34), (8, 33), (4, 32)) if lib.rtcGetDeviceProperty(embree_api._device, prop) == 1]
    assert embree_api.packet_width() == embree_api.native_width() == (native[0] if native else 16)
    assert embree_api.intersect_pointer(embree_api.packet_width()) != 0
