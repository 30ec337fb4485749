"""`Camera` and `EdgeSamples` of rayd.drjit: the same contract as rayd.torch's (DESIGN.md, "Cameras").

The discrete choices of ``sample_edges`` (silhouette edges, clipping, stratified
positions, normal sides) are :mod:`rayd.core.camera`'s, shared with rayd.torch; this
module evaluates the differentiable parts with Dr.Jit ops (see
:mod:`rayd.torch._edge_sampling` for the estimator and its references).
"""

from __future__ import annotations

import drjit as dr
import numpy as np

from rayd.core import camera as _core
from rayd.core.edges import document
from rayd.core.camera_frontend import CameraBase, EdgeSamplesBase, check_sample_args, plan_samples, to_camera
from rayd.core.checks import real
from rayd.core.transforms import check_matrices
from rayd.drjit import _check, _convert
from rayd.drjit._nearest_edge import _winner_segments, ready
from rayd.drjit.mesh import check_transform
from rayd.drjit.intersection import DrjitRecord
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

    def sample_edges(self, scene, num_samples: int, *, generator: np.random.Generator | None = None):
        """Samples on the images of the scene's silhouette and boundary edges (as rayd.torch).

        The same edges, clipping, stratified positions and normals as
        :meth:`rayd.torch.Camera.sample_edges` (:mod:`rayd.core.camera`).

        Args:
            scene: a built, synced :class:`rayd.drjit.Scene`.
            num_samples: N >= 0, an int.
            generator: a ``numpy.random.Generator`` for the N jitter numbers (default: a
                fresh unseeded one).

        Returns:
            :class:`EdgeSamples` with fields of width N (width 0 when N = 0 or no edge is
            on screen): ``xy``, ``normal`` (``Array2``), ``weight`` (``L / N``), ``edge_t``,
            ``motion`` (``Float``), ``global_edge_id`` (``Int``), ``visible`` (``Bool``),
            ``ray_inside``, ``ray_outside`` (:class:`Ray`).

        Gradients:
            ``motion`` (value 0): ``d(xy(θ) · normal)/dθ`` at fixed ``edge_t`` with respect
            to vertices, transforms and camera parameters (Dr.Jit AD, both modes).

        Raises:
            TypeError: ``scene`` not a :class:`rayd.drjit.Scene`, ``num_samples`` not an
                int, ``generator`` not a ``numpy.random.Generator``.
            ValueError: negative ``num_samples``; intrinsics no longer valid.
            RuntimeError: the scene is not built or has pending changes.
        """
        return _sample_edges(self, scene, num_samples, generator)

class EdgeSamples(DrjitRecord, EdgeSamplesBase):
    """rayd.drjit's edge samples (fields as :class:`rayd.torch.EdgeSamples`, flat Dr.Jit arrays).

    A record like :class:`Intersection`: ``dir()`` lists the fields; ``detach()`` and
    ``samples[mask]`` (a ``Bool`` of width N, an integer array, an int or a slice) give
    an ``EdgeSamples`` of the same ``width`` and ``height`` with every field (the rays'
    ``o`` and ``d`` too) mapped; gathered fields stay differentiable.
    """

    __slots__ = ("m", "count")
    _width_field = "weight"
    _RAY = Ray

    def __init__(self, *, m, count: int, **fields) -> None:
        super().__init__(**fields)
        self.m = m
        self.count = count

    @property
    def shape(self) -> tuple[int]:
        """``(N,)``."""
        return (self.count,)

    def _resize(self, count: int) -> None:
        self.count = count

    def _map_ray_part(self, fn, name: str, x):
        if not isinstance(x, dr.ArrayBase):
            return x
        if dr.width(x) == 1 and self.count > 1:  # a width-1 origin broadcasts: widen it to N lanes first
            x = x + dr.zeros(type(x), self.count)
        return fn(name, x)

    def boundary_term(self, f_inside, f_outside, *, filter: str = "box"):
        """Flat ``Float`` image of width ``height * width`` (lane ``j * width + i``), zero in value.

        ``Σ h_k(xy) (f_inside − f_outside) · motion · weight · visible`` with the box
        filter (``filter="box"`` only in rayd.drjit).

        Args:
            f_inside, f_outside: flat float arrays of width N, the shading seen along
                ``ray_inside`` and ``ray_outside``.
            filter: ``"box"``.

        Returns:
            ``Float`` of width ``height * width``, zero in value; its gradient is the
            boundary part of ``dI_k/dθ`` (Li et al. 2018).

        Raises:
            TypeError: non-float ``f_*``, a non-str ``filter``.
            ValueError: ``f_*`` not of width N, ``filter`` other than ``"box"``.
        """
        call = "rayd.drjit.EdgeSamples.boundary_term()"
        self._check_filter(call, filter, ("box",), "'box' in rayd.drjit")
        f_in = _check.float_array(call, "f_inside", f_inside, 1)
        f_out = _check.float_array(call, "f_outside", f_outside, 1)
        m, Float = self.m, type(self.motion)
        image = dr.zeros(Float, self.width * self.height)
        if not self.count:
            return image
        n = self.count
        for name, f in (("f_inside", f_in), ("f_outside", f_out)):
            if dr.width(f) != n:
                raise ValueError(f"{call}: '{name}' must have width {n} (one value per sample), got {dr.width(f)}")
        value = (Float(f_in) - Float(f_out)) * self.motion * self.weight * dr.select(self.visible, 1.0, 0.0)
        ix = dr.clip(m.Int(dr.floor(self.xy.x)), 0, self.width - 1)
        iy = dr.clip(m.Int(dr.floor(self.xy.y)), 0, self.height - 1)
        dr.scatter_reduce(dr.ReduceOp.Add, image, value, m.UInt(iy * self.width + ix))
        return image


document(Camera, {
    "generate_rays": """Camera rays through pixel positions.

        Args:
            samples: ``Array2f``/``Array2f64`` of width N (N may be 0), pixel coordinates
                ``(x, y)`` on the camera's backend; default: every pixel centre, lane
                ``j * width + i`` for pixel ``(i, j)``.

        Returns:
            :class:`Ray` with ``o`` the camera centre (width 1) and unit ``d`` (width N),
            ``d = normalize(A ((x - cx) / fx, (y - cy) / fy, 1))`` (``A`` the linear part of
            ``to_world``); float64 if the samples or any camera parameter are.

        Gradients:
            ``o``, ``d`` with respect to ``samples``, the intrinsics and ``to_world`` (Dr.Jit AD).

        Raises:
            TypeError: ``samples`` not a float Dr.Jit array.
            ValueError: ``samples`` not a 2-vector array.
        """,
    "project": """Pixel coordinates and depth of world points (the inverse of :meth:`generate_rays`).

        Args:
            points: ``Array3f``/``Array3f64`` of width N (N may be 0), world positions.

        Returns:
            ``(xy, depth)``: ``Array2`` and ``Float`` of width N, ``P = A^-1 (p - t)``,
            ``xy = (fx P_x / P_z + cx, fy P_y / P_z + cy)``, ``depth = P_z`` (test
            ``depth > 0``: points behind the camera get the mirrored projection; points
            on the camera's plane, ``depth = 0``, the camera centre among them, have
            none and get ``xy = 0`` with zero gradient, never NaN or inf).

        Gradients:
            With respect to ``points``, the intrinsics and ``to_world`` (Dr.Jit AD).

        Raises:
            TypeError: ``points`` not a float Dr.Jit array.
            ValueError: ``points`` not a 3-vector array.
        """,
}, {'generate_rays': {'return': 'Ray'}, 'project': {}})



def _sample_edges(camera, scene, num_samples, generator) -> EdgeSamples:
    call = "rayd.drjit.Camera.sample_edges()"
    from rayd.drjit.scene import Scene

    num_samples = check_sample_args(call, scene, Scene, num_samples, generator, np.random.Generator,
                                    "numpy.random.Generator")
    scene._require_ready(call)
    edges = ready(scene, call)
    from rayd.drjit._nearest_edge import _kind

    m, double = _kind(scene, *camera._arrays())
    plain = _convert.module(scene._backend, False)
    intrinsics = camera.intrinsics()
    _core.check_intrinsics(call, *intrinsics)  # width-1 arrays may have been replaced since Camera()
    if camera.to_world is not None:  # its entries may have been assigned since Camera()
        check_matrices(call, "to_world", np.array(dr.detach(camera.to_world), dtype=np.float64).reshape(1, 4, 4))
    top = edges.topology
    centre = _host_centre(camera)
    with dr.suspend_grad():
        sil = np.array(scene.silhouette_edges(plain.Array3f64(*centre)), dtype=bool)
        applied = np.array(edges._applied, dtype=np.uint8).astype(bool)
        ids = np.flatnonzero(sil & applied).astype(np.int32)
        if ids.size == 0:  # no edge to sample (Dr.Jit does not broadcast width 0 against width 1)
            return _empty_samples(camera, m, double)
        geometry = scene._live_geometry(m, double)
        _, a, b = _winner_segments(m, double, m.Int(ids), edges, geometry)
        rows = np.array(edges.edge_rows).T.astype(np.int64)  # (E, 2)
        local_v = np.array(top.v).T.astype(np.int64)
        opp = (rows[ids, 0] - local_v[ids, 0] + np.array(top.opposite).T[ids, 0]).astype(np.int64)
        o = _world_rows(m, double, edges, geometry, ids, opp)
        to_world = _host_matrix(camera)
        a, b = (to_camera(np.array(x).T.reshape(-1, 3), to_world) for x in (a, b))
        o = to_camera(o, to_world)
        is_boundary = np.array(top.is_boundary, dtype=bool)[ids]
    rng = generator if generator is not None else np.random.default_rng()
    plan = plan_samples(a, b, o, is_boundary, intrinsics, camera.width, camera.height, num_samples, rng.random)
    n = plan.count
    if n == 0:
        return _empty_samples(camera, m, double)
    Float = m.Float64 if double else m.Float
    Array2 = m.Array2f64 if double else m.Array2f
    Array3 = m.Array3f64 if double else m.Array3f
    gid = ids[plan.edge]
    t = Float(plan.edge_t)
    nrm = Array2(plan.normal[:, 0].copy(), plan.normal[:, 1].copy())
    _, a_live, b_live = _winner_segments(m, double, m.Int(gid), edges, scene._live_geometry(m, double))
    point = Array3(a_live * (1 - m.Float64(t)) + b_live * m.Float64(t))
    xy = camera.camera_to_pixels(m, double, camera.world_to_camera(m, double, point))
    mm = dr.dot(xy, nrm)
    motion = mm - dr.detach(mm)
    xy = dr.detach(xy)
    faces0 = np.array(top.faces).T[gid, 0]
    shape = np.array(top.shape_id)[gid]
    offsets = scene._core.table.tables()["global_offset"]
    face = plain.Int((offsets[shape] + faces0).astype(np.int32))
    visible = scene.visible(Array3(*centre), dr.detach(point), ignore=face)
    off = _core.EDGE_OFFSET
    return EdgeSamples(
        xy=xy, normal=nrm, weight=dr.full(Float, plan.weight, n),
        ray_inside=camera.generate_rays(Array2(xy - off * nrm)),
        ray_outside=camera.generate_rays(Array2(xy + off * nrm)),
        global_edge_id=m.Int(gid), edge_t=t, visible=visible, motion=motion,
        width=camera.width, height=camera.height, m=m, count=n,
    )


def _empty_samples(camera, m, double) -> EdgeSamples:
    """``EdgeSamples`` with no samples (N = 0 or no edge on screen): width-0 fields."""
    Float = m.Float64 if double else m.Float
    Array2 = m.Array2f64 if double else m.Array2f
    empty = camera.generate_rays(Array2())
    return EdgeSamples(
        xy=Array2(), normal=Array2(), weight=Float(), ray_inside=empty, ray_outside=empty,
        global_edge_id=m.Int(), edge_t=Float(), visible=m.Bool(), motion=Float(),
        width=camera.width, height=camera.height, m=m, count=0,
    )


def _host_matrix(camera) -> np.ndarray | None:
    """``to_world`` as a (4, 4) float64 host matrix (detached), ``None`` for the identity."""
    if camera.to_world is None:
        return None
    return np.array(dr.detach(camera.to_world), dtype=np.float64).reshape(4, 4)


def _host_centre(camera) -> tuple[float, float, float]:
    m = _host_matrix(camera)
    return (0.0, 0.0, 0.0) if m is None else tuple(float(x) for x in m[:3, 3])


def _world_rows(m, double, edges, geometry, ids, rows) -> np.ndarray:
    """(K, 3) float64 world positions of the concatenated-vertex ``rows`` of edges ``ids`` (detached)."""
    from rayd.drjit._geometry import apply

    Array3 = m.Array3f64 if double else m.Array3f
    p = dr.gather(Array3, geometry.vertices, m.UInt(rows.astype(np.uint32)))
    if geometry.transform is not None:
        shape = m.UInt(np.array(edges.topology.shape_id)[ids].astype(np.uint32))
        cols = tuple(dr.gather(Array3, c, shape) for c in geometry.transform)
        p = apply(cols, p)
    return np.array(m.Array3f64(p)).T.reshape(-1, 3).astype(np.float64)


def _div3(Array3, v, s):
    """``v / s`` one component at a time: Dr.Jit divides a 3-vector by a scalar through an
    approximate reciprocal on CUDA (~1e-6 relative in float64 on an H200); Float / Float is
    a correctly rounded ``div.rn``."""
    return Array3(v.x / s, v.y / s, v.z / s)
