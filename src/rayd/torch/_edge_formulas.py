"""The differentiable point/ray-to-segment formulas of rayd.torch's edge queries (torch ops).

- point ``p`` and segment ``[a, b]``:
  ``edge_t = clamp(dot(p - a, b - a) / |b - a|^2, 0, 1)``,
  ``edge_point = a + edge_t (b - a)``, ``distance = |p - edge_point|``;
- ray segment ``o + s d, s in [tmin, tmax]`` and segment ``a + t e, t in [0, 1]``:
  the minimiser of ``|o + s d - a - t e|^2`` over the box, by clamping the
  unconstrained solution and re-solving on the clamped side (Ericson 2004,
  "Real-Time Collision Detection", sec. 5.1.9).

Queries without an edge are evaluated on a fixed stand-in edge and masked out: zero
gradient, never NaN. Used by :mod:`rayd.torch._nearest_edge` (first order) and by the
fused kernels' twice-differentiable backward (:mod:`rayd.torch._nearest_edge_fused`).
"""

from __future__ import annotations

import math

import torch


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1)


def _safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    ok = den != 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))


def _clamp(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    return torch.minimum(torch.maximum(x, lo), hi)


def _norm(x: torch.Tensor) -> torch.Tensor:
    """``|x|`` with gradient 0 (not NaN) at ``x = 0``."""
    sq = _dot(x, x)
    ok = sq > 0
    return torch.where(ok, torch.sqrt(torch.where(ok, sq, torch.ones_like(sq))), torch.zeros_like(sq))


def point_segment(p: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(edge_t, edge_point)`` of the point of ``[a, b]`` closest to ``p`` (all (N, 3))."""
    ab = b - a
    t = _safe_div(_dot(p - a, ab), _dot(ab, ab)).clamp(0.0, 1.0)
    return t, a + t.unsqueeze(-1) * ab


def ray_segment(
    o: torch.Tensor, d: torch.Tensor, s0: torch.Tensor, s1: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, t)`` minimising ``|o + s d - a - t (b - a)|`` for ``s in [s0, s1]``, ``t in [0, 1]``.

    ``d`` must be non-zero; ``s1`` may be ``inf``. Same branch logic as the engine.
    """
    e = b - a
    r = o - a
    dd = _dot(d, d)
    ee = _dot(e, e)
    de = _dot(d, e)
    c = _dot(d, r)
    f = _dot(e, r)
    den = dd * ee - de * de
    free = den > 1.0e-12 * dd * ee
    s_line = _safe_div(de * f - c * ee, den)
    s_proj = _clamp(_safe_div(-c, dd), s0, s1)  # closest s to the edge start a
    s = torch.where(free, _clamp(s_line, s0, s1), s_proj)
    t = _safe_div(de * s + f, ee)
    below = t < 0
    above = t > 1
    s = torch.where(below, s_proj, torch.where(above, _clamp(_safe_div(de - c, dd), s0, s1), s))
    t = torch.where(ee > 0, t.clamp(0.0, 1.0), torch.zeros_like(t))
    return s, t


def _stand_in(n: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A unit edge along x at the origin: what queries without a winner are evaluated on."""
    a = torch.zeros((n, 3), dtype=dtype, device=device)
    b = torch.zeros((n, 3), dtype=dtype, device=device)
    b[:, 0] = 1.0
    return a, b


def _winner_segments(
    global_edge_id: torch.Tensor, edge_v: torch.Tensor, vertices: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(found, a, b)`` of the winners, stand-ins where ``global_edge_id < 0``."""
    found = global_edge_id >= 0
    ends = edge_v[torch.where(found, global_edge_id, 0).long()].long()
    sa, sb = _stand_in(global_edge_id.shape[0], vertices.dtype, vertices.device)
    f3 = found.unsqueeze(-1)
    return found, torch.where(f3, vertices[ends[:, 0]], sa), torch.where(f3, vertices[ends[:, 1]], sb)


def _ids(fields: dict, global_edge_id: torch.Tensor, topology) -> None:
    found = global_edge_id >= 0
    row = torch.where(found, global_edge_id, 0).long()
    fields["edge_id"] = torch.where(found, topology.edge_id[row], -1).to(torch.int32)
    fields["shape_id"] = torch.where(found, topology.shape_id[row], -1).to(torch.int32)
    fields["global_edge_id"] = global_edge_id.to(torch.int32)


def evaluate_points(
    p: torch.Tensor, global_edge_id: torch.Tensor, edge_v: torch.Tensor, vertices: torch.Tensor, topology
) -> dict[str, torch.Tensor]:
    """Fields of :class:`NearestEdge` for points (N, 3) and their winners (N,) (-1 = none)."""
    fields = point_fields(p, global_edge_id, edge_v, vertices)
    _ids(fields, global_edge_id, topology)
    return fields


def point_fields(
    p: torch.Tensor, global_edge_id: torch.Tensor, edge_v: torch.Tensor, vertices: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``distance``, ``edge_t``, ``edge_point`` for points (N, 3) and winners (N,) (torch ops)."""
    found, a, b = _winner_segments(global_edge_id, edge_v, vertices)
    f3 = found.unsqueeze(-1)
    p = torch.where(f3, p, torch.tensor([0.5, 1.0, 0.0], dtype=p.dtype, device=p.device))  # off the stand-in
    t, q = point_segment(p, a, b)
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    fields = {
        "distance": torch.where(found, _norm((p - a) - t.unsqueeze(-1) * (b - a)), math.inf),
        "edge_t": torch.where(found, t, zero),
        "edge_point": torch.where(f3, q, zero),
    }
    return fields


def evaluate_rays(
    o: torch.Tensor,
    d: torch.Tensor,
    s0: torch.Tensor,
    s1: torch.Tensor,
    global_edge_id: torch.Tensor,
    edge_v: torch.Tensor,
    vertices: torch.Tensor,
    topology,
) -> dict[str, torch.Tensor]:
    """Fields of :class:`NearestEdge` (with ``ray_t``, ``ray_point``) for rays (N, 3) and winners (N,)."""
    found, a, b = _winner_segments(global_edge_id, edge_v, vertices)
    f3 = found.unsqueeze(-1)
    dtype, device = o.dtype, o.device
    unit = torch.tensor([0.0, 0.0, 1.0], dtype=dtype, device=device)
    o = torch.where(f3, o, torch.tensor([0.5, 1.0, -1.0], dtype=dtype, device=device))
    d = torch.where(f3, d, unit)
    s0 = torch.where(found, s0, 0.0)
    s1 = torch.where(found, s1, math.inf)
    s, t = ray_segment(o, d, s0, s1, a, b)
    ray_point = o + s.unsqueeze(-1) * d
    edge_point = a + t.unsqueeze(-1) * (b - a)
    zero = torch.zeros((), dtype=dtype, device=device)
    fields = {
        "distance": torch.where(found, _norm(ray_point - edge_point), math.inf),
        "edge_t": torch.where(found, t, zero),
        "edge_point": torch.where(f3, edge_point, zero),
        "ray_t": torch.where(found, s, zero),
        "ray_point": torch.where(f3, ray_point, zero),
    }
    _ids(fields, global_edge_id, topology)
    return fields


# ---------------------------------------------------------------------- checks
