"""Session 21, helper breakit21a: zero directions in a large batch are misses without a warning.

The CPU Embree path samples 128 packets of 16 rays to decide whether to sort a batch of at
least ``SORT_MIN_RAYS`` rays; a packet of only zero (or otherwise unnormalisable) directions
made ``np.nanmin`` warn "All-NaN slice encountered" to the caller, an exception under
``-W error`` (``specular_paths`` hits it with the zero segments of its invalid paths).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

import rayd.torch as rt
from rayd.engine.cpu_embree import SORT_MIN_RAYS
from reference import icosphere


def test_zero_directions_in_a_large_batch_are_silent_misses():
    v, f = icosphere(2)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(f)))
    scene.build()
    n = 4 * SORT_MIN_RAYS
    gen = torch.Generator().manual_seed(0)
    d = torch.randn(n, 3, generator=gen)
    d[: n // 2] = 0.0  # e.g. rays the caller masked out by zeroing them
    o = torch.full((n, 3), 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):  # the first query and the warm (Embree) ones
            hit = scene.intersect(rt.Ray(o, d))
            blocked = scene.shadow_test(rt.Ray(o, d))
    # from inside the unit sphere every real direction hits once, zero directions miss
    assert not bool(hit.is_valid()[: n // 2].any()) and bool(hit.is_valid()[n // 2:].all())
    assert torch.equal(blocked, hit.is_valid())
    np.testing.assert_allclose(hit.p[n // 2:].norm(dim=-1).numpy(), 1.0, atol=2e-2)
