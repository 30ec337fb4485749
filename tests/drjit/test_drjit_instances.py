"""rayd.drjit instances: numbering, transforms, updates, gradients, parity with rayd.torch."""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import grad_rtol, rows, vec  # noqa: E402

TRI = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]


def _shift(m, x=0.0, y=0.0, z=0.0, kind=None):
    kind = kind or m.Matrix4f
    return kind([[1, 0, 0, x], [0, 1, 0, y], [0, 0, 1, z], [0, 0, 0, 1]])


def _scene(m, dynamic=False):
    """Mesh 0 (one triangle at z = 0), mesh 1 (two triangles at z = -1), instance 2 of mesh 0 at x + 5."""
    scene = rd.Scene()
    v0 = vec(m.Array3f, TRI)
    v1 = vec(m.Array3f, [[0, 0, -1], [1, 0, -1], [0, 1, -1], [1, 1, -1]])
    assert scene.add_mesh(rd.Mesh(v0, m.Array3u([0], [1], [2])), dynamic=dynamic) == 0
    assert scene.add_mesh(rd.Mesh(v1, m.Array3u([0, 1], [1, 3], [2, 2]))) == 1
    assert scene.add_instance(0, _shift(m, x=5.0)) == 2
    scene.build()
    return scene, v0


def test_instance_ids_and_hits(m):
    scene, _ = _scene(m)
    assert scene.num_meshes == 2 and scene.num_shapes == 3
    o = vec(m.Array3f, [[0.2, 0.2, 1], [5.2, 0.2, 1], [0.8, 0.8, 1], [5.8, 0.8, 1]])
    hit = scene.intersect(rd.Ray(o, m.Array3f(0, 0, -1)))
    assert rows(hit.shape_id).tolist() == [0, 2, 1, -1]
    assert rows(hit.prim_id).tolist() == [0, 0, 1, -1]
    # global_prim_id ranges in shape order: mesh 0 -> 0, mesh 1 -> 1..2, instance 2 -> 3.
    assert rows(hit.global_prim_id).tolist() == [0, 3, 2, -1]
    np.testing.assert_allclose(rows(hit.t)[:3], [1.0, 1.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(rows(hit.p)[1], [5.2, 0.2, 0.0], atol=1e-6)
    np.testing.assert_allclose(rows(hit.geo_n)[1], [0, 0, 1], atol=1e-6)
    assert rows(scene.shadow_test(rd.Ray(o, m.Array3f(0, 0, -1)))).tolist() == [True, True, True, False]


def test_instance_composes_with_mesh_transform_and_updates(m):
    scene, _ = _scene(m)
    ray = rd.Ray(m.Array3f(5.2, 0.2, 1), m.Array3f(0, 0, -1))
    # The mesh moves up by 0.5: the instance follows (M_instance @ M_mesh).
    scene.set_mesh_transform(0, _shift(m, z=0.5))
    with pytest.raises(RuntimeError, match=r"mesh 0 has pending updates"):
        scene.intersect(ray)
    scene.sync()
    np.testing.assert_allclose(rows(scene.intersect(ray).t), [0.5], rtol=1e-6)
    # The instance's own matrix, set and then changed in place.
    scene.set_mesh_transform(2, _shift(m, x=5.0, z=-0.25))
    scene.sync()
    np.testing.assert_allclose(rows(scene.intersect(ray).t), [0.75], rtol=1e-6)
    matrix = _shift(m, x=5.0)
    scene.set_mesh_transform(2, matrix)
    scene.sync()
    matrix[0][3] = m.Float(20.0)
    with pytest.raises(RuntimeError, match=r"transform of instance 2 changed in place"):
        scene.intersect(ray)
    scene.sync()
    assert not rows(scene.intersect(ray).is_valid()).any()
    hit = scene.intersect(rd.Ray(m.Array3f(20.2, 0.2, 1), m.Array3f(0, 0, -1)))
    assert rows(hit.shape_id).tolist() == [2]
    scene.set_shape_enabled(2, False)
    scene.sync()
    assert not rows(scene.intersect(rd.Ray(m.Array3f(20.2, 0.2, 1), m.Array3f(0, 0, -1))).is_valid()).any()


def test_instance_follows_dynamic_mesh_vertices(m):
    scene, v0 = _scene(m, dynamic=True)
    scene.update_mesh_vertices(0, v0 + m.Array3f(0, 0, 0.25))
    scene.sync()
    hit = scene.intersect(rd.Ray(vec(m.Array3f, [[0.2, 0.2, 1], [5.2, 0.2, 1]]), m.Array3f(0, 0, -1)))
    np.testing.assert_allclose(rows(hit.t), [0.75, 0.75], rtol=1e-6)
    with pytest.raises(ValueError, match=r"'mesh_id' 2 is an instance; update the mesh it instances"):
        scene.update_mesh_vertices(2, v0)


def test_add_instance_errors(m):
    scene, _ = _scene(m)
    with pytest.raises(ValueError, match=r"add_instance\(\): 'mesh_id' 2 is an instance"):
        scene.add_instance(2, _shift(m))
    with pytest.raises(ValueError, match=r"'mesh_id' must be in \[0, 3\), got 7"):
        scene.add_instance(7, _shift(m))
    with pytest.raises(TypeError, match=r"add_instance\(\): 'to_world' must be a Dr.Jit array"):
        scene.add_instance(0, np.eye(4))
    scene.add_instance(1, _shift(m, y=3))
    with pytest.raises(RuntimeError, match=r"shapes were added after build"):
        scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1)))


def test_instance_gradients_match_finite_differences(m):
    """d t / d (instance matrix, mesh vertices) through a rotated, scaled instance, both AD modes."""
    base = np.array([[0.0, 0.0, 0.0], [1.0, 0.1, 0.0], [0.1, 1.0, 0.2]])
    matrix = np.array([[0.9, -0.2, 0.1, 3.0], [0.2, 1.1, 0.0, 0.5], [0.05, 0.0, 1.2, 0.2], [0, 0, 0, 1]])
    o = np.array([[0.3, 0.3, 2.0], [3.22, 0.89, 3.0]])  # onto the mesh, onto the instance
    d = np.array([[0.01, 0.02, -1.0], [-0.05, 0.0, -1.0]])

    def loss(v, mat, normals=True):
        scene = rd.Scene()
        n = vec(m.Array3f64, [[0, 0.1, 1], [0.1, 0, 1], [0, 0, 1]])
        scene.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2]), normals=n if normals else None))
        scene.add_instance(0, mat)
        scene.build()
        hit = scene.intersect(rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d)))
        assert rows(hit.shape_id).tolist() == [0, 1]
        return dr.sum(hit.t * m.Float64([1.0, 2.0])) + dr.sum(dr.sum(hit.n * vec(m.Array3f64, [[0.3, -0.2, 0.1]] * 2)))

    v = vec(m.Array3f64, base)
    mat = m.Matrix4f64(matrix.tolist())
    dr.enable_grad(v, mat)
    dr.backward(loss(v, mat))
    grad_m = np.array([[dr.grad(mat)[i][j][0] for j in range(4)] for i in range(4)])
    grad_v = rows(dr.grad(v))
    rng = np.random.default_rng(0)
    tm, tv = rng.normal(size=(4, 4)), rng.normal(size=(3, 3))
    tm[3] = 0
    h = 1e-6

    def at(sign):
        return loss(vec(m.Array3f64, base + sign * h * tv), m.Matrix4f64((matrix + sign * h * tm).tolist()))[0]

    expected = (at(1) - at(-1)) / (2 * h)
    np.testing.assert_allclose(np.sum(grad_m * tm) + np.sum(grad_v * tv), expected, rtol=grad_rtol(m))

    v = vec(m.Array3f64, base)
    mat = m.Matrix4f64(matrix.tolist())
    dr.enable_grad(v, mat)
    dr.set_grad(v, vec(m.Array3f64, tv))
    dr.set_grad(mat, m.Matrix4f64(tm.tolist()))
    out = loss(v, mat)
    dr.forward_to(out)
    np.testing.assert_allclose(dr.grad(out)[0], expected, rtol=grad_rtol(m))


def test_instance_parity_with_torch(backend, m):
    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    device = "cpu" if backend == "llvm" else "cuda"
    rng = np.random.default_rng(11)
    axis = np.linspace(-0.5, 0.5, 7)
    y, x = np.meshgrid(axis, axis, indexing="ij")
    v = np.stack([x.ravel(), y.ravel(), 0.05 * rng.normal(size=x.size)], -1).astype(np.float32)
    idx = np.arange(49).reshape(7, 7)
    a, b, c, e = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    f = np.concatenate([np.stack([a, b, c], -1), np.stack([b, e, c], -1)])
    normals = np.concatenate([rng.normal(scale=0.2, size=(49, 2)), np.ones((49, 1))], -1).astype(np.float32)
    mesh_m = np.eye(4, dtype=np.float32)
    mesh_m[:3, 3] = [0.0, 0.0, -0.3]
    placements = []
    for k in range(4):
        p = np.eye(4, dtype=np.float32)
        angle = 0.3 * k
        p[:3, :3] = [[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1 + 0.1 * k]]
        p[:3, 3] = [1.2 * (k % 2) - 0.6, 1.2 * (k // 2) - 0.6, 0.2 * k]
        placements.append(p)
    ds, ts = rd.Scene(), rt.Scene()
    ds.add_mesh(rd.Mesh(vec(m.Array3f, v), m.Array3i(f.T.astype(np.int32)), normals=vec(m.Array3f, normals),
                        to_world=m.Matrix4f(mesh_m.tolist())))
    ts.add_mesh(rt.Mesh(torch.tensor(v, device=device), torch.tensor(f, device=device),
                        normals=torch.tensor(normals, device=device), to_world=torch.tensor(mesh_m, device=device)))
    for p in placements:
        ds.add_instance(0, m.Matrix4f(p.tolist()))
        ts.add_instance(0, torch.tensor(p, device=device))
    ds.build()
    ts.build()
    n = 3000
    o = np.concatenate([rng.uniform(-1.4, 1.4, size=(n, 2)), np.full((n, 1), 2.0)], -1).astype(np.float32)
    d = np.concatenate([rng.normal(scale=0.1, size=(n, 2)), -np.ones((n, 1))], -1).astype(np.float32)
    hd = ds.intersect(rd.Ray(vec(m.Array3f, o), vec(m.Array3f, d)))
    ht = ts.intersect(rt.Ray(torch.tensor(o, device=device), torch.tensor(d, device=device)))
    valid = rows(hd.is_valid())
    np.testing.assert_array_equal(valid, ht.is_valid().cpu().numpy())
    assert valid.mean() > 0.3
    same = rows(hd.global_prim_id) == ht.global_prim_id.cpu().numpy()
    assert (~same).sum() <= max(2, n // 500)
    np.testing.assert_allclose(rows(hd.t), ht.t.cpu().numpy(), rtol=1e-5)
    for name in ("prim_id", "shape_id"):
        np.testing.assert_array_equal(rows(getattr(hd, name))[same], getattr(ht, name).cpu().numpy()[same])
    for name in ("p", "geo_n", "n", "barycentric", "uv"):
        np.testing.assert_allclose(rows(getattr(hd, name))[same], getattr(ht, name).cpu().numpy()[same],
                                   rtol=1e-5, atol=2e-5, err_msg=name)


def _batch(m, matrices):
    """A width-K Matrix4f from a (K, 4, 4) array."""
    return m.Matrix4f(np.ascontiguousarray(np.asarray(matrices, dtype=np.float32).transpose(1, 2, 0)))


def test_batched_set_mesh_transform(m):
    """K ids + a width-K matrix == K single calls; gradients reach the batch."""
    shifts = [(5.0, 0.0, -0.5), (0.0, 0.0, 0.25)]  # instance 2, mesh 1
    batched, _ = _scene(m)
    single, _ = _scene(m)
    matrices = np.stack([np.array([[1, 0, 0, x], [0, 1, 0, y], [0, 0, 1, z], [0, 0, 0, 1]]) for x, y, z in shifts])
    batch = _batch(m, matrices)
    dr.enable_grad(batch)
    batched.set_mesh_transform([2, 1], batch)
    batched.sync()
    for shape_id, (x, y, z) in zip([2, 1], shifts):
        single.set_mesh_transform(shape_id, _shift(m, x, y, z))
    single.sync()
    o = vec(m.Array3f, [[5.2, 0.2, 1], [0.8, 0.8, 1], [0.2, 0.2, 1]])
    ray = rd.Ray(o, m.Array3f(0, 0, -1))
    a, b = batched.intersect(ray), single.intersect(ray)
    assert rows(a.shape_id).tolist() == rows(b.shape_id).tolist() == [2, 1, 0]
    np.testing.assert_allclose(rows(a.t), [1.5, 1.75, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(rows(a.t), rows(b.t))
    dr.backward(dr.sum(a.t))
    grad = np.array(dr.grad(batch)).reshape(4, 4, 2)
    # t = o_z - z_plane: dt/d(translation z) = -1 for the instance's and mesh 1's rays.
    np.testing.assert_allclose(grad[2, 3], [-1.0, -1.0], rtol=grad_rtol(m))


def test_batched_set_mesh_transform_errors(m):
    scene, _ = _scene(m)
    call = r"rayd.drjit.Scene.set_mesh_transform\(\)"
    two = _batch(m, [np.eye(4), np.eye(4)])
    with pytest.raises(ValueError, match=call + r": 'to_world' must hold 2 matrices"):
        scene.set_mesh_transform([0, 1], _shift(m))
    with pytest.raises(ValueError, match=call + ": 'shape_id' repeats an id"):
        scene.set_mesh_transform([1, 1], two)
    with pytest.raises(ValueError, match=call + r": 'shape_id' must be in \[0, 3\)"):
        scene.set_mesh_transform([0, 3], two)
    with pytest.raises(TypeError, match=call + ": 'shape_id'"):
        scene.set_mesh_transform("01", two)
    flat = np.eye(4)
    flat[2, 2] = 0.0
    with pytest.raises(ValueError, match=call + r": 'to_world\[1\]' is singular"):
        scene.set_mesh_transform([0, 1], _batch(m, [np.eye(4), flat]))
    assert not scene.has_pending_updates()


# ---------------------------------------------------------------- many instances, batches, errors
QUAD = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.05], [0.0, 1.0, 0.0], [1.0, 1.0, -0.05]])
QUAD_FACES = np.array([[0, 1, 2], [1, 3, 2]])


def _placements(count, rng):
    """``count`` rotated, scaled, shifted (K, 4, 4) matrices on a grid (no overlaps seen from +z)."""
    out = np.tile(np.eye(4), (count, 1, 1))
    for k in range(count):
        a = rng.uniform(-0.3, 0.3)
        out[k, :3, :3] = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]]) * rng.uniform(
            0.6, 0.8)
        out[k, :3, 3] = [3.0 + 3.0 * (k % 25), 3.0 * (k // 25), rng.uniform(-0.5, 0.5)]
    return out


def test_many_instances_match_pretransformed_reference(m):
    """500 instances (own matrices composed with the mesh's) hit exactly like the pre-transformed triangles."""
    count, rng = 500, np.random.default_rng(5)
    mesh_m = np.eye(4)
    mesh_m[:3, 3] = [0.1, -0.2, 0.3]
    placements = _placements(count, rng)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, QUAD), m.Array3u(QUAD_FACES.T.astype(np.uint32)),
                           to_world=m.Matrix4f(mesh_m.tolist())))
    for p in placements:
        scene.add_instance(0, m.Matrix4f(p.tolist()))
    scene.build()
    # Reference: every placed triangle in one world-space mesh (instance k's faces at rows 2k, 2k + 1).
    world = np.einsum("kij,vj->kvi", placements @ mesh_m, np.c_[QUAD, np.ones(4)])[..., :3]
    ref_faces = (QUAD_FACES[None] + 4 * np.arange(count)[:, None, None]).reshape(-1, 3)
    reference = rd.Scene()
    reference.add_mesh(rd.Mesh(vec(m.Array3f, world.reshape(-1, 3)), m.Array3u(ref_faces.T.astype(np.uint32))))
    reference.build()
    # One ray per triangle (at a point inside it) plus the mesh itself and misses.
    centroids = world[:, QUAD_FACES].mean(2).reshape(-1, 3)
    o = np.concatenate([centroids + [0.01, 0.02, 2.0], [[0.4, 0.1, 2.0], [-5.0, -5.0, 2.0]]])
    ray = rd.Ray(vec(m.Array3f, o), m.Array3f(0, 0, -1))
    hit, ref = scene.intersect(ray), reference.intersect(ray)
    faces = np.arange(2 * count)
    np.testing.assert_array_equal(rows(hit.shape_id), np.r_[1 + faces // 2, 0, -1])
    np.testing.assert_array_equal(rows(hit.prim_id), np.r_[faces % 2, 0, -1])
    np.testing.assert_array_equal(rows(hit.global_prim_id), np.r_[2 + faces, 0, -1])
    assert rows(ref.prim_id)[:-2].tolist() == faces.tolist()
    for name in ("t", "p", "geo_n", "barycentric"):
        np.testing.assert_allclose(rows(getattr(hit, name))[:-2], rows(getattr(ref, name))[:-2], rtol=1e-5,
                                   atol=1e-5, err_msg=name)
    # Move half of them in one batched call; the rest stay.
    moved = list(range(1, count + 1, 2))
    shifted = placements[::2].copy()
    shifted[:, 2, 3] -= 1.0
    scene.set_mesh_transform(moved, m.Matrix4f(np.ascontiguousarray(shifted.transpose(1, 2, 0))))
    assert scene.has_pending_updates()
    scene.sync()
    again = scene.intersect(ray)
    np.testing.assert_array_equal(rows(again.shape_id), rows(hit.shape_id))
    expected = rows(hit.t)[:-2] + np.where(np.isin(1 + faces // 2, moved), 1.0, 0.0)
    np.testing.assert_allclose(rows(again.t)[:-2], expected, rtol=1e-5)
    # Edge queries see the instances too.
    assert scene.edge_topology().num_edges == 5 * (count + 1)
    near = scene.nearest_edge(vec(m.Array3f, centroids[:: 2 * 37] + [0.0, 0.0, 0.01]))
    assert rows(near.shape_id).tolist() == (1 + faces[:: 2 * 37] // 2).tolist()


def test_batched_transform_changed_in_place_is_applied_at_sync(m):
    scene, _ = _scene(m)
    batch = _batch(m, [np.eye(4), np.eye(4)])
    scene.set_mesh_transform([2, 1], batch)
    batch[0][3] = m.Float([5.0, 0.0])  # instance 2 back at x + 5 (its own matrix), mesh 1 stays
    scene.sync()
    o = vec(m.Array3f, [[5.2, 0.2, 1], [0.8, 0.8, 1]])
    ray = rd.Ray(o, m.Array3f(0, 0, -1))
    np.testing.assert_allclose(rows(scene.intersect(ray).t), [1.0, 2.0], rtol=1e-6)
    assert scene.is_ready() and not scene.has_pending_updates()
    batch[2][3] = m.Float([0.5, -4.0])  # in place, after sync
    assert scene.has_pending_updates() and not scene.is_ready()
    for query in (lambda: scene.intersect(ray), lambda: scene.shadow_test(ray), lambda: scene.nearest_edge(o)):
        with pytest.raises(RuntimeError, match=r"transform of (mesh 1|instance 2) changed in place"):
            query()
    scene.sync()
    assert scene.is_ready() and not scene.has_pending_updates()
    hit = scene.intersect(ray)
    assert rows(hit.shape_id).tolist() == [2, 1]
    np.testing.assert_allclose(rows(hit.t), [0.5, 6.0], rtol=1e-6)
    # A later single-matrix call detaches the shape from the batch.
    scene.set_mesh_transform(1, _shift(m))
    scene.sync()
    batch[2][3] = m.Float([0.25, -7.0])
    scene.sync()
    np.testing.assert_allclose(rows(scene.intersect(ray).t), [0.75, 2.0], rtol=1e-6)


def _fd_check(m, loss, sources, tangents):
    """Reverse and forward mode vs central finite differences (float64) along ``tangents``."""
    def at(sign):
        moved = [m.Matrix4f64(np.ascontiguousarray(np.moveaxis(a + sign * 1e-6 * t, 0, -1)) if a.ndim == 3 else
                              (a + sign * 1e-6 * t).tolist()) for a, t in zip(sources, tangents)]
        return loss(moved)[0]

    expected = (at(1) - at(-1)) / 2e-6
    assert abs(expected) > 1e-3
    made = [m.Matrix4f64(np.ascontiguousarray(np.moveaxis(a, 0, -1)) if a.ndim == 3 else a.tolist()) for a in sources]
    dr.enable_grad(made)
    dr.backward(loss(made))
    got = sum(np.sum(np.moveaxis(np.array(dr.grad(x)).reshape(4, 4, -1), -1, 0) * t.reshape(-1, 4, 4))
              for x, t in zip(made, tangents))
    np.testing.assert_allclose(got, expected, rtol=grad_rtol(m))
    made = [m.Matrix4f64(np.ascontiguousarray(np.moveaxis(a, 0, -1)) if a.ndim == 3 else a.tolist()) for a in sources]
    dr.enable_grad(made)
    for x, t in zip(made, tangents):
        dr.set_grad(x, m.Matrix4f64(np.ascontiguousarray(np.moveaxis(t, 0, -1)) if t.ndim == 3 else t.tolist()))
    out = loss(made)
    dr.forward_to(out)
    np.testing.assert_allclose(dr.grad(out)[0], expected, rtol=grad_rtol(m))


def test_gradients_into_batched_and_single_matrices_match_finite_differences(m):
    """Mesh matrix, two single instance matrices and a batch of three: d loss / d all of them, both modes."""
    rng = np.random.default_rng(3)
    mesh_m = np.eye(4)
    mesh_m[:3, :3] += rng.normal(scale=0.05, size=(3, 3))
    mesh_m[:3, 3] = [0.05, -0.02, 0.1]
    singles = _placements(2, rng)
    batch = _placements(5, rng)[2:]
    sources = [mesh_m, singles[0], singles[1], batch]
    tangents = [rng.normal(size=(4, 4)), rng.normal(size=(4, 4)), rng.normal(size=(4, 4)), rng.normal(size=(3, 4, 4))]
    for t in tangents:
        t[..., 3, :] = 0
    placed = [mesh_m] + [p @ mesh_m for p in (*singles, *batch)]
    centre = np.array([0.4, 0.4, 0.0, 1.0])
    o = np.array([(p @ centre)[:3] + [0.02, -0.01, 2.0] for p in placed])
    d = np.tile([0.01, 0.02, -1.0], (len(placed), 1))
    normals = vec(m.Array3f64, [[0, 0.1, 1], [0.1, 0, 1], [0, 0, 1], [0.1, 0.1, 1]])

    def loss(made):
        scene = rd.Scene()
        scene.add_mesh(rd.Mesh(vec(m.Array3f64, QUAD), m.Array3u(QUAD_FACES.T.astype(np.uint32)), normals=normals,
                               to_world=made[0]))
        scene.add_instance(0, made[1])
        scene.add_instance(0, made[2])
        for _ in range(3):
            scene.add_instance(0, m.Matrix4f64(np.eye(4).tolist()))
        scene.build()
        scene.set_mesh_transform([3, 4, 5], made[3])
        scene.sync()
        hit = scene.intersect(rd.Ray(vec(m.Array3f64, o), vec(m.Array3f64, d)))
        assert rows(hit.shape_id).tolist() == [0, 1, 2, 3, 4, 5]
        weights = m.Float64(np.arange(1.0, 7.0))
        return dr.sum(hit.t * weights) + dr.sum(dr.sum(hit.n * m.Array3f64(0.3, -0.2, 0.1)) * weights)

    _fd_check(m, loss, sources, tangents)


def test_batched_and_ignore_argument_errors(m):
    scene, _ = _scene(m)
    call = r"rayd.drjit.Scene.set_mesh_transform\(\)"
    with pytest.raises(TypeError, match=call + ": 'to_world' must be a Dr.Jit array"):
        scene.set_mesh_transform([], "garbage")
    with pytest.raises(ValueError, match=call + r": 'to_world' must hold 0 matrices"):
        scene.set_mesh_transform([], _shift(m))
    with pytest.raises(ValueError, match=call + r": 'to_world' must be a Matrix4f"):
        scene.set_mesh_transform([], m.Array3f())
    scene.set_mesh_transform([], m.Matrix4f())
    assert not scene.has_pending_updates()
    ray = rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1))
    for name, query in (("intersect", lambda **k: scene.intersect(ray, **k)),
                        ("shadow_test", lambda **k: scene.shadow_test(ray, **k)),
                        ("visible", lambda **k: scene.visible(m.Array3f(0.2, 0.2, 1), m.Array3f(0.2, 0.2, -1), **k))):
        for bad in (2**40, 2**31, -(2**31) - 1):
            with pytest.raises(ValueError, match=rf"rayd.drjit.Scene.{name}\(\): 'ignore' must be a global_prim_id"):
                query(ignore=bad)
    # 64-bit ids beyond int32 match no face (not a wrapped id): face 0 is not skipped.
    hit = scene.intersect(ray, ignore=m.Int64(2**32))
    assert rows(hit.global_prim_id).tolist() == [0]
    assert rows(scene.intersect(ray, ignore=m.Int64(0)).global_prim_id).tolist() == [1]
    assert not rows(scene.visible(m.Array3f(0.2, 0.2, 1), m.Array3f(0.2, 0.2, -1), ignore=m.UInt64(2**33)))[0]
