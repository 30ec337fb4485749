"""rayd.drjit query inputs that change or disagree with themselves (helper review24b, session 24).

Found:

- A ``Ray`` holds its arrays by reference, and a Dr.Jit vector can change width in place
  (``o.x = Float(...)`` of another width). The batch width measured at ``Ray()`` then no longer
  matched the arrays: ``intersect`` stopped with Dr.Jit's "drjit.select(...): failed", and
  ``shadow_test``, ``intersect_all``, ``count_intersections`` and ``trace_reflections`` silently
  answered for the old width. Assigning ``ray.o``/``ray.d``/``ray.tmax``/``ray.tmin`` bypassed
  every check of ``Ray()`` the same way. Each query now re-derives the batch from the arrays the
  ray holds (``rayd.core.rays.RayBase._current``): still broadcasting, the query answers for the
  new batch; else ``ValueError`` naming the query and ``'ray.o'``/``'ray.d'``/...
- A 3-vector whose components have widths that do not broadcast (``Array3f(Float(3 values),
  Float(2 values), Float(1))``, or an empty component beside width-1 ones, which Dr.Jit's
  ``dr.width`` calls width 1) stopped every query with Dr.Jit's own ``RuntimeError`` ("the input is
  ragged" / "jit_var_scatter(...): operands have incompatible sizes"); it is now a ``ValueError``
  naming the call and the argument, as ragged vertices already were. Components of width 1 still
  broadcast (``Array3f(Float(N values), 0, 5)``).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
import rayd.drjit as rd  # noqa: E402

from drjit_testutil import rows, vec  # noqa: E402

# A unit square in z = 0 (two faces) and a second one in z = -1 below it.
SQUARES = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, -1], [1, 0, -1], [1, 1, -1], [0, 1, -1]], float)
FACES = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])


def _scene(m):
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARES), vec(m.Array3u, FACES)))
    scene.build()
    return scene


def _xs(m, k):
    """``k`` origins' x: inside the square for the first 3, outside (x = 2) after."""
    return m.Float([0.2, 0.5, 0.7, 2.0, 2.0, 2.0, 2.0][:k])


@pytest.mark.parametrize("query", ["intersect", "shadow_test", "intersect_all", "count_intersections",
                                   "trace_reflections", "nearest_edge"])
def test_a_ray_whose_origin_changed_width_in_place_is_read_as_it_is_now(m, query):
    scene = _scene(m)
    o = m.Array3f(_xs(m, 3), m.Float(0.5), m.Float(1.0))
    ray = rd.Ray(o, m.Array3f(0.0, 0.0, -1.0))
    o.x = _xs(m, 5)  # five origins now: the last two miss the squares
    calls = {
        "intersect": lambda: scene.intersect(ray).t,
        "shadow_test": lambda: scene.shadow_test(ray),
        "intersect_all": lambda: scene.intersect_all(ray, 2).t,
        "count_intersections": lambda: scene.count_intersections(ray),
        "trace_reflections": lambda: scene.trace_reflections(ray, 2).t,
        "nearest_edge": lambda: scene.nearest_edge(ray).distance,
    }
    got = rows(calls[query]())
    fresh = rd.Ray(m.Array3f(_xs(m, 5), m.Float(0.5), m.Float(1.0)), m.Array3f(0.0, 0.0, -1.0))
    calls_fresh = dict(calls)
    ray = fresh  # (the lambdas read `ray`)
    want = rows(calls_fresh[query]())
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if query == "intersect":  # hand-derived: t = 1 on the top square for x in the square, a miss beyond
        np.testing.assert_array_equal(got, [1, 1, 1, np.inf, np.inf])
    if query == "count_intersections":
        np.testing.assert_array_equal(got, [2, 2, 2, 0, 0])


def test_a_ray_whose_arrays_no_longer_broadcast_is_a_value_error(m):
    scene = _scene(m)
    o = m.Array3f(_xs(m, 3), m.Float(0.5), m.Float(1.0))
    d = m.Array3f(m.Float([0.0, 0.0, 0.0]), m.Float(0.0), m.Float(-1.0))
    ray = rd.Ray(o, d)
    o.x = _xs(m, 5)  # 5 origins, 3 directions
    for call in (lambda: scene.intersect(ray), lambda: scene.shadow_test(ray), lambda: scene.nearest_edge(ray),
                 lambda: scene.trace_reflections(ray, 2), lambda: scene.count_intersections(ray)):
        with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.\w+\(\): batch shapes do not broadcast: "
                                             r"'ray\.o' \(5,\), 'ray\.d' \(3,\)"):
            call()


def test_assigned_ray_arrays_are_checked_at_the_query(m):
    scene = _scene(m)
    ray = rd.Ray(m.Array3f(_xs(m, 3), m.Float(0.5), m.Float(1.0)), m.Array3f(0.0, 0.0, -1.0))
    ray.tmax = m.Float([0.5, 2.0, 0.5])  # broadcasts: taken
    np.testing.assert_array_equal(rows(scene.intersect(ray).t), [np.inf, 1, np.inf])
    ray.tmax = m.Float([2.0] * 7)
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.intersect\(\): batch shapes do not broadcast: "
                                         r"'ray\.o' \(3,\), 'ray\.d' \(1,\), 'ray\.tmax' \(7,\)"):
        scene.intersect(ray)
    ray.tmax = 2.0
    ray.o = "not an array"
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Scene\.intersect\(\): 'ray\.o' must be a Dr\.Jit array"):
        scene.intersect(ray)
    ray.o = m.Array3f(0.5, 0.5, 1.0)
    ray.d = m.Array3i(0, 0, -1)
    with pytest.raises(TypeError, match=r"^rayd\.drjit\.Scene\.shadow_test\(\): 'ray\.d' must have dtype float32"):
        scene.shadow_test(ray)
    ray.d = m.Array3f(0.0, 0.0, -1.0)
    np.testing.assert_array_equal(rows(scene.intersect(ray).t), [1])


RAGGED = {
    "2 and 3": lambda m: m.Array3f(m.Float([0.2, 0.5, 0.7]), m.Float([0.5, 0.5]), m.Float(1.0)),
    "empty and 1": lambda m: m.Array3f(m.Float(), m.Float(0.5), m.Float(1.0)),
}


@pytest.mark.parametrize("kind", sorted(RAGGED))
def test_ragged_query_vectors_are_value_errors_naming_the_argument(m, kind):
    scene = _scene(m)
    bad = RAGGED[kind](m)
    good = m.Array3f(0.5, 0.5, 1.0)
    down = m.Array3f(0.0, 0.0, -1.0)
    ragged = r"'{}' is ragged: its components have widths \[\d, \d, \d\]"
    cases = [
        ("rayd.drjit.Ray()", "o", lambda: rd.Ray(bad, down)),
        ("rayd.drjit.Ray()", "d", lambda: rd.Ray(good, bad)),
        ("rayd.drjit.Scene.nearest_edge()", "points", lambda: scene.nearest_edge(bad)),
        ("rayd.drjit.Scene.nearest_edges()", "points", lambda: scene.nearest_edges(bad, 2)),
        ("rayd.drjit.Scene.closest_point()", "points", lambda: scene.closest_point(bad)),
        ("rayd.drjit.Scene.winding_number()", "points", lambda: scene.winding_number(bad)),
        ("rayd.drjit.Scene.contains()", "points", lambda: scene.contains(bad)),
        ("rayd.drjit.Scene.signed_distance()", "points", lambda: scene.signed_distance(bad)),
        ("rayd.drjit.Scene.visible()", "start", lambda: scene.visible(bad, good)),
        ("rayd.drjit.Scene.silhouette_edges()", "viewpoint", lambda: scene.silhouette_edges(bad)),
        ("rayd.drjit.Camera.project()", "points", lambda: rd.Camera(4, 4, fov_y=40.0).project(bad)),
    ]
    for call, name, fn in cases:
        with pytest.raises(ValueError, match="^" + call.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")
                           + ": " + ragged.format(name)):
            fn()


def test_width_one_components_still_broadcast(m):
    scene = _scene(m)
    o = m.Array3f(_xs(m, 4), m.Float(0.5), m.Float(1.0))
    np.testing.assert_array_equal(rows(scene.intersect(rd.Ray(o, m.Array3f(0.0, 0.0, -1.0))).t), [1, 1, 1, np.inf])
    near = scene.closest_point(m.Array3f(_xs(m, 4), m.Float(0.5), m.Float(1.0)))
    np.testing.assert_allclose(rows(near.distance), [1, 1, 1, np.hypot(1.0, 1.0)], rtol=1e-6)


def test_ragged_matrices_are_value_errors_naming_the_argument(m):
    """A matrix entry replaced by an array of another width (``M[0][3] = Float(1, 2, 3)`` beside one of width 2)
    stopped ``Mesh()``, ``add_instance``, ``set_mesh_transform`` and ``Camera()`` with Dr.Jit's "drjit.width():
    the input is ragged"."""
    def ragged():
        M = m.Matrix4f(1)
        M[0][3] = m.Float([1.0, 2.0, 3.0])
        M[1][3] = m.Float([1.0, 2.0])
        return M

    message = r": 'to_world' is ragged: its entries have widths \[1, 2, 3\]"
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Mesh\(\)" + message):
        rd.Mesh(vec(m.Array3f, SQUARES), vec(m.Array3u, FACES), to_world=ragged())
    scene = _scene(m)
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.add_instance\(\)" + message):
        scene.add_instance(0, ragged())
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.set_mesh_transform\(\)" + message):
        scene.set_mesh_transform(0, ragged())
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Camera\(\)" + message):
        rd.Camera(4, 4, fov_y=40.0, to_world=ragged())
    np.testing.assert_array_equal(rows(scene.intersect(rd.Ray(m.Array3f(0.5, 0.5, 1.0), m.Array3f(0.0, 0.0, -1.0))).t), [1])


def _two_triangles_with_normals(m):
    tri = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], float)
    n0 = m.Array3f(m.Float([0.0, 0.0, 0.0]), m.Float([0.0, 0.0, 0.0]), m.Float([1.0, 1.0, 1.0]))
    n1 = m.Array3f(m.Float([1.0, 0.0, 0.0]), m.Float([0.0, 1.0, 0.0]), m.Float([0.0, 0.0, 1.0]))
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, tri), m.Array3u([0], [1], [2]), normals=n0))
    scene.add_mesh(rd.Mesh(vec(m.Array3f, tri - [0, 0, 1]), m.Array3u([0], [1], [2]), normals=n1))
    scene.build()
    return scene, n0, n1


def test_normals_that_changed_width_in_place_are_refused_not_read_past_their_end(m):
    """Normals and uv are read at each query; a component replaced by one of another width made the
    evaluation's gathers read zeros past its end and every later mesh's rows one place off (silently)."""
    scene, n0, n1 = _two_triangles_with_normals(m)
    ray = rd.Ray(m.Array3f(0.2, 0.3, -0.5), m.Array3f(0.0, 0.0, -1.0))  # hits mesh 1 only: w = (0.5, 0.2, 0.3)
    want = np.array([0.5, 0.2, 0.3]) / np.linalg.norm([0.5, 0.2, 0.3])  # n = normalize(sum w_i n_i), n_i = e_i
    np.testing.assert_allclose(rows(scene.intersect(ray).n), [want], rtol=1e-6)
    n0.x, n0.y, n0.z = m.Float([0.0, 0.0]), m.Float([0.0, 0.0]), m.Float([1.0, 1.0])  # mesh 0: 2 normals for 3 vertices
    message = (r"the normals of mesh 0 must keep one row per vertex \(3\); their components now have widths "
               r"\[2, 2, 2\] \(changed in place\?\)")
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.intersect\(\): " + message):
        scene.intersect(ray)
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.trace_reflections\(\): " + message):
        scene.trace_reflections(ray, 2)
    n0.x, n0.y, n0.z = m.Float([0.0, 0.0, 0.0]), m.Float(0.0), m.Float([1.0, 1.0, 1.0])  # a width-1 component
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.closest_point\(\): the normals of mesh 0 .* widths \[3, 1, 3\]"):
        scene.closest_point(m.Array3f(0.2, 0.3, 0.5))
    n0.y = m.Float([0.0, 0.0, 0.0])
    np.testing.assert_allclose(rows(scene.intersect(ray).n), [want], rtol=1e-6)
    n1.y = m.Float([0.0, 1.0])
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.intersect\(\): the normals of mesh 1 .* widths \[3, 2, 3\]"):
        scene.intersect(ray)


def test_normals_and_uv_with_a_width_one_component_are_refused_at_mesh(m):
    """``Mesh()`` took normals and uv whose components broadcast (``Array3f(xs, 0.0, zs)``: widths 3, 1, 3),
    as it does not take vertices; queries then copied the width-1 component as if it had V rows: uninitialised
    values in the shading normal of the mesh and of every later mesh (``2.4e-41``), NaN in ``uv``."""
    tri = vec(m.Array3f, [[0, 0, 0], [1, 0, 0], [0, 1, 0]])
    faces = m.Array3u([0], [1], [2])
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Mesh\(\): 'normals' is ragged: its components have widths \[3, 1, 3\]"):
        rd.Mesh(tri, faces, normals=m.Array3f(m.Float([0.0, 0.0, 0.0]), 0.0, m.Float([1.0, 1.0, 1.0])))
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Mesh\(\): 'uv' is ragged: its components have widths \[1, 3\]"):
        rd.Mesh(tri, faces, uv=m.Array2f(0.0, m.Float([0.0, 1.0, 0.0])))
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Mesh\(\): 'uv' must have width 3 like 'vertices', got 2"):
        rd.Mesh(tri, faces, uv=m.Array2f(m.Float([0.0, 1.0]), m.Float([0.0, 1.0])))


def test_update_mesh_vertices_refuses_a_width_one_component_at_once(m):
    """``update_mesh_vertices`` took vertices with a width-1 component (``Array3f(xs, ys, -0.5)``) and ``sync()``
    refused them as ragged; the update itself now does, as ``Mesh()`` does, and the scene stays as it was."""
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARES[:4]), vec(m.Array3u, FACES[:2])), dynamic=True)
    scene.build()
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.update_mesh_vertices\(\): 'vertices' is ragged: "
                                         r"its components have widths \[4, 4, 1\]"):
        scene.update_mesh_vertices(0, m.Array3f(m.Float([0.0, 1.0, 1.0, 0.0]), m.Float([0.0, 0.0, 1.0, 1.0]), m.Float(-0.5)))
    assert scene.is_ready() and not scene.has_pending_updates()
    np.testing.assert_array_equal(rows(scene.intersect(rd.Ray(m.Array3f(0.5, 0.5, 1.0), m.Array3f(0.0, 0.0, -1.0))).t), [1])


def _causes(error: BaseException) -> str:
    text = []
    while error is not None:
        text.append(f"{type(error).__name__}: {error}")
        error = error.__cause__
    return "\n".join(text)


SYMBOLIC = r"'{}' holds symbolic variables of a symbolic loop or conditional \(drjit\.while_loop"


def test_symbolic_vertices_are_refused_where_a_scene_would_keep_them(m):
    """``update_mesh_vertices`` runs inside symbolic loops (bookkeeping), but vertices made from the loop's state
    are symbolic variables: the call took them, the scene pended, and every later ``sync()`` stopped with
    Dr.Jit's "jit_var_scatter(): input arrays are symbolic ..." (a mesh made so: at ``build()``)."""
    v = vec(m.Array3f, SQUARES[:4])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, FACES[:2])), dynamic=True)
    scene.build()
    made = []

    def body(i):
        scene.update_mesh_vertices(0, v + m.Array3f(0.0, 0.0, m.Float(i) * 0.25))
        return (i + 1,)

    def body_mesh(i):
        made.append(rd.Mesh(v + m.Array3f(0.0, 0.0, m.Float(i)), vec(m.Array3u, FACES[:2])))
        return (i + 1,)

    for fn, call in ((body, r"Scene\.update_mesh_vertices\(\)"), (body_mesh, r"Mesh\(\)")):
        with pytest.raises(RuntimeError) as info:
            dr.while_loop((m.UInt32(0),), lambda i: i < 2, fn, mode="symbolic")
        assert re.search(r"ValueError: rayd\.drjit\." + call + ": " + SYMBOLIC.format("vertices"),
                         _causes(info.value)), _causes(info.value)
    assert scene.is_ready() and not scene.has_pending_updates() and not made
    scene.sync()
    np.testing.assert_array_equal(rows(scene.intersect(rd.Ray(m.Array3f(0.5, 0.5, 1.0), m.Array3f(0.0, 0.0, -1.0))).t), [1])


def test_symbolic_arrays_left_over_from_a_loop_are_value_errors(m):
    scene = _scene(m)
    kept = []

    def body(i):
        kept.append(m.Array3f(m.Float(i), 0.5, 1.0))
        return (i + 1,)

    dr.while_loop((m.UInt32(0),), lambda i: i < 2, body, mode="symbolic")
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Scene\.closest_point\(\): " + SYMBOLIC.format("points")):
        scene.closest_point(kept[0])
    with pytest.raises(ValueError, match=r"^rayd\.drjit\.Ray\(\): " + SYMBOLIC.format("o")):
        rd.Ray(kept[0], m.Array3f(0.0, 0.0, -1.0))
    np.testing.assert_allclose(rows(scene.closest_point(m.Array3f(0.5, 0.5, 1.0)).distance), [1])


def test_camera_matrix_widened_in_place_is_refused_not_broadcast(m):
    """``Camera(to_world=M)`` holds ``M`` (one matrix, width 1); an entry replaced by an array of width 3
    (``M[0][3] = Float(1, 2, 3)``) made ``project`` answer for three cameras (three pixel positions for one
    point) and ``generate_rays`` fail in ``Ray()``."""
    M = m.Matrix4f(1)
    dr.make_opaque(M)
    camera = rd.Camera(2, 1, fov_y=40.0, to_world=M)
    xy, depth = camera.project(m.Array3f(0.0, 0.0, 5.0))
    np.testing.assert_allclose(rows(xy), [[1.0, 0.5]], rtol=1e-6)  # the centre of the 2 x 1 image
    M[0][3] = m.Float([1.0, 2.0, 3.0])
    message = r"^rayd\.drjit\.Camera: 'to_world' must hold one matrix \(width 1\), but its entries now have widths \[1, 3\]"
    with pytest.raises(ValueError, match=message):
        camera.project(m.Array3f(0.0, 0.0, 5.0))
    with pytest.raises(ValueError, match=message):
        camera.generate_rays()
    M[0][3] = m.Float(1.0)
    np.testing.assert_allclose(rows(camera.generate_rays().o), [[1.0, 0.0, 0.0]])


def test_scene_changes_inside_a_frozen_function_are_refused_not_skipped_on_replay(m):
    """``update_mesh_vertices`` (and the other calls that change the scene) ran inside a function frozen with
    ``drjit.freeze``: its replays run only the recorded Dr.Jit kernels, so from the third call on the update
    silently never happened (``t`` stayed 0.8 where 0.7, 0.6 were due)."""
    v = vec(m.Array3f, SQUARES[:4])
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(v, vec(m.Array3u, FACES[:2])), dynamic=True)
    scene.build()

    @dr.freeze
    def step(z):
        moved = m.Array3f(v.x, v.y, v.z + z)
        scene.update_mesh_vertices(0, moved)
        return moved.z

    for k in range(3):
        with pytest.raises(RuntimeError) as info:
            step(m.Float(0.1 * (k + 1)))
        assert re.search(r"RuntimeError: rayd\.drjit\.Scene\.update_mesh_vertices\(\): cannot run inside a function "
                         r"frozen with drjit\.freeze", _causes(info.value)), _causes(info.value)
    assert scene.is_ready() and not scene.has_pending_updates()
    for call in (lambda: scene.set_shape_enabled(0, False), lambda: scene.edge_topology(),
                 lambda: scene.add_instance(0, m.Matrix4f(1))):
        frozen = dr.freeze(lambda z, call=call: (call(), z + 1)[1])
        with pytest.raises(RuntimeError) as info:
            frozen(m.Float(1.0))
        assert "cannot run inside a function frozen with drjit.freeze" in _causes(info.value)
    scene.update_mesh_vertices(0, m.Array3f(v.x, v.y, v.z + 0.25))  # outside: fine
    scene.sync()
    np.testing.assert_allclose(rows(scene.intersect(rd.Ray(m.Array3f(0.5, 0.5, 1.0), m.Array3f(0.0, 0.0, -1.0))).t), [0.75])
