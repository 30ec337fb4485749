"""Where an edge refit's time goes (issue 11): each launch of the ``wide*`` refits timed on its own.

For the issue-size terrain 2 M and sphere 1 M edge sets (``benchmarks/edges.py`` workloads), builds the
CUDA default tree ``ploc+q:8`` with the ``wide3`` refit (:mod:`rayd.engine.edge_refit_wide`) and times, as
``--reps`` back-to-back launches between two timing events (CUDA; wall clock after a synchronisation on the
CPU), per launch:

* ``slots``: ``tree_refit._tree_slots_kernel`` (a thread per slot: its edge's endpoints and id);
* ``climb``: the wide climb writing float boxes (``wide3``'s kernel, 100 registers on sm_90),
  ``climb lean`` (``wide3l``'s, compiled without the quantisation and slab code), ``climb gather``
  (``wideg``'s: the leaf threads gather their slots themselves, no slots launch before it);
* ``quantise``: ``_compress_cbox_kernel`` (a thread per wide node);
* ``refit <mode>``: the whole ``EdgeBvh.refit`` of each mode of ``--modes`` (the sum, with the launch gaps).

Every launch repeats the same work (the climb resets its counters), so the figures are per refit.

Usage::

    python3 benchmarks/edge_refit_parts.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine import edge_refit_wide as rw  # noqa: E402
from rayd.engine.edges import EdgeBvh  # noqa: E402
from rayd.engine.tree_refit import _tree_slots_kernel  # noqa: E402

from benchmarks.edge_trees import unique_edges  # noqa: E402
from benchmarks.edges import workloads  # noqa: E402


def per_launch_ms(device, launch, reps: int) -> float:
    """Milliseconds per call of ``launch`` over ``reps`` back-to-back calls (median of 3 such batches)."""
    launch()
    wp.synchronize_device(device)
    out = []
    for _ in range(3):
        if device.is_cuda:
            start, end = wp.Event(device, enable_timing=True), wp.Event(device, enable_timing=True)
            wp.record_event(start)
            for _ in range(reps):
                launch()
            wp.record_event(end)
            wp.synchronize_event(end)
            out.append(wp.get_event_elapsed_time(start, end) / reps)
        else:
            begin = time.perf_counter()
            for _ in range(reps):
                launch()
            wp.synchronize_device(device)
            out.append((time.perf_counter() - begin) * 1e3 / reps)
    return statistics.median(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=["full", "cpu"], default="full")
    parser.add_argument("--only", nargs="*", default=["terrain_2M_1M", "sphere_1M_1M"])
    parser.add_argument("--modes", nargs="*", default=["split", "wide3", "wide3l", "wideg"])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    wp.config.quiet = True
    device = wp.get_device("cuda:0" if args.device == "cuda" else args.device)
    print(f"# edge refit, per launch (ms), device {device}, size {args.size}, {args.reps} back-to-back launches")
    for name, spec in workloads(args.size).items():
        if name not in args.only:
            continue
        vertices, faces = spec["mesh"]()
        ends = unique_edges(faces)
        pts = wp.array(vertices, dtype=wp.vec3, device=device)
        ev = wp.array(ends, dtype=wp.vec2i, device=device)
        mask = wp.array(np.ones(len(ends), np.uint8), dtype=wp.uint8, device=device)
        bvh = EdgeBvh(pts, ev, mask, builder="ploc", leaf_size=8, wide="q", refit="wide3")
        w = bvh._fused
        c = w.compressed
        order, seg, sid = bvh.slot_edge, bvh.seg, bvh.slot_id
        no_slab = w._no_slab

        def climb(gather8: bool, lean: bool):
            kernel = rw._CLIMB_KERNELS[(gather8, lean)]
            return lambda: wp.launch(kernel, dim=w.num_leaves, inputs=[pts, ev, mask, order, w.wleaf, w.meta, c.wlinks,
                                                                       int(c.seg_boxes)],
                                     outputs=[w.counters, w.cbox, seg, sid, bvh.root_box, c.q, c.segq, int(gather8), 0,
                                              *no_slab, 0], device=device)

        parts = {
            "slots": lambda: wp.launch(_tree_slots_kernel, dim=order.shape[0], inputs=[pts, ev, mask, order],
                                       outputs=[seg, sid], device=device),
            "climb": climb(False, False),
            "climb lean": climb(False, True),
            "climb gather": climb(True, True),
            "quantise": lambda: wp.launch(rw._compress_cbox_kernel, c.count, [w.cbox, c.wlinks, seg, sid,
                                                                              int(c.seg_boxes)], [c.q, c.segq],
                                          device=device),
        }
        row = [f"{k} {per_launch_ms(device, f, args.reps):.4f}" for k, f in parts.items()]
        for mode in args.modes:
            probe = EdgeBvh(pts, ev, mask, builder="ploc", leaf_size=8, wide="q", refit=mode)
            row.append(f"refit {mode} {per_launch_ms(device, probe.refit, args.reps):.4f}")
            del probe
        print(f"{name:15s} edges {len(ends):8d} leaves {w.num_leaves:7d} wide nodes {c.count:7d}: " + ", ".join(row),
              flush=True)


if __name__ == "__main__":
    main()
