"""`Camera` and `EdgeSamples` of rayd.drjit: the same contract as rayd.torch's (DESIGN.md, "Cameras").

The discrete choices of ``sample_edges`` (silhouette edges, clipping, stratified
positions, normal sides) are :mod:`rayd.core.camera`'s, shared with rayd.torch; this
module evaluates the differentiable parts with Dr.Jit ops (see
:mod:`rayd.torch._edge_sampling` for the estimator and its references).
"""

from __future__ import annotations

import math

import drjit as dr
import numpy as np

from rayd.core import camera as _core
from rayd.drjit import _check, _convert
from rayd.drjit._nearest_edge import _setup, _winner_segments
from rayd.drjit.mesh import check_transform
from rayd.drjit.ray import Ray

_CALL = "rayd.drjit.Camera()"


class Camera:
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

    def __init__(self, width: int, height: int, *, fov_y=None, fx=None, fy=None, cx=None, cy=None,
                 to_world=None) -> None:
        self.width = _size("width", width)
        self.height = _size("height", height)
        fx, fy, cx, cy = (_scalar(n, v) for n, v in (("fx", fx), ("fy", fy), ("cx", cx), ("cy", cy)))
        if fov_y is not None:
            if isinstance(fov_y, bool) or not isinstance(fov_y, (int, float)):
                raise TypeError(f"{_CALL}: 'fov_y' must be a float, got {type(fov_y).__name__}")
            if fx is not None or fy is not None:
                raise ValueError(f"{_CALL}: give either 'fov_y' or 'fx'/'fy', not both")
            if not 0.0 < fov_y < 180.0:
                raise ValueError(f"{_CALL}: 'fov_y' must be in (0, 180) degrees, got {fov_y}")
            fx = fy = _core.fov_to_focal(float(fov_y), self.height)
        if fx is None and fy is None:
            raise ValueError(f"{_CALL}: one of 'fov_y', 'fx' or 'fy' is required")
        fx = fy if fx is None else fx
        fy = fx if fy is None else fy
        for name, value in (("fx", fx), ("fy", fy)):
            if isinstance(value, float) and not value > 0:
                raise ValueError(f"{_CALL}: '{name}' must be positive, got {value}")
        self.fov_y = fov_y
        self.fx, self.fy = fx, fy
        self.cx = 0.5 * self.width if cx is None else cx
        self.cy = 0.5 * self.height if cy is None else cy
        if to_world is not None:
            like = next((v for v in (fx, fy, cx, cy) if isinstance(v, dr.ArrayBase)), None)
            if like is None:
                like = to_world if isinstance(to_world, dr.ArrayBase) and dr.is_jit_v(to_world) else dr.llvm.Float(0)
            to_world = check_transform(_CALL, "to_world", to_world, like)
        self.to_world = to_world

    def _arrays(self) -> list:
        return [v for v in (self.fx, self.fy, self.cx, self.cy, self.to_world) if isinstance(v, dr.ArrayBase)]

    def intrinsics(self) -> tuple[float, float, float, float]:
        """``(fx, fy, cx, cy)`` as Python floats (detached)."""
        return tuple(float(dr.detach(v)[0]) if isinstance(v, dr.ArrayBase) else float(v)
                     for v in (self.fx, self.fy, self.cx, self.cy))

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

    def generate_rays(self, samples=None) -> Ray:
        """Camera rays through pixel positions (``Array2f``/``Array2f64`` of width N).

        Default: every pixel centre, lane ``j * width + i`` for pixel ``(i, j)``.
        Returns a :class:`Ray` with unit ``d`` and ``o`` the camera centre (width 1);
        differentiable as in rayd.torch.
        """
        call = "rayd.drjit.Camera.generate_rays()"
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
        local = Array3((samples.x - cx) / fx, (samples.y - cy) / fy, 1.0)
        if placed is None:
            d, o = local, Array3(0.0, 0.0, 0.0)
        else:
            rows, o = placed
            d = Array3(dr.dot(rows[0], local), dr.dot(rows[1], local), dr.dot(rows[2], local))
        return Ray(o, _div3(Array3, d, dr.norm(d)))

    def project(self, points):
        """``(xy, depth)`` (``Array2f``, ``Float`` of width N) of world points ``Array3f`` (as rayd.torch)."""
        call = "rayd.drjit.Camera.project()"
        points = _check.float_array(call, "points", points, 3)
        m, double = self._namespace(points)
        p = self.world_to_camera(m, double, points)
        return self.camera_to_pixels(m, double, p), p.z

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

        ``generator`` is a ``numpy.random.Generator`` (default: a fresh unseeded one).
        Returns :class:`EdgeSamples` with fields of width N: ``xy``, ``normal``
        (``Array2``), ``weight``, ``edge_t``, ``motion`` (``Float``), ``global_edge_id``
        (``Int``), ``visible`` (``Bool``), ``ray_inside``, ``ray_outside`` (:class:`Ray`).
        """
        return _sample_edges(self, scene, num_samples, generator)

    def __repr__(self) -> str:
        fx, fy, cx, cy = self.intrinsics()
        return f"rayd.drjit.Camera(width={self.width}, height={self.height}, fx={fx:g}, fy={fy:g}, cx={cx:g}, cy={cy:g})"


class EdgeSamples:
    """rayd.drjit's edge samples (fields as :class:`rayd.torch.EdgeSamples`, flat Dr.Jit arrays)."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)

    def __len__(self) -> int:
        return dr.width(self.weight) if self.count else 0

    def boundary_term(self, f_inside, f_outside, *, filter: str = "box"):
        """Flat ``Float`` image of width ``height * width`` (lane ``j * width + i``), zero in value.

        ``Σ h_k(xy) (f_inside − f_outside) · motion · weight · visible`` with the box
        filter (``filter="box"`` only in rayd.drjit); ``f_*`` flat float arrays of width N.
        """
        call = "rayd.drjit.EdgeSamples.boundary_term()"
        if filter != "box":
            raise ValueError(f"{call}: 'filter' must be 'box' in rayd.drjit, got {filter!r}")
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


def _sample_edges(camera, scene, num_samples, generator) -> EdgeSamples:
    call = "rayd.drjit.Camera.sample_edges()"
    from rayd.drjit.scene import Scene

    if not isinstance(scene, Scene):
        raise TypeError(f"{call}: 'scene' must be a rayd.drjit.Scene, got {type(scene).__name__}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int):
        raise TypeError(f"{call}: 'num_samples' must be an int, got {type(num_samples).__name__}")
    if num_samples < 0:
        raise ValueError(f"{call}: 'num_samples' must be >= 0, got {num_samples}")
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise TypeError(f"{call}: 'generator' must be a numpy.random.Generator, got {type(generator).__name__}")
    edges = _setup(scene, call)
    from rayd.drjit._nearest_edge import _kind

    m, double = _kind(scene, *camera._arrays())
    plain = _convert.module(scene._backend, False)
    intrinsics = camera.intrinsics()
    top = edges.topology
    centre = _host_centre(camera)
    with dr.suspend_grad():
        sil = np.array(scene.silhouette_edges(plain.Array3f64(*centre)), dtype=bool)
        applied = np.array(edges._applied, dtype=np.uint8).astype(bool)
        ids = np.flatnonzero(sil & applied).astype(np.int32)
        geometry = scene._live_geometry(m, double)
        _, a, b = _winner_segments(m, double, m.Int(ids), edges, geometry)
        rows = np.array(edges.rows).T.astype(np.int64)  # (E, 2)
        local_v = np.array(top.v).T.astype(np.int64)
        opp = (rows[ids, 0] - local_v[ids, 0] + np.array(top.opposite).T[ids, 0]).astype(np.int64)
        o = _world_rows(m, double, edges, geometry, ids, opp)
        a, b = (_to_camera(camera, np.array(x).T.reshape(-1, 3)) for x in (a, b))
        o = _to_camera(camera, o)
        seams = _core.merge_seams(a, b, o, np.array(top.is_boundary, dtype=bool)[ids])
        ids, a, b, o = ids[seams], a[seams], b[seams], o[seams]
    t0, t1, xy0, xy1 = _core.clip_to_image(a, b, intrinsics, camera.width, camera.height)
    lengths = np.linalg.norm(xy1 - xy0, axis=-1)
    total = float(lengths.sum())
    n = num_samples if total > 0 else 0
    rng = generator if generator is not None else np.random.default_rng()
    pick, s = _core.stratified_positions(lengths, rng.random(n))
    if n:
        pa = a[pick] + t0[pick, None] * (b[pick] - a[pick])
        pb = a[pick] + t1[pick, None] * (b[pick] - a[pick])
        edge_t = t0[pick] + _core.image_to_edge_param(s, pa[:, 2], pb[:, 2]) * (t1[pick] - t0[pick])
        normal = _core.edge_normals(a[pick], b[pick], o[pick], intrinsics)
    else:
        edge_t, normal = np.zeros(0), np.zeros((0, 2))
    Float = m.Float64 if double else m.Float
    Array2 = m.Array2f64 if double else m.Array2f
    Array3 = m.Array3f64 if double else m.Array3f
    gid = ids[pick] if n else np.zeros(0, dtype=np.int32)
    t = Float(edge_t)
    nrm = Array2(normal[:, 0].copy(), normal[:, 1].copy())
    _, a_live, b_live = _winner_segments(m, double, m.Int(gid), edges, scene._live_geometry(m, double))
    point = Array3(a_live * (1 - m.Float64(t)) + b_live * m.Float64(t))
    xy = camera.camera_to_pixels(m, double, camera.world_to_camera(m, double, point))
    mm = dr.dot(xy, nrm)
    motion = mm - dr.detach(mm)
    xy = dr.detach(xy)
    faces0 = np.array(top.faces).T[gid, 0] if n else np.zeros(0, dtype=np.int64)
    shape = np.array(top.shape_id)[gid] if n else np.zeros(0, dtype=np.int64)
    offsets = scene._core.table.tables()["global_offset"]
    face = plain.Int((offsets[shape] + faces0).astype(np.int32))
    if n:
        visible = scene.visible(Array3(*centre), dr.detach(point), ignore=face)
    else:
        visible = dr.zeros(m.Bool, 0)
    off = _core.EDGE_OFFSET
    return EdgeSamples(
        xy=xy, normal=nrm, weight=dr.full(Float, total / max(n, 1), n),
        ray_inside=camera.generate_rays(Array2(xy - off * nrm)) if n else None,
        ray_outside=camera.generate_rays(Array2(xy + off * nrm)) if n else None,
        global_edge_id=m.Int(gid), edge_t=t, visible=visible, motion=motion,
        width=camera.width, height=camera.height, m=m, count=n,
    )


def _host_centre(camera) -> tuple[float, float, float]:
    if camera.to_world is None:
        return (0.0, 0.0, 0.0)
    m = np.array(dr.detach(camera.to_world)).reshape(4, 4)
    return tuple(float(x) for x in m[:3, 3])


def _to_camera(camera, world: np.ndarray) -> np.ndarray:
    if camera.to_world is None:
        return world
    m = np.array(dr.detach(camera.to_world)).reshape(4, 4)
    return (world - m[:3, 3]) @ np.linalg.inv(m[:3, :3]).T


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


def _size(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{_CALL}: '{name}' must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{_CALL}: '{name}' must be positive, got {value}")
    return value


def _scalar(name: str, value: object):
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{_CALL}: '{name}' must be a float or a width-1 Float array, got bool")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{_CALL}: '{name}' must be finite, got {value}")
        return float(value)
    if isinstance(value, dr.ArrayBase) and dr.is_jit_v(value) and dr.depth_v(value) == 1 \
            and dr.type_v(value) in (dr.VarType.Float32, dr.VarType.Float64):
        if dr.width(value) != 1:
            raise ValueError(f"{_CALL}: '{name}' must have width 1, got width {dr.width(value)}")
        return value
    raise TypeError(f"{_CALL}: '{name}' must be a float or a width-1 Float array, got {type(value).__name__}")


def _div3(Array3, v, s):
    """``v / s`` one component at a time: Dr.Jit divides a 3-vector by a scalar through an
    approximate reciprocal on CUDA (~1e-6 relative in float64 on an H200); Float / Float is
    a correctly rounded ``div.rn``."""
    return Array3(v.x / s, v.y / s, v.z / s)
