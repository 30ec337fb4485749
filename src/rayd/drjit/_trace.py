"""Ray hand-over for rayd.drjit: check a query's rays, masks and ignore ids, run the engine search."""

from __future__ import annotations

import math

import drjit as dr

from rayd.core import rays as core_rays
from rayd.core.query_args import batch_name, query_arguments, ray_checker
from rayd.drjit import _check, _convert
from rayd.drjit.ray import Ray
from rayd.engine.intersect import search
from rayd.engine.rays import RayBatch


def not_ours(value: object) -> str:
    name = _convert.type_name(value)
    return f"{name} (rayd.torch and rayd.drjit objects do not mix)" if name.startswith("rayd.torch") else name


check_ray = ray_checker(Ray, not_ours)


def check_active(call: str, ray: Ray, active: object, device: str) -> tuple[int, dr.ArrayBase | None]:
    if active is None:
        return ray.width, None
    active = _check.bool_array(call, "active", active)
    _check.same_backend(call, "active", active, device, "the scene")
    n = _check.broadcast(call, [(batch_name(call), ray.width), ("active", dr.width(active))])
    return n, active


def check_ignore(call: str, n: int, ignore: object, device: str) -> tuple[int, dr.ArrayBase | int | None]:
    return core_rays.check_ignore(call, n, ignore, "a Dr.Jit Int/UInt array", lambda one: one,
                                  lambda call, n, ignore: _ignore_ids(call, n, ignore, device))


def _ignore_ids(call: str, n: int, ignore: object, device: str) -> tuple[int, dr.ArrayBase]:
    ignore = _check.index_flat(call, "ignore", ignore)
    _check.same_backend(call, "ignore", ignore, device, "the scene")
    n = _check.broadcast(call, [(batch_name(call), n), ("ignore", dr.width(ignore))])
    ignore = dr.detach(ignore)
    # Ids beyond int32 match no face: -1, not a wrapped id (no host synchronisation).
    if dr.type_v(ignore) == dr.VarType.Int64:
        ignore = dr.select((ignore >= 2**31) | (ignore < -1), -1, ignore)
    elif dr.type_v(ignore) == dr.VarType.UInt64:
        ignore = dr.select(ignore >= 2**31, 2**32 - 1, ignore)  # as int32: -1
    return n, ignore


def trace(scene, call: str, ray: object, active: object, ignore: object, any_hit: bool,
          widen: bool = False) -> tuple[int, dr.ArrayBase]:
    """Validate, then run the engine search; returns (N, width-N ``Int`` winners, -1 = none).
    ``widen``: see :func:`prepare`."""
    n, rays, keep, _ = prepare(scene, call, ray, active, ignore, widen)
    backend, device = scene._backend, scene._device
    out = _convert.empty_int32(n, backend)
    if n == 0:
        return n, out
    _convert.launch(device, search, scene._core.accel, rays, _convert.scalar_view(out, device), any_hit)
    # The buffers behind ``rays`` stay referenced until here; on CUDA, Dr.Jit frees and
    # reuses memory in stream order, after the engine's launch.
    del keep, rays
    return n, out


def prepare(scene, call: str, ray: object, active: object, ignore: object,
            widen: bool | str = False) -> tuple[int, RayBatch | None, tuple, Ray]:
    """Validate a query's rays, mask and ignore ids; returns (N, the engine's RayBatch, buffers to keep, the ray).

    The RayBatch (``None`` when N = 0) views float32 search-frame copies (origins minus
    the scene's centre); keep the returned buffers alive until the launch has run.
    ``widen`` (callers that decide on the float64 ``t``): in a float64 query the float32
    bounds are widened by a rounding band (:func:`widened`), so that the float32 search
    drops no hit inside ``(tmin, tmax)`` on its float64 ``t`` (``"tmin"``: the lower one only;
    ``"tmax"``: the upper one only). A ``tmin`` of ``-inf`` is searched from a finite start before
    the ray enters the scene's box (:func:`unbounded_below`).
    """
    ray, n, active, ignore = query_arguments(scene, call, ray, active, ignore)
    backend, device = scene._backend, scene._device
    if n == 0:
        return n, None, (), ray
    o = ray.o
    centre = scene._core.centre
    if centre is not None:  # (o - c) in float64, then rounded (engine/frame.py)
        Array3 = _convert.module(backend, False).Array3f64
        o = Array3(dr.detach(o)) - Array3(*(float(x) for x in centre))
    o_rel = o
    o, o_buffer = _convert.vec3_view(o, device)
    d, d_buffer = _convert.vec3_view(ray.d, device)
    if widen and scene._precision(ray.o, ray.d)[1]:
        tmin, tmax = widened(o_rel, ray.d, ray.tmin, ray.tmax, backend)
        if widen == "tmin":  # (count_intersections: its tmax bound stays the float32 one)
            tmax = _convert.float32(ray.tmax, backend)
        elif widen == "tmax":  # (trace_reflections: no search again behind a winner at or before tmin)
            tmin = _convert.float32(ray.tmin, backend)
    else:
        tmin, tmax = _convert.float32(ray.tmin, backend), _convert.float32(ray.tmax, backend)
    tmin = unbounded_below(scene, o_rel, ray.d, ray.tmin, tmin, backend)
    flag = _convert.uint8(active, backend)
    skip = _convert.int32(-1 if ignore is None else ignore, backend)
    rays = RayBatch(
        o,
        d,
        _convert.scalar_view(tmin, device),
        _convert.scalar_view(tmax, device),
        _convert.scalar_view(flag, device),
        _convert.scalar_view(skip, device),
    )
    return n, rays, (o_buffer, d_buffer, tmin, tmax, flag, skip), ray


def unbounded_below(scene, o, d, tmin, rows: dr.ArrayBase, backend: str) -> dr.ArrayBase:
    """The float32 ``tmin`` search rows ``rows`` with every ``tmin = -inf`` replaced by a finite start.

    The start is :func:`rayd.core.rays.search_start` (just before the ray enters the scene's
    box), from float64 search-frame origins ``o`` and directions ``d``. Nothing is computed
    for a finite Python ``tmin``, nor for an LLVM ``tmin`` array without ``-inf`` (one reduction
    read on the CPU); a CUDA array is replaced where it is ``-inf`` (traced, no read of ``tmin``;
    the scene's box, :meth:`rayd.core.scene.SceneCore.search_box`, is read once per ``sync()``
    that moved a dynamic mesh). NaN stays NaN (a malformed ray: a miss).
    """
    if isinstance(tmin, (int, float)):
        if tmin != -math.inf:
            return rows
    elif backend == "llvm" and not dr.any(dr.detach(tmin) == -math.inf)[0]:  # (on the CPU a read is no sync)
        return rows
    plain = _convert.module(backend, False)
    o64, d64 = plain.Array3f64(dr.detach(o)), plain.Array3f64(dr.detach(d))
    start = core_rays.search_start(dr.select, (o64.x, o64.y, o64.z), (d64.x, d64.y, d64.z),
                                   scene._core.search_box())
    if not isinstance(tmin, (int, float)):
        start = dr.select(plain.Float64(dr.detach(tmin)) == -math.inf, start, plain.Float64(rows))
    return plain.Float(start)


def widened(o, d, tmin, tmax, backend: str) -> tuple[dr.ArrayBase, dr.ArrayBase]:
    """Float32 bounds of a float64 query widened by the rounding band of :func:`rayd.core.rays.widened`
    (``o`` the search-frame origins)."""
    plain = _convert.module(backend, False)
    o64, d64 = plain.Array3f64(dr.detach(o)), plain.Array3f64(dr.detach(d))
    lo, hi = (float(b) if isinstance(b, (int, float)) else plain.Float64(dr.detach(b)) for b in (tmin, tmax))
    return core_rays.widened(dr.norm(o64) / dr.norm(d64), lo, hi, plain.Float)


def unblocked(ray: Ray, blocked: dr.ArrayBase, active: dr.ArrayBase | None) -> dr.ArrayBase:
    """Width-N ``Bool`` ``visible``: not ``blocked`` (``shadow_test``'s answer), finite endpoints, a
    non-zero direction and ``active`` (if given)."""
    d = ray.d
    result = ~blocked & (dr.all(dr.isfinite(ray.o)) & dr.all(dr.isfinite(d)) & dr.any(d != 0))
    return result if active is None else result & dr.detach(active)

