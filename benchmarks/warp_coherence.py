"""What a closest-hit walk costs per GPU warp, counted on the CPU (issue 18, "build").

``benchmarks/builder_quality.py`` counts work per ray over a random subset of rays: node
visits and triangle tests. A GPU runs 32 consecutive rays in lock step, so it also pays
for what those counts do not see. This script walks rayd's child-pair nodes
(``pair_nodes.PairNodes``: the nodes, refs and leaf-ordered corners the search kernel
reads, at their real offsets) near child first, as ``pair_walk._walk_flat_pairs`` does
(float32 slabs, a float32 Moller-Trumbore test instead of the watertight one), records
every step of every ray of ``--warps`` blocks of 32 consecutive rays (in the workload's
own ray order), and reports per warp:

- ``steps``: loop iterations of the walk (``max`` over the 32 lanes: what the warp waits
  for; ``mean``: one lane's work) and ``simt``: the iterations the warp executes when
  the inner-node branch and the leaf branch of one iteration are serialised (an
  iteration costs 1 if any lane is at an inner node, plus the most triangles any lane
  at a leaf tests in it, as the leaf loop runs until its longest lane is done);
  ``simt_ww``: the same for a while-while walk (Aila & Laine 2009: each lane runs inner
  nodes until it reaches a leaf; the warp then runs every lane's leaf together: the
  j-th leaf visits of all lanes cost the longest inner run before them plus the largest leaf);
  ``simt_split``: the if-if walk testing one triangle per iteration (a leaf of c triangles is
  c iterations);
- ``node_lines`` / ``tri_lines``: distinct 128-byte lines of pair nodes (64 B each) and
  of leaf corners (48 B per slot) the warp touches (the L1 traffic if nothing is
  shared between warps), and ``lines`` their sum;
- ``depth``: the deepest stack the warp used.

Usage::

    python benchmarks/warp_coherence.py --size full --trees sah,ploc,ploc:l1,ploc:l2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayd.engine import ploc, triangles  # noqa: E402

from benchmarks import workloads  # noqa: E402

wp.config.quiet = True
INF = wp.constant(float("inf"))
CAP = wp.constant(512)  # steps recorded per ray (more: the walk still completes, the excess is counted)


@wp.func
def _slab(o: wp.vec3, inv_d: wp.vec3, lx: float, ly: float, lz: float, hx: float, hy: float, hz: float,
          reach: float) -> float:
    t0x = (lx - o[0]) * inv_d[0]
    t1x = (hx - o[0]) * inv_d[0]
    t0y = (ly - o[1]) * inv_d[1]
    t1y = (hy - o[1]) * inv_d[1]
    t0z = (lz - o[2]) * inv_d[2]
    t1z = (hz - o[2]) * inv_d[2]
    enter = wp.max(wp.max(wp.min(t0x, t1x), wp.min(t0y, t1y)), wp.max(wp.min(t0z, t1z), 0.0))
    leave = wp.min(wp.min(wp.max(t0x, t1x), wp.max(t0y, t1y)), wp.max(t0z, t1z))
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


@wp.func
def _corner(tris: wp.array(dtype=wp.vec4), i: int) -> wp.vec3:
    c = tris[i]
    return wp.vec3(c[0], c[1], c[2])


@wp.kernel
def _trace_kernel(boxes: wp.array(dtype=wp.vec4), links: wp.array(dtype=wp.vec4i), tris: wp.array(dtype=wp.vec4),
                  root: int, rays: wp.array(dtype=wp.int32), o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3),
                  steps: wp.array(dtype=wp.int32), num_steps: wp.array(dtype=wp.int32),
                  max_stack: wp.array(dtype=wp.int32), t_out: wp.array(dtype=float)):
    r = wp.tid()
    ro = o[rays[r]]
    rd = d[rays[r]]
    sd = rd
    for k in range(3):
        if sd[k] == 0.0:
            sd[k] = 1.0e-30
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), sd)
    best = float(INF)
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    deepest = int(0)
    ref = root
    k = int(0)
    while True:
        if k < CAP:
            steps[r * CAP + k] = ref
        k += 1
        if ref >= 0:
            b0 = boxes[4 * ref]
            b1 = boxes[4 * ref + 1]
            b2 = boxes[4 * ref + 2]
            t_left = _slab(ro, inv_d, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], best)
            t_right = _slab(ro, inv_d, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3], best)
            if t_left < INF or t_right < INF:
                lk = links[4 * ref + 3]
                if t_left < INF and t_right < INF:
                    if t_right < t_left:
                        stack[count] = lk[0]
                        ref = lk[1]
                    else:
                        stack[count] = lk[1]
                        ref = lk[0]
                    count += 1
                    deepest = wp.max(deepest, count)
                elif t_left < INF:
                    ref = lk[0]
                else:
                    ref = lk[1]
                continue
        else:
            code = -1 - ref
            first = code >> 3
            for slot in range(first, first + (code & 7) + 1):
                t = _moller(ro, rd, _corner(tris, 3 * slot), _corner(tris, 3 * slot + 1), _corner(tris, 3 * slot + 2))
                best = wp.min(best, t)
        if count == 0:
            break
        count -= 1
        ref = stack[count]
    num_steps[r] = k
    max_stack[r] = deepest
    t_out[r] = best


def warp_costs(steps: np.ndarray, num_steps: np.ndarray, depth: np.ndarray) -> dict:
    """Per-warp figures (see the module docstring) from the recorded steps (R, CAP), R a multiple of 32."""
    cap = steps.shape[1]
    n = np.minimum(num_steps, cap)
    w = steps.reshape(-1, 32, cap)
    nw = n.reshape(-1, 32)
    valid = np.arange(cap)[None, None, :] < nw[:, :, None]
    inner = valid & (w >= 0)
    leaf = valid & (w < 0)
    count = np.where(leaf, ((-1 - w) & 7) + 1, 0)
    simt_inner = inner.any(1).sum(1)
    simt_leaf = count.max(1).sum(1)
    simt = simt_inner + simt_leaf
    node_lines, tri_lines = [], []
    for k in range(w.shape[0]):
        refs = w[k][valid[k]]
        node_lines.append(np.unique(refs[refs >= 0] >> 1).size)
        codes = -1 - refs[refs < 0]
        first, cnt = codes >> 3, (codes & 7) + 1
        slots = np.repeat(first, cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        lines = np.unique(np.concatenate([(48 * slots) >> 7, (48 * slots + 47) >> 7]))
        tri_lines.append(lines.size)
    node_lines, tri_lines = np.array(node_lines), np.array(tri_lines)
    # While-while: a lane runs inner nodes until it reaches a leaf, then waits; the leaf loop runs
    # once every lane has left the inner loop (j-th leaf of every lane together).
    ww = []
    for k in range(w.shape[0]):
        runs = []
        for lane in range(32):
            seq = w[k, lane, : nw[k, lane]]
            at = np.flatnonzero(seq < 0)
            inner_run = np.diff(np.concatenate([[-1], at])) - 1
            tail = seq.size - 1 - (at[-1] if at.size else -1)
            runs.append((inner_run, ((-1 - seq[at]) & 7) + 1, tail))
        j_max = max(r[0].size for r in runs)
        cost = 0
        for j in range(j_max + 1):
            inner_j = [(r[0][j] if j < r[0].size else (r[2] if j == r[0].size else 0)) for r in runs]
            leaf_j = [(r[1][j] if j < r[1].size else 0) for r in runs]
            cost += max(inner_j) + max(leaf_j)
        ww.append(cost)
    # One triangle per iteration: a leaf of c triangles becomes c iterations of one test each.
    split = []
    for k in range(w.shape[0]):
        seqs = []
        for lane in range(32):
            seq = w[k, lane, : nw[k, lane]]
            reps = np.where(seq < 0, ((-1 - seq) & 7) + 1, 1)
            seqs.append(np.repeat(seq < 0, reps))
        longest = max(x.size for x in seqs)
        kind = np.full((32, longest), -1, np.int8)
        for lane, x in enumerate(seqs):
            kind[lane, : x.size] = x
        split.append(int((kind == 0).any(0).sum() + (kind == 1).any(0).sum()))
    tests = count.sum(2)
    return {
        "steps_mean": float(n.mean()), "steps_max": float(nw.max(1).mean()),
        "inner_per_ray": float(inner.sum(2).mean()), "tests_per_ray": float(tests.mean()),
        "simt": float(simt.mean()), "simt_inner": float(simt_inner.mean()), "simt_leaf": float(simt_leaf.mean()),
        "simt_ww": float(np.mean(ww)), "simt_split": float(np.mean(split)),
        "node_lines": float(node_lines.mean()), "tri_lines": float(tri_lines.mean()),
        "lines": float((node_lines + tri_lines).mean()), "depth_max": float(depth.reshape(-1, 32).max(1).mean()),
        "overflow": int((num_steps > cap).sum()),
    }


def build(spec: str, points: wp.array, indices: wp.array):
    """``sah``, ``lbvh63`` (``builder_quality.lbvh``) or ``ploc[:rR][:lL][:oO]`` (as ``builder_quality.py``;
    ``:oO``: ``ploc.ORDER`` O), with pair nodes."""
    name, *opts = spec.split(":")
    if name.startswith("lbvh"):
        from types import SimpleNamespace

        from benchmarks.builder_quality import lbvh
        from rayd.engine.pair_nodes import PairNodes

        tri = triangles.TriangleScene(points, indices, bvh_constructor="median", layout="warp")
        nodes = lbvh(tri, int(name[4:]))
        return SimpleNamespace(nodes=nodes, pairs=PairNodes(nodes, points, indices, 0), keep=(tri, nodes))
    kw = {o[0]: o[1:] for o in opts}
    saved = (ploc.RADIUS, ploc.MAX_LEAF, getattr(ploc, "ORDER", None))
    ploc.RADIUS, ploc.MAX_LEAF = int(kw.get("r", saved[0])), int(kw.get("l", saved[1]))
    if "o" in kw:
        ploc.ORDER = kw["o"]
    try:
        return triangles.TriangleScene(points, indices, bvh_constructor=name, layout="pair")
    finally:
        ploc.RADIUS, ploc.MAX_LEAF = saved[0], saved[1]
        if saved[2] is not None:
            ploc.ORDER = saved[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", choices=("small", "full"), default="small")
    ap.add_argument("--warps", type=int, default=1024, help="blocks of 32 consecutive rays, at random places")
    ap.add_argument("--trees", default="sah,ploc,ploc:l1,ploc:l2")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    full = args.size == "full"
    loads = [workloads.terrain(1024, 2048) if full else workloads.terrain(256, 512),
             workloads.sphere(513, 1024, 1 << 22) if full else workloads.sphere(129, 256, 1 << 18)]
    for w in loads:
        dev = args.device
        points = wp.array(w.vertices, dtype=wp.vec3, device=dev)
        indices = wp.array(w.faces.ravel(), dtype=wp.int32, device=dev)
        starts = np.random.default_rng(0).choice(w.num_rays // 32, min(args.warps, w.num_rays // 32), replace=False)
        pick = (32 * starts[:, None] + np.arange(32)[None, :]).ravel().astype(np.int32)
        rays = wp.array(pick, dtype=wp.int32, device=dev)
        o = wp.array(w.o, dtype=wp.vec3, device=dev)
        d = wp.array(w.d, dtype=wp.vec3, device=dev)
        ref_t = None
        for spec in args.trees.split(","):
            tri = build(spec, points, indices)
            p = tri.pairs
            m = len(pick)
            steps = wp.full(m * CAP, 0, dtype=wp.int32, device=dev)
            num, deep, t = (wp.empty(m, dtype=wp.int32, device=dev), wp.empty(m, dtype=wp.int32, device=dev),
                            wp.empty(m, dtype=float, device=dev))
            wp.launch(_trace_kernel, m, [p.boxes, p.links, p.tris, p.root, rays, o, d], [steps, num, deep, t],
                      device=dev)
            t = t.numpy()
            ref_t = t if ref_t is None else ref_t
            row = {"workload": w.name, "tree": spec, "nodes": int(tri.nodes.lowers.shape[0]),
                   "depth": int(tri.nodes.depth), "warps": len(starts),
                   **{k: (round(v, 3) if isinstance(v, float) else v)
                      for k, v in warp_costs(steps.numpy().reshape(m, CAP), num.numpy(), deep.numpy()).items()},
                   "same_t": float(np.mean(t == ref_t))}
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
            del tri


if __name__ == "__main__":
    main()
