"""Edge sampling of rayd.drjit (``Camera.sample_edges``): the ``EdgeSamples`` record and the sampling steps.

The steps' order, the argument checks and the discrete choices (silhouette edges,
clipping, stratified positions, normal sides) are
:meth:`rayd.core.camera_frontend.CameraBase.sample_edges`', shared with rayd.torch; this
module gives it the steps written in Dr.Jit (:data:`OPS`): the candidate edges on the
host and the differentiable evaluation (see :mod:`rayd.torch._edge_sampling` for the
estimator and its references).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import drjit as dr
import numpy as np

from rayd.core import camera as _core
from rayd.core.camera_frontend import EdgeSamplesBase
from rayd.core.transforms import check_matrices
from rayd.drjit import _check, _convert
from rayd.drjit._geometry import place
from rayd.drjit._nearest_edge import _kind, _winner_segments, ready, silhouette_edges
from rayd.drjit.intersection import DrjitRecord
from rayd.drjit.ray import Ray


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

    def __init__(self, *, m: Any, count: int, **fields: Any) -> None:
        super().__init__(**fields)
        self.m = m
        self.count = count

    @property
    def shape(self) -> tuple[int]:
        """``(N,)``."""
        return (self.count,)

    def _resize(self, count: int) -> None:
        self.count = count

    def _all_rows(self, x: dr.ArrayBase) -> dr.ArrayBase:
        if dr.width(x) == 1 and self.count > 1:  # a width-1 origin broadcasts: widen it to N lanes first
            x = x + dr.zeros(type(x), self.count)
        return x

    def boundary_term(self, f_inside: dr.ArrayBase, f_outside: dr.ArrayBase, *, filter: str = "box") -> dr.ArrayBase:
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


def _candidates(call: str, camera, scene, edges, intrinsics: tuple) -> tuple:
    """The camera's values checked (they may have changed since ``Camera()``); the silhouette and
    boundary edges seen by the BVH from the camera centre: ``(work, ids, a, b, o, is_boundary)``, the
    host ids and rows, ``work`` the output namespace ``m``, precision ``double`` and host ``centre``."""
    m, double = _kind(scene, *camera._arrays())
    _core.check_intrinsics(call, *intrinsics)  # width-1 arrays may have been replaced since Camera()
    if camera.to_world is not None:  # its entries may have been assigned since Camera()
        check_matrices(call, "to_world", np.array(dr.detach(camera.to_world), dtype=np.float64).reshape(1, 4, 4))
    work = SimpleNamespace(m=m, double=double, centre=camera._host_centre())
    plain = _convert.module(scene._backend, False)
    top = edges.topology
    with dr.suspend_grad():
        # every record's faces read as consistently oriented (rayd.torch._edge_sampling)
        sil = np.array(silhouette_edges(scene, call, plain.Array3f64(*work.centre), oriented=True), dtype=bool)
        applied = np.array(edges._applied, dtype=np.uint8).astype(bool)
        boundary = np.array(top.is_boundary, dtype=bool)
        rule = _core.coincident_faces(np.array(top.opposite).T, lambda: (np.array(top.v).T, np.array(top.shape_id)))
        sil, boundary = _core.merge_coincident_faces(rule, sil, boundary, np.asarray)  # faces listed twice: one face
        ids = np.flatnonzero(sil & applied).astype(np.int32)
        if ids.size == 0:  # no edge to sample (Dr.Jit does not broadcast width 0 against width 1)
            empty = np.zeros((0, 3))
            return work, ids, empty, empty, empty, np.zeros(0, dtype=bool)
        geometry = scene._live_geometry(m, double)
        _, a, b = _winner_segments(m, double, m.Int(ids), edges, geometry)
        rows = np.array(edges.edge_rows).T.astype(np.int64)  # (E, 2)
        local_v = np.array(top.v).T.astype(np.int64)
        opp = (rows[ids, 0] - local_v[ids, 0] + np.array(top.opposite).T[ids, 0]).astype(np.int64)
        o = _world_rows(m, double, edges, geometry, ids, opp)
        a, b = (np.array(x).T.reshape(-1, 3) for x in (a, b))
        return work, ids, a, b, o, boundary[ids]


def _jitter(generator: np.random.Generator | None) -> Callable[[int], np.ndarray]:
    """``generator.random`` (a fresh unseeded generator by default)."""
    return (generator if generator is not None else np.random.default_rng()).random


def _evaluate(camera, scene, edges, work: SimpleNamespace, ids: np.ndarray, plan) -> dict[str, object]:
    """The fields of :class:`EdgeSamples` (and its ``m``, ``count``): the differentiable evaluation at the
    fixed edge parameter (Dr.Jit AD)."""
    m, double = work.m, work.double
    n = plan.count
    if n == 0:
        return _empty_samples(camera, m, double)
    plain = _convert.module(scene._backend, False)
    top = edges.topology
    Float = m.Float64 if double else m.Float
    Array2 = m.Array2f64 if double else m.Array2f
    gid = ids[plan.edge]
    t = Float(plan.edge_t)
    nrm = Array2(plan.normal[:, 0].copy(), plan.normal[:, 1].copy())
    # The motion in float64 from the float64 placement, rounded once (as rayd.torch): a transformed
    # float32 mesh and camera 3e4 from the origin, placed and projected in float32, gave derivatives
    # up to 4.5e-4 (relative) off (tests/drjit/test_drjit21_placement.py).
    _, a_live, b_live = _winner_segments(m, double, m.Int(gid), edges, scene._live_geometry(m, double))
    t64 = m.Float64(plan.edge_t)
    point = a_live * (1 - t64) + b_live * t64
    xy64 = camera._camera_to_pixels((m, True), camera._world_to_camera((m, True), point))
    mm = dr.dot(xy64, m.Array2f64(plan.normal[:, 0].copy(), plan.normal[:, 1].copy()))
    motion = Float(mm - dr.detach(mm))
    xy = Array2(plan.xy[:, 0].copy(), plan.xy[:, 1].copy())  # the value: float64 on the host (SamplePlan.xy)
    faces0 = np.array(top.faces).T[gid, 0]
    shape = np.array(top.shape_id)[gid]
    offsets = scene._core.table.tables()["global_offset"]
    face = plain.Int((offsets[shape] + faces0).astype(np.int32))
    target = plain.Array3f64(*(plan.point[:, k].copy() for k in range(3)))  # float64: SamplePlan.point
    visible = scene.visible(plain.Array3f64(*work.centre), target, ignore=face)
    off = _core.EDGE_OFFSET
    return dict(xy=xy, normal=nrm, weight=dr.full(Float, plan.weight, n),
                ray_inside=camera.generate_rays(Array2(xy - off * nrm)),
                ray_outside=camera.generate_rays(Array2(xy + off * nrm)),
                global_edge_id=m.Int(gid), edge_t=t, visible=visible, motion=motion, m=m, count=n)


def _empty_samples(camera, m, double) -> dict[str, object]:
    """The fields of ``EdgeSamples`` with no samples (N = 0 or no edge on screen): width 0."""
    Float = m.Float64 if double else m.Float
    Array2 = m.Array2f64 if double else m.Array2f
    empty = camera.generate_rays(Array2())
    return dict(xy=Array2(), normal=Array2(), weight=Float(), ray_inside=empty, ray_outside=empty,
                global_edge_id=m.Int(), edge_t=Float(), visible=m.Bool(), motion=Float(), m=m, count=0)


def _world_rows(m, double, edges, geometry, ids, rows) -> np.ndarray:
    """(K, 3) float64 world positions of the concatenated-vertex ``rows`` of edges ``ids`` (detached)."""
    Array3 = m.Array3f64 if double else m.Array3f
    shape = None if geometry.transform is None else m.UInt(np.array(edges.topology.shape_id)[ids].astype(np.uint32))
    (p,) = place(geometry.transform, shape, dr.gather(Array3, geometry.vertices, m.UInt(rows.astype(np.uint32))))
    return np.array(p).T.reshape(-1, 3).astype(np.float64)


#: rayd.drjit's steps of :meth:`rayd.core.camera_frontend.CameraBase.sample_edges`.
OPS = SimpleNamespace(generator_type=np.random.Generator, generator_name="numpy.random.Generator", ready=ready,
                      candidates=_candidates, jitter=_jitter, evaluate=_evaluate)
