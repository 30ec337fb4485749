"""rayd.drjit sees every in-place Dr.Jit write into a registered array (issue 19, item 2).

Dr.Jit writes a scatter (``dr.scatter(v.z, ...)``, ``v.x[k] = ...``) straight into the
memory of a variable nobody else references, keeping its id; the scene holds a second
reference to what it snapshotted, so such writes copy first and change the id. The
rule (DESIGN.md, updates): a dynamic mesh's vertices and any registered matrix count
as pending (``sync()`` applies them); a static mesh's vertices and any faces make
queries raise until ``build()``. Every case also checks the BVH itself: the ray
``RAY_X`` misses the triangle where it was built and hits it only once the moved
geometry is snapshotted (the evaluation alone reads the live arrays, so ``t`` would
not show a stale BVH).
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import rows, vec  # noqa: E402

TRI = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
SHIFT = 5.0  # every form moves the triangle by +5 in x
X0 = TRI[:, 0]


def _idx(m):
    return m.UInt32([0, 1, 2])


def _setitem(m, v):
    for k in range(3):
        v.x[k] = float(X0[k] + SHIFT)


def _masked_scatter(m, v):
    # Lanes 0..2 all active; an extra lane pointing at row 0 is masked off.
    dr.scatter(v.x, type(v.x)(list(X0 + SHIFT) + [-100.0]), m.UInt32([0, 1, 2, 0]), m.Bool([True, True, True, False]))


def _masked_select(m, v):
    v.x = dr.select(m.Bool([True, True, True]), v.x + SHIFT, v.x)


def _iadd_component(m, v):
    v.x += SHIFT


def _iadd_vector(m, v):
    v += type(v)(SHIFT, 0, 0)


def _index_assign(m, v):
    v[0] = type(v.x)(X0 + SHIFT)


#: Every in-place write form we know that moves the registered vertices (name -> writer).
#: ``grad`` marks forms Dr.Jit allows on arrays with gradients enabled
#: (``v.x[k] = ...`` is refused there: "not permitted on attached variables").
FORMS = {
    "scatter": (lambda m, v: dr.scatter(v.x, type(v.x)(X0 + SHIFT), _idx(m)), True),
    "setitem": (_setitem, False),
    "masked_scatter": (_masked_scatter, True),
    "masked_select": (_masked_select, True),
    "scatter_add": (lambda m, v: dr.scatter_add(v.x, type(v.x)([SHIFT] * 3), _idx(m)), True),
    "scatter_reduce": (lambda m, v: dr.scatter_reduce(dr.ReduceOp.Max, v.x, type(v.x)(X0 + SHIFT), _idx(m)), True),
    "scatter_exch": (lambda m, v: dr.eval(dr.scatter_exch(v.x, type(v.x)(X0 + SHIFT), _idx(m))), False),
    "scatter_vec3": (lambda m, v: dr.scatter(v, type(v)(X0 + SHIFT, TRI[:, 1], TRI[:, 2]), _idx(m)), True),
    "iadd_component": (_iadd_component, True),
    "iadd_vector": (_iadd_vector, True),
    "assign_component": (lambda m, v: setattr(v, "x", type(v.x)(X0 + SHIFT)), True),
    "index_assign": (_index_assign, True),
}


def _vertices(m, double=False):
    v = vec(m.Array3f64 if double else m.Array3f, TRI)
    dr.make_opaque(v)
    return v


def _ray(m, x=0.2):
    return rd.Ray(m.Array3f([x, 0.2], [0.2, 0.2], [1.0, 1.0]), m.Array3f(0, 0, -1))


def _hits(scene, m):
    """(is_valid, t) of the two rays: at x = 0.2 (the built triangle) and x = 5.2 (the moved one)."""
    ray = rd.Ray(m.Array3f([0.2, 0.2 + SHIFT], [0.2, 0.2], [1.0, 1.0]), m.Array3f(0, 0, -1))
    hit = scene.intersect(ray)
    return rows(hit.is_valid()).tolist(), rows(hit.t)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize("double", [False, True], ids=["f32", "f64"])
def test_dynamic_in_place_write_is_pending_then_refit(m, form, grad, double):
    write, grad_ok = FORMS[form]
    if grad and not grad_ok:
        pytest.skip("Dr.Jit refuses this write on arrays with gradients enabled")
    v = _vertices(m, double)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2])), dynamic=True)
    scene.build()
    if grad:
        dr.enable_grad(v)
    assert scene.is_ready() and not scene.has_pending_updates()
    assert _hits(scene, m)[0] == [True, False]
    write(m, v)
    np.testing.assert_allclose(rows(v)[:, 0], X0 + SHIFT)  # the write happened
    assert scene.has_pending_updates() and not scene.is_ready()
    for query in (
        lambda: scene.intersect(_ray(m)),
        lambda: scene.shadow_test(_ray(m)),
        lambda: scene.visible(m.Array3f(0.2, 0.2, 1), m.Array3f(0.2, 0.2, -1)),
        lambda: scene.nearest_edge(m.Array3f(0.2, 0.2, 1)),
    ):
        with pytest.raises(RuntimeError, match=r"vertices or transform of mesh 0 changed in place.*call sync\(\)"):
            query()
    scene.sync()
    assert scene.is_ready() and not scene.has_pending_updates()
    valid, t = _hits(scene, m)
    assert valid == [False, True]  # the refitted BVH, not the built one
    np.testing.assert_allclose(t[1], 1.0, rtol=1e-6)
    near = scene.nearest_edge(m.Array3f(SHIFT + 0.5, -1.0, 0.0))  # below edge (0,1), now at x in [5, 6]
    np.testing.assert_allclose(rows(near.distance), [1.0], rtol=1e-6)
    # A second write after sync() is seen again (the hold is renewed).
    v.x += 1.0
    assert scene.has_pending_updates()
    scene.sync()
    assert _hits(scene, m)[0] == [False, False]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_static_in_place_write_raises_until_build(m, form):
    write, _ = FORMS[form]
    v = _vertices(m)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2])))
    scene.build()
    write(m, v)
    # sync() cannot apply it: not pending, but not ready, and queries say build().
    assert not scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"the vertices of static mesh 0 changed in place; call build\(\)"):
        scene.intersect(_ray(m))
    with pytest.raises(RuntimeError, match=r"the vertices of static mesh 0 changed in place; call build\(\)"):
        scene.shadow_test(_ray(m))
    with pytest.raises(RuntimeError, match=r"Scene.sync\(\): the vertices of static mesh 0 changed in place"):
        scene.sync()
    scene.build()
    assert scene.is_ready()
    assert _hits(scene, m)[0] == [False, True]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_non_writes_are_not_changes(m, dynamic):
    v = vec(m.Array3f, TRI)  # literal-free but unevaluated-safe
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2]), to_world=m.Matrix4f(1)), dynamic=dynamic)
    scene.build()
    dr.make_opaque(v)
    dr.eval(v)
    dr.enable_grad(v)
    _ = v.x + 1.0  # reading is not writing
    assert scene.is_ready() and not scene.has_pending_updates()
    assert _hits(scene, m)[0] == [True, False]


def test_literal_vertices_made_opaque_are_not_a_change(m):
    # Built from literals (dr.full): the scene makes them opaque at build(), so the
    # user's own dr.make_opaque later does not look like a write.
    v = m.Array3f(m.Float([0.0, 1.0, 0.0]), m.Float([0.0, 0.0, 1.0]), dr.full(m.Float, 0.0, 3))
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3u([0], [1], [2])))
    scene.build()
    dr.make_opaque(v)
    assert scene.is_ready()


def _m_setitem(m, M):
    M[0][3] = m.Float(SHIFT)


def _m_setitem_2d(m, M):
    M[0, 3] = SHIFT


def _m_iadd(m, M):
    M[0][3] += SHIFT


def _m_entry_scatter(m, M):
    dr.scatter(M[0][3], m.Float(SHIFT), m.UInt32(0))


TRANSFORM_FORMS = {
    "setitem": _m_setitem,
    "setitem_2d": _m_setitem_2d,
    "scatter": _m_entry_scatter,
    "iadd": _m_iadd,
}


@pytest.mark.parametrize("form", sorted(TRANSFORM_FORMS))
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_to_world_in_place_is_pending_for_any_mesh(m, form, dynamic):
    """One rule for matrices, static mesh or not: pending, queries say sync(), sync() applies it."""
    M = m.Matrix4f(1)
    dr.make_opaque(M)  # evaluated, as a matrix an optimiser steps (a literal's first write always re-indexes)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(_vertices(m), m.Array3u([0], [1], [2]), to_world=M), dynamic=dynamic)
    scene.build()
    TRANSFORM_FORMS[form](m, M)
    assert scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"transform of mesh 0 changed in place.*call sync\(\)"):
        scene.intersect(_ray(m))
    scene.sync()
    assert scene.is_ready() and not scene.has_pending_updates()
    assert _hits(scene, m)[0] == [False, True]


@pytest.mark.parametrize("form", sorted(TRANSFORM_FORMS))
def test_instance_and_batch_matrices_in_place(m, form):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(_vertices(m), m.Array3u([0], [1], [2])))
    own = m.Matrix4f(1)
    own[1, 3] = 10.0  # the instance sits at y + 10, out of both rays
    dr.make_opaque(own)
    scene.add_instance(0, own)
    scene.build()
    TRANSFORM_FORMS[form](m, own)
    own[1, 3] = 0.0
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match=r"transform of instance 1 changed in place"):
        scene.intersect(_ray(m))
    scene.sync()
    hit = scene.intersect(rd.Ray(m.Array3f(0.2 + SHIFT, 0.2, 1.0), m.Array3f(0, 0, -1)))
    assert rows(hit.shape_id).tolist() == [1]

    batch = m.Matrix4f(1)  # a batch of one, for set_mesh_transform([0], ...)
    dr.make_opaque(batch)
    scene.set_mesh_transform([0], batch)
    scene.sync()
    ray = rd.Ray(m.Array3f([0.2, 0.2 + SHIFT], [0.2, 0.2], [1.0, 1.0]), m.Array3f(0, 0, -1))
    assert rows(scene.intersect(ray).shape_id).tolist() == [0, 1]
    TRANSFORM_FORMS[form](m, batch)
    assert scene.has_pending_updates()
    with pytest.raises(RuntimeError, match=r"transform of mesh 0 changed in place"):
        scene.intersect(_ray(m))
    scene.sync()
    assert rows(scene.intersect(ray).shape_id).tolist() == [-1, 0]  # the mesh at x + 5, its instance at x + 10


def test_normals_and_uv_are_read_live(m):
    """Normals and uv are not snapshotted: in-place writes apply to the next query, nothing pends."""
    normals = vec(m.Array3f, [[0, 0, 1]] * 3)
    uv = m.Array2f([0.0, 1.0, 0.0], [0.0, 0.0, 1.0])
    dr.make_opaque(normals, uv)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(_vertices(m), m.Array3u([0], [1], [2]), normals=normals, uv=uv))
    scene.build()
    dr.scatter(normals.x, m.Float([1.0, 1.0, 1.0]), _idx(m))
    dr.scatter(normals.z, m.Float([0.0, 0.0, 0.0]), _idx(m))
    uv.x[1] = 3.0
    assert scene.is_ready() and not scene.has_pending_updates()
    hit = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1)))
    np.testing.assert_allclose(rows(hit.n), [[1, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(rows(hit.uv), [[0.6, 0.2]], rtol=1e-5)


FACE_FORMS = {
    "scatter": lambda m, f: dr.scatter(f.y, m.UInt32(2), m.UInt32(0)),
    "setitem": lambda m, f: f.y.__setitem__(0, 2),
    "assign_component": lambda m, f: setattr(f, "y", m.UInt32([2])),
    "scatter_inc": lambda m, f: dr.eval(dr.scatter_inc(f.y, m.UInt32(0))),
}


@pytest.mark.parametrize("form", sorted(FACE_FORMS))
def test_faces_in_place_raise_until_build(m, form):
    v = vec(m.Array3f, np.vstack([TRI, [[0.0, 0.0, 1.0]]]))
    f = m.Array3u([0], [1], [2])
    dr.make_opaque(f)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, f), dynamic=True)
    scene.build()
    FACE_FORMS[form](m, f)
    assert not scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"the faces of mesh 0 changed in place since build\(\); call build\(\)"):
        scene.intersect(_ray(m))
    with pytest.raises(RuntimeError, match=r"Scene.sync\(\): the faces of mesh 0 changed in place"):
        scene.sync()
    scene.build()
    assert scene.is_ready()


@pytest.mark.parametrize("name", ["vertices", "faces", "to_world"])
def test_assigning_a_mesh_array_is_refused_never_stale(m, name):
    """``mesh.to_world = M`` after ``Mesh()`` was silently ignored by the scene (stale answers,
    rebuild or not); it is refused naming the call to use, and the scene keeps its arrays."""
    M = m.Matrix4f(1)
    mesh = rd.Mesh(_vertices(m), m.Array3u([0], [1], [2]), to_world=M)
    scene = rd.Scene()
    scene.add_mesh(mesh, dynamic=True)
    scene.build()
    shifted = m.Matrix4f(1)
    shifted[0][3] = SHIFT
    new = {"vertices": vec(m.Array3f, TRI + [SHIFT, 0, 0]), "faces": m.Array3u([0], [2], [1]), "to_world": shifted}[name]
    how = {"vertices": r"update_mesh_vertices", "to_world": r"rayd\.drjit\.Scene\.set_mesh_transform"}.get(name, "new Mesh")
    with pytest.raises(AttributeError, match=rf"rayd\.drjit\.Mesh: '{name}' cannot be assigned.*{how}"):
        setattr(mesh, name, new)
    scene.build()
    assert _hits(scene, m)[0] == [True, False]
    scene.set_mesh_transform(0, shifted)
    scene.sync()
    assert _hits(scene, m)[0] == [False, True]
