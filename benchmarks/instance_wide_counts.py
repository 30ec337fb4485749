"""Instance walk census over 4-wide nodes (issue 18, session 19): per ray, the top-level and BLAS node
fetches, instance entries, triangles tested and deepest shared stack of the ``wide_both`` /
``wide_blas`` walks (``engine/instance_walk.py``, ``wide`` 2 / 1), beside ``unified`` (pair nodes, counted
by ``instance_walk_counts.py``'s copy), on the workload of ``instances.py`` (CPU or CUDA).

The wide walk is a copy of ``instance_walk._walk_unified`` (its ``wide`` branches) with counters added (keep in step
by hand); every walk's winners are checked against ``Scene.intersect`` of a ``unified`` scene. Usage:

    python benchmarks/instance_wide_counts.py [--device cpu] [--instances 1000] [--tris 100000] [--rays 16384]
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
from benchmarks.instance_walk_counts import _count_unified_kernel  # noqa: E402
from benchmarks.instances import workload  # noqa: E402
from rayd.engine.instance_walk import _MARKER, _STACK, _confirmed, _world_shift  # noqa: E402
from rayd.engine.instances import set_instance_walk  # noqa: E402
from rayd.engine.native import bits_float, float_bits, load4i  # noqa: E402
from rayd.engine.pair_walk import _leaf_corners, _pair_entries, _pair_step, ray_frame  # noqa: E402
from rayd.engine.traversal import SceneView, _approach, _start_at_tmin  # noqa: E402
from rayd.engine.watertight import INF, safe_direction, sheared_t  # noqa: E402
from rayd.engine.wide_walk import _children, _near_rows, _sort4  # noqa: E402


@wp.func
def _counted_wide(counts: wp.array2d(dtype=wp.int32), ray: int, view: SceneView, o_in: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int,
                       any_hit: int, top: int) -> tuple[float, int]:
    """``instance_walk._walk_unified`` (its ``wide`` branches) with counters: top-level / BLAS node fetches (columns 0, 2),
    instance entries (1), triangles tested (3), deepest stack (4)."""
    winner = int(-1)
    shift = _world_shift(view, o_in, d)
    if shift < 0.0:
        return tmax, winner
    best = tmax
    stack = wp.vector(dtype=wp.int32, length=_STACK)
    count = int(0)
    # The ray of the level being walked: world at the top level, object space in a BLAS.
    o = o_in + shift * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    near = _near_rows(inv_d)
    off = shift
    level = int(0)
    k = wp.vec3i(0, 0, 0)
    sh = wp.vec3(0.0, 0.0, 0.0)
    inst = int(0)
    pbase = int(0)
    gbase = int(0)
    base = view.tlas_pair_base
    ref = view.tlas_pair_root
    if top != 0:
        base = view.tlas_wide_base
        ref = view.tlas_wide_root
    while True:
        if ref >= 0:
            counts[ray, 2 * level] = counts[ray, 2 * level] + 1
            if top == 0 and level == 0:
                g = 4 * (base + ref)
                t_left, t_right = _pair_entries(view.blas_pair_boxes, g, o, inv_d, best - off)
                if t_left < INF or t_right < INF:
                    ref, far, t_far, push = _pair_step(load4i(view.blas_pair_links, g + 3), t_left, t_right)
                    if push != 0:
                        stack[count] = float_bits(t_far)
                        stack[count + 1] = far
                        count += 2
                    continue
            else:
                g = 8 * (base + ref)
                entry = _children(view.inst_wide_data, g, near, o, inv_d, best - off)
                if entry[0] < INF or entry[1] < INF or entry[2] < INF or entry[3] < INF:
                    ds, rs = _sort4(entry, load4i(view.inst_wide_links, g + 6))
                    for j in range(3, 0, -1):  # the far ones first
                        if ds[j] < INF:
                            if level == 0:  # top-level entries carry their entry distance (culled when popped)
                                stack[count] = float_bits(ds[j])
                                count += 1
                            stack[count] = rs[j]
                            count += 1
                    ref = rs[0]
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
                    inv_d, k, sh = ray_frame(dl)
                    near = _near_rows(inv_d)
                    inst = leaf_inst
                    row = load4i(view.inst_wide_table, inst)
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
                a, b, c = _leaf_corners(view.blas_tris, tri)
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
                near = _near_rows(inv_d)
                off = shift
                base = view.tlas_pair_base
                if top != 0:
                    base = view.tlas_wide_base
                continue
            if level == 0:
                count -= 1
                if bits_float(stack[count]) >= best - off:
                    continue
            done = int(0)
            break
        if done != 0:
            break
    return best, winner



@wp.kernel(enable_backward=False)
def _count_wide_kernel(view: SceneView, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), any_hit: int,
                       top: int, counts: wp.array2d(dtype=wp.int32), winner: wp.array(dtype=wp.int32)):
    i = wp.tid()
    oi, tmin, tmax = _start_at_tmin(o[i], d[i], 0.0, INF)
    t, w = _counted_wide(counts, i, view, oi, d[i], tmin, tmax, -1, any_hit, top)
    winner[i] = w


def _scene(walk: str, v, f, first, instances: int, dev: str):
    set_instance_walk(walk)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v.to(dev), f.to(dev)))
    scene.set_shape_enabled(0, False)
    for k in range(instances):
        scene.add_instance(0, first[k].to(dev))
    scene.build()
    if scene._core.accel.search_walk != "instances_" + walk:
        raise SystemExit(f"{walk}: the scene walks {scene._core.accel.search_walk!r}")
    return scene


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--tris", type=int, default=100_000)
    p.add_argument("--rays", type=int, default=16384)
    args = p.parse_args(argv)
    v, f, first, _, o, d = workload(args.instances, args.tris, args.rays)
    dev = args.device
    walks = ("unified", "wide_blas", "wide_both")
    scenes = {w: _scene(w, v, f, first, args.instances, dev) for w in walks}
    set_instance_walk("auto")
    wide = scenes["wide_both"]._core.accel.instances.wide
    level = scenes["unified"]._core.accel.instances
    print(f"pair depth: top level {level.nodes.depth}, BLAS {max(b.nodes.depth for b in level.blas)}; wide stack "
          f"need: top level {wide.top_stack} (x2: distances), BLAS {wide.blas_stack}; shared stack {_STACK}; wide "
          f"nodes: top level {wide.top.count}, BLAS {wide.blas[0].count} (pair nodes {level.tlas_pairs.boxes.shape[0] // 4}"
          f" / {level.blas[0].pairs.boxes.shape[0] // 4})")
    ray = rt.Ray(o.to(dev), d.to(dev))
    hit = scenes["unified"].intersect(ray, flags=rt.RayFlags.Minimal)
    ow, dw = (wp.from_torch(x.to(dev).contiguous(), dtype=wp.vec3) for x in (o, d))
    names = ("top-level node fetches", "instance entries", "BLAS node fetches", "BLAS triangles tested",
             "deepest stack")
    for any_hit in (0, 1):
        table = {}
        for walk in walks:
            counts = wp.zeros((args.rays, 6), dtype=wp.int32, device=ow.device)
            winner = wp.zeros(args.rays, dtype=wp.int32, device=ow.device)
            view = scenes[walk]._core.accel.view
            if walk == "unified":
                wp.launch(_count_unified_kernel, dim=args.rays, inputs=[view, ow, dw, any_hit, 0, counts, winner],
                          device=ow.device)
            else:
                wp.launch(_count_wide_kernel, dim=args.rays,
                          inputs=[view, ow, dw, any_hit, int(walk == "wide_both"), counts, winner],
                          device=ow.device)
            table[walk] = counts.numpy()
            if not any_hit:
                same = (winner.numpy() == hit.global_prim_id.cpu().numpy()).mean()
                print(f"closest hit, {walk}: winners equal to Scene.intersect (unified) on {100 * same:.3f} % of rays")
        print(f"{'any hit' if any_hit else 'closest hit'} ({args.instances} instances x {f.shape[0]} tris, "
              f"{args.rays} rays), per ray mean / median / p99: " + " | ".join(walks))
        for k, name in enumerate(names):
            row = [f"{table[w][:, k].mean():7.2f} {np.median(table[w][:, k]):5.0f} "
                   f"{np.percentile(table[w][:, k], 99):5.0f}" for w in walks]
            print(f"  {name:24s} {' | '.join(row)}")
        base = table["unified"]
        print("  node fetches / unified's: " + " | ".join(
            f"top {table[w][:, 0].sum() / base[:, 0].sum():.3f}, BLAS {table[w][:, 2].sum() / base[:, 2].sum():.3f}"
            for w in walks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
