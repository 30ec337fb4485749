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

:func:`intersect_fused` (``Scene.intersect``) runs ``engine.closest_fields``: one kernel
writes every requested field, the ids and the hit interval of the record in their final
layout (``RayFlags.Minimal`` writes ``t`` and the ids only); its backward runs the adjoint
of ``t`` alone when only ``t`` carries a gradient. For instances and transformed meshes
the same kernel (corners placed in float64) runs when nothing needs a gradient.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad

from rayd.torch._convert import serialised
from rayd import engine
from rayd.core import hits
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
        _convert.save_for_backward(ctx, o_rows, d_rows, vertices, global_prim_id, indices)
        ctx.set_materialize_grads(False)  # unused outputs' gradients stay None (zeros made below)
        return tuple(outputs)

    @staticmethod
    @serialised
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


class _FusedClosest(torch.autograd.Function):
    """(o_rows, d_rows, vertices) -> (t[, p, geo_n, barycentric], shape_id, prim_id) of a closest-hit query.

    ``global_prim_id`` (the search's winners) is overwritten with the reported ones.
    """

    @staticmethod
    def forward(ctx, o_rows, d_rows, vertices, global_prim_id, indices, offsets, tmin, tmax, geometric):  # noqa: D102
        (t, *vec, shape_id, prim_id), (o, d, gid, v, idx) = _closest_outputs(
            o_rows, d_rows, vertices, global_prim_id, indices, offsets, tmin, tmax, geometric)
        ctx.mark_non_differentiable(shape_id, prim_id)
        ctx.set_materialize_grads(False)  # unused outputs: None, not (N, 3) zeros made by autograd
        copied = _convert.save_for_backward(ctx, o_rows, d_rows, vertices, global_prim_id, indices)
        ctx.geometric = geometric
        # The backward's Warp views: five wp.from_torch calls fewer (not of inference tensors, saved as copies).
        ctx.views = None if copied else (o, d, gid, v, idx)
        return (t, *vec, shape_id, prim_id)

    @staticmethod
    @serialised
    def backward(ctx, *grads):  # noqa: D102
        o_rows, d_rows, vertices, global_prim_id, indices = ctx.saved_tensors
        needs = ctx.needs_input_grad
        grads = tuple(grads[:4]) if ctx.geometric else (grads[0], None, None, None)
        rest = (None,) * 6
        if torch.is_grad_enabled():  # create_graph=True: the gradient must be differentiable
            found = _differentiable_backward(needs[:3], (o_rows, d_rows, vertices), global_prim_id, indices, grads)
            return (*found[:3], *rest)
        n = global_prim_id.shape[0]
        device = global_prim_id.device
        grad_o, grad_d, grad_v = (_zeros(x.shape, device) if need else None
                                  for x, need in zip((o_rows, d_rows, vertices), needs[:3]))
        if grad_o is None and grad_d is None and grad_v is None:
            return (None, None, None, *rest)
        # The forward's views of the saved tensors (ctx.saved_tensors above checked their versions),
        # dropped here so that they keep nothing alive after the backward (retain_graph: made again).
        views = ctx.views or _views(o_rows, d_rows, global_prim_id, vertices, indices)
        ctx.views = None
        adj = [None if g is None else _convert.vec3_view(g) for g in (grad_o, grad_d, grad_v)]
        if all(g is None for g in grads[1:]):  # only t carries a gradient: the adjoint of t alone
            if grads[0] is not None:
                scratch = torch.empty(n, dtype=torch.float32, device=device)
                # global_prim_id holds the forward's reported winners (singular ones are -1),
                # which evaluate_t_adjoint relies on instead of re-testing them.
                engine.evaluate_t_adjoint(*views, _convert.scalar_view(scratch),
                                          _convert.scalar_view(grads[0].contiguous()), *adj,
                                          _convert.current_stream(device))
        else:
            full = [
                (g if g is not None else _zeros(shape, device)).contiguous()
                for g, shape in zip(grads, ((n,), (n, 3), (n, 3), (n, 3)))
            ]
            engine.evaluate_hits_adjoint(*views, _out_views(_empty_outputs(n, device)), _out_views(full), *adj,
                                         _convert.current_stream(device))
        return (grad_o, grad_d, grad_v, *rest)


def _closest_outputs(o_rows, d_rows, vertices, global_prim_id, indices, offsets, tmin, tmax, geometric) -> tuple:
    """:class:`_FusedClosest`'s forward without autograd: ``((t[, p, geo_n, barycentric], shape_id, prim_id),
    the five Warp views of the inputs)``."""
    n = global_prim_id.shape[0]
    device = global_prim_id.device
    t = torch.empty(n, dtype=torch.float32, device=device)
    vec = [torch.empty((n, 3), dtype=torch.float32, device=device) for _ in range(3)] if geometric else []
    shape_id = torch.empty(n, dtype=torch.int32, device=device)
    prim_id = torch.empty(n, dtype=torch.int32, device=device)
    views = o, d, gid, v, idx = _views(o_rows, d_rows, global_prim_id, vertices, indices)
    outputs = [_convert.scalar_view(t), *([_convert.vec3_view(x) for x in vec] or [None] * 3),
               _convert.scalar_view(shape_id), _convert.scalar_view(prim_id)]
    engine.closest_fields(o, d, v, idx, _convert.scalar_view(offsets), _bound_view(tmin), _bound_view(tmax),
                          gid, outputs, _convert.current_stream(device))
    return (t, *vec, shape_id, prim_id), views


def _bound_view(bound):
    return bound if isinstance(bound, float) else _convert.scalar_view(bound)


def _bound_rows(bound: float | torch.Tensor, batch: torch.Size) -> float | torch.Tensor:
    """A hit bound as ``tmin < t < tmax`` compares it with float32 ``t`` (``_interval.enforce``).

    A number or a one-element tensor is compared in float32 (torch keeps the tensor's
    dtype for a scalar operand): rounded to float32 here. A tensor per ray is compared
    in the promoted dtype, which float64 holds exactly.
    """
    if not isinstance(bound, torch.Tensor):
        return float(np.float32(bound))
    bound = bound.detach()
    if bound.numel() == 1:
        return bound.reshape(1).to(torch.float32).to(torch.float64)
    return bound.expand(batch).reshape(-1).to(torch.float64).contiguous()


def closest(state, ray, batch: torch.Size, global_prim_id: torch.Tensor, meshes: list[torch.Tensor],
            flags: RayFlags) -> dict[str, torch.Tensor] | None:
    """``Scene.intersect``'s fields by one kernel, or ``None`` where the op-by-op path must run.

    Meshes without transforms (plain scenes): differentiable (:func:`intersect_fused`).
    Instances and transformed meshes without vertex normals or uv: forward only, when
    nothing needs a gradient (:func:`intersect_placed`). Both need float32 rays and
    vertices, eager mode and no ``torch.func`` transform (:func:`usable`).
    """
    if not usable([ray.o, ray.d, *meshes]):
        return None
    if state.plain and not state.has_matrix():
        vertices = meshes[0] if len(meshes) == 1 else torch.cat(meshes)
        return intersect_fused(ray, batch, global_prim_id, vertices, state, flags)
    table = state.table
    if table.face_has_normals is not None or table.face_has_uv is not None:
        return None
    if torch.is_grad_enabled() and any(x.requires_grad for x in (ray.o, ray.d, *meshes)):
        return None
    world = state.world() if state.has_matrix() else None
    if world is not None and world.requires_grad:
        return None
    return intersect_placed(ray, batch, global_prim_id, state.flat_vertices(), state, world, flags)  # no gradient


def _ray_rows(ray, batch: torch.Size) -> list[torch.Tensor]:
    return [_rows(ray.o, batch), _rows(ray.d, batch)]


def _rows(x: torch.Tensor, batch: torch.Size) -> torch.Tensor:
    """``x`` (..., 3) as contiguous (N, 3) rows of ``batch``, or (1, 3) when it is one row.

    Already such rows (the common (N, 3) contiguous ray batch): ``x`` itself, with no
    expand/reshape/contiguous op recorded in the forward or the autograd graph.
    """
    lead = x.shape[:-1]
    if x.dim() == 2 and x.is_contiguous() and (lead.numel() == 1 or (len(batch) == 1 and lead == batch)):
        return x
    if lead.numel() == 1:
        return x.reshape(1, 3).contiguous()
    return x.expand(tuple(batch) + (3,)).reshape(-1, 3).contiguous()


def _record(out: tuple, global_prim_id: torch.Tensor, geometric: bool, flags: RayFlags) -> dict[str, torch.Tensor]:
    names = hits.field_names(flags)
    values = {"t": out[0], "shape_id": out[-2], "prim_id": out[-1], "global_prim_id": global_prim_id}
    if geometric:
        _, p, geo_n, barycentric = out[:4]
        values.update(p=p, geo_n=geo_n, barycentric=barycentric, n=geo_n)  # no vertex normals: n is geo_n
        if "uv" in names:
            values["uv"] = barycentric[:, 1:]  # no uv: (w1, w2)
    return {name: values[name] for name in names if name in values}


def intersect_fused(ray, batch: torch.Size, global_prim_id: torch.Tensor, vertices: torch.Tensor, state,
                    flags: RayFlags) -> dict[str, torch.Tensor]:
    """The fields of ``Scene.intersect``'s record, (N, ...) rows, interval applied, in one kernel.

    ``ray``: the query's :class:`~rayd.torch.Ray` (float32); ``global_prim_id``: (N,) int32
    winners of the search (overwritten with the reported ones); ``vertices``: float32
    (V, 3) live vertices of the plain scene ``state`` (a ``LiveState``); only the fields
    ``flags`` asks for are computed. Differentiable with respect to ``vertices``,
    ``ray.o`` and ``ray.d``.
    """
    offsets, _ = state.int32_tables
    rows = _ray_rows(ray, batch)
    geometric = bool(flags & (RayFlags.Geometric | RayFlags.ShadingN | RayFlags.UV))
    vertices = vertices.contiguous()
    inputs = (rows[0], rows[1], vertices, global_prim_id, state.indices, offsets, _bound_rows(ray.tmin, batch),
              _bound_rows(ray.tmax, batch), geometric)
    if torch.is_grad_enabled() and (rows[0].requires_grad or rows[1].requires_grad or vertices.requires_grad):
        out = _FusedClosest.apply(*inputs)
    else:  # nothing to differentiate: the same outputs without autograd.Function's bookkeeping (~30-50 us)
        out = _closest_outputs(*inputs)[0]
    return _record(out, global_prim_id, geometric, flags)


def intersect_placed(ray, batch: torch.Size, global_prim_id: torch.Tensor, vertices: torch.Tensor, state,
                     world: torch.Tensor | None, flags: RayFlags) -> dict[str, torch.Tensor]:
    """:func:`intersect_fused` for instances and transformed meshes, forward only (no gradient).

    ``world``: (S, 4, 4) float64 placement per shape (``LiveState.world()``), or ``None``
    when no shape has a transform. The corners are placed in float64 and evaluated as
    the op-by-op path does (``_geometry.gather``, ``_intersect.evaluate``).
    """
    offsets, face_row = state.int32_tables
    o, d = _ray_rows(ray, batch)
    n = global_prim_id.shape[0]
    device = global_prim_id.device
    geometric = bool(flags & (RayFlags.Geometric | RayFlags.ShadingN | RayFlags.UV))
    t = torch.empty(n, dtype=torch.float32, device=device)
    vec = [torch.empty((n, 3), dtype=torch.float32, device=device) for _ in range(3)] if geometric else []
    shape_id = torch.empty(n, dtype=torch.int32, device=device)
    prim_id = torch.empty(n, dtype=torch.int32, device=device)
    outputs = [_convert.scalar_view(t), *([_convert.vec3_view(x) for x in vec] or [None] * 3),
               _convert.scalar_view(shape_id), _convert.scalar_view(prim_id)]
    placement = None
    if world is not None:
        import warp as wp  # noqa: PLC0415

        placement = wp.from_torch(_convert.primal(world).to(torch.float64).contiguous(), dtype=wp.mat44d)
    engine.closest_fields(
        _convert.vec3_view(o.detach()), _convert.vec3_view(d.detach()), _convert.vec3_view(vertices.detach()),
        _convert.scalar_view(state.indices), _convert.scalar_view(offsets),
        _bound_view(_bound_rows(ray.tmin, batch)), _bound_view(_bound_rows(ray.tmax, batch)),
        _convert.scalar_view(global_prim_id), outputs, _convert.current_stream(device),
        face_row=_convert.scalar_view(face_row), world=placement,
    )
    return _record((t, *vec, shape_id, prim_id), global_prim_id, geometric, flags)


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
    rows = [_rows(o, batch), _rows(d, batch)]
    t, p, geo_n, barycentric = _FusedEvaluate.apply(rows[0], rows[1], vertices.contiguous(), global_prim_id, indices)
    return {"t": t, "p": p, "geo_n": geo_n, "n": geo_n, "barycentric": barycentric, "uv": barycentric[:, 1:]}
