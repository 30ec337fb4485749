"""rayd.drjit Scene.specular_paths and find_specular_paths: equal to rayd.torch's on random scenes
(values and gradients), float64 finite differences, forward = reverse, oracles, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

import rayd.torch as rt  # noqa: E402
from drjit_testutil import grad_rtol, rows, vec  # noqa: E402

BOX_F = [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [2, 3, 7], [2, 7, 6], [1, 2, 6], [1, 6, 5],
         [0, 4, 7], [0, 7, 3]]


def _box(lo, hi):
    (x0, y0, z0), (x1, y1, z1) = lo, hi
    return [[x0, y0, z0], [x1, y0, z0], [x1, y1, z0], [x0, y1, z0], [x0, y0, z1], [x1, y0, z1], [x1, y1, z1], [x0, y1, z1]]


def _room(seed):
    """A room (10 x 8 x 4) with a box inside, vertices jittered (general position): 24 faces."""
    v = np.array(_box([0, 0, 0], [10, 8, 4]) + _box([3, 3, 0.01], [5, 4.5, 2.5]), dtype=np.float64)
    v += np.random.default_rng(seed).uniform(-0.05, 0.05, v.shape)
    f = np.array(BOX_F + [[a + 8, b + 8, c + 8] for a, b, c in BOX_F])
    return v, f


def _drjit_scene(m, v, f, grad=True):
    vd = vec(m.Array3f64, v)
    if grad:
        dr.enable_grad(vd)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vd, m.Array3u(f.T.astype(np.uint32))))
    scene.build()
    return scene, vd


def _torch_scene(v, f):
    vt = torch.tensor(v, requires_grad=True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vt, torch.tensor(f)))
    scene.build()
    return scene, vt


def _all_sequences(faces):
    return np.array([[-1, -1]] + [[a, -1] for a in range(faces)]
                    + [[a, b] for a in range(faces) for b in range(faces) if a != b])


def _pairs(seed, count):
    rng = np.random.default_rng(seed)
    lo, hi = np.array([0.5, 0.5, 0.3]), np.array([9.5, 7.5, 3.7])
    return rng.uniform(lo, hi, (count, 3)), rng.uniform(lo, hi, (count, 3))


@pytest.mark.parametrize("seed", [0, 1])
def test_equals_torch_on_random_scenes(m, seed):
    v, f = _room(seed)
    seqs = _all_sequences(len(f))
    src, dst = _pairs(seed + 10, 3)
    n = len(src) * len(seqs)
    src_rows, dst_rows = np.repeat(src, len(seqs), 0), np.repeat(dst, len(seqs), 0)
    seq_rows = np.tile(seqs, (len(src), 1))
    rng = np.random.default_rng(seed + 20)
    w_len, w_pts = rng.normal(size=n), rng.normal(size=(n, 2, 3))

    tscene, tv = _torch_scene(v, f)
    ts, td = torch.tensor(src_rows, requires_grad=True), torch.tensor(dst_rows, requires_grad=True)
    ref = tscene.specular_paths(ts, td, torch.tensor(seq_rows))
    assert 50 < int(ref.valid.sum()) < n  # a real mixture of valid and invalid paths
    (torch.where(ref.valid, ref.length, 0.0) * torch.tensor(w_len)).sum().add(
        (ref.points * torch.tensor(w_pts)).sum()).backward()

    scene, vd = _drjit_scene(m, v, f)
    s, d = vec(m.Array3f64, src_rows), vec(m.Array3f64, dst_rows)
    dr.enable_grad(s, d)
    got = scene.specular_paths(s, d, m.TensorXi(seq_rows.astype(np.int32)))
    assert got.shape == (n, 2)
    np.testing.assert_array_equal(np.array(got.valid), ref.valid.numpy())
    np.testing.assert_array_equal(np.array(got.num_bounces), ref.num_bounces.numpy())
    np.testing.assert_allclose(np.array(got.length), ref.length.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(rows(got.points).reshape(n, 2, 3), ref.points.detach().numpy(), rtol=1e-12,
                               atol=1e-12)
    loss = dr.sum(dr.select(got.valid, got.length, 0.0) * m.Float64(w_len))
    loss += dr.sum(dr.sum(got.points * vec(m.Array3f64, w_pts.reshape(-1, 3))))
    dr.backward(loss)
    rtol = grad_rtol(m)
    for mine, theirs in ((s, ts), (d, td), (vd, tv)):
        # CUDA's approximate rcp/rsqrt errors scale with the largest terms that cancel
        atol = 1e-9 if ".llvm" in m.__name__ else rtol * float(np.abs(theirs.grad.numpy()).max())
        np.testing.assert_allclose(rows(dr.grad(mine)), theirs.grad.numpy(), rtol=rtol, atol=atol)


# The corner of test_drjit_reflections.py: paths off faces 0 then 1.
CORNER_V = np.array([[0.0, -1.0, -10.0], [0.01, 20.0, -10.0], [-0.01, -1.0, 20.0],
                     [-1.0, 0.0, -10.0], [20.0, 0.01, -10.0], [-1.0, -0.01, 20.0]])
CORNER_F = np.array([[0, 1, 2], [3, 4, 5]])
SRC = np.array([[3.0, 2.0, 0.2], [2.5, 3.0, -0.3]])
DST = np.array([[3.1, 1.2, 0.5], [3.5, 1.0, 0.2]])


def _corner_fields(m, v, src, dst):
    scene, _ = _drjit_scene(m, v, CORNER_F, grad=False)
    paths = scene.specular_paths(vec(m.Array3f64, src), vec(m.Array3f64, dst), m.TensorXi(np.array([[0, 1]] * 2)))
    assert bool(dr.all(paths.valid))
    return np.concatenate([np.array(paths.length), rows(paths.points).reshape(-1)])


def test_gradients_match_finite_differences_and_forward_equals_reverse(m):
    rng = np.random.default_rng(3)
    w = rng.normal(size=2 + 12)
    scene, vd = _drjit_scene(m, CORNER_V, CORNER_F)
    s, d = vec(m.Array3f64, SRC), vec(m.Array3f64, DST)
    dr.enable_grad(s, d)
    paths = scene.specular_paths(s, d, m.TensorXi(np.array([[0, 1]] * 2, dtype=np.int32)))
    dr.backward(dr.sum(paths.length * m.Float64(w[:2])) + dr.sum(dr.sum(paths.points * vec(m.Array3f64,
                                                                                           w[2:].reshape(-1, 3)))))
    eps = 1e-6
    rtol = grad_rtol(m)
    for name, base, grad in (("v", CORNER_V, dr.grad(vd)), ("src", SRC, dr.grad(s)), ("dst", DST, dr.grad(d))):
        fd = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args = {"v": CORNER_V, "src": SRC, "dst": DST}
            hi = _corner_fields(m, **{**args, name: plus})
            lo = _corner_fields(m, **{**args, name: minus})
            fd[idx] = w @ (hi - lo) / (2 * eps)
        np.testing.assert_allclose(rows(grad), fd, rtol=max(rtol, 1e-6), atol=1e-6, err_msg=name)
    # Forward mode along a tangent of (src, dst, v) = the reverse gradient dotted with it.
    tangents = [rng.normal(size=x.shape) for x in (SRC, DST, CORNER_V)]
    reverse = sum((rows(g) * t).sum() for g, t in zip((dr.grad(s), dr.grad(d), dr.grad(vd)), tangents))
    scene, vd = _drjit_scene(m, CORNER_V, CORNER_F)
    s, d = vec(m.Array3f64, SRC), vec(m.Array3f64, DST)
    dr.enable_grad(s, d)
    for x, t in zip((s, d, vd), tangents):
        dr.set_grad(x, vec(m.Array3f64, t))
    paths = scene.specular_paths(s, d, m.TensorXi(np.array([[0, 1]] * 2, dtype=np.int32)))
    total = dr.sum(paths.length * m.Float64(w[:2])) + dr.sum(dr.sum(paths.points * vec(m.Array3f64,
                                                                                      w[2:].reshape(-1, 3))))
    forward = dr.forward_to(total)
    np.testing.assert_allclose(float(forward[0]), reverse, rtol=max(rtol, 1e-10))


def test_oracles_mirror_reciprocity_invalid(m):
    # One mirror (z = 0) and a blocker above x = 3 (the cases of tests/torch/test_reflections.py).
    v = np.array([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 0.0],
                  [2.5, -1.0, 0.5], [3.5, -1.0, 0.5], [3.0, 1.0, 0.5]])
    scene, _ = _drjit_scene(m, v, np.array([[0, 1, 2], [3, 4, 5]]), grad=False)
    src = np.array([[-0.5, 0.0, 1.0], [-0.5, 0.0, 1.0], [2.0, 0.0, 1.0], [-0.5, 0.0, 1.0], [-0.5, 0.0, 1.0]])
    dst = np.array([[0.5, 0.0, 1.0], [5.0, 0.0, 1.0], [4.0, 0.0, 0.25], [0.5, 0.0, -1.0], [0.5, 0.0, 1.0]])
    seq = m.TensorXi(np.array([[0], [0], [1], [0], [1]], dtype=np.int32))
    paths = scene.specular_paths(vec(m.Array3f64, src), vec(m.Array3f64, dst), seq)
    assert np.array(paths.valid).tolist() == [True, False, False, False, False]
    mirrored = src[0] * [1, 1, -1]
    assert abs(np.array(paths.length)[0] - np.linalg.norm(dst[0] - mirrored)) < 1e-12
    assert np.isinf(np.array(paths.length)[1:]).all() and (rows(paths.points)[1:] == 0).all()
    back = scene.specular_paths(vec(m.Array3f64, dst[:1]), vec(m.Array3f64, src[:1]), m.TensorXi(np.array([0])))
    assert abs(np.array(back.length)[0] - np.array(paths.length)[0]) < 1e-12
    # Blocked: a narrow blocker at z = 0.3 over the outgoing leg (both directions).
    vb = np.array([[-2.0, -2.0, 0.0], [2.0, -2.0, 0.0], [0.0, 2.0, 0.0], [0.2, -1.0, 0.3], [0.4, -1.0, 0.3],
                   [0.3, 1.0, 0.3]])
    blocked, _ = _drjit_scene(m, vb, np.array([[0, 1, 2], [3, 4, 5]]), grad=False)
    a, b = np.array([[-1.0, 0.0, 1.0]] * 2), np.array([[1.0, 0.0, 1.0], [-0.5, 0.0, 1.0]])
    one = m.TensorXi(np.array([0], dtype=np.int32))  # one sequence for every path
    assert np.array(blocked.specular_paths(vec(m.Array3f64, a), vec(m.Array3f64, b), one).valid).tolist() == [False,
                                                                                                           True]
    assert np.array(blocked.specular_paths(vec(m.Array3f64, b), vec(m.Array3f64, a), one).valid).tolist() == [False,
                                                                                                           True]
    # Line of sight (B = 0), padding, inactive paths, interior padding.
    los = scene.specular_paths(vec(m.Array3f64, src[:2]), vec(m.Array3f64, dst[:2]),
                               m.TensorXi(np.zeros((2, 0), dtype=np.int32)))
    np.testing.assert_allclose(np.array(los.length), np.linalg.norm(dst[:2] - src[:2], axis=1), rtol=1e-12)
    assert los.shape == (2, 0) and dr.width(los.points) == 0
    pad = scene.specular_paths(vec(m.Array3f64, src[:1]), vec(m.Array3f64, dst[:1]),
                               m.TensorXi(np.array([[0, -1, -1]], dtype=np.int32)), active=m.Bool([True]))
    assert np.array(pad.num_bounces).tolist() == [1]
    assert abs(np.array(pad.length)[0] - np.array(paths.length)[0]) < 1e-12
    off = scene.specular_paths(vec(m.Array3f64, src[:1]), vec(m.Array3f64, dst[:1]), one, active=m.Bool([False]))
    assert not bool(off.valid[0])
    bad = scene.specular_paths(vec(m.Array3f64, src[:1]), vec(m.Array3f64, dst[:1]),
                               m.TensorXi(np.array([[0, -1, 1]], dtype=np.int32)))
    assert not bool(bad.valid[0]) and math.isinf(bad.length[0])


def test_float32_and_selection(m):
    scene, _ = _drjit_scene(m, CORNER_V.astype(np.float32), CORNER_F, grad=False)
    v32 = vec(m.Array3f, CORNER_V.astype(np.float32))
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v32, m.Array3u(CORNER_F.T.astype(np.uint32))))
    scene.build()
    paths = scene.specular_paths(vec(m.Array3f, SRC), vec(m.Array3f, DST), m.TensorXi(np.array([[0, 1]] * 2)))
    assert dr.type_v(paths.length) == dr.VarType.Float32 and bool(dr.all(paths.valid))
    tscene = rt.Scene()
    tscene.add_mesh(rt.Mesh(torch.tensor(CORNER_V, dtype=torch.float32), torch.tensor(CORNER_F)))
    tscene.build()
    ref = tscene.specular_paths(torch.tensor(SRC, dtype=torch.float32), torch.tensor(DST, dtype=torch.float32),
                                torch.tensor([[0, 1]] * 2))
    np.testing.assert_allclose(np.array(paths.length), ref.length.numpy(), rtol=1e-6)
    second = paths[m.Bool([False, True])]
    assert second.shape == (1, 2) and dr.width(second.points) == 2
    np.testing.assert_allclose(rows(second.points), ref.points[1].numpy(), rtol=1e-5)


def test_errors(m):
    scene, _ = _drjit_scene(m, CORNER_V, CORNER_F, grad=False)
    s, t = m.Array3f64(1.0, 1.0, 0.0), m.Array3f64(2.0, 1.0, 0.0)
    call = r"rayd\.drjit\.Scene\.specular_paths\(\): "
    with pytest.raises(ValueError, match=call + "'prim_sequence' must have at most 16"):
        scene.specular_paths(s, t, m.TensorXi(np.zeros((1, 17), dtype=np.int32)))
    with pytest.raises(TypeError, match=call + "'prim_sequence' must be a Dr.Jit integer tensor"):
        scene.specular_paths(s, t, m.Int([0]))
    with pytest.raises(TypeError, match=call + "'prim_sequence'"):
        scene.specular_paths(s, t, np.zeros((1, 1), dtype=np.int32))
    with pytest.raises(TypeError, match=call + "'source'"):
        scene.specular_paths(m.Array3i(1, 1, 0), t, m.TensorXi(np.zeros((1, 1), dtype=np.int32)))
    with pytest.raises(ValueError, match=call + "batch shapes do not broadcast"):
        scene.specular_paths(vec(m.Array3f64, SRC), vec(m.Array3f64, np.zeros((3, 3))),
                             m.TensorXi(np.zeros((1, 1), dtype=np.int32)))
    with pytest.raises(TypeError, match=call + "'active'"):
        scene.specular_paths(s, t, m.TensorXi(np.zeros((1, 1), dtype=np.int32)), active=m.Float([1.0]))
    unbuilt = rd.Scene()
    unbuilt.add_mesh(rd.Mesh(vec(m.Array3f64, CORNER_V), m.Array3u(CORNER_F.T.astype(np.uint32))))
    with pytest.raises(RuntimeError, match=r"specular_paths\(\)"):
        unbuilt.specular_paths(s, t, m.TensorXi(np.zeros((1, 1), dtype=np.int32)))
    find = r"rayd\.drjit\.find_specular_paths\(\): "
    with pytest.raises(ValueError, match=find + "'max_bounces'"):
        rd.find_specular_paths(scene, s, t, 0)
    with pytest.raises(TypeError, match=find + "'num_rays'"):
        rd.find_specular_paths(scene, s, t, 2, num_rays=1.5)
    with pytest.raises(RuntimeError, match=r"find_specular_paths\(\)"):
        rd.find_specular_paths(unbuilt, s, t, 1)


def test_find_specular_paths_equals_torch(m):
    v, f = _room(0)
    src = np.array([[1.0, 1.0, 1.5], [8.0, 6.5, 3.0]])
    dst = np.array([[9.0, 1.0, 1.0], [2.0, 7.0, 2.0], [4.0, 6.0, 0.5]])
    tscene, _ = _torch_scene(v, f)
    ts = torch.tensor(src, requires_grad=True)
    ref = rt.find_specular_paths(tscene, ts, torch.tensor(dst), 2, num_rays=20000)
    scene, _ = _drjit_scene(m, v, f)
    s = vec(m.Array3f64, src)
    dr.enable_grad(s)
    got = rd.find_specular_paths(scene, s, vec(m.Array3f64, dst), 2, num_rays=20000)
    assert got.shape == tuple(ref.prim_sequence.shape)
    num_s, num_t, count, b = got.shape

    def as_set(valid, seq, length):
        return {(i // (num_t * count), i // count % num_t, tuple(seq[i])): length[i] for i in np.flatnonzero(valid)}

    mine = as_set(np.array(got.valid), np.array(got.prim_sequence).reshape(-1, b), np.array(got.length))
    theirs = as_set(ref.valid.numpy().reshape(-1), ref.prim_sequence.numpy().reshape(-1, b),
                    ref.length.detach().numpy().reshape(-1))
    assert len(mine) > 100 and set(mine) == set(theirs)
    for key, length in mine.items():
        assert abs(length - theirs[key]) <= 1e-12 * length
    length = np.array(got.length).reshape(num_s, num_t, count)
    assert (length[..., 1:] >= length[..., :-1]).all()
    # Gradient of the sum of valid lengths wrt sources equals torch's.
    dr.backward(dr.sum(dr.select(got.valid, got.length, 0.0)))
    torch.where(ref.valid, ref.length, 0.0).sum().backward()
    np.testing.assert_allclose(rows(dr.grad(s)), ts.grad.numpy(), rtol=grad_rtol(m), atol=1e-9)
    first = got[0]
    assert first.shape == (1, num_t, count, b) and dr.width(first.length) == num_t * count


def test_a_reflection_on_a_shared_diagonal_is_one_path(m):
    # two coplanar floor triangles; the reflection point (0, 0, 0) lies on their shared diagonal
    v = np.array([[-1.0, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]])
    f = np.array([[0, 1, 2], [0, 2, 3]])
    scene, _ = _drjit_scene(m, v, f)
    got = rd.find_specular_paths(scene, vec(m.Array3f64, [[-0.5, -0.5, 1.0]]), vec(m.Array3f64, [[0.5, 0.5, 1.0]]),
                                 1, num_rays=20000)
    valid = np.array(got.valid)
    assert int(valid.sum()) == 2  # line of sight + one floor reflection, not one per triangle
    np.testing.assert_allclose(np.sort(np.array(got.length)[valid]), [2 ** 0.5, 6 ** 0.5], rtol=1e-12)
