"""Fast path of ``Scene.trace_reflections``: every field in one fused kernel, backward by the op-by-op formulas.

Used for float32 rays and vertices on plain meshes (no transforms or instances),
outside forward-mode AD, functorch transforms and ``torch.compile`` (those take the
op-by-op path of :func:`rayd.torch._chain.evaluate`). The forward is
:func:`rayd.engine.evaluate_chain`: the formulas of ``_chain.evaluate`` in one launch
for all slots, instead of some hundred torch ops over ``[N, B, ...]`` tensors. The
backward re-evaluates the fixed chain with ``_chain.evaluate`` (the slots the kernel
counted) and differentiates it, so gradients are those of the op-by-op path; with
``create_graph=True`` they are themselves differentiable.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad

from rayd.torch._convert import serialised
from rayd import engine
from rayd.torch import _convert

_SCALARS: dict[tuple, torch.Tensor] = {}
_FIELDS = ("t", "p", "geo_n", "d_out", "image_source", "path_length")


def usable(state, origin: torch.Tensor, direction: torch.Tensor) -> bool:
    """True if the fused path may run: float32 plain meshes, float32 rays, no AD transform active."""
    if torch.compiler.is_compiling() or forward_ad._current_level >= 0 or _convert.transforms_active():
        return False
    if not state.plain or state.has_matrix():
        return False
    meshes = [s.vertices for s in state.core.table.meshes]
    return all(t.dtype == torch.float32 and not _convert.is_wrapped(t) for t in (origin, direction, *meshes))


def _bound(bound, batch: torch.Size, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A bound of segment 0 as the float64 value the float32 ``t`` is compared with (as torch compares).

    A float or a one-element tensor is a scalar of the comparison (rounded to float32);
    a tensor of the batch shape compares in its promoted dtype.
    """
    if not isinstance(bound, torch.Tensor):
        key = (float(bound), device, dtype)
        found = _SCALARS.get(key)
        if found is None:  # cached: a float bound makes no op per query
            if len(_SCALARS) > 64:
                _SCALARS.clear()
            found = _SCALARS[key] = torch.full((1,), bound, dtype=torch.float64, device=device).to(dtype).double()
        return found
    bound = _convert.primal(bound).detach()
    if bound.numel() == 1:
        return bound.reshape(1).to(dtype).double()
    return bound.expand(batch).reshape(-1).to(torch.promote_types(bound.dtype, dtype)).double().contiguous()


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.detach().contiguous()


class _FusedChain(torch.autograd.Function):
    """(origin, direction, vertices) -> the chain's float fields, for the winners ``ids``."""

    @staticmethod
    def forward(ctx, origin, direction, vertices, ids, indices, lo, hi, info):  # noqa: D102
        n, bounces = ids.shape[:2]
        device = ids.device
        f32 = torch.float32
        out_ids = torch.empty_like(ids)
        t = torch.empty((n, bounces), dtype=f32, device=device)
        vec = [torch.empty((n, bounces, 3), dtype=f32, device=device) for _ in range(4)]
        count = torch.empty(n, dtype=torch.int32, device=device)
        length = torch.empty(n, dtype=f32, device=device)
        engine.evaluate_chain(
            _convert.vec3_view(_rows(origin)), _convert.vec3_view(_rows(direction)), _convert.scalar_view(lo),
            _convert.scalar_view(hi), _convert.vec3_view(_rows(vertices)), _convert.scalar_view(indices),
            _convert.scalar_view(ids),
            [_convert.scalar_view(out_ids), _convert.scalar_view(t), *(_convert.vec3_view(x) for x in vec),
             _convert.scalar_view(count), _convert.scalar_view(length)],
            _convert.current_stream(device),
        )
        _convert.save_for_backward(ctx, origin, direction, vertices, out_ids)
        ctx.info = info
        ctx.mark_non_differentiable(out_ids, count)
        return t, *vec, length, out_ids, count

    @staticmethod
    @serialised
    def backward(ctx, *grads):  # noqa: D102
        origin, direction, vertices, ids = ctx.saved_tensors
        scene, tmin, tmax, batch, evaluate = ctx.info
        needs = ctx.needs_input_grad[:3]
        create = torch.is_grad_enabled()  # create_graph=True: the gradient must be differentiable
        with torch.enable_grad():
            # Aliases: the partial derivatives of this evaluation alone (an origin that
            # depends on the vertices must not carry that path twice).
            inputs = [x.view_as(x) if create else x.detach().requires_grad_(need)
                      for x, need in zip((origin, direction, vertices), needs)]
            fields = evaluate(scene, ids, inputs[0], inputs[1], tmin, tmax, batch, torch.float32, inputs[2], None,
                              counted=ids[..., 0] >= 0)
            outputs, wanted_grads = [], []
            for name, grad in zip(_FIELDS, grads[:6]):
                if grad is not None and fields[name].requires_grad:
                    outputs.append(fields[name])
                    wanted_grads.append(grad)
            wanted = [x for x, need in zip(inputs, needs) if need]
            found = (list(torch.autograd.grad(outputs, wanted, wanted_grads, create_graph=create, allow_unused=True))
                     if outputs and wanted else [])
        result = []
        for x, need in zip(inputs, needs):
            if not need:
                result.append(None)
                continue
            g = found.pop(0) if found else None
            result.append(torch.zeros_like(x) if g is None else g)
        return (*result, None, None, None, None, None)


def chain(scene, ids: torch.Tensor, origin: torch.Tensor, direction: torch.Tensor, tmin, tmax,
          batch: torch.Size, evaluate) -> dict[str, torch.Tensor]:
    """The fields of a ReflectionChain ((n, B, ...) tensors) by the fused kernel (see the module docstring).

    ``evaluate``: the op-by-op evaluation (``rayd.torch._chain.evaluate``) the backward differentiates.
    """
    state = scene._state
    device = scene._device
    vertices = state.live(torch.float32).vertices
    lo = _bound(tmin, batch, device, torch.float32)
    hi = _bound(tmax, batch, device, torch.float32)
    t, p, geo_n, d_out, image, length, out_ids, count = _FusedChain.apply(
        origin, direction, vertices, ids, state.indices, lo, hi, (scene, tmin, tmax, batch, evaluate))
    return {"t": t, "p": p, "geo_n": geo_n, "d_out": d_out, "image_source": image, "prim_id": out_ids[..., 2],
            "shape_id": out_ids[..., 1], "global_prim_id": out_ids[..., 0], "num_bounces": count,
            "path_length": length}
