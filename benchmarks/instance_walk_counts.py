"""Instance walk census (issue 18, part 2): per ray, how many top-level nodes, instance entries,
BLAS nodes and BLAS triangles the pair-layout instance walks visit (CPU or CUDA).

The walks are copies of ``engine.pair_walk._walk_top_level_pair`` / ``_walk_instance_pair``
(nested) and ``engine.instance_walk._walk_unified`` (whose visits ``pairtop`` shares) with
counters added (keep in step by hand); their winners are checked against
``Scene.intersect``. Usage:

    python benchmarks/instance_walk_counts.py [--device cpu] [--instances 1000] [--tris 100000] [--rays 16384]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import warp as wp

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    import rayd  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import rayd.torch as rt  # noqa: E402
from benchmarks.instances import workload  # noqa: E402
from rayd.engine.native import bits_float, float_bits, load4, load4i  # noqa: E402
from rayd.engine.pair_walk import _slab  # noqa: E402
from rayd.engine.instance_walk import _MARKER, _STACK, _confirmed, _world_shift  # noqa: E402
from rayd.engine.instances import set_instance_walk  # noqa: E402
from rayd.engine.traversal import SceneView, _approach, _entry, _start_at_tmin  # noqa: E402
from rayd.engine.watertight import INF, confirmed_t, ray_shear, safe_direction, sheared_t  # noqa: E402


@wp.func
def _counted_blas(counts: wp.array2d(dtype=wp.int32), ray: int, view: SceneView, inst: int, o64: wp.vec3d, shift: float, c64: wp.vec3d, d64: wp.vec3d,
                        tmin: float, tmax: float, ignore_local: int, any_hit: int) -> tuple[float, int]:
    """``traversal._walk_instance`` over the instance's BLAS in the pair layout: (t, local face) or (tmax, -1)."""
    face = int(-1)
    d = wp.vec3(d64)
    s = _approach(wp.vec3(o64), d, view.blas_magnitude[0])
    if s < 0.0:
        return tmax, face
    o = wp.vec3(o64 + wp.float64(s) * d64)
    s = s + shift
    best = tmax
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    k, sh = ray_shear(d)
    node_base = view.inst_pair_base[inst]
    prim_base = view.inst_prim_base[inst]
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    ref = view.inst_pair_root[inst]
    while True:
        if ref >= 0:
            counts[ray, 2] = counts[ray, 2] + 1
            g = 4 * (node_base + ref)
            b0 = load4(view.blas_pair_boxes, g)
            b1 = load4(view.blas_pair_boxes, g + 1)
            b2 = load4(view.blas_pair_boxes, g + 2)
            reach = best - s
            t_left = _slab(o, inv_d, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], reach)
            t_right = _slab(o, inv_d, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3], reach)
            if t_left < INF or t_right < INF:
                links = load4i(view.blas_pair_links, g + 3)
                if t_left < INF and t_right < INF:
                    if t_right < t_left:
                        stack[count] = links[0]
                        ref = links[1]
                    else:
                        stack[count] = links[1]
                        ref = links[0]
                    count += 1
                elif t_left < INF:
                    ref = links[0]
                else:
                    ref = links[1]
                continue
        else:
            code = -1 - ref
            first = prim_base + (code >> 3)
            for slot in range(first, first + (code & 7) + 1):
                counts[ray, 3] = counts[ray, 3] + 1
                a4 = load4(view.blas_tris, 3 * slot)
                b4 = load4(view.blas_tris, 3 * slot + 1)
                c4 = load4(view.blas_tris, 3 * slot + 2)
                a = wp.vec3(a4[0], a4[1], a4[2])
                b = wp.vec3(b4[0], b4[1], b4[2])
                c = wp.vec3(c4[0], c4[1], c4[2])
                t = sheared_t(o, k, sh, a, b, c) + s
                if t > tmin and t < best:
                    f = view.blas_primitives[slot]
                    if f != ignore_local:
                        t = confirmed_t(c64, d64, a, b, c)  # as in _slot_face (rare branch)
                        if t > tmin and t < best:
                            best = t
                            face = f
            if face >= 0 and any_hit != 0:
                return best, face
        if count == 0:
            break
        count -= 1
        ref = stack[count]
    return best, face


@wp.func
def _counted_top(counts: wp.array2d(dtype=wp.int32), ray: int, view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                         any_hit: int) -> tuple[float, int]:
    """``traversal._walk_top_level`` entering each instance with :func:`_walk_instance_pair`."""
    winner = int(-1)
    root = view.tlas_root
    lo = view.tlas_lowers[root]
    hi = view.tlas_uppers[root]
    magnitude = wp.max(wp.max(wp.max(wp.abs(lo[0]), wp.abs(lo[1])), wp.max(wp.abs(lo[2]), wp.abs(hi[0]))),
                       wp.max(wp.abs(hi[1]), wp.abs(hi[2])))
    shift = _approach(o, d, magnitude)
    if shift < 0.0:
        return tmax, winner
    o0 = o
    o = o + shift * d
    best = tmax
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    nodes = wp.vector(dtype=wp.int32, length=64)
    entries = wp.vector(dtype=wp.float32, length=64)
    count = int(0)
    node = view.tlas_root
    done = int(0)
    while done == 0:
        low = view.tlas_lower_index[node]
        if low[3] < 0:
            first = low[3] & 0x7FFFFFFF
            last = view.tlas_upper_index[node][3] & 0x7FFFFFFF
            for slot in range(first, last):
                inst = view.tlas_primitives[slot]
                if view.shape_enabled[view.inst_shape[inst]] != wp.uint8(0):
                    m = view.inst_to_object[inst]
                    counts[ray, 1] = counts[ray, 1] + 1
                    t, face = _counted_blas(counts, ray, view, inst, wp.transform_point(m, wp.vec3d(o)), shift,
                                                  wp.transform_point(m, wp.vec3d(o0)),
                                                  wp.transform_vector(m, wp.vec3d(d)), tmin, best,
                                                  ignore - view.inst_global[inst], any_hit)
                    if face >= 0 and t < best:
                        best = t
                        winner = view.inst_global[inst] + face
                        if any_hit != 0:
                            return best, winner
        else:
            counts[ray, 0] = counts[ray, 0] + 1
            left = low[3]
            right = view.tlas_upper_index[node][3] & 0x7FFFFFFF
            reach = best - shift
            t_left = _entry(o, inv_d, view.tlas_lowers[left], view.tlas_uppers[left], reach)
            t_right = _entry(o, inv_d, view.tlas_lowers[right], view.tlas_uppers[right], reach)
            if t_left < INF and t_right < INF:
                near = left
                far = right
                t_far = t_right
                if t_right < t_left:
                    near = right
                    far = left
                    t_far = t_left
                nodes[count] = far
                entries[count] = t_far
                count += 1
                node = near
                continue
            if t_left < INF:
                node = left
                continue
            if t_right < INF:
                node = right
                continue
        done = int(1)
        while count > 0:
            count -= 1
            if entries[count] < best - shift:
                node = nodes[count]
                done = int(0)
                break
    return best, winner


@wp.func
def _counted_unified(counts: wp.array2d(dtype=wp.int32), ray: int, view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                  any_hit: int, cull: int) -> tuple[float, int]:
    """``instance_walk._walk_unified`` with counters: top-level / BLAS node fetches, instance entries,
    triangles tested, deepest stack, BLAS pops behind the closest hit (columns 0, 2, 1, 3, 4, 5)."""
    winner = int(-1)
    shift = _world_shift(view, o_in, d)
    if shift < 0.0:
        return tmax, winner
    best = tmax
    stack = wp.vector(dtype=wp.int32, length=_STACK)
    pushed = wp.vector(dtype=wp.float32, length=_STACK)  # census only: entry distance of each pushed ref
    count = int(0)
    # The ray of the level being walked: world at the top level, object space in a BLAS.
    o = o_in + shift * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    off = shift
    base = view.tlas_pair_base
    level = int(0)
    k = wp.vec3i(0, 0, 0)
    sh = wp.vec3(0.0, 0.0, 0.0)
    inst = int(0)
    pbase = int(0)
    gbase = int(0)
    ref = view.tlas_pair_root
    while True:
        if ref >= 0:
            counts[ray, 2 * level] = counts[ray, 2 * level] + 1
            g = 4 * (base + ref)
            b0 = load4(view.blas_pair_boxes, g)
            b1 = load4(view.blas_pair_boxes, g + 1)
            b2 = load4(view.blas_pair_boxes, g + 2)
            reach = best - off
            t_left = _slab(o, inv_d, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], reach)
            t_right = _slab(o, inv_d, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3], reach)
            if t_left < INF or t_right < INF:
                links = load4i(view.blas_pair_links, g + 3)
                if t_left < INF and t_right < INF:
                    far = links[0]
                    t_far = t_left
                    ref = links[1]
                    if t_right >= t_left:
                        far = links[1]
                        t_far = t_right
                        ref = links[0]
                    if level == 0 or cull != 0:  # top-level entries carry their entry distance (culled when popped)
                        stack[count] = float_bits(t_far)
                        count += 1
                    stack[count] = far
                    pushed[count] = t_far
                    count += 1
                elif t_left < INF:
                    ref = links[0]
                else:
                    ref = links[1]
                continue
        elif level == 0:
            code = -1 - ref
            first = code >> 3
            rest = code & 7
            if rest > 0:  # the leaf's other instances come next (one continuation ref, never culled)
                stack[count] = float_bits(-INF)
                stack[count + 1] = -1 - (8 * (first + 1) + rest - 1)
                count += 2
            leaf_inst = view.tlas_primitives[first]
            if view.shape_enabled[view.inst_shape[leaf_inst]] != wp.uint8(0):
                m = view.inst_to_object[leaf_inst]
                o64 = wp.transform_point(m, wp.vec3d(o))
                d64 = wp.transform_vector(m, wp.vec3d(d))
                dl = wp.vec3(d64)
                s = _approach(wp.vec3(o64), dl, view.blas_magnitude[0])
                counts[ray, 1] = counts[ray, 1] + 1
                if s >= 0.0:
                    o = wp.vec3(o64 + wp.float64(s) * d64)
                    off = s + shift
                    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(dl))
                    k, sh = ray_shear(dl)
                    inst = leaf_inst
                    row = load4i(view.inst_table, inst)
                    base = row[0]
                    pbase = row[1]
                    gbase = row[3]
                    level = 1
                    stack[count] = _MARKER
                    count += 1
                    ref = row[2]
                    continue
        else:
            code = -1 - ref
            start = pbase + (code >> 3)
            for tri in range(start, start + (code & 7) + 1):
                counts[ray, 3] = counts[ray, 3] + 1
                a4 = load4(view.blas_tris, 3 * tri)
                e4 = load4(view.blas_tris, 3 * tri + 1)
                f4 = load4(view.blas_tris, 3 * tri + 2)
                a = wp.vec3(a4[0], a4[1], a4[2])
                b = wp.vec3(e4[0], e4[1], e4[2])
                c = wp.vec3(f4[0], f4[1], f4[2])
                t = sheared_t(o, k, sh, a, b, c) + off
                if t > tmin and t < best:
                    f = view.blas_primitives[tri]
                    if gbase + f != ignore:
                        t = _confirmed(view, inst, o_in, d, a, b, c)
                        if t > tmin and t < best:
                            best = t
                            winner = gbase + f
            if winner >= 0 and any_hit != 0:
                return best, winner
        counts[ray, 4] = wp.max(counts[ray, 4], count)
        # Pop: a marker returns to the top level, whose entries behind the closest hit are skipped.
        done = int(1)
        while count > 0:
            count -= 1
            ref = stack[count]
            if ref == _MARKER:
                level = 0  # the world ray again (recomputed: fewer registers held across the BLAS)
                o = o_in + shift * d
                inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
                off = shift
                base = view.tlas_pair_base
                continue
            if level == 1 and pushed[count] >= best - off:
                counts[ray, 5] = counts[ray, 5] + 1  # a BLAS node behind the closest hit so far
            if level == 0 or cull != 0:
                count -= 1
                if bits_float(stack[count]) >= best - off:
                    continue
            done = int(0)
            break
        if done != 0:
            break
    return best, winner



@wp.kernel(enable_backward=False)
def _count_unified_kernel(view: SceneView, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), any_hit: int,
                          cull: int, counts: wp.array2d(dtype=wp.int32), winner: wp.array(dtype=wp.int32)):
    i = wp.tid()
    oi, tmin, tmax = _start_at_tmin(o[i], d[i], 0.0, INF)
    t, w = _counted_unified(counts, i, view, oi, d[i], tmin, tmax, -1, any_hit, cull)
    winner[i] = w


@wp.kernel(enable_backward=False)
def _count_kernel(view: SceneView, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), any_hit: int,
                  counts: wp.array2d(dtype=wp.int32), winner: wp.array(dtype=wp.int32)):
    i = wp.tid()
    oi, tmin, tmax = _start_at_tmin(o[i], d[i], 0.0, INF)
    t, w = _counted_top(counts, i, view, oi, d[i], tmin, tmax, -1, any_hit)
    winner[i] = w


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--tris", type=int, default=100_000)
    p.add_argument("--rays", type=int, default=16384)
    args = p.parse_args(argv)
    v, f, first, _, o, d = workload(args.instances, args.tris, args.rays)
    dev = args.device
    set_instance_walk("unified")  # the scene also gets the top level's pair nodes (for the unified census)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.to(dev), f.to(dev)))
    scene.set_shape_enabled(0, False)
    for k in range(args.instances):
        scene.add_instance(0, first[k].to(dev))
    scene.build()
    accel = scene._core.accel
    if accel.search_walk != "instances_unified":
        raise SystemExit(f"this census copies the pair-layout instance walks; the scene uses {accel.search_walk!r}")
    level = accel.instances
    print(f"depth: top level {level.nodes.depth}, BLAS {max(b.nodes.depth for b in level.blas)}; "
          f"shared stack {_STACK} entries")
    hit = scene.intersect(rt.Ray(o.to(dev), d.to(dev)), flags=rt.RayFlags.Minimal)
    ow, dw = (wp.from_torch(x.to(dev).contiguous(), dtype=wp.vec3) for x in (o, d))
    names = ("top-level inner nodes", "instance entries", "BLAS inner nodes", "BLAS triangles tested", "deepest stack",
             "BLAS pops behind best")
    walks = (("nested", _count_kernel, []), ("unified", _count_unified_kernel, [0]),
             ("unified_cull", _count_unified_kernel, [1]))
    for any_hit in (0, 1):
        table = {}
        for walk, kernel, extra in walks:
            counts = wp.zeros((args.rays, 6), dtype=wp.int32, device=ow.device)
            winner = wp.zeros(args.rays, dtype=wp.int32, device=ow.device)
            wp.launch(kernel, dim=args.rays, inputs=[accel.view, ow, dw, any_hit, *extra, counts, winner],
                      device=ow.device)
            table[walk] = counts.numpy()
            if not any_hit:
                same = (winner.numpy() == hit.global_prim_id.cpu().numpy()).mean()
                print(f"closest hit, {walk} walk: winners equal to Scene.intersect on {100 * same:.3f} % of rays")
        print(f"{'any hit' if any_hit else 'closest hit'} ({args.instances} instances x {f.shape[0]} tris, "
              f"{args.rays} rays), per ray mean / median / p99: nested | unified (= pairtop) | unified_cull")
        for k, name in enumerate(names):
            row = []
            for walk, _, _ in walks:
                c = table[walk][:, k]
                if k >= 4 and walk == "nested":  # the nested walk's stacks are separate (not counted)
                    row.append(f"{'-':>26s}")
                else:
                    row.append(f"{c.mean():8.1f} {np.median(c):8.0f} {np.percentile(c, 99):8.0f}")
            print(f"  {name:24s} {' | '.join(row)}")
        print("  BLAS inner nodes per entry " + " | ".join(
            f"{table[w][:, 2].sum() / max(table[w][:, 1].sum(), 1):.1f}" for w, _, _ in walks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
