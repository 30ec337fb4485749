"""rayd.drjit input checks and lifecycle errors: types, messages, and no mixing with torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import vec  # noqa: E402

TRI = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]


def _mesh(m, **kw):
    return rd.Mesh(vec(m.Array3f, TRI), m.Array3u([0], [1], [2]), **kw)


def _built(m, dynamic=False):
    scene = rd.Scene()
    scene.add_mesh(_mesh(m), dynamic=dynamic)
    scene.build()
    return scene


def _ray(m):
    return rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1))


# ------------------------------------------------------------------------- Mesh
def test_mesh_type_errors(m, plain):
    f = m.Array3u([0], [1], [2])
    v = vec(m.Array3f, TRI)
    with pytest.raises(TypeError, match=r"rayd.drjit.Mesh\(\): 'vertices' must be a Dr.Jit array.*got numpy.ndarray"):
        rd.Mesh(np.array(TRI), f)
    with pytest.raises(TypeError, match=r"'vertices' must have dtype float32 or float64, got drjit\..*Array3i"):
        rd.Mesh(m.Array3i([0], [1], [2]), f)
    with pytest.raises(TypeError, match=r"'vertices' must be a Dr.Jit array.*got drjit.scalar.Array3f"):
        rd.Mesh(dr.scalar.Array3f(0, 0, 0), f)
    with pytest.raises(TypeError, match=r"'faces' must have dtype int32, uint32, int64 or uint64"):
        rd.Mesh(v, m.Array3f([0], [1], [2]))
    with pytest.raises(TypeError, match=r"'normals' must have dtype"):
        rd.Mesh(v, f, normals=m.Array3u([0, 0, 0], [0, 0, 0], [1, 1, 1]))
    with pytest.raises(TypeError, match=r"'to_world' must"):
        rd.Mesh(v, f, to_world=np.eye(4))


def test_mesh_shape_and_value_errors(m):
    f = m.Array3u([0], [1], [2])
    v = vec(m.Array3f, TRI)
    with pytest.raises(ValueError, match=r"'vertices' must have shape \(N, 3\).*got drjit\..*Array2f"):
        rd.Mesh(m.Array2f([0, 1, 0], [0, 0, 1]), f)
    with pytest.raises(ValueError, match=r"'faces' must have shape \(N, 3\)"):
        rd.Mesh(v, m.UInt([0, 1, 2]))
    with pytest.raises(ValueError, match=r"'faces' must index vertices in \[0, 3\), got values in \[0, 3\]"):
        rd.Mesh(v, m.Array3u([0], [1], [3]))
    with pytest.raises(ValueError, match=r"got values in \[-1, 2\]"):
        rd.Mesh(v, m.Array3i([-1], [1], [2]))
    with pytest.raises(ValueError, match=r"'normals' must have width 3 like 'vertices', got 2"):
        rd.Mesh(v, f, normals=m.Array3f([0, 0], [0, 0], [1, 1]))
    with pytest.raises(ValueError, match=r"'uv' must have shape \(N, 2\)"):
        rd.Mesh(v, f, uv=v)
    with pytest.raises(ValueError, match=r"'to_world' must have shape \(4, 4\)"):
        rd.Mesh(v, f, to_world=m.Matrix3f())


def test_scalar_to_world_is_accepted(m):
    mesh = _mesh(m, to_world=dr.scalar.Matrix4f([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1]]))
    scene = rd.Scene()
    scene.add_mesh(mesh)
    scene.build()
    hit = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 3), m.Array3f(0, 0, -1)))
    np.testing.assert_allclose(np.array(hit.t), [2.0], rtol=1e-6)


def test_non_finite_or_singular_transforms_are_rejected(m):
    nan = [[1, 0, 0, math.nan], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    flat = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]
    with pytest.raises(ValueError, match=r"rayd.drjit.Mesh\(\): 'to_world' holds non-finite"):
        _mesh(m, to_world=m.Matrix4f(nan))
    with pytest.raises(ValueError, match=r"rayd.drjit.Mesh\(\): 'to_world' is singular"):
        _mesh(m, to_world=dr.scalar.Matrix4f(flat))
    scene = rd.Scene()
    scene.add_mesh(_mesh(m))
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene.add_instance\(\): 'to_world' is singular"):
        scene.add_instance(0, m.Matrix4f(flat))
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene.set_mesh_transform\(\): 'to_world' holds non-finite"):
        scene.set_mesh_transform(0, m.Matrix4f(nan))
    assert scene.num_shapes == 1
    rank2 = [[1, 2, 3, 0], [4, 5, 6, 0], [7, 8, 9, 0], [0, 0, 0, 1]]  # LU would leave a rounding residue
    with pytest.raises(ValueError, match=r"set_mesh_transform\(\): 'to_world' is singular"):
        scene.set_mesh_transform(0, m.Matrix4f64(rank2))
    batch = m.Matrix4f64(np.ascontiguousarray(np.stack([np.eye(4), np.array(rank2, dtype=float)]).transpose(1, 2, 0)))
    scene.add_instance(0, m.Matrix4f(1))
    with pytest.raises(ValueError, match=r"set_mesh_transform\(\): 'to_world\[1\]' is singular"):
        scene.set_mesh_transform([0, 1], batch)
    with pytest.raises(ValueError, match=r"'to_world' holds values outside the float32 range"):
        scene.set_mesh_transform(1, m.Matrix4f64(np.diag([1e39, 1e39, 1e39, 1.0]).tolist()))


# -------------------------------------------------------------------------- Ray
def test_ray_errors(m):
    o, d = m.Array3f(0, 0, 1), m.Array3f(0, 0, -1)
    with pytest.raises(TypeError, match=r"rayd.drjit.Ray\(\): 'o' must be a Dr.Jit array"):
        rd.Ray([0, 0, 1], d)
    with pytest.raises(ValueError, match=r"rayd.drjit.Ray\(\): 'd' must have shape \(N, 3\)"):
        rd.Ray(o, m.Float([1.0]))
    with pytest.raises(TypeError, match=r"'tmax' must be a float or a Dr.Jit Float array, got bool"):
        rd.Ray(o, d, True)
    with pytest.raises(TypeError, match=r"'tmin' must be a float or a Dr.Jit Float array, got str"):
        rd.Ray(o, d, tmin="0")
    with pytest.raises(ValueError, match=r"'tmax' must have shape \(N,\)"):
        rd.Ray(o, d, m.Array3f(1, 1, 1))
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: 'o' \(2,\), 'd' \(3,\)"):
        rd.Ray(m.Array3f([0, 1], [0, 1], [0, 1]), m.Array3f([0, 1, 2], [0, 1, 2], [0, 1, 2]))


def test_malformed_rays_are_misses_not_errors(m):
    scene = _built(m)
    o = m.Array3f([math.inf, 0.2, 0.2], [0.2, 0.2, 0.2], [1, 1, 1])
    d = m.Array3f([0, 0, 0], [0, 0, 0], [-1, 0, -1])
    hit = scene.intersect(rd.Ray(o, d, m.Float([10, 10, -1])))
    assert not np.array(hit.is_valid()).any()


# ------------------------------------------------------------------------ Scene
def test_scene_argument_errors(m):
    scene = _built(m)
    with pytest.raises(TypeError, match=r"rayd.drjit.Scene.add_mesh\(\): 'mesh' must be a rayd.drjit.Mesh, got str"):
        scene.add_mesh("mesh")
    with pytest.raises(TypeError, match=r"'dynamic' must be a bool, got int"):
        rd.Scene().add_mesh(_mesh(m), dynamic=1)
    with pytest.raises(TypeError, match=r"rayd.drjit.Scene.intersect\(\): 'ray' must be a rayd.drjit.Ray, got tuple"):
        scene.intersect((m.Array3f(0, 0, 1), m.Array3f(0, 0, -1)))
    with pytest.raises(TypeError, match=r"'active' must have dtype bool"):
        scene.intersect(_ray(m), m.Float([1.0]))
    with pytest.raises(TypeError, match=r"'active' must be a Dr.Jit array"):
        scene.intersect(_ray(m), True)
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast: 'ray' \(2,\), 'active' \(3,\)"):
        scene.intersect(rd.Ray(m.Array3f([0, 1], [0, 1], [1, 1]), m.Array3f(0, 0, -1)), m.Bool([True] * 3))
    with pytest.raises(TypeError, match=r"'flags' must be a rayd.RayFlags, got str"):
        scene.intersect(_ray(m), flags="all")
    with pytest.raises(ValueError, match=r"'flags' has unknown bits 0x8"):
        scene.intersect(_ray(m), flags=8)
    with pytest.raises(TypeError, match=r"update_mesh_vertices\(\): 'mesh_id' must be an int, got str"):
        scene.update_mesh_vertices("0", vec(m.Array3f, TRI))
    with pytest.raises(ValueError, match=r"'shape_id' must be in \[0, 1\), got 4"):
        scene.set_mesh_transform(4, m.Matrix4f())


def test_build_errors(m):
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene.build\(\): the scene is empty"):
        rd.Scene().build()
    bad = rd.Scene()
    bad.add_mesh(rd.Mesh(m.Array3f([0, 1, math.nan], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2])))
    with pytest.raises(ValueError, match=r"'vertices of mesh 0' holds non-finite values \(first at row 2\)"):
        bad.build()


def test_update_errors(m):
    scene = _built(m, dynamic=True)
    with pytest.raises(ValueError, match=r"'vertices' must have shape \(3, 3\) like mesh 0, got width 2"):
        scene.update_mesh_vertices(0, m.Array3f([0, 1], [0, 1], [0, 1]))
    static = _built(m)
    with pytest.raises(RuntimeError, match=r"mesh 0 was added with dynamic=False"):
        static.update_mesh_vertices(0, vec(m.Array3f, TRI))
    scene.update_mesh_vertices(0, m.Array3f([0, 1, 0], [0, 0, 1], [0, math.inf, 0]))
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene.sync\(\): 'vertices of mesh 0' holds non-finite"):
        scene.sync()


# -------------------------------------------------------------------- lifecycle
def test_query_before_build(m):
    scene = rd.Scene()
    scene.add_mesh(_mesh(m))
    with pytest.raises(RuntimeError, match=r"rayd.drjit.Scene.intersect\(\): the scene is not built"):
        scene.intersect(_ray(m))
    with pytest.raises(RuntimeError, match=r"rayd.drjit.Scene.sync\(\): the scene is not built"):
        scene.sync()
    assert not scene.is_ready()


def test_add_after_build(m):
    scene = _built(m)
    scene.add_mesh(_mesh(m))
    with pytest.raises(RuntimeError, match=r"shapes were added after build\(\); call build\(\) again"):
        scene.intersect(_ray(m))
    scene.build()
    assert scene.is_ready()


def test_pending_updates_block_queries(m):
    scene = _built(m, dynamic=True)
    scene.update_mesh_vertices(0, vec(m.Array3f, TRI))
    with pytest.raises(RuntimeError, match=r"mesh 0 has pending updates; call sync\(\) first"):
        scene.intersect(_ray(m))
    scene.sync()
    scene.intersect(_ray(m))
    scene.set_mesh_transform(0, m.Matrix4f([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, -0.5], [0, 0, 0, 1]]))
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match=r"pending updates"):
        scene.intersect(_ray(m))
    scene.sync()
    np.testing.assert_allclose(np.array(scene.intersect(_ray(m)).t), [1.5], rtol=1e-6)


def test_in_place_changes_are_detected(m):
    dynamic = rd.Scene()
    v = vec(m.Array3f, TRI)
    dynamic.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2])), dynamic=True)
    dynamic.build()
    dr.enable_grad(v)  # enabling gradients is not a change
    assert dynamic.is_ready()
    v.z += 0.5
    with pytest.raises(RuntimeError, match=r"vertices or transform of mesh 0 changed in place since the last sync\(\)"):
        dynamic.intersect(_ray(m))
    dynamic.sync()
    np.testing.assert_allclose(np.array(dynamic.intersect(_ray(m)).t), [0.5], rtol=1e-6)

    static = rd.Scene()
    w = vec(m.Array3f, TRI)
    static.add_mesh(rd.Mesh(w, m.Array3u([0], [1], [2])))
    static.build()
    w.x = w.x + 1
    with pytest.raises(RuntimeError, match=r"static mesh 0 changed in place; call build\(\) to rebuild"):
        static.intersect(_ray(m))
    with pytest.raises(RuntimeError, match=r"static mesh 0 changed in place"):
        static.sync()
    static.build()
    assert not np.array(static.intersect(_ray(m)).is_valid()).any()


# ---------------------------------------------------------------- no mixing
def test_torch_objects_are_rejected():
    torch = pytest.importorskip("torch")
    rt = pytest.importorskip("rayd.torch")
    import drjit.llvm.ad as m

    v = torch.tensor(TRI)
    f = torch.tensor([[0, 1, 2]])
    foreign = r"got torch.Tensor \(PyTorch tensors belong to rayd.torch"
    with pytest.raises(TypeError, match=r"'vertices' must be a Dr.Jit array.*" + foreign):
        rd.Mesh(v, f)
    with pytest.raises(TypeError, match=r"rayd.drjit.Ray\(\): 'o' must be a Dr.Jit array.*got torch.Tensor"):
        rd.Ray(v, v)
    with pytest.raises(TypeError, match=r"'tmax' must be a float or a Dr.Jit Float array, got torch.Tensor"):
        rd.Ray(m.Array3f(0, 0, 1), m.Array3f(0, 0, -1), torch.tensor(1.0))
    scene = rd.Scene()
    no_mix = r" \(rayd.torch and rayd.drjit objects do not mix\)"
    with pytest.raises(TypeError, match=r"'mesh' must be a rayd.drjit.Mesh, got rayd.torch.mesh.Mesh" + no_mix):
        scene.add_mesh(rt.Mesh(v, f))
    scene.add_mesh(_mesh(m))
    scene.build()
    with pytest.raises(TypeError, match=r"'ray' must be a rayd.drjit.Ray, got rayd.torch.ray.Ray" + no_mix):
        scene.intersect(rt.Ray(v, v))
    with pytest.raises(TypeError, match=r"'active' must be a Dr.Jit array.*got torch.Tensor"):
        scene.intersect(_ray(m), torch.ones(1, dtype=torch.bool))


def test_backends_do_not_mix():
    if not dr.has_backend(dr.JitBackend.CUDA):
        pytest.skip("needs the CUDA backend")
    import drjit.cuda.ad as c
    import drjit.llvm.ad as m

    with pytest.raises(ValueError, match=r"'faces' is on cuda:0, but 'vertices' is on cpu"):
        rd.Mesh(vec(m.Array3f, TRI), c.Array3u([0], [1], [2]))
    scene = _built(m)
    with pytest.raises(ValueError, match=r"'ray.o' is on cuda:\d, but the scene is on cpu"):
        scene.intersect(rd.Ray(c.Array3f(0.2, 0.2, 1), c.Array3f(0, 0, -1)))


# ------------------------------------------- faces written in place (issue 19, item 5)
@pytest.mark.parametrize("bad", [10**8, 10**6, -5, 3])
@pytest.mark.parametrize("kind", ["Array3i", "Array3u", "Array3i64"])
def test_faces_written_in_place_after_mesh_are_checked_at_build(m, bad, kind):
    # Once these segfaulted build() (1e8) or the first nearest_edge (1e6), or gave garbage (-5).
    if bad < 0 and kind == "Array3u":
        bad = 2**32 - 5  # -5 as uint32
    f = getattr(m, kind)([0], [1], [2])
    dr.make_opaque(f)
    mesh = rd.Mesh(vec(m.Array3f, TRI), f)
    dr.scatter(f.y, type(f.y)(bad), m.UInt32(0))
    scene = rd.Scene()
    scene.add_mesh(mesh)
    with pytest.raises(
        ValueError, match=rf"rayd.drjit.Scene.build\(\): 'faces of mesh 0' must index vertices in \[0, 3\), got values in \[{min(bad, 0)}, {max(bad, 2)}\]"
    ):
        scene.build()
    dr.scatter(f.y, type(f.y)(1), m.UInt32(0))  # repaired: builds and answers
    scene.build()
    assert np.array(scene.intersect(_ray(m)).is_valid()).tolist() == [True]
    np.testing.assert_allclose(np.array(scene.nearest_edge(m.Array3f(0.5, -1.0, 0.0)).distance), [1.0], rtol=1e-6)


def test_faces_written_in_place_after_build_are_checked_at_rebuild(m):
    f = m.Array3u([0], [1], [2])
    dr.make_opaque(f)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, TRI), f), dynamic=True)
    scene.build()
    f.z[0] = 10**6
    with pytest.raises(RuntimeError, match=r"Scene.nearest_edge\(\): the faces of mesh 0 changed in place"):
        scene.nearest_edge(m.Array3f(0.5, -1.0, 0.0))
    with pytest.raises(RuntimeError, match=r"Scene.sync\(\): the faces of mesh 0 changed in place"):
        scene.sync()
    with pytest.raises(ValueError, match=r"Scene.build\(\): 'faces of mesh 0' must index vertices in \[0, 3\)"):
        scene.build()


def test_ragged_arrays_and_width_changes_are_value_errors(m):
    f = m.Array3u([0], [1], [2])
    v = vec(m.Array3f, TRI)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, f), dynamic=True)
    f.x = m.UInt32([0, 1])  # one component reassigned to another width
    with pytest.raises(ValueError, match=r"Scene.build\(\): 'faces of mesh 0' is ragged: its components have widths \[2, 1, 1\]"):
        scene.build()
    f.x = m.UInt32([0])
    scene.build()
    v.x, v.y, v.z = m.Float([0, 1, 0, 5]), m.Float([0, 0, 1, 5]), m.Float([0, 0, 0, 5])  # V grew in place
    with pytest.raises(ValueError, match=r"Scene.sync\(\): 'vertices' of mesh 0 must keep the width 3 it had at build\(\), got 4"):
        scene.sync()
    with pytest.raises(ValueError, match=r"rayd.drjit.Mesh\(\): 'vertices' is ragged"):
        rd.Mesh(m.Array3f(m.Float([0, 1]), m.Float([0]), m.Float([0])), f)


def test_scene_copy_deepcopy_and_pickle_are_clear_errors(m):
    import copy
    import pickle

    scene = _built(m)
    for fn, pattern in ((copy.copy, r"copy.copy\(rayd.drjit.Scene\): a shallow copy would share"),
                        (copy.deepcopy, r"copy.deepcopy\(rayd.drjit.Scene\) is not supported"),
                        (pickle.dumps, r"pickle.dumps\(rayd.drjit.Scene\): .*cannot be pickled")):
        with pytest.raises(TypeError, match=pattern):
            fn(scene)
    # the original is untouched and still answers
    assert scene.num_meshes == 1
    assert float(scene.intersect(_ray(m)).t[0]) == 1.0


def test_visible_names_its_segments_not_a_ray(m):
    """``visible(start, end, active, ignore=...)`` has no ``ray`` argument: a batch mismatch of
    ``active`` or ``ignore`` named ``'ray' (2,)``; it names ``'start/end'`` now, and the ray
    queries keep ``'ray'``."""
    scene = _built(m)
    start = m.Array3f([0.2, 0.3], [0.2, 0.2], [1, 1])
    end = m.Array3f([0.2, 0.3], [0.2, 0.2], [-1, -1])
    for kw, name in ((dict(active=m.Bool([True, False, True])), "active"), (dict(ignore=m.Int([0, 1, 1])), "ignore")):
        with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.visible\(\): batch shapes do not broadcast: "
                                             rf"'start/end' \(2,\), '{name}' \(3,\)$"):
            scene.visible(start, end, **kw)
        with pytest.raises(ValueError, match=rf"^rayd\.drjit\.Scene\.shadow_test\(\): .*'ray' \(2,\), '{name}' \(3,\)$"):
            scene.shadow_test(rd.Ray(start, end - start), **kw)
    assert np.array(scene.visible(start, end, m.Bool([True, True]))).tolist() == [False, False]
