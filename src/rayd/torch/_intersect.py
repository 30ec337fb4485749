"""Differentiable evaluation of closest hits for a fixed winner (torch ops).

The engine's search kernel picks the winning triangle per ray; this module hands the
winners' live (differentiable) geometry to :func:`rayd.core.hits.evaluate`, which
recomputes ``t, u, v`` by Moeller & Trumbore (1997, "Fast, Minimum Storage
Ray/Triangle Intersection", JGT 2(1)) and derives ``p, geo_n, n, barycentric, uv``
with the torch ops of :mod:`rayd.torch._vector` (one formula for both frontends).
Misses are evaluated on a stand-in triangle and masked out: zero gradient, never NaN,
in reverse and in forward mode.
"""

from __future__ import annotations

import torch

from rayd.core import hits
from rayd.flags import RayFlags
from rayd.torch import _vector
from rayd.torch._geometry import HitGeometry


_STAND_IN = _vector._CONSTANTS  # the cache behind the stand-in's constants (rayd.torch._vector.constant)


def _stand_in(dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(v0, v1, v2, o, d, up)``: the constants of :func:`rayd.core.hits.evaluate`, made (cached) now.

    ``Scene.build()`` makes them for float32 and float64, outside any query, so compiled
    graphs see the same cached tensors before and after.
    """
    return tuple(_vector.constant(c, dtype, device) for c in (*hits.STAND_IN_TRIANGLE, *hits.STAND_IN_RAY, hits.UP))


def evaluate(
    o: torch.Tensor,
    d: torch.Tensor,
    global_prim_id: torch.Tensor,
    geometry: HitGeometry,
    flags: RayFlags,
    face: tuple[float, float, float] | None = None,
) -> dict[str, torch.Tensor]:
    """Intersection fields for rays (N, 3) whose winners are gathered in ``geometry``.

    ``o``, ``d`` and ``geometry`` tensors share one float dtype. ``face``: the search centre
    where a winner whose crossing lies off its face is a miss (:func:`rayd.core.hits.off_face`;
    float64 queries, :func:`rayd.core.hits.face_frame`). Returns a dict of (N, ...) tensors
    named as the fields of :class:`rayd.torch.Intersection`.
    """
    dtype = o.dtype
    corners = geometry.corners.double()
    # The solve runs in float64 even for float32 inputs (differentiably cast back):
    # grazing hits are ill-conditioned, and float32 rounding would make this path,
    # the fused kernel (float64 inside too) and rayd.drjit disagree.
    ids = {"prim_id": geometry.prim_id, "shape_id": geometry.shape_id,
           "global_prim_id": global_prim_id.to(torch.int32)}

    def normals(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (w.unsqueeze(-1) * geometry.normals).sum(-2), geometry.has_normals

    def uv(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (w.unsqueeze(-1) * geometry.uv).sum(-2), geometry.has_uv

    return hits.evaluate(_vector, flags, geometry.hit, o.double(), d.double(), corners.unbind(1), ids,
                         lambda x: x.to(dtype), None if geometry.normals is None else normals,
                         None if geometry.uv is None else uv, face)
