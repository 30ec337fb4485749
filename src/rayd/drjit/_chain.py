"""``trace_reflections`` of rayd.drjit: one engine launch per chain, then one differentiable pass.

As ``rayd.torch._chain``: :func:`rayd.engine.trace_chain` finds every slot's winner in
one launch; the winners' world corners are gathered once (width ``N B``, slot ``b`` of
ray ``i`` at lane ``i B + b``), their planes computed once, then a loop over the bounces
solves each segment against its slot's plane in float64 from the values the record
reports (rounded to the output precision at each bounce), Dr.Jit recording the loop into
its kernels and AD carrying gradients through the chain. A slot counts iff its plane is not
degenerate, the segment is not parallel to it and ``t`` lies in the segment's interval
(``tmin < t < tmax`` for segment 0, ``0 < t < inf`` after it) in the output precision (and, in
a float64 chain, the segment crosses the plane on the face: ``rayd.core.hits.off_face``);
after a slot that does not count the chain is empty. The bounce loop is
:func:`rayd.core.specular.bounce_chain`'s (shared with rayd.torch), run on Dr.Jit ops.
"""

from __future__ import annotations

import math
import operator
from types import SimpleNamespace

import drjit as dr
import warp as wp

from rayd import engine
from rayd.core import hits, segments, specular
from rayd.drjit import _convert, _vector
from rayd.drjit._intersect import _bound, locate


def _dot(a, b):
    return a.x * b.x + a.y * b.y + a.z * b.z


def chain(scene, m, double: bool, rays, keep: tuple, n: int, bounces: int, ray) -> dict:
    """The fields of a ReflectionChain of ``n`` rays (slot fields of width ``n B``)."""
    backend, device = scene._backend, scene._device
    plain = _convert.module(backend, False)
    ids = plain.TensorXi(dr.empty(plain.Int, n * bounces * 3), shape=(n, bounces, 3))
    t_search = plain.TensorXf(dr.empty(plain.Float, n * bounces), shape=(n, bounces))
    dr.make_opaque(ids, t_search)
    _convert.launch(device, engine.trace_chain, scene._core.accel, scene._core.shape_lookup, rays,
                    wp.from_dlpack(_convert._capsule(ids, device)), wp.from_dlpack(_convert._capsule(t_search, device)))
    del keep, rays, t_search
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    Int, UInt, Work, F64 = m.Int, m.UInt, m.Array3f64, m.Float64
    flat = m.Int(ids.array)
    total = n * bounces
    lane = dr.arange(UInt, total)
    gid = dr.gather(Int, flat, 3 * lane)
    shape = dr.gather(Int, flat, 3 * lane + 1)
    prim = dr.gather(Int, flat, 3 * lane + 2)
    _, hit, _, _, _, _, (v0, v1, v2) = locate(m, Array3, gid, scene._state.live_geometry(m, double))
    ops = SimpleNamespace(
        dot=dr.dot, select=dr.select, where=dr.select, divide=operator.truediv, cross=dr.cross, sqrt=dr.sqrt,
        rsqrt=_vector.rsqrt, scale=_vector.scale,  # not dr.rsqrt / a vector over a scalar: approximate on CUDA
        const3=_vector.const3, max_abs=_vector.max_abs, masked=_vector.masked,
        madd=lambda x, a, y, scale: x + a * y if scale == 1.0 else x + scale * a * y,
        compared=lambda t: F64(Float(dr.detach(t))),  # compared in the output precision, as intersect does
        reported=lambda x: x if double else Work(Array3(x)))
    normal, unit, offset, ok = specular.slot_planes(ops, v0, v1, v2, hit)  # float64 corners (locate)
    first = dr.arange(UInt, n) * bounces
    o = Work(ray.o)
    d = Work(ray.d)
    if dr.width(o) != n:
        o = dr.gather(Work, o, dr.zeros(UInt, n))
    if dr.width(d) != n:
        d = dr.gather(Work, d, dr.zeros(UInt, n))
    o, d = specular.finite_rows(ops, dr.select, o, d)  # malformed rays: an empty chain, path_length 0, no NaN
    out = {"t": dr.full(Float, math.inf, total), "p": dr.zeros(Array3, total), "geo_n": dr.zeros(Array3, total),
           "d_out": dr.zeros(Array3, total), "image_source": dr.zeros(Array3, total)}
    valid_all = dr.zeros(m.Bool, total)
    count = dr.zeros(Int, n)
    path = dr.zeros(F64, n)

    def slot(b):
        idx = first + b
        return (dr.gather(Work, normal, idx), dr.gather(Work, unit, idx), dr.gather(F64, offset, idx),
                dr.gather(m.Bool, ok, idx))

    def emit(b, t, valid, p, geo_n, d_out, image):
        nonlocal count, path
        idx = first + b
        dr.scatter(out["t"], dr.select(valid, Float(t), math.inf), idx)
        for name, value in (("p", p), ("geo_n", geo_n), ("d_out", d_out), ("image_source", image)):
            dr.scatter(out[name], dr.select(valid, Array3(value), 0), idx)
        dr.scatter(valid_all, valid, idx)
        count += dr.select(valid, 1, 0)
        path += t

    def corners(b):
        idx = first + b
        return tuple(dr.gather(Work, x, idx) for x in (v0, v1, v2))

    face = hits.face_frame(scene._core, double)  # float64: a slot off its face ends the chain
    specular.bounce_chain(ops, bounces, slot, o, d, (_bound(F64, ray.tmin), _bound(F64, ray.tmax)), emit,
                          corners=corners, face=face)
    out["prim_id"] = dr.select(valid_all, prim, -1)
    out["shape_id"] = dr.select(valid_all, shape, -1)
    out["global_prim_id"] = dr.select(valid_all, gid, -1)
    out["num_bounces"] = count
    out["path_length"] = Float(path * segments.norm(ops, d))
    return out
