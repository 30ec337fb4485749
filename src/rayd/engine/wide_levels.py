"""The top-down levels of ``wide_nodes.WideNodes``' collapse in one launch per level (issue 18, "build").

``WideNodes`` makes the wide nodes level by level. Before, each level took two launches (the level's
nodes, then a one-thread kernel setting the next level's bounds) of one thread per node the level
could hold, ``min(4^L, pair nodes)``: on the 2 M-triangle terrain 26 levels (52 launches), most of them
past the tree's depth with about a million idle threads each. Here ``wide_nodes._collapse_level_kernel``
does a level in one launch: the last of its threads to finish (a counter, ``level[2]``) sets the next level's
bounds after every thread's nodes and counter bumps are visible (a fence before the count, as the
fused refit's climb does). On CUDA the launch has at most :data:`LEVEL_THREADS` threads, each taking
every so many nodes, so every level is the same launch, recorded once and replayed; on the CPU it
keeps one thread per node of the level, so the nodes are numbered exactly as with two launches (on
CUDA the numbering follows the atomic counter of ``wide_nodes._collapse_node`` either way).
"""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.runtime import launch_once


#: 1 (default): one launch per level; 0: two ``wp.launch`` a level (the collapse before this module).
#: The same wide tree. ``RAYD_WIDE_ONE_LAUNCH`` 
#: (session 20, one H200, ``benchmarks/results/h200-session20/``: with the other build switches, ``build()``
#: terrain 2 M 12.39 -> 10.37 ms, sphere 1 M 13.37 -> 11.33 ms, medians of 10, the same tree).
ONE_LAUNCH = int(os.environ.get("RAYD_WIDE_ONE_LAUNCH", "1"))

#: Most threads of a level's launch on CUDA (each takes every ``LEVEL_THREADS``-th node of the level).
#: ``RAYD_WIDE_LEVEL_THREADS``.
LEVEL_THREADS = int(os.environ.get("RAYD_WIDE_LEVEL_THREADS", "65536"))

_FIXED_ON_CPU = False  # tests: the CUDA launches (LEVEL_THREADS threads, strided) on the CPU too


def collapse_levels(kernels: tuple, args: list, level: wp.array, counter: wp.array, inner: int, depth: int,
                    device, stream: wp.Stream | None) -> None:
    """Launch the ``max(1, depth)`` levels of the collapse (nothing is read back).

    Args:
        kernels: ``wide_nodes``' ``(_collapse_level_kernel, _collapse_kernel, _next_level_kernel)``.
        args: ``_collapse_kernel``'s arguments: pair boxes and links, costs, ``sah``, ``level`` (int32 (3,):
            first and end node of the level, threads done), ``counter`` (int32 (2,): nodes made, deepest
            stack), ``src``, ``need``, the wide rows and links.
        level, counter: those two arrays; inner: pair nodes (the most wide nodes); depth: levels to launch.
        device: the Warp device; stream: the stream (``None``: the device's current one).
    """
    one_level, collapse, next_level = kernels
    width = 1
    for _ in range(max(1, depth)):
        dim = min(width, inner)
        if not ONE_LAUNCH:
            wp.launch(collapse, dim, args, device=device, stream=stream)
            wp.launch(next_level, 1, [level, counter], device=device, stream=stream)
        else:
            dim = dim if device.is_cpu and not _FIXED_ON_CPU else min(inner, LEVEL_THREADS)
            # one command for every level (and every build): re-bound to this build's arrays at its first level
            launch_once(one_level, dim, [*args, dim], device, stream)
        width *= 4
