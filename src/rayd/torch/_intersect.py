"""Differentiable evaluation of closest hits for a fixed winner (torch ops).

The engine's search kernel picks the winning triangle per ray; this module recomputes
``t, u, v`` for that triangle from the live (differentiable) geometry by solving

    o + t d = (1 - u - v) v0 + u v1 + v v2

with Cramer's rule in the form of Moeller & Trumbore (1997, "Fast, Minimum Storage
Ray/Triangle Intersection", JGT 2(1)), then derives ``p, geo_n, n, barycentric, uv``.
Rays that missed are evaluated against a fixed, well-conditioned stand-in triangle and
masked out, so misses carry exactly zero gradient and never NaN, in reverse and in
forward mode.
"""

from __future__ import annotations

import math

import torch

from rayd.flags import RayFlags
from rayd.torch import _convert
from rayd.torch._geometry import HitGeometry


_STAND_IN_VALUES = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.25, 0.25, 1.0], [0.0, 0.0, -1.0],
                    [0.0, 0.0, 1.0]]
_STAND_IN: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, ...]] = {}


def _stand_in(dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """A triangle and a ray that hits it head-on at t = 1: the evaluation point of misses.

    Cached per dtype and device, so queries make no host-to-device copy. The cached
    tensors are made outside any ``torch.func`` transform (plain tensors, which every
    later transform can use; a wrapped one would outlive its transform).
    """
    key = (dtype, device)
    if key not in _STAND_IN and torch.compiler.is_compiling():  # constants of the graph, not cached
        values = torch.tensor(_STAND_IN_VALUES, dtype=dtype, device=device)
        return tuple(values.unbind(0))
    if key not in _STAND_IN:
        with _convert.outside_transforms():
            values = torch.tensor(_STAND_IN_VALUES, dtype=dtype).to(device)
            stand_in = tuple(values.unbind(0))
        if any(_convert.is_wrapped(x) for x in stand_in):  # pragma: no cover - torch without _DisableFuncTorch
            return stand_in
        _STAND_IN[key] = stand_in
    return _STAND_IN[key]


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1)


def _normalize(x: torch.Tensor, fallback: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x / |x|`` with ``fallback`` where ``|x| = 0``; returns (result, ok-mask)."""
    sq = _dot(x, x).unsqueeze(-1)
    ok = sq > 0
    safe = torch.where(ok, x, fallback)
    return safe * torch.rsqrt(torch.where(ok, sq, torch.ones_like(sq))), ok


def evaluate(
    o: torch.Tensor,
    d: torch.Tensor,
    global_prim_id: torch.Tensor,
    geometry: HitGeometry,
    flags: RayFlags,
) -> dict[str, torch.Tensor]:
    """Intersection fields for rays (N, 3) whose winners are gathered in ``geometry``.

    ``o``, ``d`` and ``geometry`` tensors share one float dtype. Returns a dict of
    (N, ...) tensors named as the fields of :class:`rayd.torch.Intersection`.
    """
    dtype, device = o.dtype, o.device
    hit = geometry.hit
    hit3 = hit.unsqueeze(-1)
    corners = geometry.corners
    c0, c1, c2, so, sd, up = _stand_in(dtype, device)
    v0 = torch.where(hit3, corners[:, 0], c0)
    v1 = torch.where(hit3, corners[:, 1], c1)
    v2 = torch.where(hit3, corners[:, 2], c2)
    o = torch.where(hit3, o, so)
    d = torch.where(hit3, d, sd)
    # The solve runs in float64 even for float32 inputs (differentiably cast back):
    # grazing hits are ill-conditioned, and float32 rounding would make this path,
    # the fused kernel (float64 inside too) and rayd.drjit disagree.
    o, d, v0, v1, v2 = (x.double() for x in (o, d, v0, v1, v2))

    e1 = v1 - v0
    e2 = v2 - v0
    pvec = torch.linalg.cross(d, e2)
    det = _dot(e1, pvec)
    # A winner found in float32 can be degenerate or singular when re-evaluated (no
    # interior, or no unique t): a miss, as the search decides (watertight.confirmed_t).
    singular = (det == 0) | (torch.linalg.cross(e1, e2) == 0).all(-1)
    hit = hit & ~singular
    hit3 = hit.unsqueeze(-1)
    det = torch.where(singular, torch.ones_like(det), det)
    inv_det = 1.0 / det
    s = o - v0
    qvec = torch.linalg.cross(s, e1)
    t = _dot(e2, qvec) * inv_det

    zero = torch.zeros((), dtype=dtype, device=device)
    out = {
        "t": torch.where(hit, t.to(dtype), torch.full((), math.inf, dtype=dtype, device=device)),
        "prim_id": torch.where(hit, geometry.prim_id, -1),
        "shape_id": torch.where(hit, geometry.shape_id, -1),
        "global_prim_id": torch.where(hit, global_prim_id.to(torch.int32), -1),
    }
    if not flags & (RayFlags.Geometric | RayFlags.ShadingN | RayFlags.UV):
        return out

    u = _dot(s, pvec) * inv_det
    v = _dot(d, qvec) * inv_det
    w = torch.stack((1.0 - u - v, u, v), dim=-1).to(dtype)
    u, v = u.to(dtype), v.to(dtype)
    geo_n, _ = _normalize(torch.linalg.cross(e1, e2), up.double())
    geo_n = torch.where(hit3, geo_n.to(dtype), zero)
    if flags & RayFlags.Geometric:
        out["p"] = torch.where(hit3, (o + t.unsqueeze(-1) * d).to(dtype), zero)
        out["geo_n"] = geo_n
        out["barycentric"] = torch.where(hit3, w, zero)
    if flags & RayFlags.ShadingN:
        if geometry.normals is None:
            out["n"] = geo_n
        else:
            interpolated = (w.unsqueeze(-1) * geometry.normals).sum(-2)
            shading, ok = _normalize(interpolated, up)
            use = ok & geometry.has_normals.unsqueeze(-1) & hit3
            out["n"] = torch.where(use, shading, geo_n)
    if flags & RayFlags.UV:
        fallback = torch.stack((u, v), dim=-1)
        if geometry.uv is None:
            uv = fallback
        else:
            interpolated = (w.unsqueeze(-1) * geometry.uv).sum(-2)
            uv = torch.where(geometry.has_uv.unsqueeze(-1), interpolated, fallback)
        out["uv"] = torch.where(hit3, uv, zero)
    return out
