"""`Camera` and `EdgeSamples` of rayd.drjit: the same contract as rayd.torch's (DESIGN.md, "Cameras").

The discrete choices of ``sample_edges`` (silhouette edges, clipping, stratified
positions, normal sides) are :mod:`rayd.core.camera`'s, shared with rayd.torch; this
module evaluates the differentiable parts with Dr.Jit ops (see
:mod:`rayd.torch._edge_sampling` for the estimator and its references).
"""

from __future__ import annotations

import drjit as dr

from rayd.core.camera_frontend import CameraBase
from rayd.core.frontend import serialise_public
from rayd.core.checks import real
from rayd.drjit import _check, _convert
from rayd.drjit._edge_sampling import EdgeSamples  # noqa: F401 - rayd.drjit.EdgeSamples, documented there
from rayd.drjit.mesh import check_transform
from rayd.drjit.ray import Ray


class Camera(CameraBase):
    """A pinhole camera in the OpenCV convention (x right, y down, z forward; pixel centres at +0.5).

    Args:
        width, height: image size in pixels, positive ints.
        fov_y: vertical field of view in degrees (a float in ``(0, 180)``); sets
            ``fx = fy = (height / 2) / tan(fov_y / 2)``. Either ``fov_y`` or ``fx``/``fy``.
        fx, fy, cx, cy: floats, or flat ``Float``/``Float64`` arrays of width 1 (``.ad``
            with gradients enabled to differentiate); ``cx, cy`` default to the centre.
        to_world: optional camera-to-world ``Matrix4f``/``Matrix4f64`` (width 1).

    Raises:
        TypeError, ValueError: as :class:`rayd.torch.Camera` (messages start with
            ``rayd.drjit.Camera()``).
    """

    _SCALAR = "a float or a width-1 Float array"
    _ARRAY = dr.ArrayBase

    def _checked_fov(self, fov_y: object) -> float | None:
        if fov_y is None:
            return None
        if real(fov_y) is None:
            raise TypeError(f"{self._CALL}: 'fov_y' must be a float, got {type(fov_y).__name__}")
        return real(fov_y)

    def _checked_to_world(self, to_world: object) -> dr.ArrayBase:
        """A checked ``Matrix4f``/``Matrix4f64`` of width 1 on the intrinsics' backend (values read once)."""
        like = next((v for v in (self.fx, self.fy, self.cx, self.cy) if isinstance(v, dr.ArrayBase)), None)
        if like is None:
            like = to_world if isinstance(to_world, dr.ArrayBase) and dr.is_jit_v(to_world) else dr.llvm.Float(0)
        return check_transform(self._CALL, "to_world", to_world, like)

    def _arrays(self) -> list:
        return [v for v in (self.fx, self.fy, self.cx, self.cy, self.to_world) if isinstance(v, dr.ArrayBase)]

    def _generate_rays(self, call: str, samples) -> Ray:
        m, double = self._namespace(samples)
        Array2 = m.Array2f64 if double else m.Array2f
        if samples is None:
            lane = dr.arange(m.UInt, self.width * self.height)
            samples = Array2(m.Float64(lane % self.width) + 0.5, m.Float64(lane // self.width) + 0.5)
        else:
            samples = _check.float_array(call, "samples", samples, 2)
            samples = Array2(samples)
        (fx, fy, cx, cy), placed = self._parts(m, double)
        Array3 = m.Array3f64 if double else m.Array3f
        if dr.width(samples) == 0:  # Dr.Jit does not broadcast width 0 against width 1
            return Ray(placed[1] if placed is not None else Array3(0.0, 0.0, 0.0), Array3())
        local = Array3((samples.x - cx) / fx, (samples.y - cy) / fy, 1.0)
        if placed is None:
            d, o = local, Array3(0.0, 0.0, 0.0)
        else:
            rows, o = placed
            d = Array3(dr.dot(rows[0], local), dr.dot(rows[1], local), dr.dot(rows[2], local))
        return Ray(o, _div3(Array3, d, dr.norm(d)))

    def _project(self, call: str, points):
        points = _check.float_array(call, "points", points, 3)
        m, double = self._namespace(points)
        if dr.width(points) == 0:  # Dr.Jit does not broadcast width 0 against width 1
            return (m.Array2f64 if double else m.Array2f)(), (m.Float64 if double else m.Float)()
        p = self.world_to_camera(m, double, points)
        plane = p.z == 0  # no projection: xy = 0, and a finite stand-in keeps the gradient 0
        Array3 = m.Array3f64 if double else m.Array3f
        xy = self.camera_to_pixels(m, double, Array3(dr.select(plane, 1, p.x), dr.select(plane, 1, p.y),
                                                     dr.select(plane, 1, p.z)))
        return dr.select(plane, 0, xy), p.z

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
        backend = _convert.backend_name(found[0]) if found else "llvm"
        double = any(_convert.is_double(a) for a in found)
        ad = any(_convert.is_ad(a) for a in found)
        return _convert.module(backend, ad), double

    def _parts(self, m, double):
        """Intrinsics as ``Float`` of the working type, and ``(rows, t)`` of ``to_world`` (or ``None``)."""
        Float = m.Float64 if double else m.Float
        k = tuple(Float(v) for v in (self.fx, self.fy, self.cx, self.cy))
        if self.to_world is None:
            return k, None
        M = (m.Matrix4f64 if double else m.Matrix4f)(self.to_world)
        Array3 = m.Array3f64 if double else m.Array3f
        rows = tuple(Array3(M[i][0], M[i][1], M[i][2]) for i in range(3))
        return k, (rows, Array3(M[0][3], M[1][3], M[2][3]))

    def world_to_camera(self, m, double, points):
        """Camera-space positions of world points (differentiable)."""
        Array3 = m.Array3f64 if double else m.Array3f
        p = Array3(points)
        _, placed = self._parts(m, double)
        if placed is None:
            return p
        rows, t = placed
        # A^-1 = [c0 c1 c2] / det with c0 = r1 x r2, c1 = r2 x r0, c2 = r0 x r1 (true division:
        # dr.rcp is approximate on CUDA).
        c0, c1, c2 = dr.cross(rows[1], rows[2]), dr.cross(rows[2], rows[0]), dr.cross(rows[0], rows[1])
        det = dr.dot(rows[0], c0)
        q = p - t
        return _div3(Array3, c0 * q.x + c1 * q.y + c2 * q.z, det)

    def camera_to_pixels(self, m, double, p):
        """Pixel coordinates of camera-space points (differentiable)."""
        (fx, fy, cx, cy), _ = self._parts(m, double)
        Array2 = m.Array2f64 if double else m.Array2f
        return Array2(fx * p.x / p.z + cx, fy * p.y / p.z + cy)


serialise_public(Camera)  # calls from several threads: one at a time (rayd.engine.runtime.ENGINE_LOCK)



def _div3(Array3, v, s):
    """``v / s`` one component at a time: Dr.Jit divides a 3-vector by a scalar through an
    approximate reciprocal on CUDA (~1e-6 relative in float64 on an H200); Float / Float is
    a correctly rounded ``div.rn``."""
    return Array3(v.x / s, v.y / s, v.z / s)

