"""While-while and one-triangle walks of the flat child-pair nodes (issue 18, "build": trees whose leaves sit at
uneven depths).

``pair_walk._walk_flat_pairs`` is an *if-if* loop: each iteration either opens an inner
node or tests a leaf. A GPU warp runs 32 rays in lock step, so when some lanes are at a
leaf and others at an inner node, the warp runs both branches. Over Warp's host SAH tree
the lanes of a coherent warp reach their leaves at the same iteration; over a PLOC tree
(leaves at uneven depths, of 1-4 triangles) they do not, and the leaf branch (the
costlier one) runs about twice as often per warp for the same tests per ray
(``benchmarks/warp_coherence.py``). Aila & Laine (2009) split the loop:

- ``"ww"`` (*while-while*): each lane opens inner nodes until it reaches a leaf (or its
  walk ends); the leaf loop then runs for every lane that has one. A lane visits the same
  nodes and tests the same triangles in the same order as the if-if walk: the same hits,
  bit for bit; only how the warp's lanes line up changes.
- ``"one"`` (*if-if, one triangle per iteration*): ``pair_walk``'s loop, but an iteration at a
  leaf tests one triangle and keeps the rest of the leaf as the next ref, so a lane at a leaf of
  four triangles does not hold the warp for four tests while the others open nodes (the SAH
  tree's leaves hold one triangle). The same nodes and tests in the same order: the same closest
  hits, bit for bit (an any-hit walk stops at the first triangle that blocks, so it may name
  another blocker of the same leaf).
- ``"wws"`` (*speculative*): a lane that reaches a leaf keeps it pending and goes on
  opening inner nodes until every active lane of the warp has one (a warp vote,
  ``__ballot_sync``; on the CPU each thread votes alone, which is ``"ww"`` with one leaf kept
  pending). Leaves are tested in the order they were found, so the closest hit is the
  same; nodes opened while a leaf is pending are tested against the hit before it.

Selected per scene by ``triangles.set_pair_walk`` / ``RAYD_PAIR_WALK`` (default ``"auto"``: ``"ww"`` on CUDA, ``"ifif"``
(``pair_walk``'s) on the CPU); only the flat search kernel (``intersect.search``) uses them.

References:
    Aila & Laine 2009, "Understanding the Efficiency of Ray Traversal on GPUs", HPG.
"""

from __future__ import annotations

import warp as wp

from rayd.engine.native import load4, load4i
from rayd.engine.pair_walk import _slab, _slot_face
from rayd.engine.traversal import SceneView, _approach, _start_at_tmin
from rayd.engine.watertight import INF, ray_shear, safe_direction

wp.set_module_options({"enable_backward": False})


@wp.func_native("""
#if defined(__CUDA_ARCH__)
    unsigned int lanes = __activemask();
    return __ballot_sync(lanes, p != 0) == lanes ? 1 : 0;
#else
    return p != 0 ? 1 : 0;
#endif
""")
def warp_all(p: int) -> int:
    """1 if ``p`` is nonzero in every active lane of this warp (CUDA ``__ballot_sync`` over ``__activemask()``;
    Warp's JIT runtime, ``cuda_crt.h``, has these two but no ``__all_sync``); on the CPU, ``p != 0``."""
    ...


def _make_walk(speculative: bool) -> wp.Function:
    @wp.func
    def walk(view: SceneView, o0: wp.vec3, s: float, d: wp.vec3, tmin: float, tmax: float, ignore: int,
             any_hit: int) -> tuple[float, int]:
        o = o0 + s * d
        inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
        k, sh = ray_shear(d)
        best = tmax
        face = int(-1)
        stack = wp.vector(dtype=wp.int32, length=64)
        count = int(0)
        ref = view.flat_pair_root
        pending = int(0)  # a leaf ref (< 0) found and not yet tested, or 0
        done = int(0)  # the walk has nothing left to open (a pending leaf may remain)
        while done == 0 or pending != 0:
            while done == 0 and ref >= 0:
                b0 = load4(view.flat_pair_boxes, 4 * ref)
                b1 = load4(view.flat_pair_boxes, 4 * ref + 1)
                b2 = load4(view.flat_pair_boxes, 4 * ref + 2)
                reach = best - s
                t_left = _slab(o, inv_d, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], reach)
                t_right = _slab(o, inv_d, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3], reach)
                if t_left < INF or t_right < INF:
                    links = load4i(view.flat_pair_links, 4 * ref + 3)
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
                elif count == 0:
                    done = 1
                else:
                    count -= 1
                    ref = stack[count]
                if wp.static(speculative):
                    if done == 0 and ref < 0 and pending == 0:
                        pending = ref  # keep it, go on opening nodes
                        if count == 0:
                            done = 1
                        else:
                            count -= 1
                            ref = stack[count]
                    if warp_all(wp.where(pending != 0 or done != 0, 1, 0)) != 0:
                        break
            # Leaves: the pending one, then any leaves reached next (in the order found).
            while True:
                if pending == 0:
                    if done != 0 or ref >= 0:
                        break
                    pending = ref
                    if count == 0:
                        done = 1
                    else:
                        count -= 1
                        ref = stack[count]
                code = -1 - pending
                pending = 0
                first = code >> 3
                for slot in range(first, first + (code & 7) + 1):
                    t, f = _slot_face(view, slot, o, k, sh, s, o0, d, tmin, best, ignore)
                    if t < best:
                        best = t
                        face = f
                if face >= 0 and any_hit != 0:
                    return best, face
        return best, face

    return walk


@wp.func
def _walk_one(view: SceneView, o0: wp.vec3, s: float, d: wp.vec3, tmin: float, tmax: float, ignore: int,
              any_hit: int) -> tuple[float, int]:
    """``pair_walk._walk_flat_pairs`` testing one triangle per iteration (see the module docstring)."""
    o = o0 + s * d
    inv_d = wp.cw_div(wp.vec3(1.0, 1.0, 1.0), safe_direction(d))
    k, sh = ray_shear(d)
    best = tmax
    face = int(-1)
    stack = wp.vector(dtype=wp.int32, length=64)
    count = int(0)
    ref = view.flat_pair_root
    while True:
        if ref >= 0:
            b0 = load4(view.flat_pair_boxes, 4 * ref)
            b1 = load4(view.flat_pair_boxes, 4 * ref + 1)
            b2 = load4(view.flat_pair_boxes, 4 * ref + 2)
            reach = best - s
            t_left = _slab(o, inv_d, b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], reach)
            t_right = _slab(o, inv_d, b1[2], b1[3], b2[0], b2[1], b2[2], b2[3], reach)
            if t_left < INF or t_right < INF:
                links = load4i(view.flat_pair_links, 4 * ref + 3)
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
            first = code >> 3
            t, f = _slot_face(view, first, o, k, sh, s, o0, d, tmin, best, ignore)
            if t < best:
                best = t
                face = f
            if face >= 0 and any_hit != 0:
                return best, face
            if (code & 7) != 0:  # the leaf's next triangle at the next iteration
                ref = -1 - (code + 7)  # first + 1, count - 1
                continue
        if count == 0:
            break
        count -= 1
        ref = stack[count]
    return best, face


_walk_ww = _make_walk(False)
_walk_wws = _make_walk(True)


def _make_trace(walk: wp.Function) -> wp.Function:
    @wp.func
    def trace(view: SceneView, o: wp.vec3, d: wp.vec3, tmin: float, tmax: float, ignore: int, any_hit: int) -> int:
        """``pair_walk.trace_flat_pair`` with this walk."""
        o, tmin, tmax = _start_at_tmin(o, d, tmin, tmax)
        s = _approach(o, d, view.flat_magnitude[0])
        winner = int(-1)
        if s >= 0.0:
            t, face = walk(view, o, s, d, tmin, tmax, ignore, any_hit)
            if face >= 0:
                winner = view.flat_global[face]
        return winner

    return trace


#: The flat trace functions per walk name (``intersect`` keys its search kernels by ``"flat_pair" + name``).
TRACES = {"ww": _make_trace(_walk_ww), "wws": _make_trace(_walk_wws), "one": _make_trace(_walk_one)}
