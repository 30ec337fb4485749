"""``trace_reflections`` of rayd.torch: one engine launch per chain, then one differentiable pass.

The engine (:func:`rayd.engine.trace_chain`, through the ``rayd::trace_chain`` custom op)
finds every slot's winner in one launch.
Here all winners' world-space corners are gathered at once (``[N, B, 3, 3]``), their
planes computed at once, then a short loop over the bounces solves ``o + t d`` against
each slot's plane (the chain is sequential: segment ``b + 1`` starts at ``p_b``) with a
handful of fused ops per bounce, in float64 from values rounded to the output dtype at
each bounce (so that the chain equals B ``intersect`` calls from the reported ``p``,
``d_out``), and the record is assembled once. For a fixed chain of faces the
ray-plane solve gives the same ``t`` (and derivatives) as the Moeller-Trumbore solve of
``intersect``; a slot counts iff its winner's plane is not degenerate, the segment is
not parallel to it, and ``t`` lies in the segment's interval (``tmin < t < tmax`` for
segment 0, ``0 < t < inf`` after it) in the output dtype, as ``intersect`` decides; in a
float64 chain, also iff the segment crosses the plane on the face (``rayd.core.hits.off_face``).
Once a slot does not count, the later slots are empty (the chain ends). The bounce loop
is :func:`rayd.core.specular.bounce_chain`'s (shared with rayd.drjit), run on torch ops.
"""

from __future__ import annotations

import math
import operator

import torch

from rayd.core import hits, segments, specular
from rayd.torch import _chain_fused, _interval, _ops, _vector


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``sum(a * b, -1)`` for float64 ``[..., 3]`` (a product with ones: a sum over a last dim of 3
    is ~10x slower than the product on the CPU)."""
    return (a * b) @ torch.ones(3, dtype=a.dtype, device=a.device)


class _ChainOps:
    """The ops of :func:`rayd.core.specular.bounce_chain` on (n, 3) float64 tensors, scalars (n,),
    for the output ``dtype`` (a class, not a namespace: TorchDynamo builds it inside a graph)."""

    dot = staticmethod(_dot)
    select = staticmethod(torch.where)
    where = staticmethod(torch.where)
    divide = staticmethod(operator.truediv)
    cross = staticmethod(torch.linalg.cross)
    rsqrt = staticmethod(torch.rsqrt)
    sqrt = staticmethod(torch.sqrt)
    scale = staticmethod(_vector.scale)
    const3 = staticmethod(_vector.const3)
    max_abs = staticmethod(_vector.max_abs)
    masked = staticmethod(_vector.masked)

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def madd(self, x: torch.Tensor, a: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.addcmul(x, a.unsqueeze(-1), y, value=scale)

    def compared(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(self.dtype)

    def reported(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.dtype == torch.float64 else x.to(self.dtype).double()


def chain(scene, call: str, rows: tuple[torch.Tensor, ...], n: int, bounces: int, origin: torch.Tensor,
          direction: torch.Tensor, tmin, tmax, batch: torch.Size, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The fields of a ReflectionChain ((n, B, ...) tensors) for ``n`` flat rays.

    ``origin``, ``direction`` (n, 3) in ``dtype`` (differentiable); ``tmin``, ``tmax`` the
    ray's bounds (floats or tensors broadcastable to ``batch``); ``rows`` their search rows
    (:func:`rayd.torch._trace.prepare`). The search is the ``rayd::trace_chain`` op
    (:mod:`rayd.torch._ops`) under ``torch.compile`` and ``vmap``. For float32 plain
    meshes outside forward mode and transforms, the fields come from one fused kernel
    (:mod:`rayd.torch._chain_fused`, the same formulas; backward through :func:`evaluate`).
    """
    ids = _ops.trace_chain(scene, call, rows, n, bounces)  # (n, B, 3): global, shape, prim
    state = scene._state
    if dtype == torch.float32 and _chain_fused.usable(state, origin, direction):
        return _chain_fused.chain(scene, ids, origin, direction, tmin, tmax, batch, evaluate)
    live = state.live(dtype)
    return evaluate(scene, ids, origin, direction, tmin, tmax, batch, dtype, live.vertices, live.to_world)


def evaluate(scene, ids: torch.Tensor, origin: torch.Tensor, direction: torch.Tensor, tmin, tmax,
             batch: torch.Size, dtype: torch.dtype, vertices: torch.Tensor, to_world: torch.Tensor | None,
             counted: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The chain's fields for the winners ``ids`` (n, B, 3), in torch ops (differentiable).

    ``vertices``, ``to_world``: the live vertices in ``dtype`` and placements
    (``state.live(dtype)``'s, or aliases of them). ``counted`` (n, B) bool, if given, says which slots count instead
    of deciding it here (the fused forward's decision, for its backward).
    """
    n, bounces = ids.shape[:2]
    device = scene._device
    state = scene._state
    gid = ids[..., 0]
    hit = gid >= 0
    table = state.table
    shape = torch.where(hit, ids[..., 1], 0).long()
    prim = torch.where(hit, ids[..., 2], 0).long()
    corners = vertices[table.faces[table.face_row[shape] + prim]]  # (n, B, 3, 3)
    if to_world is not None:
        m = to_world[shape]  # (n, B, 4, 4) float64
        corners = corners.to(m.dtype) @ m[..., :3, :3].transpose(-1, -2) + m[..., None, :3, 3]
    corners = corners.double()
    ops = _ChainOps(dtype)
    v0, v1, v2 = corners.unbind(-2)
    normal, unit, offset, ok = specular.slot_planes(ops, v0, v1, v2, hit)
    o, d = specular.finite_rows(ops, _vector.where3, origin.double(), direction.double())  # malformed rays: no NaN
    bounds = (_interval._rows(tmin, batch, gid), _interval._rows(tmax, batch, gid))
    ts, vectors, oks = [], [], []

    def emit(b, t, valid, p, geo_n, d_out, image):
        ts.append(t)
        vectors.extend((p, geo_n, d_out, image))
        oks.append(valid)

    slot = lambda b: (normal[:, b], unit[:, b], offset[:, b], ok[:, b])  # noqa: E731
    replay = None if counted is None else (lambda b: counted[:, b])
    face = hits.face_frame(scene._core, dtype == torch.float64)  # float64: an off-face slot ends the chain
    specular.bounce_chain(ops, bounces, slot, o, d, bounds, emit, replay,
                          lambda b: (v0[:, b], v1[:, b], v2[:, b]), face)
    valid = torch.stack(oks, dim=1)  # (n, B)
    t = torch.stack(ts, dim=1)  # 0 in empty slots
    vec = torch.where(valid[..., None, None], torch.stack(vectors, dim=1).reshape(n, bounces, 4, 3), 0.0).to(dtype)
    ids = torch.where(valid.unsqueeze(-1), ids, -1)
    inf = torch.full((), math.inf, dtype=dtype, device=device)
    return {"t": torch.where(valid, t.to(dtype), inf), "p": vec[:, :, 0], "geo_n": vec[:, :, 1],
            "d_out": vec[:, :, 2], "image_source": vec[:, :, 3], "prim_id": ids[..., 2], "shape_id": ids[..., 1],
            "global_prim_id": ids[..., 0], "num_bounces": valid.sum(-1).to(torch.int32),
            "path_length": (t.sum(-1) * segments.norm(ops, d)).to(dtype)}

