"""Fused optimiser steps made visible to rayd's change tracking.

rayd.torch sees in-place changes of registered vertices and matrices through autograd's
version counter (``Tensor._version``; DESIGN.md, "in-place changes"). PyTorch's fused
optimiser kernels (``torch.optim.Adam``, ``AdamW``, ``SGD``, ``Adagrad`` with
``fused=True``: ``torch._fused_adam_`` and friends) write the parameters in place without
bumping that counter, so a scene would keep tracing its old BVH against moved vertices.
One global optimiser step post-hook (``torch.optim.optimizer.register_optimizer_step_post_hook``)
bumps the counter of every parameter a fused step has just written (those of a
``fused=True`` group with a gradient: the fused kernels skip the others), as the unfused
steps' in-place ops do themselves. Nothing changes for unfused optimisers.
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


def _bump_fused(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    """After ``optimizer.step()``: bump the version of each parameter a fused group changed."""
    for group in optimizer.param_groups:
        if group.get("fused"):
            changed = [p for p in group["params"] if p.grad is not None]
            if changed:
                torch.autograd.graph.increment_version(changed)


HANDLE = register_optimizer_step_post_hook(_bump_fused)
