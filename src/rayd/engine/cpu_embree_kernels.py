"""Warp kernels of the Embree CPU path (:mod:`rayd.engine.cpu_embree`): per packet of 16 rays
(:func:`_search16`, C++ inside a Warp kernel), Embree's rays, ``rtcIntersect8`` on each half (or ``rtcIntersect16``
where native: :func:`rayd.engine.embree_api.native_width`), then the checks
that send a ray to rayd's Warp search (with grown faces, :mod:`rayd.engine.cpu_embree_grown`, on the
true face's weights; a winner crossed in the margin traced again by ``rtcIntersect1`` without it);
and :func:`_trace_kernel`, Embree alone (tests, benchmarks)."""

from __future__ import annotations

import warp as wp

from rayd.engine import embree_api

wp.set_module_options({"enable_backward": False})


@wp.kernel(enable_backward=False)
def _trace_kernel(fn: wp.uint64, scene: wp.uint64, n: int, origin: wp.array(dtype=wp.vec3),
                  direction: wp.array(dtype=wp.vec3), far: wp.array(dtype=float), prim: wp.array(dtype=wp.int32),
                  geom: wp.array(dtype=wp.int32), u: wp.array(dtype=float), v: wp.array(dtype=float),
                  coherent_cos: float):
    lo = wp.tid() * 16
    embree_api.intersect16(fn, scene, origin, direction, far, prim, geom, u, v, lo, wp.min(lo + 16, n), coherent_cos)


#: Rays whose origin lies farther than ``FAR_SCALE * R`` from the frame's centre: the edge band (``EDGE``) and the
#: near-tangent band (``graze``) of their hits are widened by ``|o - c| / (FAR_SCALE R)``. The Warp path computes
#: such a ray's corners relative to its float32 origin, rounded at ``|o|``, so its winner near an edge follows that
#: rounding (rays from 100 R / 1,000 R aimed at an icosphere's vertices and chords: 2 / 377 of 32,000 answered unlike
#: the Warp path, 0 / 0 widened; helper review25, tests/torch/test_review25_embree_far_rays.py).
FAR_SCALE = 8.0

#: Rays whose origin lies farther than ``FAR_RAYS * R`` from the frame's centre go to Warp: there the Warp path's
#: rounding outgrows the edge caps too (a ray grazing a silhouette: 1e4 R, 32 of 32,000 widened rays still differed).
FAR_RAYS = 1024.0

# One packet of 16 rays in C++ (Warp's CPU code calls out of line for isfinite/isnan and reads
# every row through per-row scratch arrays; here everything stays in registers and the stack):
# the same steps as _prepare_row, rtcIntersect16 and _finish_row, in the same float32/float64
# arithmetic, so that the winners and the rays sent to Warp are unchanged.
_SEARCH16 = r"""
    #pragma clang fp contract(off)
    typedef void (*rtc_intersect16_t)(const int*, void*, void*, void*);
    struct { int flags; unsigned int features; void* context; void* filter; void* intersect; float width; void* pad[2]; }
        args = {0, 0xFFFFFFFFu, nullptr, nullptr, nullptr, 0.0f, {nullptr, nullptr}};
    alignas(64) float R[16 * 32];  // RTCRayHit16: 12 ray fields, then the hit (room for instance ids)
    alignas(64) int valid[16];
    double S0[16], DL[16];
    float SC[16];  // per lane: the edge and near-tangent bands' scale (FAR_SCALE)
    float TF[16];  // each lane's Embree tfar (for a second trace)
    int send[16];  // rows Warp must answer without an Embree ray (|d| outside Embree's range, origin too far)
    unsigned int* U = (unsigned int*)R;
    const double cx = centre[0], cy = centre[1], cz = centre[2];
    const double rad = (double)radius, rs = 1.8 * (double)radius;
    int live = 0, first = -1, count = 0;
    float fx = 0.0f, fy = 0.0f, fz = 0.0f;
    bool coherent = true;
    int rows[16];
    float OX[16], OY[16], OZ[16], DX[16], DY[16], DZ[16], T0[16], T1[16];
    int ACT[16], IGN[16];
    // Ray arrays of contiguous rows (every frontend's) are read through their data pointers: wp::index
    // recomputes each strided address (terrain, one thread, Embree stood in: 0.7 of the packet's ~5 ms).
    const bool dense = o.strides[0] == (int)sizeof(wp::vec3) && d.strides[0] == (int)sizeof(wp::vec3)
        && tmin.strides[0] == (int)sizeof(float) && tmax.strides[0] == (int)sizeof(float)
        && active.strides[0] == (int)sizeof(uint8_t) && ignore.strides[0] == (int)sizeof(int);
    const float* o_ = (const float*)o.data;
    const float* d_ = (const float*)d.data;
    const float* tmin_ = (const float*)tmin.data;
    const float* tmax_ = (const float*)tmax.data;
    const uint8_t* active_ = (const uint8_t*)active.data;
    const int* ignore_ = (const int*)ignore.data;
    for (int j = 0; j < 16; ++j) {
        // Lane j's row: lo + j, or with tiles (width > 0) column 4 tile + (j % 4) of image row j / 4
        // of the band of 4 rows that starts at lo (rows past the image's width or hi: no ray).
        int col = width > 0 ? 4 * tile + (j & 3) : 0;
        int i = width > 0 ? (col < width ? lo + (j >> 2) * width + col : hi) : lo + j;
        rows[j] = i;
        if (i < hi && dense) {
            const float* oi = o_ + 3 * (i * o_stride);
            const float* di = d_ + 3 * (i * d_stride);
            OX[j] = oi[0]; OY[j] = oi[1]; OZ[j] = oi[2]; DX[j] = di[0]; DY[j] = di[1]; DZ[j] = di[2];
            T0[j] = tmin_[i * tmin_stride]; T1[j] = tmax_[i * tmax_stride];
            ACT[j] = active_[i * active_stride] != 0;
            IGN[j] = ignore_[i * ignore_stride];
        } else if (i < hi) {
            wp::vec3 oi = wp::index(o, i * o_stride), di = wp::index(d, i * d_stride);
            OX[j] = oi[0]; OY[j] = oi[1]; OZ[j] = oi[2]; DX[j] = di[0]; DY[j] = di[1]; DZ[j] = di[2];
            T0[j] = wp::index(tmin, i * tmin_stride); T1[j] = wp::index(tmax, i * tmax_stride);
            ACT[j] = wp::index(active, i * active_stride) != 0;
            IGN[j] = wp::index(ignore, i * ignore_stride);
        } else {
            OX[j] = 0.0f; OY[j] = 0.0f; OZ[j] = 0.0f; DX[j] = 1.0f; DY[j] = 1.0f; DZ[j] = 1.0f;
            T0[j] = 0.0f; T1[j] = -1.0f; ACT[j] = 0; IGN[j] = -1;
        }
    }
    if (key_pass == 1 && fast_key) {
        // Sort keys only, in float32 (the key orders the rays, it never changes an answer): the Morton
        // code (10 bits per axis, over [-2 R, 2 R]^3) of where the ray enters the sphere of radius
        // 1.8 R (or its origin, from inside), rays that miss that sphere or are malformed last;
        // returns 1 for an incoherent packet (unit directions of the keyed lanes, as below).
        const float fcx = (float)cx, fcy = (float)cy, fcz = (float)cz, frs2 = (float)(rs * rs), inv4r = 1.0f / (4.0f * radius);
        unsigned int code[16];
        float UX[16], UY[16], UZ[16];
        int keyed[16];
        for (int j = 0; j < 16; ++j) {
            float ox = OX[j] - fcx, oy = OY[j] - fcy, oz = OZ[j] - fcz, ex = DX[j], ey = DY[j], ez = DZ[j];
            float dd = ex * ex + ey * ey + ez * ez, b = ox * ex + oy * ey + oz * ez;
            float disc = b * b - dd * (ox * ox + oy * oy + oz * oz - frs2);
            float ta = (-b - sqrtf(disc >= 0.0f ? disc : 0.0f)) / dd;
            float t = T0[j] > ta ? T0[j] : ta;
            float px = ox + t * ex, py = oy + t * ey, pz = oz + t * ez;
            int ok = ACT[j] & (disc >= 0.0f) & (dd > 0.0f) & (T1[j] > T0[j]) & (px == px) & (py == py) & (pz == pz);
            keyed[j] = ok;
            float inv = 1.0f / sqrtf(dd > 0.0f ? dd : 1.0f);
            UX[j] = ex * inv; UY[j] = ey * inv; UZ[j] = ez * inv;
            unsigned int c3[3];
            float pp[3] = {px, py, pz};
            for (int a = 0; a < 3; ++a) {
                float q = (pp[a] * inv4r + 0.5f) * 1023.0f;
                c3[a] = q > 0.0f ? (q < 1023.0f ? (unsigned int)q : 1023u) : 0u;
            }
            unsigned int m = 0u;
            for (int bb = 0; bb < 10; ++bb)
                m |= (((c3[0] >> bb) & 1u) << (3 * bb)) | (((c3[1] >> bb) & 1u) << (3 * bb + 1)) | (((c3[2] >> bb) & 1u) << (3 * bb + 2));
            code[j] = ok ? m : 0x3FFFFFFFu;
        }
        int nk = 0, f0 = -1;
        for (int j = 0; j < 16; ++j) nk += keyed[j] != 0;
        for (int j = 0; j < 16; ++j) {
            if (keyed[j]) { f0 = j; break; }
        }
        bool coh = true;
        if (f0 >= 0) {  // (as the main pass's test below: the first keyed lane, then all lanes at once)
            int apart = 0;
            for (int j = 0; j < 16; ++j)
                apart |= (keyed[j] != 0) & (j > f0) & (UX[j] * UX[f0] + UY[j] * UY[f0] + UZ[j] * UZ[f0] < coherent_cos);
            coh = apart == 0;
        }
        for (int j = 0; j < 16 && lo + j < hi; ++j) {
            wp::index(keys, lo + j) = (int)code[j];
            wp::index(order, lo + j) = lo + j;
        }
        return (nk > 1 && !coh) ? 1 : 0;
    }
    // Branch-free over the 16 lanes (selects, no short-circuits), so that the compiler vectorizes
    // it; every lane evaluates the same float32/float64 expressions as one ray at a time would.
    const float big = 3.40282347e38f;
    for (int j = 0; j < 16; ++j) {
        float ax = OX[j], ay = OY[j], az = OZ[j], ex = DX[j], ey = DY[j], ez = DZ[j], t0 = T0[j], t1 = T1[j];
        int wellformed = ACT[j] & (__builtin_fabsf(ax) <= big) & (__builtin_fabsf(ay) <= big) & (__builtin_fabsf(az) <= big)
            & (__builtin_fabsf(ex) <= big) & (__builtin_fabsf(ey) <= big) & (__builtin_fabsf(ez) <= big)
            & (__builtin_fabsf(t0) <= big) & (t1 == t1) & !((ex == 0.0f) & (ey == 0.0f) & (ez == 0.0f)) & (t1 > t0);
        double ox = (double)ax - cx, oy = (double)ay - cy, oz = (double)az - cz;
        double dx = (double)ex, dy = (double)ey, dz = (double)ez;
        double oo = ox * ox + oy * oy + oz * oz, dd2 = dx * dx + dy * dy + dz * dz;
        double dl = (double)band * (__builtin_sqrt(oo) + rad) / __builtin_sqrt(dd2);
        double b = ox * dx + oy * dy + oz * dz;
        // b^2 - dd2 (oo - rs^2) as dd2 rs^2 - |o x d|^2 (Lagrange's identity): no cancellation
        // for origins far from the sphere (1e8 R: b^2 and dd2 oo agree in all their digits).
        double qx = oy * dz - oz * dy, qy = oz * dx - ox * dz, qz = ox * dy - oy * dx;
        double disc = dd2 * (rs * rs) - (qx * qx + qy * qy + qz * qz);
        // Warp answers rays of a |d| outside Embree's float32 range, and rays from so far that their
        // shifted origin (moved back by dl from the sphere) lies beyond far_origin anyway, whose sphere
        // test is too thin for float64 beyond (ta = tb at |o - c| = 1e16 R).
        int far = (dd2 < dir2_min) | (dd2 > dir2_max) | ((double)band * (__builtin_sqrt(oo) + rad) > (double)far_origin)
            | (__builtin_sqrt(oo) > FAR_RAYS * rad);
        send[j] = wellformed & far;
        double sq = __builtin_sqrt(disc >= 0.0 ? disc : 0.0);
        double ta = (-b - sq) / dd2, tb = (-b + sq) / dd2;
        double lo_t = (double)t0 > ta ? (double)t0 : ta;
        double hi_t = (double)t1 < tb ? (double)t1 : tb;
        double s0 = lo_t - dl;
        int ok = wellformed & !far & (disc >= 0.0) & (hi_t > lo_t);
        R[0 * 16 + j] = ok ? (float)(ox + s0 * dx) : 0.0f; R[1 * 16 + j] = ok ? (float)(oy + s0 * dy) : 0.0f;
        R[2 * 16 + j] = ok ? (float)(oz + s0 * dz) : 0.0f; R[3 * 16 + j] = 0.0f;
        R[4 * 16 + j] = ok ? ex : 1.0f; R[5 * 16 + j] = ok ? ey : 1.0f; R[6 * 16 + j] = ok ? ez : 1.0f;
        R[7 * 16 + j] = 0.0f;
        R[8 * 16 + j] = ok ? (float)(hi_t - s0 + dl) : -1.0f;
        U[9 * 16 + j] = 0xFFFFFFFFu; U[10 * 16 + j] = 0u; U[11 * 16 + j] = 0u;
        U[17 * 16 + j] = 0xFFFFFFFFu; U[18 * 16 + j] = 0xFFFFFFFFu; U[19 * 16 + j] = 0xFFFFFFFFu;
        S0[j] = ok ? (double)(float)s0 : 0.0; DL[j] = ok ? (double)(float)dl : 0.0;
        double sc = __builtin_sqrt(oo) / (FAR_SCALE * rad);
        SC[j] = sc > 1.0 ? (float)sc : 1.0f;
        TF[j] = R[8 * 16 + j];
        valid[j] = ok ? -1 : 0;
    }
    float INV[16];  // (every lane, vectorized; only the valid ones are read)
    for (int j = 0; j < 16; ++j) {
        float dx = R[4 * 16 + j], dy = R[5 * 16 + j], dz = R[6 * 16 + j];
        INV[j] = 1.0f / sqrtf(dx * dx + dy * dy + dz * dz);
    }
    // Coherent: every valid lane's unit direction within coherent_cos of the first valid lane's (the
    // first found, then the test over all lanes at once, vectorized: the same products, the same answer).
    for (int j = 0; j < 16; ++j) live += valid[j] != 0;
    for (int j = 0; j < 16; ++j) {
        if (valid[j]) { first = j; break; }
    }
    if (first >= 0) {
        fx = R[4 * 16 + first] * INV[first]; fy = R[5 * 16 + first] * INV[first]; fz = R[6 * 16 + first] * INV[first];
        int apart = 0;
        for (int j = 0; j < 16; ++j) {
            float dx = R[4 * 16 + j], dy = R[5 * 16 + j], dz = R[6 * 16 + j];
            apart |= (valid[j] != 0) & (j > first) & ((dx * fx + dy * fy + dz * fz) * INV[j] < coherent_cos);
        }
        coherent = apart == 0;
    }
    if (key_pass == 1) {
        // Sort keys only: the Morton code (10 bits per axis, over [-2 R, 2 R]^3) of each Embree
        // origin (rays without an Embree ray last); returns 1 for an incoherent packet.
        for (int j = 0; j < 16 && lo + j < hi; ++j) {
            unsigned int code = 0x3FFFFFFFu;
            if (valid[j]) {
                code = 0u;
                for (int a = 0; a < 3; ++a) {
                    float q = (R[a * 16 + j] / (4.0f * radius) + 0.5f) * 1023.0f;
                    unsigned int c = q > 0.0f ? (q < 1023.0f ? (unsigned int)q : 1023u) : 0u;
                    for (int b = 0; b < 10; ++b) code |= ((c >> b) & 1u) << (3 * b + a);
                }
            }
            wp::index(keys, lo + j) = (int)code;
            wp::index(order, lo + j) = lo + j;
        }
        return (live > 1 && !coherent) ? 1 : 0;
    }
    // Lanes of mask traced through scn (the 16 prepared lanes; with narrower Embree packets, in
    // 16 / packet calls, each field copied into a packet-wide RTCRayHitN (21 fields) and the result back).
    auto run = [&](int* mask, unsigned long long scn) {
        if (packet >= 16) {
            ((rtc_intersect16_t)fn)(mask, (void*)scn, (void*)R, &args);
            return;
        }
        // 8 or 4 lanes per call: each field copied into a packet-wide RTCRayHitN (21 fields) and the result back
        // (the 16-lane layout keeps the loops above and below vectorized)
        alignas(64) float P[8 * 24];
        alignas(64) int pv[8];
        for (int h = 0; h < 16; h += packet) {
            int any = 0;
            for (int j = 0; j < packet; ++j) { pv[j] = mask[h + j]; any |= pv[j]; }
            if (!any) continue;
            for (int f = 0; f < 21; ++f)
                for (int j = 0; j < packet; ++j) P[f * packet + j] = R[f * 16 + h + j];
            ((rtc_intersect16_t)fn)(pv, (void*)scn, (void*)P, &args);
            for (int f = 8; f < 21; ++f)
                for (int j = 0; j < packet; ++j) R[f * 16 + h + j] = P[f * packet + j];
        }
    };
    alignas(64) int missed[16];
    int graze_hit[16];
    for (int j = 0; j < 16; ++j) { missed[j] = 0; graze_hit[j] = 0; }
    if (live > 0) {
        args.flags = coherent ? (1 << 16) : 0;  // RTC_RAY_QUERY_FLAG_COHERENT : _INCOHERENT
        run(valid, scene);
        if (edge_scene != 0) {
            // Misses through the edge caps (a miss leaves the ray's fields as they were): a ray that
            // passes within rounding of an edge without crossing a face is re-searched by Warp.
            int any = 0;
            for (int j = 0; j < 16; ++j) { missed[j] = (valid[j] && U[18 * 16 + j] == 0xFFFFFFFFu) ? -1 : 0; any |= missed[j]; }
            if (any) {
                run(missed, edge_scene);
                for (int j = 0; j < 16; ++j) {
                    graze_hit[j] = missed[j] && U[18 * 16 + j] != 0xFFFFFFFFu;
                    if (missed[j]) U[18 * 16 + j] = 0xFFFFFFFFu;  // still a miss of the scene
                }
            }
        }
    }
    // The checks' arithmetic first, branch-free over the 16 lanes (vectorized; the same float32/float64
    // expressions as one lane at a time, every term evaluated: no side effects), then the decisions.
    int FARL[16], ZERO[16], BADH[16], OUT[16], FORCE[16];
    // Lane j's row of the grown table (its winner's; a miss: row 0), gathered for all lanes before the checks:
    // the 16 loads in flight at once (incoherent winners: a cache miss each), and the checks' loop vectorizes
    float GS[16], G1[16], G2[16], G3[16];
    auto grow = [&](int j) {
        const float* G = (const float*)grown.data + 4 * (size_t)(U[18 * 16 + j] == 0u ? U[17 * 16 + j] : 0u);
        GS[j] = G[0]; G1[j] = G[1]; G2[j] = G[2]; G3[j] = G[3];
    };
    auto check = [&](int j) {
        float px = R[0 * 16 + j], py = R[1 * 16 + j], pz = R[2 * 16 + j];
        FARL[j] = sqrtf(px * px + py * py + pz * pz) > far_origin;
        ZERO[j] = (DX[j] == 0.0f) | (DY[j] == 0.0f) | (DZ[j] == 0.0f);
        double t = (double)R[8 * 16 + j] + S0[j];
        float gx = R[12 * 16 + j], gy = R[13 * 16 + j], gz = R[14 * 16 + j];
        float ex = R[4 * 16 + j], ey = R[5 * 16 + j], ez = R[6 * 16 + j];
        float dn = __builtin_fabsf(gx * ex + gy * ey + gz * ez);
        // The rounding band at tmin and tmax, along the ray: the origin's rounding across the face's
        // plane moves Embree's t by dl over the cosine of the ray's angle with the face, so a near-tangent
        // winner (the face a leaving ray starts on, its float64 t behind tmin) is sent to Warp within
        // dl / cos (a zero cosine: always).
        double gd = (double)sqrtf(gx * gx + gy * gy + gz * gz) * (double)sqrtf(ex * ex + ey * ey + ez * ez);
        double dl = DL[j] * ((double)dn < gd ? gd / (double)dn : 1.0);
        int bad = (t <= (double)T0[j] + dl) | (t >= (double)T1[j] - dl);
        float bu = R[15 * 16 + j], bv = R[16 * 16 + j];
        float w = 1.0f - bu - bv;
        // A grown face (cpu_embree_grown): the weights of the true face, b = s b' - (s - 1) b_I, and the
        // normal's length over s^2; s = 0 (a face not grown: degenerate or a sliver): re-searched. (Selects on
        // the row gathered by grow(j), so that the loop over the lanes vectorizes.)
        float sg = GS[j];
        float gw = sg * w - G1[j], gu = sg * bu - G2[j], gv = sg * bv - G3[j];
        float gdn = sg > 0.0f ? dn / (sg * sg) : 0.0f;
        w = grown_mode ? (sg > 0.0f ? gw : -1.0f) : w;
        bu = grown_mode ? gu : bu;
        bv = grown_mode ? gv : bv;
        dn = grown_mode ? gdn : dn;
        float m = bu < bv ? bu : bv;
        m = m < w ? m : w;
        // A hit whose crossing lies within rounding of an edge *along the face*: the ray's
        // rounding across the plane (graze / longest edge, in units of R) moves the crossing by
        // that over the cosine of its angle with the face, m * altitude away from the edge
        // (altitude >= |Ng| / longest edge): a near-tangent ray may cross for one test only.
        int tangent = m * dn < graze * SC[j] * sqrtf(ex * ex + ey * ey + ez * ez);
        BADH[j] = bad | (m < edge * SC[j]) | tangent | !__builtin_isfinite(t);
        // (grown faces) the crossing lies outside the true face by more than the rounding (the mirror of
        // the near-tangent check): neither test hits that face, the ray is traced again without it
        OUT[j] = grown_mode & (U[18 * 16 + j] == 0u) & (m < 0.0f) & (-m * dn > graze * SC[j] * sqrtf(ex * ex + ey * ey + ez * ez));
        FORCE[j] = 0;
    };
    for (int j = 0; j < 16; ++j) grow(j);
    for (int j = 0; j < 16; ++j) check(j);
    if (grown_mode && live > 0) {
        // Rays whose closest grown face is crossed clearly outside its true face (in the margin, over a
        // neighbour): Embree again, the same ray, that face left out by an argument filter (its primID in
        // the ray's id); the closest grown crossing after it is checked as the first one was, and a miss
        // there goes to Warp. (Warp re-searched these: ~1.5 us a ray against ~0.25 us for Embree.)
        struct FilterArgs { int* valid; void* user; void* context; const unsigned int* ray; const unsigned int* hit; unsigned int N; };
        auto filter = [](const FilterArgs* a) {
            const unsigned int N = a->N;
            for (unsigned int i = 0; i < N; ++i)
                if (a->valid[i] != 0 && a->hit[6 * N + i] == 0u && a->hit[5 * N + i] == a->ray[10 * N + i]) a->valid[i] = 0;
        };
        alignas(64) int again[16];
        int any = 0;
        for (int j = 0; j < 16; ++j) { again[j] = (valid[j] && OUT[j] && !FARL[j]) ? -1 : 0; any |= again[j]; }
        if (any) {
            float first_t[16];
            for (int j = 0; j < 16; ++j) {
                first_t[j] = R[8 * 16 + j];
                if (!again[j]) continue;
                U[10 * 16 + j] = U[17 * 16 + j];
                R[8 * 16 + j] = TF[j];
                U[17 * 16 + j] = 0xFFFFFFFFu; U[18 * 16 + j] = 0xFFFFFFFFu; U[19 * 16 + j] = 0xFFFFFFFFu;
            }
            const int flags = args.flags;
            args.flags = 2;  // RTC_RAY_QUERY_FLAG_INVOKE_ARGUMENT_FILTER
            args.filter = (void*)+filter;
            // One ray at a time (rtcIntersect1, an RTCRayHit: the 12 ray fields, then the hit): a packet
            // call with one or two live lanes cost about as much as Warp's search of them.
            typedef void (*rtc_intersect1_t)(void*, void*, void*);
            for (int j = 0; j < 16; ++j) {
                if (!again[j]) continue;
                alignas(16) float one[24];
                for (int f = 0; f < 20; ++f) one[f] = R[f * 16 + j];
                ((rtc_intersect1_t)fn1)((void*)scene, (void*)one, &args);
                for (int f = 8; f < 20; ++f) R[f * 16 + j] = one[f];
            }
            args.flags = flags;
            args.filter = nullptr;
            for (int j = 0; j < 16; ++j) {
                if (!again[j]) continue;
                grow(j);
                check(j);
                // A miss after the margin, or a hit farther than grown_gap past it (the true hit after a
                // margin is mostly the neighbour across that edge, within a few margins; farther, the ray
                // may have passed a face at a grazing angle in between, which the grown test can miss): Warp
                float ex = R[4 * 16 + j], ey = R[5 * 16 + j], ez = R[6 * 16 + j];
                FORCE[j] = (U[18 * 16 + j] == 0xFFFFFFFFu) | ((R[8 * 16 + j] - first_t[j]) * sqrtf(ex * ex + ey * ey + ez * ez) > grown_gap);
            }
        }
    }
    // The decisions. With the per-face tables unneeded (face_mode & 7 == 7: one identity map, every shape
    // enabled, no flagged face) branch-free over the 16 lanes (selects, vectorized), else one lane at a
    // time through the tables; both give every lane the same (res, again).
    int RES[16], AGAIN[16];
    if ((face_mode & 7) == 7) {
        const int miss_wait = (face_mode & 8) ? 2 : 0;  // no edge caps yet: Warp answers the misses
        for (int j = 0; j < 16; ++j) {
            unsigned int geom = U[18 * 16 + j];
            int f = (int)U[17 * 16 + j];
            int hit = geom != 0xFFFFFFFFu;
            int capfar = (hit & (geom > 0u)) | FARL[j];  // a cap (near a vertex, or a sliver) or too far
            int miss_again = (graze_hit[j] | ZERO[j]) ? 1 : miss_wait;
            int hit_again = BADH[j] | (f == IGN[j]);
            int again = capfar | FORCE[j] ? 1 : (hit ? hit_again : miss_again);
            AGAIN[j] = valid[j] ? again : send[j];
            RES[j] = (valid[j] & hit & !again) ? f : -1;
        }
    } else {
        for (int j = 0; j < 16; ++j) {
            int res = -1, again = send[j];
            if (valid[j] && rows[j] < hi) {
                bool hit = U[18 * 16 + j] != 0xFFFFFFFFu;
                if ((hit && U[18 * 16 + j] > 0u) || FARL[j]) {
                    again = 1;  // a cap (near a vertex, or a sliver) or an origin too far: Warp decides
                } else if (!hit) {
                    again = (graze_hit[j] || ZERO[j] || FORCE[j]) ? 1 : 0;
                    if (!again && (face_mode & 8)) again = 2;  // no edge caps yet: Warp answers the misses
                } else {
                    int f = (int)U[17 * 16 + j];
                    if (BADH[j]) {
                        again = 1;
                    } else {
                        int g = (face_mode & 1) ? f : wp::index(flat_global, f);
                        if (!(face_mode & 2) && wp::index(shape_enabled, wp::index(flat_shape, f)) == 0) again = 1;
                        else if (!(face_mode & 4) && wp::index(degenerate, f) != 0) again = 1;
                        else if (g == IGN[j]) again = 1;
                        else res = g;
                    }
                }
            }
            RES[j] = res; AGAIN[j] = again;
        }
    }
    if (out.strides[0] == (int)sizeof(int) && redo.strides[0] == 1 && order.strides[0] == (int)sizeof(int)) {
        // (through the data pointers: wp::index reloads pointer and stride around every store)
        int* out_ = (int*)out.data;
        uint8_t* redo_ = (uint8_t*)redo.data;
        const int* order_ = (const int*)order.data;
        for (int j = 0; j < 16; ++j) {
            int i = rows[j];
            if (i >= hi) continue;
            int dst = key_pass == 2 ? order_[i] : i;  // a sorted batch: row i is ray order[i]
            out_[dst] = RES[j];
            redo_[dst] = (uint8_t)AGAIN[j];
            count += AGAIN[j];
        }
    } else {
        for (int j = 0; j < 16; ++j) {
            int i = rows[j];
            if (i >= hi) continue;
            int dst = key_pass == 2 ? wp::index(order, i) : i;
            wp::index(out, dst) = RES[j];
            wp::index(redo, dst) = (uint8_t)AGAIN[j];
            count += AGAIN[j];
        }
    }
    return count;
""".replace("FAR_SCALE", repr(FAR_SCALE)).replace("FAR_RAYS", repr(FAR_RAYS))


@wp.func_native(_SEARCH16)
def _search16(
    o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    active: wp.array(dtype=wp.uint8), active_stride: int, ignore: wp.array(dtype=wp.int32), ignore_stride: int,
    centre: wp.vec3d, radius: float, band: float,
    flat_global: wp.array(dtype=wp.int32), flat_shape: wp.array(dtype=wp.int32),
    shape_enabled: wp.array(dtype=wp.uint8), degenerate: wp.array(dtype=wp.uint8), face_mode: int,
    far_origin: float, edge: float, graze: float, dir2_min: wp.float64, dir2_max: wp.float64, fn: wp.uint64, scene: wp.uint64, edge_scene: wp.uint64,
    coherent_cos: float, packet: int, grown: wp.array2d(dtype=float), grown_mode: int, grown_gap: float, fn1: wp.uint64, lo: int, hi: int,
    width: int, tile: int,
    out: wp.array(dtype=wp.int32), redo: wp.array(dtype=wp.uint8),
    keys: wp.array(dtype=wp.int32), order: wp.array(dtype=wp.int32), key_pass: int, fast_key: int,
) -> int:
    """Rows ``lo .. hi - 1`` (at most 16; with ``width > 0``, the 4 x 4 tile ``tile`` of the band of 4
    image rows of ``width`` rays from ``lo``, rows from ``hi`` on left out): Embree's rays,
    ``rtcIntersect16``, the checks; returns the
    number of rows sent to Warp (``redo = 1``); with ``key_pass = 2`` (a sorted batch) row ``i``'s
    answers go to ``out``/``redo`` at ``order[i]``. With ``key_pass = 1``, no trace: each row's sort key into
    ``keys`` (the Morton code of its Embree origin; rays without one last), ``order[row] = row``,
    and returns 1 when the packet is incoherent (see :data:`rayd.engine.embree_api.COHERENT_COS`)."""
    ...


_GRAB = r"""
    // A true atomic add (Warp's atomic_add is a plain add on the CPU): the next items of a counter
    // shared by the launches of several threads, or a count they add to.
    return __atomic_fetch_add((int32_t*)counter.data, step, __ATOMIC_RELAXED);
"""


@wp.func_native(_GRAB)
def _grab(counter: wp.array(dtype=wp.int32), step: int) -> int:
    """``counter[0] += step`` atomically across threads; returns the old value."""
    ...


@wp.kernel(enable_backward=False)
def _search16_kernel(
    o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    active: wp.array(dtype=wp.uint8), active_stride: int, ignore: wp.array(dtype=wp.int32), ignore_stride: int,
    centre: wp.vec3d, radius: float, band: float,
    flat_global: wp.array(dtype=wp.int32), flat_shape: wp.array(dtype=wp.int32),
    shape_enabled: wp.array(dtype=wp.uint8), degenerate: wp.array(dtype=wp.uint8), face_mode: int,
    far_origin: float, edge: float, graze: float, dir2_min: wp.float64, dir2_max: wp.float64,
    fn: wp.uint64, scene: wp.uint64, edge_scene: wp.uint64, coherent_cos: float, packet: int,
    grown: wp.array2d(dtype=float), grown_mode: int, grown_gap: float, fn1: wp.uint64, base: int, n: int, width: int,
    out: wp.array(dtype=wp.int32), redo: wp.array(dtype=wp.uint8), redo_count: wp.array(dtype=wp.int32),
    keys: wp.array(dtype=wp.int32), order: wp.array(dtype=wp.int32), key_pass: int, fast_key: int,
):
    """One packet of 16 rows from ``base`` (:func:`_search16`); ``redo_count`` counts the rows sent to
    Warp, or with ``key_pass`` the incoherent packets. With ``width > 0`` (camera rows of ``width``
    rays, ``base`` at the start of a band of 4 rows), packet ``tid`` is the 4 x 4 tile
    ``tid % ceil(width / 4)`` of band ``tid / ceil(width / 4)``."""
    lo = base + wp.tid() * 16
    hi = wp.min(lo + 16, n)
    tile = int(0)
    if width > 0:
        tiles = (width + 3) // 4
        lo = base + (wp.tid() // tiles) * 4 * width
        hi = wp.min(lo + 4 * width, n)
        tile = wp.tid() % tiles
    count = _search16(o, o_stride, d, d_stride, tmin, tmin_stride, tmax, tmax_stride, active, active_stride,
                      ignore, ignore_stride, centre, radius, band, flat_global, flat_shape, shape_enabled,
                      degenerate, face_mode, far_origin, edge, graze, dir2_min, dir2_max, fn, scene, edge_scene, coherent_cos, packet,
                      grown, grown_mode, grown_gap, fn1, lo, hi, width, tile,
                      out, redo, keys, order, key_pass, fast_key)
    if count > 0:
        _grab(redo_count, count)  # (chunks of one call run on several threads)


@wp.kernel(enable_backward=False)
def _search16_steal_kernel(
    o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    active: wp.array(dtype=wp.uint8), active_stride: int, ignore: wp.array(dtype=wp.int32), ignore_stride: int,
    centre: wp.vec3d, radius: float, band: float,
    flat_global: wp.array(dtype=wp.int32), flat_shape: wp.array(dtype=wp.int32),
    shape_enabled: wp.array(dtype=wp.uint8), degenerate: wp.array(dtype=wp.uint8), face_mode: int,
    far_origin: float, edge: float, graze: float, dir2_min: wp.float64, dir2_max: wp.float64,
    fn: wp.uint64, scene: wp.uint64, edge_scene: wp.uint64, coherent_cos: float, packet: int,
    grown: wp.array2d(dtype=float), grown_mode: int, grown_gap: float, fn1: wp.uint64, base: int, n: int, width: int,
    out: wp.array(dtype=wp.int32), redo: wp.array(dtype=wp.uint8), redo_count: wp.array(dtype=wp.int32),
    keys: wp.array(dtype=wp.int32), order: wp.array(dtype=wp.int32), key_pass: int, fast_key: int,
    counter: wp.array(dtype=wp.int32), items: int, step: int,
):
    """:func:`_search16_kernel`'s packets ``0 .. items - 1`` taken ``step`` at a time from ``counter``
    (zero before the call) by one such launch (dim 1) per thread: the threads share the work to the
    last ``step`` packets without a launch per chunk. The same packets, so the same answers."""
    tiles = int(1)
    if width > 0:
        tiles = (width + 3) // 4
    count = int(0)
    first = _grab(counter, step)
    while first < items:
        for i in range(first, wp.min(first + step, items)):
            lo = base + i * 16
            hi = wp.min(lo + 16, n)
            tile = int(0)
            if width > 0:
                lo = base + (i // tiles) * 4 * width
                hi = wp.min(lo + 4 * width, n)
                tile = i % tiles
            count += _search16(o, o_stride, d, d_stride, tmin, tmin_stride, tmax, tmax_stride, active, active_stride,
                               ignore, ignore_stride, centre, radius, band, flat_global, flat_shape, shape_enabled,
                               degenerate, face_mode, far_origin, edge, graze, dir2_min, dir2_max, fn, scene, edge_scene,
                               coherent_cos, packet, grown, grown_mode, grown_gap, fn1, lo, hi, width, tile, out, redo, keys, order, key_pass,
                               fast_key)
        first = _grab(counter, step)
    if count > 0:
        _grab(redo_count, count)


_GATHER = r"""
    // Rows lo .. hi - 1 of each gathered output from row order[i] of its ray array; arrays of stride 0
    // (broadcast) are left out (copy bit k of mask clear): their launch argument stays the array itself.
    // One loop per array over raw pointers (contiguous arrays; wp::index's strided address costs 2.5x):
    // independent loads in flight, the order re-read from cache.
    const int* ord = &wp::index(order, 0);
    if (mask & 1) { const wp::vec3* a = &wp::index(o, 0); wp::vec3* b = &wp::index(o_out, 0); for (int i = lo; i < hi; ++i) b[i] = a[ord[i]]; }
    if (mask & 2) { const wp::vec3* a = &wp::index(d, 0); wp::vec3* b = &wp::index(d_out, 0); for (int i = lo; i < hi; ++i) b[i] = a[ord[i]]; }
    if (mask & 4) { const float* a = &wp::index(tmin, 0); float* b = &wp::index(tmin_out, 0); for (int i = lo; i < hi; ++i) b[i] = a[ord[i]]; }
    if (mask & 8) { const float* a = &wp::index(tmax, 0); float* b = &wp::index(tmax_out, 0); for (int i = lo; i < hi; ++i) b[i] = a[ord[i]]; }
    if (mask & 16) { const uint8_t* a = &wp::index(active, 0); uint8_t* b = &wp::index(active_out, 0); for (int i = lo; i < hi; ++i) b[i] = a[ord[i]]; }
    if (mask & 32) { const int* a = &wp::index(ignore, 0); int* b = &wp::index(ignore_out, 0); for (int i = lo; i < hi; ++i) b[i] = a[ord[i]]; }
    return 0;
"""


@wp.func_native(_GATHER)
def _gather_rows(
    order: wp.array(dtype=wp.int32), o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3),
    tmin: wp.array(dtype=float), tmax: wp.array(dtype=float), active: wp.array(dtype=wp.uint8),
    ignore: wp.array(dtype=wp.int32), o_out: wp.array(dtype=wp.vec3), d_out: wp.array(dtype=wp.vec3),
    tmin_out: wp.array(dtype=float), tmax_out: wp.array(dtype=float), active_out: wp.array(dtype=wp.uint8),
    ignore_out: wp.array(dtype=wp.int32), mask: int, lo: int, hi: int,
) -> int:
    """Rows ``lo .. hi - 1``: ``out[i] = array[order[i]]`` for the arrays whose bit is set in ``mask``
    (all contiguous)."""
    ...


#: Rows per thread of :func:`_gather_rows_kernel` (Warp's per-thread cost on the CPU, amortised).
GATHER_ROWS = wp.constant(64)


@wp.kernel(enable_backward=False)
def _gather_rows_kernel(
    order: wp.array(dtype=wp.int32), o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3),
    tmin: wp.array(dtype=float), tmax: wp.array(dtype=float), active: wp.array(dtype=wp.uint8),
    ignore: wp.array(dtype=wp.int32), o_out: wp.array(dtype=wp.vec3), d_out: wp.array(dtype=wp.vec3),
    tmin_out: wp.array(dtype=float), tmax_out: wp.array(dtype=float), active_out: wp.array(dtype=wp.uint8),
    ignore_out: wp.array(dtype=wp.int32), mask: int, base: int, n: int,
):
    """``GATHER_ROWS`` rows from ``base + tid * GATHER_ROWS`` (up to ``n``) of :func:`_gather_rows`."""
    lo = base + wp.tid() * GATHER_ROWS
    _gather_rows(order, o, d, tmin, tmax, active, ignore, o_out, d_out, tmin_out, tmax_out, active_out, ignore_out,
                 mask, lo, wp.min(lo + GATHER_ROWS, n))
