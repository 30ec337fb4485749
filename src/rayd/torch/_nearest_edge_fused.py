"""Fast path of point queries (``nearest_edge(points)``, ``nearest_edges``): one fused Warp
kernel forward, its Warp-generated adjoint backward.

Used when points and vertices are float32 and the scene is plain meshes (no
transforms or instances), outside forward-mode AD and functorch transforms, and
outside ``torch.use_deterministic_algorithms(True)`` (the adjoint accumulates vertex
gradients with atomic adds). Every other case takes the op-by-op path of
``_nearest_edge.py``, which computes the same formulas.

Higher order: a backward run with ``create_graph=True`` differentiates the op-by-op
formulas for the same winners instead of running the adjoint kernel (whose result
would be a constant), so the gradient is itself differentiable.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad

from rayd.torch._convert import serialised
from rayd.engine import edge_evaluate
from rayd.torch import _convert
from rayd.torch._edge_formulas import point_fields


def usable(shapes: list, points: torch.Tensor) -> bool:
    """True if the fused path may run for these points and scene shapes (never under ``torch.compile``)."""
    if torch.compiler.is_compiling():
        return False
    if torch.are_deterministic_algorithms_enabled() or forward_ad._current_level >= 0:
        return False
    if _convert.transforms_active():
        return False
    if points.dtype != torch.float32 or _convert.is_wrapped(points):
        return False
    for shape in shapes:
        if getattr(shape, "is_instance", False) or shape.to_world is not None:
            return False
        if shape.vertices.dtype != torch.float32 or _convert.is_wrapped(shape.vertices):
            return False
    return True


class _FusedEdgeEvaluate(torch.autograd.Function):
    """(point_rows, vertices) -> (distance, edge_t, edge_point) for fixed winning edges."""

    @staticmethod
    def forward(ctx, point_rows, vertices, repeat, global_edge_id, edge_v):  # noqa: D102
        outputs = _empty(global_edge_id.shape[0], global_edge_id.device)
        edge_evaluate.evaluate_edges_point(
            *_views(point_rows, repeat, global_edge_id, vertices, edge_v), _out_views(outputs),
            _convert.current_stream(global_edge_id.device),
        )
        ctx.repeat = repeat
        _convert.save_for_backward(ctx, point_rows, vertices, global_edge_id, edge_v)
        return tuple(outputs)

    @staticmethod
    @serialised
    def backward(ctx, grad_distance, grad_t, grad_point):  # noqa: D102
        point_rows, vertices, global_edge_id, edge_v = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: the gradient must be differentiable
            return _differentiable_backward(
                ctx.needs_input_grad, point_rows, vertices, ctx.repeat, global_edge_id, edge_v,
                (grad_distance, grad_t, grad_point),
            )
        n = global_edge_id.shape[0]
        device = global_edge_id.device
        grads = [
            (g if g is not None else torch.zeros(shape, dtype=torch.float32, device=device)).contiguous()
            for g, shape in ((grad_distance, (n,)), (grad_t, (n,)), (grad_point, (n, 3)))
        ]
        grad_p = torch.zeros_like(point_rows)
        grad_v = torch.zeros_like(vertices)
        edge_evaluate.evaluate_edges_point_adjoint(
            *_views(point_rows, ctx.repeat, global_edge_id, vertices, edge_v),
            _out_views(_empty(n, device)),
            _out_views(grads),
            _convert.vec3_view(grad_p),
            _convert.vec3_view(grad_v),
            _convert.current_stream(device),
        )
        needs = ctx.needs_input_grad
        return (grad_p if needs[0] else None, grad_v if needs[1] else None, None, None, None)


def _differentiable_backward(needs, point_rows, vertices, repeat, global_edge_id, edge_v, grad_outputs) -> tuple:
    """Vector-Jacobian products of the op-by-op evaluation, recorded for further differentiation."""
    point_rows, vertices = point_rows.view_as(point_rows), vertices.view_as(vertices)  # partials only (see intersect)
    n = global_edge_id.shape[0]
    if point_rows.shape[0] == 1:
        p = point_rows.expand(n, 3)
    else:
        p = point_rows.unsqueeze(1).expand(point_rows.shape[0], repeat, 3).reshape(n, 3)
    fields = point_fields(p, global_edge_id, edge_v, vertices)
    outputs, grads = [], []
    for name, grad in zip(("distance", "edge_t", "edge_point"), grad_outputs):
        if grad is not None and fields[name].requires_grad:
            outputs.append(fields[name])
            grads.append(grad)
    inputs = (point_rows, vertices)
    wanted = [x for x, need in zip(inputs, needs) if need]
    found = list(torch.autograd.grad(outputs, wanted, grads, create_graph=True, allow_unused=True)) if outputs else []
    result = []
    for x, need in zip(inputs, needs):
        g = (found.pop(0) if found else None) if need else None
        result.append(None if not need else (torch.zeros_like(x) if g is None else g))
    return (*result, None, None, None)


def _empty(n: int, device: torch.device) -> list[torch.Tensor]:
    return [
        torch.empty(n, dtype=torch.float32, device=device),
        torch.empty(n, dtype=torch.float32, device=device),
        torch.empty((n, 3), dtype=torch.float32, device=device),
    ]


def _views(point_rows, repeat, global_edge_id, vertices, edge_v) -> list:
    return [
        _convert.vec3_view(point_rows.detach()),
        repeat,
        _convert.scalar_view(global_edge_id),
        _convert.vec3_view(vertices.detach()),
        _convert.vec2i_view(edge_v),
    ]


def _out_views(tensors: list[torch.Tensor]) -> list:
    distance, t, point = tensors
    return [_convert.scalar_view(distance), _convert.scalar_view(t), _convert.vec3_view(point)]


def evaluate_points_fused(
    points: torch.Tensor, batch: torch.Size, repeat: int, global_edge_id: torch.Tensor, shapes: list,
    edge_v: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """``distance``, ``edge_t``, ``edge_point`` (N = batch.numel() * repeat rows) by the fused kernels.

    ``points``: float32 (..., 3) broadcastable to ``batch``; ``global_edge_id``: int32
    (N,) contiguous; ``shapes``: plain float32 meshes (see :func:`usable`).
    """
    lead = points.shape[:-1]
    rows = points.reshape(1, 3) if lead.numel() == 1 else points.expand(tuple(batch) + (3,)).reshape(-1, 3)
    vertices = [s.vertices for s in shapes]
    vertices = vertices[0] if len(vertices) == 1 else torch.cat(vertices)
    distance, t, point = _FusedEdgeEvaluate.apply(
        rows.contiguous(), vertices.contiguous(), repeat, global_edge_id.contiguous(), edge_v
    )
    return {"distance": distance, "edge_t": t, "edge_point": point}
