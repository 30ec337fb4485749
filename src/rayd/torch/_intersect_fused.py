"""Fast path of ``Scene.intersect``: one fused Warp kernel forward, its adjoint backward.

Used when everything is float32 and the scene is plain meshes (no transforms,
instances, vertex normals or texture coordinates), outside forward-mode AD and
functorch transforms, and outside ``torch.use_deterministic_algorithms(True)``
(the adjoint accumulates vertex gradients with atomic adds). Every other case takes
the op-by-op path of ``_intersect.py``, which computes the same formulas.

Higher order: a backward run with ``create_graph=True`` (grad mode on inside
``backward``, as in ``torch.autograd.functional.hessian``) does not use the adjoint
kernel, whose result would be a constant: it re-evaluates the winners with the
op-by-op formulas and differentiates those, so the gradient is itself differentiable.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad

from rayd import engine
from rayd.flags import RayFlags
from rayd.torch import _convert
from rayd.torch._geometry import HitGeometry


def usable(tensors: list[torch.Tensor]) -> bool:
    """True if the fused path may run for these differentiable inputs (never under ``torch.compile``)."""
    if torch.compiler.is_compiling():  # the op-by-op formulas trace into the graph instead
        return False
    if torch.are_deterministic_algorithms_enabled() or forward_ad._current_level >= 0:
        return False
    if _convert.transforms_active():
        return False
    return all(t.dtype == torch.float32 and not _convert.is_wrapped(t) for t in tensors)


class _FusedEvaluate(torch.autograd.Function):
    """(o_rows, d_rows, vertices) -> (t, p, geo_n, barycentric) for fixed winners."""

    @staticmethod
    def forward(ctx, o_rows, d_rows, vertices, global_prim_id, indices):  # noqa: D102
        n = global_prim_id.shape[0]
        device = global_prim_id.device
        outputs = _empty_outputs(n, device)
        engine.evaluate_hits(*_views(o_rows, d_rows, global_prim_id, vertices, indices), _out_views(outputs),
                             _convert.current_stream(device))
        ctx.save_for_backward(o_rows, d_rows, vertices, global_prim_id, indices)
        ctx.set_materialize_grads(False)  # unused outputs' gradients stay None (zeros made below)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, grad_t, grad_p, grad_n, grad_b):  # noqa: D102
        o_rows, d_rows, vertices, global_prim_id, indices = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: the gradient must be differentiable
            return _differentiable_backward(
                ctx.needs_input_grad, (o_rows, d_rows, vertices), global_prim_id, indices,
                (grad_t, grad_p, grad_n, grad_b),
            )
        n = global_prim_id.shape[0]
        device = global_prim_id.device
        grads = [
            (g if g is not None else _zeros(shape, device)).contiguous()
            for g, shape in ((grad_t, (n,)), (grad_p, (n, 3)), (grad_n, (n, 3)), (grad_b, (n, 3)))
        ]
        grad_o = _zeros(o_rows.shape, device)
        grad_d = _zeros(d_rows.shape, device)
        grad_v = _zeros(vertices.shape, device)
        engine.evaluate_hits_adjoint(
            *_views(o_rows, d_rows, global_prim_id, vertices, indices),
            _out_views(_empty_outputs(n, device)),
            _out_views(grads),
            _convert.vec3_view(grad_o),
            _convert.vec3_view(grad_d),
            _convert.vec3_view(grad_v),
            _convert.current_stream(device),
        )
        needs = ctx.needs_input_grad
        return (grad_o if needs[0] else None, grad_d if needs[1] else None, grad_v if needs[2] else None, None, None)


def _zeros(shape, device: torch.device) -> torch.Tensor:
    """float32 zeros; on the CPU from NumPy (zero pages, one thread): torch's 2-thread OpenMP fill
    waits for a core that another process holds (about 36 ms per (N, 3) fill at 256 k rays)."""
    if device.type == "cpu" and math.prod(shape) > 0:  # (NumPy's empty arrays have zero strides)
        return torch.from_numpy(np.zeros(tuple(shape), dtype=np.float32))
    return torch.zeros(shape, dtype=torch.float32, device=device)


def _differentiable_backward(needs, inputs, global_prim_id, indices, grad_outputs) -> tuple:
    """Vector-Jacobian products of the op-by-op evaluation, recorded for further differentiation."""
    from rayd.torch._intersect import evaluate  # noqa: PLC0415 - keeps this module light to import

    # Aliases: the partial derivatives of this evaluation alone. Without them, an input
    # that itself depends on another (a reflection's origin is the previous hit point,
    # a function of the vertices) would also carry that path, counted again upstream.
    inputs = tuple(x.view_as(x) for x in inputs)
    o_rows, d_rows, vertices = inputs
    n = global_prim_id.shape[0]
    hit = global_prim_id >= 0
    tri = indices.long().reshape(-1, 3)[torch.where(hit, global_prim_id, 0).long()]
    none = torch.full((n,), -1, dtype=torch.int32, device=global_prim_id.device)
    geometry = HitGeometry(hit=hit, corners=vertices[tri], normals=None, has_normals=None, uv=None, has_uv=None,
                           shape_id=none, prim_id=none)
    fields = evaluate(o_rows.expand(n, 3), d_rows.expand(n, 3), global_prim_id, geometry, RayFlags.Geometric)
    outputs, grads = [], []
    for name, grad in zip(("t", "p", "geo_n", "barycentric"), grad_outputs):
        if grad is not None and fields[name].requires_grad:
            outputs.append(fields[name])
            grads.append(grad)
    wanted = [x for x, need in zip(inputs, needs) if need]
    found = torch.autograd.grad(outputs, wanted, grads, create_graph=True, allow_unused=True) if outputs else ()
    found = list(found)
    result = []
    for x, need in zip(inputs, needs):
        if not need:
            result.append(None)
            continue
        g = found.pop(0) if found else None
        result.append(torch.zeros_like(x) if g is None else g)
    return (*result, None, None)


def _empty_outputs(n: int, device: torch.device) -> list[torch.Tensor]:
    return [
        torch.empty(n, dtype=torch.float32, device=device),
        torch.empty((n, 3), dtype=torch.float32, device=device),
        torch.empty((n, 3), dtype=torch.float32, device=device),
        torch.empty((n, 3), dtype=torch.float32, device=device),
    ]


def _views(o_rows, d_rows, global_prim_id, vertices, indices) -> list:
    return [
        _convert.vec3_view(o_rows.detach()),
        _convert.vec3_view(d_rows.detach()),
        _convert.scalar_view(global_prim_id),
        _convert.vec3_view(vertices.detach()),
        _convert.scalar_view(indices),
    ]


def _out_views(tensors: list[torch.Tensor]) -> list:
    t, p, n, b = tensors
    return [_convert.scalar_view(t), _convert.vec3_view(p), _convert.vec3_view(n), _convert.vec3_view(b)]


def evaluate_fused(
    o: torch.Tensor, d: torch.Tensor, batch: torch.Size, global_prim_id: torch.Tensor, vertices: torch.Tensor,
    indices: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Float fields of an :class:`Intersection` (N rays) by the fused kernels.

    ``o``, ``d``: float32 (..., 3) broadcastable to ``batch``; ``vertices``: float32
    (V, 3) live (differentiable) vertices of the flat scene; ``indices``: int32 (3 F,).
    """
    rows = []
    for x in (o, d):
        lead = x.shape[:-1]
        rows.append(x.reshape(1, 3).contiguous() if lead.numel() == 1 else
                    x.expand(tuple(batch) + (3,)).reshape(-1, 3).contiguous())
    t, p, geo_n, barycentric = _FusedEvaluate.apply(rows[0], rows[1], vertices.contiguous(), global_prim_id, indices)
    return {"t": t, "p": p, "geo_n": geo_n, "n": geo_n, "barycentric": barycentric, "uv": barycentric[:, 1:]}
