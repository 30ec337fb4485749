"""rayd.drjit in Dr.Jit's symbolic and recorded modes, and before any mesh (session 20, helper breakit20c).

A scene call hands Dr.Jit arrays to Warp kernels and reads small arrays on the host, which Dr.Jit cannot
do with symbolic variables: inside ``drjit.while_loop`` / ``if_stmt`` / ``@drjit.syntax`` a query failed with
Dr.Jit's "variable remains dirty despite an attempt to evaluate it", and inside ``drjit.freeze`` with
"created before recording was started". Both are now refused at the call with a message naming it and the
way out (evaluated mode); evaluated loops give the eager answers. A query on a scene that never had a mesh
raised ``AttributeError`` ('NoneType' object has no attribute 'startswith'); it raises the contract's
``RuntimeError`` (not built) now.
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")


def _scene(m):
    """Two parallel triangles at z = 0 and z = -1 (the ray at (0.2, 0.2) hits both)."""
    v = m.Array3f([0.0, 1, 0, 0, 1, 0], [0.0, 0, 1, 0, 0, 1], [0.0, 0, 0, -1, -1, -1])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3i([0, 3], [1, 4], [2, 5])))
    scene.build()
    return scene


def _cause_chain(error: BaseException) -> str:
    text = []
    while error is not None:
        text.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(text)


QUERIES = {
    "intersect": lambda s, o, d: s.intersect(rd.Ray(o, d)).t,
    "shadow_test": lambda s, o, d: dr.select(s.shadow_test(rd.Ray(o, d)), 1.0, 0.0),
    "count_intersections": lambda s, o, d: type(o.x)(s.count_intersections(rd.Ray(o, d))),
    "intersect_all": lambda s, o, d: s.intersect_all(rd.Ray(o, d), 1).t,
    "visible": lambda s, o, d: dr.select(s.visible(o, o + d), 1.0, 0.0),
    "closest_point": lambda s, o, d: s.closest_point(o).distance,
}


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_symbolic_loop_is_refused_by_name(m, query):
    scene = _scene(m)
    run = QUERIES[query]

    def body(i, acc, o):
        return i + 1, acc + run(scene, o, m.Array3f(0, 0, -1)), o

    start = (m.UInt32(0, 0), m.Float(0, 0), m.Array3f([0.2, 0.3], [0.2, 0.2], [1.0, 1.0]))
    with pytest.raises(RuntimeError) as info:
        dr.while_loop(start, lambda i, acc, o: i < 2, body, mode="symbolic")
    assert f"rayd.drjit.Scene.{query}(): cannot run inside a symbolic loop" in _cause_chain(info.value)


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_evaluated_loop_answers_as_eager_calls(m, query):
    scene = _scene(m)
    run = QUERIES[query]
    d = m.Array3f(0, 0, -1)
    o0 = m.Array3f([0.2, 0.3], [0.2, 0.2], [1.0, 1.0])

    def body(i, acc, o):
        return i + 1, acc + run(scene, o, d), o + m.Array3f(0, 0, -0.5)

    _, acc, _ = dr.while_loop((m.UInt32(0, 0), m.Float(0, 0), o0), lambda i, acc, o: i < 2, body, mode="evaluated")
    eager = run(scene, o0, d) + run(scene, o0 + m.Array3f(0, 0, -0.5), d)
    np.testing.assert_array_equal(np.asarray(acc), np.asarray(eager))
    if query == "intersect":  # from z = 1: t = 1; from z = 0.5: t = 0.5
        np.testing.assert_allclose(np.asarray(acc), [1.5, 1.5])


def test_symbolic_conditional_is_refused(m):
    scene = _scene(m)
    o, d = m.Array3f([0.2, 0.3], [0.2, 0.2], [1.0, 1.0]), m.Array3f(0, 0, -1)
    with pytest.raises(RuntimeError) as info:
        dr.if_stmt((o, d), m.Bool([True, False]), lambda o, d: scene.intersect(rd.Ray(o, d)).t,
                   lambda o, d: dr.zeros(m.Float, 2), mode="symbolic")
    assert "rayd.drjit.Scene.intersect(): cannot run inside a symbolic loop, conditional" in _cause_chain(info.value)
    t = dr.if_stmt((o, d), m.Bool([True, False]), lambda o, d: scene.intersect(rd.Ray(o, d)).t,
                   lambda o, d: dr.zeros(m.Float, 2), mode="evaluated")
    np.testing.assert_allclose(np.asarray(t), [1.0, 0.0])


def test_frozen_function_is_refused(m):
    scene = _scene(m)

    @dr.freeze
    def trace(o):
        return scene.intersect(rd.Ray(o, m.Array3f(0, 0, -1))).t

    with pytest.raises(RuntimeError) as info:
        trace(m.Array3f([0.2, 0.3], [0.2, 0.2], [1.0, 1.0]))
    assert "rayd.drjit.Scene.intersect(): cannot run inside a function frozen with drjit.freeze" in \
        _cause_chain(info.value)
    # the scene is unharmed: eager calls answer
    np.testing.assert_allclose(np.asarray(scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 1), m.Array3f(0, 0, -1))).t), [1])


def test_lifecycle_calls_are_refused_in_symbolic_loops(m):
    v = m.Array3f([0.0, 1, 0], [0.0, 0, 1], [0.0, 0, 0])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, m.Array3i([0], [1], [2])), dynamic=True)
    scene.build()

    def body(i):
        scene.update_mesh_vertices(0, v + m.Array3f(0, 0, 0.5))
        scene.sync()
        return (i + 1,)

    with pytest.raises(RuntimeError) as info:
        dr.while_loop((m.UInt32(0),), lambda i: i < 2, body, mode="symbolic")
    assert "rayd.drjit.Scene.sync(): cannot run inside a symbolic loop" in _cause_chain(info.value)
    scene.sync()  # (update_mesh_vertices, is_ready, has_pending_updates are bookkeeping: they still run there)
    t = scene.intersect(rd.Ray(m.Array3f(0.2, 0.2, 3.0), m.Array3f(0, 0, -1))).t
    np.testing.assert_allclose(np.asarray(t), [2.5])


def test_camera_rays_still_work_in_symbolic_loops(m):
    """Pure Dr.Jit calls (Camera.generate_rays) are not refused."""
    cam = rd.Camera(4, 3, fov_y=45.0)
    xy = m.Array2f([0.5, 1.5], [0.5, 0.5])

    def body(i, acc):
        return i + 1, acc + cam.generate_rays(xy).d.z

    _, acc = dr.while_loop((m.UInt32(0, 0), m.Float(0, 0)), lambda i, acc: i < 2, body, mode="symbolic")
    np.testing.assert_allclose(np.asarray(acc), 2 * np.asarray(cam.generate_rays(xy).d.z), rtol=1e-6)


@pytest.mark.parametrize("query", sorted(QUERIES) + ["nearest_edge", "silhouette_edges", "winding_number"])
def test_query_on_a_scene_without_meshes_raises_not_built(m, query):
    scene = rd.Scene()
    o, d = m.Array3f(0.2, 0.2, 1.0), m.Array3f(0, 0, -1)
    run = {**QUERIES, "nearest_edge": lambda s, o, d: s.nearest_edge(o),
           "silhouette_edges": lambda s, o, d: s.silhouette_edges(o),
           "winding_number": lambda s, o, d: s.winding_number(o)}[query]
    with pytest.raises(RuntimeError, match=rf"^rayd\.drjit\.Scene\.{query}\(\): the scene is not built"):
        run(scene, o, d)


def test_sample_edges_is_refused_by_its_own_name_in_symbolic_loops(m):
    scene = _scene(m)
    cam = rd.Camera(8, 6, fov_y=60.0, to_world=m.Matrix4f([[1, 0, 0, 0.2], [0, -1, 0, 0.2], [0, 0, -1, 3], [0, 0, 0, 1]]))
    eager = cam.sample_edges(scene, 16)
    assert dr.width(eager.xy) == 16

    def body(i, acc):
        return i + 1, acc + dr.sum(cam.sample_edges(scene, 16).weight)

    with pytest.raises(RuntimeError) as info:
        dr.while_loop((m.UInt32(0), m.Float(0)), lambda i, acc: i < 2, body, mode="symbolic")
    assert "rayd.drjit.Camera.sample_edges(): cannot run inside a symbolic loop" in _cause_chain(info.value)
