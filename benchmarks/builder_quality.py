"""Triangle-BVH quality by builder, device-independent (issue 18, "build"): SAH cost and
the inner nodes visited / triangles tested per closest-hit ray.

Trees (all over the same padded triangle boxes of ``rayd.engine.TriangleScene``):

- ``sah``: Warp's host SAH builder, leaf 1 (rayd's default tree);
- ``ploc[:rR][:lL]``: rayd's PLOC (``rayd.engine.ploc``), radius R (default ``ploc.RADIUS``), leaves of
  at most L triangles by SAH (default ``ploc.MAX_LEAF``), ``:cC``: C_I = C / 10 (C_T = 1);
- ``lbvh30`` / ``lbvh63``: Karras 2012 LBVH, one triangle per leaf, over 30-bit per-axis
  (what Warp's CUDA ``"lbvh"`` builder uses) or 63-bit cubic Morton keys of the box
  centres; its boxes are computed here on the host (a reference tree, not a builder).

The SAH cost is ``C_T sum_inner A(n) / A(root) + C_I sum_leaves |n| A(n) / A(root)`` with
unit costs. The counts come from one Warp kernel that walks each tree near child first
(as ``pair_walk``: both children's slabs tested per inner node, the nearer entered
first, boxes beyond the current hit skipped) with a float32 Moller-Trumbore test; they
measure the tree, not rayd's kernels. Builds and walks run on ``--device`` (CPU here).

Usage::

    python benchmarks/builder_quality.py --size full --rays 65536      # terrain 2M, sphere 1M
    python benchmarks/builder_quality.py --size small --trees sah,ploc,ploc:l4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine import edge_lbvh, ploc, triangles  # noqa: E402

DEFAULTS = (ploc.RADIUS, ploc.MAX_LEAF)  # what ``ploc`` alone means
from rayd.engine.bvh_nodes import BvhNodes  # noqa: E402
from rayd.engine.morton import BoxKeys, sorted_box_keys  # noqa: E402

from benchmarks import workloads  # noqa: E402

wp.config.quiet = True
INF = wp.constant(float("inf"))


@wp.func
def _slab(o: wp.vec3, inv_d: wp.vec3, lo: wp.vec4, hi: wp.vec4, reach: float) -> float:
    t0 = wp.cw_mul(wp.vec3(lo[0], lo[1], lo[2]) - o, inv_d)
    t1 = wp.cw_mul(wp.vec3(hi[0], hi[1], hi[2]) - o, inv_d)
    a = wp.min(t0, t1)
    b = wp.max(t0, t1)
    enter = wp.max(wp.max(a[0], a[1]), wp.max(a[2], 0.0))
    leave = wp.min(wp.min(b[0], b[1]), b[2])
    if leave >= enter and enter < reach:
        return enter
    return INF


@wp.func
def _moller(o: wp.vec3, d: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3) -> float:
    e1 = b - a
    e2 = c - a
    p = wp.cross(d, e2)
    det = wp.dot(e1, p)
    if det == 0.0:
        return INF
    inv = 1.0 / det
    s = o - a
    u = wp.dot(s, p) * inv
    q = wp.cross(s, e1)
    v = wp.dot(d, q) * inv
    t = wp.dot(e2, q) * inv
    if u < 0.0 or v < 0.0 or u + v > 1.0 or t <= 0.0:
        return INF
    return t


@wp.kernel
def _count_kernel(lowers: wp.array(dtype=wp.vec4), uppers: wp.array(dtype=wp.vec4),
                  lower_index: wp.array(dtype=wp.vec4i), upper_index: wp.array(dtype=wp.vec4i),
                  primitives: wp.array(dtype=wp.int32), points: wp.array(dtype=wp.vec3),
                  indices: wp.array(dtype=wp.int32), root: int, o: wp.array(dtype=wp.vec3),
                  d: wp.array(dtype=wp.vec3), visits: wp.array(dtype=wp.int32), tests: wp.array(dtype=wp.int32),
                  t_out: wp.array(dtype=float)):
    r = wp.tid()
    ro = o[r]
    rd = d[r]
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), rd + wp.vec3(1.0e-30, 1.0e-30, 1.0e-30))
    best = float(INF)
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    node = root
    nv = int(0)
    nt = int(0)
    while True:
        low = lower_index[node][3]
        if low >= 0:
            nv += 1
            a = low
            b = upper_index[node][3] & 0x7FFFFFFF
            ta = _slab(ro, inv_d, lowers[a], uppers[a], best)
            tb = _slab(ro, inv_d, lowers[b], uppers[b], best)
            if ta < INF or tb < INF:
                if ta < INF and tb < INF:
                    if tb < ta:
                        stack[count] = a
                        node = b
                    else:
                        stack[count] = b
                        node = a
                    count += 1
                elif ta < INF:
                    node = a
                else:
                    node = b
                continue
        else:
            first = low & 0x7FFFFFFF
            end = upper_index[node][3] & 0x7FFFFFFF
            for s in range(first, end):
                f = primitives[s]
                nt += 1
                t = _moller(ro, rd, points[indices[3 * f]], points[indices[3 * f + 1]], points[indices[3 * f + 2]])
                best = wp.min(best, t)
        if count == 0:
            break
        count -= 1
        node = stack[count]
    visits[r] = nv
    tests[r] = nt
    t_out[r] = best


def sah_cost(nodes: BvhNodes) -> tuple[float, int, float]:
    """(unit-cost SAH cost, node count, mean triangles per leaf) of a tree in Warp's layout (reachable nodes only)."""
    t = ploc.tree_arrays(nodes)
    ext = np.maximum(t["hi"] - t["lo"], 0.0).astype(np.float64)
    area = ext[:, 0] * ext[:, 1] + ext[:, 1] * ext[:, 2] + ext[:, 2] * ext[:, 0]
    seen = np.zeros(len(area), bool)
    front = np.array([t["root"]])
    while front.size:
        seen[front] = True
        inner = front[~t["leaf"][front]]
        front = np.concatenate([t["left"][inner], t["right"][inner]])
    leaf = t["leaf"] & seen
    inner = ~t["leaf"] & seen
    count = (t["right"] - t["left"])[leaf]
    cost = area[inner].sum() + (area[leaf] * count).sum()
    return float(cost / area[t["root"]]), int(seen.sum()), float(count.mean())


class _Host:
    """A tree made here (keeps its arrays alive)."""


def lbvh(tri: triangles.TriangleScene, key_bits: int) -> BvhNodes:
    """Karras LBVH over the triangle boxes (boxes computed on the host), in Warp's layout."""
    n = tri.num_triangles
    dev = tri.device
    keys = BoxKeys(n, dev)
    sorted_box_keys(tri.lowers, tri.uppers, keys, key_bits=key_bits, cubic=key_bits > 30)
    order = keys.order[:n]
    left = wp.zeros(n - 1, dtype=wp.int32, device=dev)
    right = wp.zeros(n - 1, dtype=wp.int32, device=dev)
    first = wp.zeros(n - 1, dtype=wp.int32, device=dev)
    size = wp.zeros(n - 1, dtype=wp.int32, device=dev)
    parent = wp.full(2 * n - 1, -1, dtype=wp.int32, device=dev)
    wp.launch(edge_lbvh._edges_hierarchy_kernel, n - 1, [keys.codes, n], [left, right, parent, first, size], device=dev)
    left, right, size, order = left.numpy(), right.numpy(), size.numpy(), order.numpy()
    lo = np.empty((2 * n - 1, 3), np.float32)
    hi = np.empty((2 * n - 1, 3), np.float32)
    lo[n - 1:] = tri.lowers.numpy()[order]
    hi[n - 1:] = tri.uppers.numpy()[order]
    by_size = np.argsort(size, kind="stable")
    bounds = np.flatnonzero(np.diff(size[by_size])) + 1
    for group in np.split(by_size, bounds):  # children are smaller than their parent
        lo[group] = np.minimum(lo[left[group]], lo[right[group]])
        hi[group] = np.maximum(hi[left[group]], hi[right[group]])
    li = np.concatenate([left, np.arange(n) | np.int32(-2 ** 31)]).astype(np.int32)
    ui = np.concatenate([right, (np.arange(n) + 1) | np.int32(-2 ** 31)]).astype(np.int32)
    low = np.concatenate([lo, li.view(np.float32)[:, None]], 1)
    up = np.concatenate([hi, ui.view(np.float32)[:, None]], 1)
    keep = _Host()
    keep.low = wp.array(low, dtype=wp.vec4, device=dev)
    keep.up = wp.array(up, dtype=wp.vec4, device=dev)
    keep.prims = wp.array(order.astype(np.int32), dtype=wp.int32, device=dev)
    nodes = BvhNodes(keep.low, keep.up, wp.array(ptr=keep.low.ptr, dtype=wp.vec4i, shape=keep.low.shape, device=dev),
                     wp.array(ptr=keep.up.ptr, dtype=wp.vec4i, shape=keep.up.shape, device=dev), keep.prims, 0, 0)
    nodes._keep = keep
    return nodes


def build(spec: str, points: wp.array, indices: wp.array) -> tuple[BvhNodes, dict, object]:
    """The tree named ``spec`` and what its build reported."""
    name, *opts = spec.split(":")
    t0 = time.perf_counter()
    if name in ("sah", "ploc"):
        kw = {o[0]: int(o[1:]) for o in opts}
        was_r, was_l = ploc.RADIUS, ploc.MAX_LEAF
        ploc.RADIUS, ploc.MAX_LEAF = kw.get("r", DEFAULTS[0]), kw.get("l", DEFAULTS[1])
        ploc.COSTS = (1.0, kw.get("c", 10) / 10.0)
        try:
            tri = triangles.TriangleScene(points, indices, bvh_constructor=name, layout="warp")
        finally:
            ploc.RADIUS, ploc.MAX_LEAF, ploc.COSTS = was_r, was_l, (1.0, 1.0)
        info = {"build_s": time.perf_counter() - t0}
        if tri.tree is not None:
            info.update(iterations=tri.tree.iterations, launches=tri.tree.launches)
        return tri.nodes, info, tri
    tri = triangles.TriangleScene(points, indices, bvh_constructor="median", layout="warp")  # for its boxes
    nodes = lbvh(tri, 30 if name == "lbvh30" else 63)
    return nodes, {"build_s": time.perf_counter() - t0}, (tri, nodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", choices=("small", "full"), default="small",
                    help="full: terrain 2M (C1024) and sphere 1M; small: terrain 131k (C256), sphere 65k")
    ap.add_argument("--rays", type=int, default=65536, help="rays counted per workload (a fixed random subset)")
    ap.add_argument("--trees", default="sah,ploc,ploc:r2:l1,ploc:r2:l2,ploc:r4:l4,ploc:r16:l1,lbvh30,lbvh63")
    ap.add_argument("--json", default=None, help="append one JSON line per (workload, tree)")
    ap.add_argument("--scan", default=None, help="a scan of --mesh-dir instead (e.g. dragon_871k: bsphere rays)")
    ap.add_argument("--mesh-dir", default="/work/meshes")
    args = ap.parse_args()
    full = args.size == "full"
    loads = [workloads.terrain(1024, 2048) if full else workloads.terrain(256, 512),
             workloads.sphere(513, 1024, 1 << 22) if full else workloads.sphere(129, 256, 1 << 18)]
    if args.scan:
        loads = [workloads.scan_bsphere(args.scan, 1 << 20, args.mesh_dir),
                 workloads.scan_camera(args.scan, 1024, 1024, args.mesh_dir)]
    for w in loads:
        dev = args.device
        points = wp.array(w.vertices, dtype=wp.vec3, device=dev)
        indices = wp.array(w.faces.ravel(), dtype=wp.int32, device=dev)
        pick = np.random.default_rng(0).choice(w.num_rays, min(args.rays, w.num_rays), replace=False)
        o = wp.array(w.o[pick], dtype=wp.vec3, device=dev)
        d = wp.array(w.d[pick], dtype=wp.vec3, device=dev)
        ref_t = None
        for spec in args.trees.split(","):
            nodes, info, keep = build(spec, points, indices)
            cost, num_nodes, per_leaf = sah_cost(nodes)
            m = len(pick)
            visits = wp.empty(m, dtype=wp.int32, device=dev)
            tests = wp.empty(m, dtype=wp.int32, device=dev)
            t = wp.empty(m, dtype=float, device=dev)
            wp.launch(_count_kernel, m, [nodes.lowers, nodes.uppers, nodes.lower_index, nodes.upper_index,
                                         nodes.primitives, points, indices, nodes.root, o, d], [visits, tests, t],
                      device=dev)
            t = t.numpy()
            ref_t = t if ref_t is None else ref_t
            row = {"workload": w.name, "triangles": w.num_triangles, "tree": spec, "sah_cost": round(cost, 3),
                   "nodes": num_nodes, "tris_per_leaf": round(per_leaf, 3),
                   "visits_per_ray": round(float(visits.numpy().mean()), 3),
                   "tests_per_ray": round(float(tests.numpy().mean()), 3),
                   "same_t": float(np.mean(t == ref_t)), "rays_counted": m, "device": dev,
                   **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in info.items()}}
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
            del keep


if __name__ == "__main__":
    main()
