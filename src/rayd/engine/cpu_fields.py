"""The closest-hit record fields on the CPU, 16 rays at a time in C++ (:func:`closest_fields`).

The same fields, in the same float32/float64 arithmetic, as
:func:`rayd.engine.evaluate.closest_fields`'s Warp kernel (Moeller & Trumbore 1997, JGT 2(1),
solved in float64 from the float32 inputs), for scenes without placements (no instances or
transforms): the winners' corners are gathered one ray at a time, then the formulas run
branch-free over the 16 rays (selects instead of branches, so that the compiler vectorizes
them), written with Warp's own ``wp::cross`` / ``wp::dot`` / ``wp::normalize`` so that every
value is the Warp kernel's to the bit. :func:`rayd.engine.evaluate.closest_fields` calls it for
CPU batches whose ``world`` is ``None``.
"""

from __future__ import annotations

import warp as wp

from rayd.engine import runtime
from rayd.engine.cpu_embree_kernels import _grab
from rayd.engine.native import raw_pointers
from rayd.engine.runtime import LaunchCache, PerRow, _warmed, run_parallel

wp.set_module_options({"enable_backward": False})

#: Recorded launches (a :class:`LaunchCache` per kernel and chunk), one dict per call in flight: a call
#: takes one off this list (or makes one) and puts it back, so no two threads replay one command.
_free: list = []

#: 1: the corners of 16 rays' winners are prefetched before they are gathered (0: for measurements).
PREFETCH = 1

#: Contiguous arrays through raw pointers (:data:`_FIELDS16_RAW`); off: ``wp::index`` (for measurements).
RAW = True

#: 1: a call of several chunks runs as one launch per core, each taking ``STEAL_STEP`` packets at a
#: time from a shared counter (as ``cpu_embree.STEAL``; 32 packets read 0.5 ms slower: the pass is
#: memory-bound, and runs of 4096 rays keep its streams sequential); 0: a launch per chunk.
STEAL, STEAL_STEP = 1, 256

_FIELDS16 = r"""
    int F[16], SH[16];
    wp::vec3d A[16], B[16], C[16], O[16], D[16];
    double LO[16], HI[16];
    const int S = (int)offsets.shape[0];
    if (prefetch && S == 1) {
        // The winners' index rows, then their corners, requested for all 16 rays before the gathers below
        // read them one ray at a time (incoherent winners: a cache miss each, then one more for the corners)
        int ROW[16];
        for (int j = 0; j < 16; ++j) {
            int i = lo + j;
            int f = i < hi ? wp::index(global_prim_id, i) : -1;
            ROW[j] = f >= 0 ? wp::index(face_row, 0) + f - wp::index(offsets, 0) : -1;
            if (ROW[j] >= 0) __builtin_prefetch(&wp::index(indices, 3 * ROW[j]));
        }
        for (int j = 0; j < 16; ++j) {
            if (ROW[j] < 0) continue;
            __builtin_prefetch(&wp::index(vertices, wp::index(indices, 3 * ROW[j])));
            __builtin_prefetch(&wp::index(vertices, wp::index(indices, 3 * ROW[j] + 1)));
            __builtin_prefetch(&wp::index(vertices, wp::index(indices, 3 * ROW[j] + 2)));
        }
    }
    for (int j = 0; j < 16; ++j) {
        int i = lo + j;
        int f = i < hi ? wp::index(global_prim_id, i) : -1;
        int shape = 0;
        if (f >= 0) {  // the last shape whose first global_prim_id is <= f
            int top = S;
            while (top - shape > 1) {
                int mid = (shape + top) / 2;
                if (wp::index(offsets, mid) <= f) shape = mid; else top = mid;
            }
            int row = wp::index(face_row, shape) + f - wp::index(offsets, shape);
            A[j] = wp::vec3d(wp::index(vertices, wp::index(indices, 3 * row)));
            B[j] = wp::vec3d(wp::index(vertices, wp::index(indices, 3 * row + 1)));
            C[j] = wp::vec3d(wp::index(vertices, wp::index(indices, 3 * row + 2)));
            O[j] = wp::vec3d(wp::index(o, i * o_stride));
            D[j] = wp::vec3d(wp::index(d, i * d_stride));
            LO[j] = tmin_stride >= 0 ? wp::index(tmin_rows, i * tmin_stride) : tmin_value;
            HI[j] = tmax_stride >= 0 ? wp::index(tmax_rows, i * tmax_stride) : tmax_value;
        } else {
            A[j] = wp::vec3d(0.0, 0.0, 0.0); B[j] = wp::vec3d(1.0, 0.0, 0.0); C[j] = wp::vec3d(0.0, 1.0, 0.0);
            O[j] = wp::vec3d(0.0, 0.0, 1.0); D[j] = wp::vec3d(0.0, 0.0, -1.0); LO[j] = 0.0; HI[j] = 0.0;
        }
        F[j] = f; SH[j] = shape;
    }
    float T[16], PX[16], PY[16], PZ[16], NX[16], NY[16], NZ[16], W0[16], W1[16], W2[16];
    for (int j = 0; j < 16; ++j) {
        wp::vec3d e1 = wp::sub(B[j], A[j]);
        wp::vec3d e2 = wp::sub(C[j], A[j]);
        wp::vec3d n = wp::cross(e1, e2);
        wp::vec3d pvec = wp::cross(D[j], e2);
        double det = wp::dot(e1, pvec);
        // _singular64: a degenerate face or a ray in its plane (the same cross products and dot)
        bool singular = (n[0] == 0.0 && n[1] == 0.0 && n[2] == 0.0) || det == 0.0;
        double inv_det = 1.0 / det;
        wp::vec3d s = wp::sub(O[j], A[j]);
        wp::vec3d qvec = wp::cross(s, e1);
        double hit_t = wp::mul(wp::dot(e2, qvec), inv_det);
        double u = wp::mul(wp::dot(s, pvec), inv_det);
        double v = wp::mul(wp::dot(D[j], qvec), inv_det);
        double t32 = (double)(float)hit_t;
        bool hit = F[j] >= 0 && !singular && t32 > LO[j] && t32 < HI[j];
        wp::vec3d hp = wp::add(O[j], wp::mul(hit_t, D[j]));
        wp::vec3d g = wp::normalize(n);
        F[j] = hit ? F[j] : -1;
        T[j] = hit ? (float)hit_t : __builtin_inff();
        PX[j] = hit ? (float)hp[0] : 0.0f; PY[j] = hit ? (float)hp[1] : 0.0f; PZ[j] = hit ? (float)hp[2] : 0.0f;
        NX[j] = hit ? (float)g[0] : 0.0f; NY[j] = hit ? (float)g[1] : 0.0f; NZ[j] = hit ? (float)g[2] : 0.0f;
        W0[j] = hit ? (float)(1.0 - u - v) : 0.0f; W1[j] = hit ? (float)u : 0.0f; W2[j] = hit ? (float)v : 0.0f;
    }
    for (int j = 0; j < 16 && lo + j < hi; ++j) {
        int i = lo + j;
        int f = F[j];
        wp::index(global_prim_id, i) = f;
        wp::index(t, i) = T[j];
        wp::index(shape_id, i) = f >= 0 ? SH[j] : -1;
        wp::index(prim_id, i) = f >= 0 ? f - wp::index(offsets, SH[j]) : -1;
        if (geometric) {
            wp::index(p, i) = wp::vec3(PX[j], PY[j], PZ[j]);
            wp::index(geo_n, i) = wp::vec3(NX[j], NY[j], NZ[j]);
            wp::index(barycentric, i) = wp::vec3(W0[j], W1[j], W2[j]);
        }
    }
"""


# The same C++ over raw pointers (every array contiguous, checked by :func:`closest_fields`).
_FIELDS16_RAW = raw_pointers(_FIELDS16, {
    "o": "const wp::vec3", "d": "const wp::vec3", "vertices": "const wp::vec3", "indices": "const int",
    "offsets": "const int", "face_row": "const int", "tmin_rows": "const double", "tmax_rows": "const double",
    "global_prim_id": "int", "t": "float", "p": "wp::vec3", "geo_n": "wp::vec3", "barycentric": "wp::vec3",
    "shape_id": "int", "prim_id": "int"})

def _fields16_pair(snippet: str, name: str, doc: str):
    """The ``func_native`` of ``snippet`` (rows ``lo .. hi - 1``, at most 16) and its kernel (packet
    ``tid + base`` of 16 rows); the two C++ snippets share one signature."""

    def fields16(
        o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
        vertices: wp.array(dtype=wp.vec3), indices: wp.array(dtype=wp.int32), offsets: wp.array(dtype=wp.int32),
        face_row: wp.array(dtype=wp.int32), tmin_value: wp.float64, tmin_rows: wp.array(dtype=wp.float64),
        tmin_stride: int, tmax_value: wp.float64, tmax_rows: wp.array(dtype=wp.float64), tmax_stride: int,
        geometric: int, global_prim_id: wp.array(dtype=wp.int32), t: wp.array(dtype=float),
        p: wp.array(dtype=wp.vec3), geo_n: wp.array(dtype=wp.vec3), barycentric: wp.array(dtype=wp.vec3),
        shape_id: wp.array(dtype=wp.int32), prim_id: wp.array(dtype=wp.int32), prefetch: int, lo: int, hi: int,
    ):
        ...

    fields16.__doc__ = doc
    fields16.__name__ = fields16.__qualname__ = name
    func = wp.func_native(snippet)(fields16)

    def kernel(
        o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
        vertices: wp.array(dtype=wp.vec3), indices: wp.array(dtype=wp.int32), offsets: wp.array(dtype=wp.int32),
        face_row: wp.array(dtype=wp.int32), tmin_value: wp.float64, tmin_rows: wp.array(dtype=wp.float64),
        tmin_stride: int, tmax_value: wp.float64, tmax_rows: wp.array(dtype=wp.float64), tmax_stride: int,
        geometric: int, global_prim_id: wp.array(dtype=wp.int32), t: wp.array(dtype=float),
        p: wp.array(dtype=wp.vec3), geo_n: wp.array(dtype=wp.vec3), barycentric: wp.array(dtype=wp.vec3),
        shape_id: wp.array(dtype=wp.int32), prim_id: wp.array(dtype=wp.int32), prefetch: int, n: int, base: int,
        counter: wp.array(dtype=wp.int32), step: int,
    ):
        first = wp.tid() + base
        last = first + 1
        if step > 0:  # packets 0 .. base - 1 taken step at a time from counter by one launch per thread
            first = _grab(counter, step)
            last = wp.min(first + step, base)
        while first < last:
            for i in range(first, last):
                lo = i * 16
                func(o, o_stride, d, d_stride, vertices, indices, offsets, face_row, tmin_value, tmin_rows,
                     tmin_stride, tmax_value, tmax_rows, tmax_stride, geometric, global_prim_id, t, p, geo_n,
                     barycentric, shape_id, prim_id, prefetch, lo, wp.min(lo + 16, n))
            first = last
            if step > 0:
                first = _grab(counter, step)
                last = wp.min(first + step, base)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    return func, wp.kernel(kernel, enable_backward=False)


_fields16, _fields16_kernel = _fields16_pair(
    _FIELDS16, "_fields16", "Rows ``lo .. hi - 1`` (at most 16) of :func:`rayd.engine.evaluate.closest_fields` "
    "without placements.")
_fields16_raw, _fields16_raw_kernel = _fields16_pair(
    _FIELDS16_RAW, "_fields16_raw", "As :func:`_fields16`, every array contiguous (raw pointers).")


def closest_fields(o: wp.array, o_stride: int, d: wp.array, d_stride: int, vertices: wp.array, indices: wp.array,
                   offsets: wp.array, face_row: wp.array, bounds: list, geometric: int, outputs: list) -> None:
    """:func:`rayd.engine.evaluate.closest_fields` on the CPU for vertices already in world space.

    Args:
        o, d: ``wp.vec3`` ray arrays with their strides (0: broadcast, 1: per row).
        vertices, indices, offsets, face_row: as the Warp kernel takes them (``face_row`` is
            ``offsets`` for meshes without instances).
        bounds: ``[tmin_value, tmin_rows, tmin_stride, tmax_value, tmax_rows, tmax_stride]`` as the
            Warp kernel takes them (stride -1: the value).
        geometric: 1 to write ``p``, ``geo_n``, ``barycentric``.
        outputs: ``[global_prim_id, t, p, geo_n, barycentric, shape_id, prim_id]`` (N,), as the Warp
            kernel writes them (``global_prim_id`` rewritten in place).
    """
    n = outputs[0].shape[0]
    if n == 0:
        return
    packets = (n + 15) // 16
    bounds = [b.array if isinstance(b, PerRow) else b for b in bounds]
    inputs = [o, o_stride, d, d_stride, vertices, indices, offsets, face_row, *bounds, geometric, *outputs, PREFETCH, n]
    device = outputs[0].device
    arrays = [x for x in (o, d, vertices, indices, offsets, face_row, bounds[1], bounds[4], *outputs) if x is not None]
    kernel = _fields16_raw_kernel if RAW and all(a.is_contiguous for a in arrays) else _fields16_kernel
    workers = runtime._WORKERS  # (os.cpu_count() reads sysfs: ~10-40 us a call)
    parts = min(4 * workers, max(1, packets // 64)) if kernel.key in _warmed else 1
    step = STEAL_STEP if STEAL and parts > 1 else 0  # one launch per thread, packets from a counter
    cuts = [packets * k // parts for k in range(parts + 1)]

    caches = _free.pop() if _free else {}  # this call's recorded launches (atomic under the GIL)

    counter = caches.get("counter")
    if counter is None:
        counter = caches["counter"] = wp.zeros(1, dtype=wp.int32, device=device)
        caches["counter_np"] = counter.numpy()  # (kept: wp.array.numpy() costs ~5 us a call)

    def run(k: int) -> None:
        if cuts[k + 1] > cuts[k]:
            cache = caches.get((kernel.key, k, step))
            if cache is None:
                cache = caches[(kernel.key, k, step)] = LaunchCache()
            if step:
                cache.launch(kernel, 1, [*inputs, packets, counter, step], device)
            else:
                cache.launch(kernel, cuts[k + 1] - cuts[k], [*inputs, cuts[k], counter, 0], device)

    try:
        if step:
            caches["counter_np"][0] = 0
        run_parallel(run, workers if step else parts)
    finally:
        _free.append(caches)
    _warmed.add(kernel.key)
