"""What one refit of the flat BVH writes and how far it climbs: the fused refit of every structure
(``RAYD_TRI_REFIT=full``) against the climb over the 4-wide nodes (``wide``), on one tree (issue 18,
"update", 17th session). Counts from the tree's arrays (bytes the kernels store, atomics, levels), and
the CPU time of both refits interleaved (Warp's CPU kernels run on one thread: a proxy only).

    PYTHONPATH=src python3 benchmarks/trirefit_census.py [--cells 512] [--builder ploc] [--repeats 9]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from benchmarks import workloads  # noqa: E402
from rayd.engine import triangles, wide_refit  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--cells", type=int, default=512, help="terrain of 2 cells^2 triangles")
ap.add_argument("--sphere", action="store_true", help="the bumpy sphere of cells rings, 2 cells segments instead")
ap.add_argument("--builder", default="ploc")
ap.add_argument("--repeats", type=int, default=9)
a = ap.parse_args()
wp.config.quiet = True
if a.sphere:
    v, f = workloads.bumpy_sphere_mesh(a.cells, 2 * a.cells)
else:
    v, f = workloads.terrain_mesh(a.cells)
t0 = time.perf_counter()
tri = triangles.TriangleScene(wp.array(v, dtype=wp.vec3, device="cpu"), wp.array(f.ravel(), dtype=wp.int32, device="cpu"),
                              bvh_constructor=a.builder, layout="wide4")
print(f"{'sphere' if a.sphere else 'terrain'} {len(f):,d} tris, {a.builder} + wide4, built in {time.perf_counter() - t0:.1f} s")
assert tri.wide is not None
wide_refit.set_tri_refit("wide")
tri.refit()  # makes the WideRefit
F = tri.num_triangles
low = tri.nodes.lower_index.numpy()[:, 3]
parents = tri.fused.parents.numpy()
leaf = low < 0
L = int(leaf.sum())
inner = len(low) - L
W = tri.wide.count


def depth_of(parent: np.ndarray, start: np.ndarray) -> np.ndarray:
    d = np.zeros(len(start), np.int64)
    cur = start.copy()
    while True:
        up = parent[cur]
        live = up >= 0
        if not live.any():
            return d
        d[live] += 1
        cur = np.where(live, up, cur)


bin_depth = depth_of(parents, np.flatnonzero(leaf))
up = tri._wide_refits['leaf'].up.numpy()
wparent = (up >> 2) - 1
wpar_node = np.where(wparent >= 0, wparent >> 2, -1)
leaves = tri._wide_refits['leaf'].items.numpy()
leaves = leaves[leaves >= 0]
wide_depth = depth_of(wpar_node, leaves >> 2) + 1  # the leaf's wide node, then its ancestors
slots = tri.wide.slots.numpy()
wide_slot_writes = int((slots >= 0).sum())
# bytes stored (requested by the code; a box write is 6 x 4-B scalars)
full = dict(tris=48 * F, items=24 * F, leaf_boxes=24 * L, inner_boxes=24 * inner, pair_nodes=48 * inner,
            wide_slots=24 * wide_slot_writes, counters=4 * inner)
wide = dict(tris=48 * F, leaf_slots=24 * L, inner_slots=24 * (W - 1), counters=4 * W)
full_atomics, wide_atomics = 2 * inner, L + (W - 1)
links = tri.wide.links.numpy().reshape(-1, 8, 4)[:W]
used = links[:, 7] >= 0
has_leaf = (used & (links[:, 6] < 0)).any(1)
all_leaf = has_leaf & ~(used & (links[:, 6] >= 0)).any(1)
node_atomics = int((has_leaf & ~all_leaf).sum()) + (W - 1)  # one per mixed node's thread, one per inner child
print(f"leaves {L:,d} ({F / L:.2f} tris each), binary inner nodes {inner:,d}, wide nodes {W:,d}")
print(f"levels climbed per leaf: binary mean {bin_depth.mean():.1f} max {bin_depth.max()}, "
      f"wide mean {wide_depth.mean():.1f} max {wide_depth.max()}")
print(f"full: stores {sum(full.values()) / F:.1f} B/tri ({', '.join(f'{k} {x / F:.1f}' for k, x in full.items())}), "
      f"atomics {full_atomics / F:.2f}/tri (+ a fence each)")
print(f"wide: stores {sum(wide.values()) / F:.1f} B/tri ({', '.join(f'{k} {x / F:.1f}' for k, x in wide.items())}), "
      f"atomics {wide_atomics / F:.2f}/tri (+ a fence each)")
print(f"wide_node: {int(has_leaf.sum()):,d} threads ({F / has_leaf.sum():.1f} tris each; {int(all_leaf.sum()):,d} nodes "
      f"of leaves only), atomics {node_atomics / F:.2f}/tri, stores as wide")
# CPU time, interleaved (one thread)
times = {"full": [], "wide": [], "wide_node": [], "wide_levels": []}
for i in range(a.repeats):
    for m in ("full", "wide", "wide_node", "wide_levels"):
        wide_refit.set_tri_refit(m)
        t0 = time.perf_counter()
        tri.refit()
        times[m].append((time.perf_counter() - t0) * 1e3)
        if m != "full":
            t0 = time.perf_counter()
            tri.complete()
            times.setdefault("complete", []).append((time.perf_counter() - t0) * 1e3)
med = {m: statistics.median(x) for m, x in times.items()}
print(f"CPU refit ms (median of {a.repeats}, interleaved): full {med['full']:.2f}  wide {med['wide']:.2f} "
      f"({med['wide'] / med['full']:.3f})  wide_node {med['wide_node']:.2f} ({med['wide_node'] / med['full']:.3f})  "
      f"wide_levels {med['wide_levels']:.2f} ({med['wide_levels'] / med['full']:.3f}, "
      f"{len(tri._wide_refits['levels'].levels) + 1} launches)  complete {med['complete']:.2f}")
