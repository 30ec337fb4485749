"""Ray hand-over for rayd.torch: check a query's rays, masks and ignore ids, run the engine search (``_ops``)."""

from __future__ import annotations

import math

import numpy as np
import torch

from rayd.core.checks import type_name
from rayd.core import rays as core_rays
from rayd.core.query_args import batch_name, query_arguments, ray_checker
from rayd.torch import _check, _convert, _interval, _ops
from rayd.torch.ray import Ray

check_ray = ray_checker(Ray, type_name)


def check_active(call: str, ray: Ray, active: object, device: torch.device) -> tuple[torch.Size, torch.Tensor | None]:
    if active is None:
        return ray.shape, None
    active = _check.tensor(call, "active", active)
    if active.dtype != torch.bool:
        raise TypeError(f"{call}: 'active' must have dtype bool, got {active.dtype}")
    _check.same_device(call, "active", active, device, "the scene")
    batch = _check.broadcast(call, [(batch_name(call), ray.shape), ("active", active.shape)])
    return batch, active


def check_ignore(call: str, batch: torch.Size, ignore: object,
                 device: torch.device) -> tuple[torch.Size, torch.Tensor | None]:
    return core_rays.check_ignore(call, batch, ignore, "an integer tensor",
                                  lambda one: torch.full((1,), one, dtype=torch.int32, device=device),
                                  lambda call, batch, ignore: _ignore_ids(call, batch, ignore, device))


def _ignore_ids(call: str, batch: torch.Size, ignore: object, device: torch.device) -> tuple[torch.Size, torch.Tensor]:
    ignore = _check.index_tensor(call, "ignore", ignore)
    _check.same_device(call, "ignore", ignore, device, "the scene")
    batch = _check.broadcast(call, [(batch_name(call), batch), ("ignore", ignore.shape)])
    ignore = _convert.primal(ignore)
    if ignore.dtype == torch.int64:  # ids beyond int32 match no face: -1, not a wrapped id (no host sync)
        ignore = torch.where((ignore >= 2**31) | (ignore < -1), -1, ignore)
    return batch, ignore


def bound(value: float | torch.Tensor, batch: torch.Size, device: torch.device,
          made: dict | None = None) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return _convert.flat_float32(value, batch, None)
    if made is not None and value in made:  # the default 0 and inf: rows made at build(), no launch per query
        return made[value]
    return torch.full((1,), value, dtype=torch.float32, device=device)


def trace(scene, call: str, ray: object, active: object, ignore: object,
          any_hit: bool, widen: bool = False) -> tuple[torch.Size, int, torch.Tensor, Ray]:
    """Validate, then run the engine search; returns (batch shape, N, (N,) int32 winners, the ray).
    ``widen``: see :func:`prepare`."""
    batch, n, rows, ray = prepare(scene, call, ray, active, ignore, widen)
    if n == 0:
        return batch, n, torch.empty(n, dtype=torch.int32, device=scene._device), ray
    return batch, n, _ops.ray_search(scene, call, *rows, n, any_hit), ray


def prepare(scene, call: str, ray: object, active: object, ignore: object,
            widen: bool | str = False) -> tuple[torch.Size, int, tuple[torch.Tensor, ...] | None, Ray]:
    """Validate a query's rays, mask and ignore ids; returns (batch shape, N, the ray rows, the ray).

    The rows (``None`` when N = 0) are ``(o, d, tmin, tmax, flag, skip)`` as the searches of
    :mod:`rayd.torch._ops` take them: float32 search-frame origins (minus the scene's
    centre), directions and bounds, uint8 active flags, int32 ignore ids; each (N, ...) or
    a single row for all rays (a stride-0 broadcast in the engine).

    A ``tmin`` of ``-inf`` (every hit before ``tmax``) is searched from a finite start before the
    ray enters the scene's box (:func:`unbounded_below`); the bounds the caller decides on stay the ray's.

    ``widen`` (callers that decide on the float64 ``t``): in a float64 query (not under
    ``torch.compile``/``torch.func``, where no later step decides), the float32 bounds are widened by a rounding band (:func:`widened`), so that a hit inside
    ``(tmin, tmax)`` on its float64 ``t`` is never dropped by the float32 search (``"tmax"``: the upper one
    only, for ``trace_reflections``, whose chain cannot search again behind a winner at or before ``tmin``).
    """
    ray, batch, active, ignore = query_arguments(scene, call, ray, active, ignore)
    device = scene._device
    n = batch.numel()
    if n == 0:
        return batch, n, None, ray
    if active is None:
        flag = scene._state.all_active
    else:
        flag = _convert.primal(active)
        flag = (flag.reshape(1) if flag.numel() == 1 else flag.expand(batch).reshape(-1)).to(torch.uint8)
        flag = flag.contiguous()
    if ignore is None:
        skip = scene._state.no_ignore
    else:
        skip = ignore.reshape(1) if ignore.numel() == 1 else ignore.expand(batch).reshape(-1)
        skip = skip.to(torch.int32).contiguous()
    centre = scene._state.centre  # (o - c) in float64, then rounded (engine/frame.py)
    o = ray.o if centre is None else _convert.primal(ray.o).to(torch.float64) - centre
    made = scene._state.bound_rows
    tmin, tmax = bound(ray.tmin, batch, device, made), bound(ray.tmax, batch, device, made)
    if widen and scene._output_dtype(ray.o, ray.d) == torch.float64 and not _traced():
        wide_min, tmax = widened(o, ray.d, ray.tmin, ray.tmax, batch)
        tmin = tmin if widen == "tmax" else wide_min
    tmin = unbounded_below(scene, o, ray.d, ray.tmin, batch, tmin)
    rows = (_convert.flat_float32(o, batch, 3), _convert.flat_float32(ray.d, batch, 3), tmin, tmax, flag, skip)
    return batch, n, rows, ray


def unbounded_below(scene, o: torch.Tensor, d: torch.Tensor, tmin: float | torch.Tensor, batch: torch.Size,
                    rows: torch.Tensor) -> torch.Tensor:
    """The float32 ``tmin`` search rows ``rows`` with every ``tmin = -inf`` replaced by a finite start.

    The start is :func:`rayd.core.rays.search_start` (just before the ray enters the scene's
    box), from float64 search-frame origins ``o`` and directions ``d``. Nothing is computed
    for a finite Python ``tmin``, nor for a CPU ``tmin`` tensor without ``-inf`` (one NumPy
    check); a tensor on a device is replaced where it is ``-inf`` without a host read.
    NaN stays NaN (a malformed ray: a miss).
    """
    if isinstance(tmin, torch.Tensor):
        value = _convert.primal(tmin).detach()
        if _interval.host_ok(value) and not _traced() and not np.isneginf(value.numpy()).any():
            return rows
    elif tmin != -math.inf:
        return rows
    o64, d64 = (_convert.primal(x).detach().to(torch.float64).expand(tuple(batch) + (3,)).reshape(-1, 3)
                for x in (o, d))
    below = None
    if isinstance(tmin, torch.Tensor):
        below = torch.isneginf(value.expand(batch).reshape(-1))
    if o64.device.type == "cpu" and _interval.host_ok(o64) and not _traced():
        # In NumPy: torch's CPU ops wake its OpenMP pool, whose spinning threads then slow the
        # engine's search beside them (several times the cost of these ops at 2^18 rays).
        box = _search_box(scene, o64.device)
        start = core_rays.search_start(np.where, tuple(o64.numpy().T), tuple(d64.numpy().T), box)
        if below is not None:
            start = np.where(below.numpy(), start, rows.numpy().astype(np.float64))
        return torch.from_numpy(np.ascontiguousarray(start, dtype=np.float32))
    start = core_rays.search_start(torch.where, o64.unbind(-1), d64.unbind(-1), _search_box(scene, o64.device))
    if below is not None:
        start = torch.where(below, start, rows.expand(start.shape).to(torch.float64))
    return start.to(torch.float32).contiguous()


def _search_box(scene, device: torch.device) -> tuple | None:
    """The scene's box for :func:`rayd.core.rays.search_start`, in the search frame.

    On the CPU: the core's (host floats; reading a mesh's box there is no synchronisation).
    On a GPU, unless the core has it already: one computed on the device from the placed
    vertices (no host read), kept until the next ``sync()``. Under ``torch.compile``: computed
    in the graph (a box read while tracing would stay a constant of the graph after a
    ``sync()`` moved the scene).
    """
    core = scene._core
    compiling = torch.compiler.is_compiling()
    if not compiling and (device.type == "cpu" or core.has_search_box):
        return core.search_box()
    state = scene._state
    if not compiling and state._device_box is not None:
        return state._device_box
    placed = state.placed_vertices(torch.float64, detach=True)
    lower, upper = placed.amin(0), placed.amax(0)
    if state.centre is not None:
        lower, upper = lower - state.centre, upper - state.centre
    box = lower.unbind(0), upper.unbind(0)
    if not compiling:
        state._device_box = box
    return box


def _traced() -> bool:
    return torch.compiler.is_compiling() or _convert.transforms_active()


def widened(o: torch.Tensor, d: torch.Tensor, tmin, tmax, batch: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) float32 bounds of a float64 query widened by the rounding band of :func:`rayd.core.rays.widened`
    (``o`` the search-frame origins)."""
    o64 = _convert.primal(o).to(torch.float64).expand(tuple(batch) + (3,)).reshape(-1, 3)
    d64 = _convert.primal(d).to(torch.float64).expand(tuple(batch) + (3,)).reshape(-1, 3)
    reach = torch.linalg.vector_norm(o64, dim=1) / torch.linalg.vector_norm(d64, dim=1)
    lo, hi = (_convert.primal(b).detach().to(torch.float64).expand(batch).reshape(-1) if isinstance(b, torch.Tensor)
              else float(b) for b in (tmin, tmax))
    return core_rays.widened(reach, lo, hi, lambda b: b.to(torch.float32).contiguous())


def unblocked(ray: Ray, blocked: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
    """(batch) bool ``visible``: not ``blocked`` ((batch) bool, ``shadow_test``'s answer), finite
    endpoints, a non-zero direction and ``active`` (if given)."""
    o = _convert.primal(ray.o)
    d = _convert.primal(ray.d)
    batch = blocked.shape
    ok = torch.isfinite(o).all(-1) & torch.isfinite(d).all(-1) & (d != 0).any(-1)
    result = ~blocked & ok.expand(batch)
    return result if active is None else result & _convert.primal(active).expand(batch)
