"""`Camera` and `EdgeSamples` of rayd.drjit: the same contract as rayd.torch's (DESIGN.md, "Cameras").

The discrete choices of ``sample_edges`` (silhouette edges, clipping, stratified
positions, normal sides) are :mod:`rayd.core.camera`'s, shared with rayd.torch; this
module evaluates the differentiable parts with Dr.Jit ops (see
:mod:`rayd.torch._edge_sampling` for the estimator and its references).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import drjit as dr

from rayd.core import camera as _core
from rayd.core.camera_frontend import CameraBase
from rayd.core.frontend import serialise_public
from rayd.drjit import _check, _convert
from rayd.drjit._edge_sampling import EdgeSamples  # noqa: F401 - rayd.drjit.EdgeSamples, documented there
from rayd.drjit.mesh import check_transform
from rayd.drjit.ray import Ray


class Camera(CameraBase):
    """A pinhole camera in the OpenCV convention (x right, y down, z forward; pixel centres at +0.5).

    Args:
        width, height: image size in pixels, positive ints.
        fov_y: vertical field of view in degrees, in ``(0, 180)``: a float or a flat
            ``Float``/``Float64`` array of width 1 (differentiable, read at each call); sets
            ``fx = fy = (height / 2) / tan(fov_y / 2)``. Either ``fov_y`` or ``fx``/``fy``.
        fx, fy, cx, cy: floats, or flat ``Float``/``Float64`` arrays of width 1 (``.ad``
            with gradients enabled to differentiate); ``cx, cy`` default to the centre.
        to_world: optional camera-to-world ``Matrix4f``/``Matrix4f64`` (width 1) of the
            backend or of ``drjit.scalar``, read at each call (held, not copied).

    Raises:
        TypeError, ValueError: as :class:`rayd.torch.Camera` (messages start with
            ``rayd.drjit.Camera()``).
    """

    _SCALAR = "a float or a width-1 Float array"
    _ARRAY = dr.ArrayBase

    def _array_focal(self, fov_y: dr.ArrayBase) -> dr.ArrayBase:
        return (0.5 * self.height) / dr.tan(fov_y * (dr.pi / 360.0))

    def _check_values(self, call: str) -> None:
        """``ValueError`` for non-positive/non-finite intrinsics or ``fov_y`` outside ``(0, 180)``
        (one host read of array values, at ``Camera()`` and ``sample_edges``)."""
        fov_y = self._host_scalar(self.fov_y) if self._is_array(self.fov_y) else self.fov_y
        _core.check_intrinsics(call, *self.intrinsics(), fov_y=fov_y)

    def _checked_to_world(self, to_world: object) -> dr.ArrayBase:
        """A checked ``Matrix4f``/``Matrix4f64`` of width 1 on the intrinsics' backend (values read once)."""
        like = next((v for v in (self.fx, self.fy, self.cx, self.cy) if isinstance(v, dr.ArrayBase)), None)
        if like is None:
            like = to_world if isinstance(to_world, dr.ArrayBase) and dr.is_jit_v(to_world) else dr.llvm.Float(0)
        return check_transform(self._CALL, "to_world", to_world, like)

    def _arrays(self) -> list:
        return [v for v in (self.fx, self.fy, self.cx, self.cy, self.fov_y, self.to_world) if isinstance(v, dr.ArrayBase)]

    # ------------------------------------------------------------------ CameraBase hooks
    def _array_scalar(self, name: str, value: object):
        if not (isinstance(value, dr.ArrayBase) and dr.is_jit_v(value) and dr.depth_v(value) == 1
                and dr.type_v(value) in (dr.VarType.Float32, dr.VarType.Float64)):
            return None
        if dr.width(value) != 1:
            raise ValueError(f"{self._CALL}: '{name}' must have width 1, got width {dr.width(value)}")
        return value

    def _host_scalar(self, value) -> float:
        return float(dr.detach(value)[0])

    def _namespace(self, *arrays):
        """``(m, double)``: the output namespace (``.ad`` if anything is) and precision."""
        found = [a for a in list(arrays) + self._arrays() if isinstance(a, dr.ArrayBase)]
        jit = [a for a in found if dr.is_jit_v(a)]  # (a drjit.scalar to_world has no backend)
        backend = _convert.backend_name(jit[0]) if jit else "llvm"
        double = any(_convert.is_double(a) for a in found)
        ad = any(_convert.is_ad(a) for a in found)
        return _convert.module(backend, ad), double

    # ------------------------------------------------------------------ camera space (rayd.core.camera_frontend)
    def world_to_camera(self, points: dr.ArrayBase) -> dr.ArrayBase:
        """Camera-space positions of world points, no checks.

        Args:
            points: ``Array3f``/``Array3f64`` of width N, world-space points of the
                camera's backend.

        Returns:
            (N, 3) ``Array3f``/``Array3f64`` (float64 if ``points`` or any camera
            parameter is; ``.ad`` if any is): ``to_world⁻¹ @ [points, 1]`` (the points
            themselves when ``to_world`` is ``None``), in the camera's axes (x right,
            y down, z forward).

        Units: world units.

        Gradients: differentiable (Dr.Jit AD) with respect to ``points`` and ``to_world``.

        Raises:
            Nothing of its own (Dr.Jit errors for mismatched arrays).
        """
        return self._world_to_camera(self._namespace(points), points)

    def camera_to_pixels(self, p: dr.ArrayBase) -> dr.ArrayBase:
        """Pixel coordinates of camera-space points: the pinhole projection, no checks.

        Args:
            p: ``Array3f``/``Array3f64`` of width N, camera-space points.

        Returns:
            (N, 2) ``Array2f``/``Array2f64``: ``(fx x / z + cx, fy y / z + cy)``.
            Points with ``z = 0`` divide by zero here; :meth:`project` handles them.

        Units: pixels.

        Gradients: differentiable (Dr.Jit AD) with respect to ``p`` and the intrinsics.

        Raises:
            Nothing of its own (Dr.Jit errors for mismatched arrays).
        """
        return self._camera_to_pixels(self._namespace(p), p)


def _pixel_centres(camera: Camera) -> dr.ArrayBase:
    """Every pixel centre, lane ``j * width + i`` at ``(i + 0.5, j + 0.5)``, in the camera's namespace."""
    m, double = camera._namespace()
    lane = dr.arange(m.UInt, camera.width * camera.height)
    return _type(m, double, 2)(m.Float64(lane % camera.width) + 0.5, m.Float64(lane // camera.width) + 0.5)


def _type(m, double: bool, components: int) -> type:
    """``Float``, ``Array2f`` or ``Array3f`` of namespace ``m`` (the ``64`` ones if ``double``)."""
    name = {1: "Float", 2: "Array2f", 3: "Array3f"}[components]
    return getattr(m, f"{name}64" if double else name)


def _intrinsics(camera: Camera, work: tuple) -> tuple:
    """``(fx, fy, cx, cy)`` as ``Float``/``Float64`` of the working namespace (``work = (m, double)``)."""
    Float = _type(*work, 1)
    return tuple(Float(v) for v in (camera.fx, camera.fy, camera.cx, camera.cy))


def _placement(camera: Camera, m, double: bool) -> tuple:
    """``(rows, t)`` of ``to_world`` as ``Array3`` of the working type: its linear part's rows, its translation."""
    widths = sorted({dr.width(entry) for row in camera.to_world for entry in row})
    if widths != [1]:  # one matrix at Camera(); an entry replaced in place by another width would broadcast the camera
        raise ValueError(f"rayd.drjit.Camera: 'to_world' must hold one matrix (width 1), but its entries now have "
                         f"widths {widths} (changed in place?)")
    M = (m.Matrix4f64 if double else m.Matrix4f)(camera.to_world)
    Array3 = _type(m, double, 3)
    return tuple(Array3(M[i][0], M[i][1], M[i][2]) for i in range(3)), Array3(M[0][3], M[1][3], M[2][3])


def _unrotate(rows: tuple, q: dr.ArrayBase) -> dr.ArrayBase:
    """``A^-1 q`` for ``A`` of rows ``r0, r1, r2``: ``[c0 c1 c2] q / det``, ``c0 = r1 x r2``, ``c1 = r2 x r0``,
    ``c2 = r0 x r1`` (true divisions: ``dr.rcp`` is approximate on CUDA)."""
    c0, c1, c2 = dr.cross(rows[1], rows[2]), dr.cross(rows[2], rows[0]), dr.cross(rows[0], rows[1])
    return _div3(type(q), c0 * q.x + c1 * q.y + c2 * q.z, dr.dot(rows[0], c0))


#: rayd.drjit's steps of ``generate_rays``, ``project`` and the camera-space maps
#: (:class:`rayd.core.camera_frontend.CameraBase`, ``_OPS``): work = ``(m, double)``, vectors ``Array2``/``Array3``.
Camera._OPS = SimpleNamespace(working=lambda camera, array: camera._namespace(array), pixel_centres=_pixel_centres,
                              checked_samples=lambda camera, call, v: _check.float_array(call, "samples", v, 2),
                              checked_points=lambda camera, call, v: _check.float_array(call, "points", v, 3),
                              cast=lambda work, v: _type(*work, len(v))(v),
                              components=lambda work, v: tuple(_type(*work, len(v))(v)),
                              vector=lambda work, *parts: _type(*work, len(parts))(*parts),
                              intrinsics=_intrinsics,
                              placement=lambda camera, work: _placement(camera, *work),
                              rotate=lambda rows, v: type(v)(*(dr.dot(r, v) for r in rows)),
                              unrotate=_unrotate, zero3=lambda work: _type(*work, 3)(0.0, 0.0, 0.0),
                              unit=lambda v: _div3(type(v), v, dr.norm(v)),
                              select=lambda mask, value, v: type(v)(*(dr.select(mask, value, c) for c in v)),
                              ray=Ray, empty=lambda array: dr.width(array) == 0,
                              nothing=lambda work, components: _type(*work, components)())



def _sample_edges_outside_recording(method):
    """``Camera.sample_edges`` refused by its own name in symbolic regions and ``drjit.freeze`` (it queries the scene)."""

    @functools.wraps(method)
    def sample_edges(self, *args, **kwargs):
        _check.outside_recording("rayd.drjit.Camera.sample_edges()")
        return method(self, *args, **kwargs)

    return sample_edges


Camera.sample_edges = _sample_edges_outside_recording(Camera.sample_edges)
serialise_public(Camera)  # calls from several threads: one at a time (rayd.engine.runtime.ENGINE_LOCK)
_check.exact_math_public(Camera)  # float64 derivatives exact on CUDA (FastMath off inside every call)



def _div3(Array3, v, s):
    """``v / s`` one component at a time: Dr.Jit divides a 3-vector by a scalar through an
    approximate reciprocal on CUDA (~1e-6 relative in float64 on an H200); Float / Float is
    a correctly rounded ``div.rn``."""
    return Array3(v.x / s, v.y / s, v.z / s)

