"""A ``drjit.scalar`` matrix given as ``to_world`` is held like any other (session 21, helper breakit21b).

Before, ``Mesh``, ``add_instance``, ``set_mesh_transform`` and ``Camera`` converted a
``drjit.scalar.Matrix4f`` into a JIT matrix at the call, so a later in-place write into the
user's matrix (``m[2, 3] = 2``, a Dr.Jit API) was neither seen nor refused: queries answered
from the old placement (stale geometry), and the camera kept its old pose.
"""

from __future__ import annotations

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
rd = pytest.importorskip("rayd.drjit")

from drjit_testutil import vec  # noqa: E402

# A unit square in z = 0 made of two triangles, and a ray down onto it from z = 3.
SQUARE_V = np.array([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [1.0, 1.0, 0.0], [-1.0, 1.0, 0.0]])
SQUARE_F = np.array([[0, 1, 2], [0, 2, 3]])


def _scene(m, how: str, matrix):
    scene = rd.Scene()
    faces = m.Array3u(SQUARE_F.T.astype(np.uint32))
    if how == "mesh":
        scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARE_V), faces, to_world=matrix))
    elif how == "instance":  # the mesh itself far away; its instance placed by `matrix`
        scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARE_V + [0.0, 0.0, -50.0]), faces))
        scene.add_instance(0, matrix)
    else:
        scene.add_mesh(rd.Mesh(vec(m.Array3f, SQUARE_V), faces))
        scene.build()
        scene.set_mesh_transform(0, matrix)
        scene.sync()
        return scene
    scene.build()
    return scene


@pytest.mark.parametrize("how", ["mesh", "instance", "set_mesh_transform"])
@pytest.mark.parametrize("kind", ["Matrix4f", "Matrix4f64"])
def test_write_into_a_scalar_matrix_is_pending_then_applied(m, how, kind):
    lift = np.eye(4)
    if how == "instance":
        lift[2, 3] = 50.0  # brings the far square back to z = 0
    matrix = getattr(dr.scalar, kind)(lift.tolist())
    scene = _scene(m, how, matrix)
    ray = rd.Ray(m.Array3f(0.2, 0.3, 3.0), m.Array3f(0.0, 0.0, -1.0))
    np.testing.assert_allclose(np.array(scene.intersect(ray).t), [3.0], rtol=1e-6)

    matrix[2, 3] = matrix[2, 3] + 1.0  # the square moves up to z = 1
    assert scene.has_pending_updates() and not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"rayd.drjit.Scene.intersect\(\): .* changed in place since the last sync"):
        scene.intersect(ray)  # was t = 3: the old placement
    scene.sync()
    np.testing.assert_allclose(np.array(scene.intersect(ray).t), [2.0], rtol=1e-6)
    np.testing.assert_allclose(np.array(scene.closest_point(m.Array3f(0.2, 0.3, 3.0)).distance), [2.0], rtol=1e-6)

    matrix[0, 0] = 0.0  # singular: refused at sync(), never used
    with pytest.raises(ValueError, match=r"rayd.drjit.Scene.sync\(\): the matrix of .* is singular"):
        scene.sync()


def test_camera_follows_writes_into_its_scalar_matrix(m):
    pose = dr.scalar.Matrix4f(1)
    camera = rd.Camera(8, 6, fov_y=40.0, to_world=pose)
    centre = m.Array2f(4.0, 3.0)
    np.testing.assert_allclose(np.array(camera.generate_rays(centre).o).ravel(), [0.0, 0.0, 0.0])
    pose[0, 3] = 5.0
    np.testing.assert_allclose(np.array(camera.generate_rays(centre).o).ravel(), [5.0, 0.0, 0.0])  # was (0, 0, 0)
    xy, depth = camera.project(m.Array3f(5.0, 0.0, 2.0))
    np.testing.assert_allclose(np.array(xy).ravel(), [4.0, 3.0], atol=1e-5)
    np.testing.assert_allclose(np.array(depth), [2.0], rtol=1e-6)
