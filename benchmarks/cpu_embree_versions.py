"""Issue 12: Embree alone, one thread, the same rays: rayd's scenes (Embree 4.4 of embreex, robust,
vertex caps) beside Embree 3 as Mitsuba 3.9 calls it (its bundled ``libembree3``: one scene of
``RTC_BUILD_QUALITY_HIGH``, ``RTC_SCENE_FLAG_NONE``, ``rtcIntersect16`` packets of 16 consecutive
rays, the coherent flag from the workload).

Rays: centre-relative float32 origins and directions, ``tfar = inf``; the terrain's either in row
order (Mitsuba's packets) or in rayd's 4 x 4 tiles; the sphere's in row order or in the Morton
order of their origins (rayd sorts incoherent batches). Process CPU time of one Warp launch (one
thread), medians of ``repeats``, configurations interleaved per repeat. Reference only: Mitsuba's
library is loaded to measure it, never by rayd.

With a third argument, the path of a shared library exporting ``fake16`` (a stand-in for
``rtcIntersect16`` that answers every lane with a hit halfway, e.g. compiled from ``void fake16(const
int* valid, void* scene, float* R, void* args)``), rayd's search is also timed with that stand-in in
place of Embree: what is left is ray preparation, checks and Python.

Session 24 added the grown non-robust scenes (:mod:`rayd.engine.cpu_embree_grown`) and rayd's search with
``GROWN = 0`` (robust + caps) and ``GROWN = 1``.

Usage: python benchmarks/cpu_embree_versions.py terrain|sphere [repeats] [stand-in.so]
"""
import ctypes, os, re, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, warp as wp
from benchmarks import workloads
from rayd.engine import cpu_embree, embree_api
from rayd.engine.cpu_embree_caps import vertex_caps
from rayd.engine.cpu_embree_grown import grown_faces

wp.config.quiet = True
wp.init()

_E3 = r"""
    // Embree 3's rtcIntersect16(valid, scene, RTCIntersectContext*, RTCRayHit16*): context {flags, filter, instID}.
    typedef void (*fn_t)(const int*, void*, void*, void*);
    struct { int flags; void* filter; unsigned int inst; } ctx = {coherent_flag, nullptr, 0xFFFFFFFFu};
    struct { int flags; unsigned int features; void* context; void* filter; void* intersect; float width; void* pad[2]; }
        args = {coherent_flag ? (1 << 16) : 0, 0xFFFFFFFFu, nullptr, nullptr, nullptr, 0.0f, {nullptr, nullptr}};
    alignas(64) float R[16 * 32];
    alignas(64) int valid[16];
    unsigned int* U = (unsigned int*)R;
    const float* org = (const float*)origin.data; const float* dir = (const float*)direction.data;
    int hits = 0;
    for (int j = 0; j < 16; ++j) {
        int i = lo + j; bool ok = i < hi; int s = ok ? i : lo;
        valid[j] = ok ? -1 : 0;
        R[0 * 16 + j] = org[3 * s]; R[1 * 16 + j] = org[3 * s + 1]; R[2 * 16 + j] = org[3 * s + 2]; R[3 * 16 + j] = 0.0f;
        R[4 * 16 + j] = dir[3 * s]; R[5 * 16 + j] = dir[3 * s + 1]; R[6 * 16 + j] = dir[3 * s + 2]; R[7 * 16 + j] = 0.0f;
        R[8 * 16 + j] = __builtin_inff(); U[9 * 16 + j] = 0xFFFFFFFFu; U[10 * 16 + j] = 0u; U[11 * 16 + j] = 0u;
        U[17 * 16 + j] = 0xFFFFFFFFu; U[18 * 16 + j] = 0xFFFFFFFFu; U[19 * 16 + j] = 0xFFFFFFFFu;
    }
    ((fn_t)fn)(valid, (void*)scene, version == 3 ? (void*)&ctx : (void*)R, version == 3 ? (void*)R : (void*)&args);
    for (int j = 0; j < 16; ++j) if (valid[j] && (U[18 * 16 + j] == 0u || R[8 * 16 + j] < 0.0f)) ++hits;
    return hits;
"""


@wp.func_native(_E3)
def _trace16(fn: wp.uint64, scene: wp.uint64, version: int, coherent_flag: int, origin: wp.array(dtype=wp.vec3),
             direction: wp.array(dtype=wp.vec3), lo: int, hi: int) -> int:
    ...


@wp.kernel(enable_backward=False)
def _trace(fn: wp.uint64, scene: wp.uint64, version: int, coherent_flag: int, n: int, origin: wp.array(dtype=wp.vec3),
           direction: wp.array(dtype=wp.vec3), hits: wp.array(dtype=wp.int32)):
    lo = wp.tid() * 16
    wp.atomic_add(hits, 0, _trace16(fn, scene, version, coherent_flag, origin, direction, lo, wp.min(lo + 16, n)))


class Embree3Scene:
    """Mitsuba 3.9's ``libembree3`` (reference): one triangle geometry per mesh, HIGH quality, given flags."""

    def __init__(self, meshes, robust=False, quality=2):
        import mitsuba
        path = os.path.join(os.path.dirname(mitsuba.__file__), "libembree3.so")
        lib = ctypes.CDLL(path)
        # Mitsuba's copy exports its functions in C++ namespace ``mitsuba``: find the mangled names.
        import subprocess
        syms = {}
        for line in subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout.split("\n"):
            m = re.match(r"\S+ T (_ZN7mitsuba\d+(rtc\w+?)E\S*)$", line.strip())
            if m:
                syms.setdefault(m.group(2), m.group(1))
        get = lambda name: getattr(lib, syms[name])
        vp, ui = ctypes.c_void_p, ctypes.c_uint
        for name, res, args in (("rtcNewDevice", vp, [ctypes.c_char_p]), ("rtcNewScene", vp, [vp]),
                                ("rtcNewGeometry", vp, [vp, ctypes.c_int]),
                                ("rtcSetNewGeometryBuffer", vp, [vp, ctypes.c_int, ui, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]),
                                ("rtcCommitGeometry", None, [vp]), ("rtcAttachGeometryByID", None, [vp, vp, ui]),
                                ("rtcSetSceneFlags", None, [vp, ctypes.c_int]), ("rtcCommitScene", None, [vp]),
                                ("rtcSetSceneBuildQuality", None, [vp, ctypes.c_int])):
            f = get(name); f.restype, f.argtypes = res, args
        self.lib, dev = lib, get("rtcNewDevice")(None)
        self.ptr = get("rtcNewScene")(dev)
        get("rtcSetSceneBuildQuality")(self.ptr, quality)
        get("rtcSetSceneFlags")(self.ptr, 4 if robust else 0)
        for k, (v, f) in enumerate(meshes):
            g = get("rtcNewGeometry")(dev, 0)
            for kind, fmt, data in ((1, 0x9003, np.ascontiguousarray(v, np.float32)), (0, 0x5003, np.ascontiguousarray(f, np.uint32))):
                buf = get("rtcSetNewGeometryBuffer")(g, kind, 0, fmt, 12, len(data))
                ctypes.memmove(buf, data.ctypes.data, data.nbytes)
            get("rtcCommitGeometry")(g); get("rtcAttachGeometryByID")(self.ptr, g, k)
        get("rtcCommitScene")(self.ptr)
        self.fn = ctypes.cast(get("rtcIntersect16"), ctypes.c_void_p).value
        self.occluded = ctypes.cast(get("rtcOccluded16"), ctypes.c_void_p).value


def compact(scene):
    """``scene`` recommitted with ``RTC_SCENE_FLAG_ROBUST | RTC_SCENE_FLAG_COMPACT`` (smaller nodes)."""
    lib = embree_api.library()
    lib.rtcSetSceneFlags(scene.ptr, 4 | 2)
    lib.rtcCommitScene(scene.ptr)
    return scene


def morton_order(o):
    lo, hi = o.min(0), o.max(0)
    q = ((o - lo) / (hi - lo + 1e-30) * 1023).astype(np.uint64)
    code = np.zeros(len(o), np.uint64)
    for b in range(10):
        for a in range(3):
            code |= ((q[:, a] >> np.uint64(b)) & np.uint64(1)) << np.uint64(3 * b + a)
    return np.argsort(code, kind="stable")


def tile_order(side):
    i = np.arange(side * side).reshape(side // 4, 4, side // 4, 4)  # band, row in band, tile, column
    return i.transpose(0, 2, 1, 3).reshape(-1)


def main():
    which = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    wl = workloads.terrain(256, 512) if which == "terrain" else workloads.sphere(129, 256, 1 << 18)
    v = wl.vertices.astype(np.float64); f = wl.faces
    lo, hi = v.min(0), v.max(0); c = 0.5 * (lo + hi); R = float(np.abs(v - c).max())
    rel = (v - c).astype(np.float32)
    caps = vertex_caps(v - c, cpu_embree.CAP * R)
    o = (wl.o.astype(np.float64) - c).astype(np.float32); d = wl.d.astype(np.float32)
    orders = {"row": np.arange(len(o))}
    orders["tiles" if which == "terrain" else "morton"] = tile_order(512) if which == "terrain" else morton_order(o)
    coherent = 1 if wl.coherent else 0
    tri = [(rel, f)]
    # session 24: each face grown by GROW * R in its plane, per-face vertices, not robust, no caps
    a, b, cc = (v - c)[f[:, 0]], (v - c)[f[:, 1]], (v - c)[f[:, 2]]
    degenerate = ~np.any(np.cross(b - a, cc - a) != 0.0, axis=1)
    gp, gf, _, gs, _ = grown_faces(a, b, cc, cpu_embree.GROW * R, degenerate)
    grown = [(gp, gf)] + ([gs] if gs is not None else [])
    scenes = {
        "E4 grown, not robust, two-level (rayd 24 coherent)": (4, embree_api.Scene(grown, quality=0, geometry_quality=1, robust=False,
                                                                                   argument_filter=True)),
        "E4 grown, not robust, merged HIGH (rayd 24 incoherent)": (4, embree_api.Scene(grown, quality=2, robust=False,
                                                                                       argument_filter=True)),
        "E4 grown, not robust, merged HIGH, no filter flag": (4, embree_api.Scene(grown, quality=2, robust=False)),
        "E3 HIGH not robust (Mitsuba)": (3, Embree3Scene(tri)),
        "E3 HIGH robust": (3, Embree3Scene(tri, robust=True)),
        "E4 HIGH not robust": (4, embree_api.Scene(tri, quality=2, robust=False)),
        "E4 HIGH robust": (4, embree_api.Scene(tri, quality=2)),
        "E4 MEDIUM robust": (4, embree_api.Scene(tri)),
        "E4 robust + caps, two-level (rayd coherent)": (4, embree_api.Scene(tri + [caps], quality=0, geometry_quality=1)),
        "E4 robust + caps, merged HIGH (rayd incoherent)": (4, embree_api.Scene(tri + [caps], quality=2)),
        "E4 not robust + caps, merged HIGH": (4, embree_api.Scene(tri + [caps], quality=2, robust=False)),
        "E4 robust + caps, two-level, COMPACT": (4, compact(embree_api.Scene(tri + [caps], quality=0, geometry_quality=1))),
        # the caps of one axis only (vertex_caps makes the x, y, z caps of a vertex in turn): enough for
        # rays whose dominant axis is that one
        "E4 robust + z caps only, two-level": (4, embree_api.Scene(
            tri + [(caps[0], caps[1].reshape(-1, 3, 3)[:, 2].copy())], quality=0, geometry_quality=1)),
        "E4 robust + z caps only, merged HIGH": (4, embree_api.Scene(
            tri + [(caps[0], caps[1].reshape(-1, 3, 3)[:, 2].copy())], quality=2)),
    }
    fn4 = embree_api.intersect16_pointer()
    occ4 = ctypes.cast(embree_api.library().rtcOccluded16, ctypes.c_void_p).value
    # rayd's whole search (ray preparation, rtcIntersect16 through rayd's own scenes, checks) on one thread:
    # the arguments of one Scene.intersect call captured, then cpu_embree.search called with serial chunks.
    import torch, rayd.torch as rt
    searches = {}
    for grown_mode in (0, 1):  # session 24: rayd's search with robust mode + caps, and with the grown scene
        cpu_embree.GROWN = grown_mode
        scene = rt.Scene(); scene.add_mesh(rt.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces))); scene.build()
        ray = rt.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
        captured, real = [], cpu_embree.search
        cpu_embree.search = lambda *a: (captured.append(a), real(*a))
        for _ in range(3):
            scene.shadow_test(ray)
        cpu_embree.search = real
        searches[grown_mode] = (scene, captured[-1])
    cpu_embree.run_parallel = lambda run, parts: [run(k) for k in range(parts)]
    accel, rays, out, warp_search = searches[0][1]
    arrays = {k: (wp.array(o[p], dtype=wp.vec3), wp.array(d[p], dtype=wp.vec3)) for k, p in orders.items()}
    n = len(o)
    res = {}
    stand_in = ctypes.cast(ctypes.CDLL(sys.argv[3]).fake16, ctypes.c_void_p).value if len(sys.argv) > 3 else None
    real_pointer = embree_api.intersect_pointer
    for rep in range(reps + 1):
        for grown_mode, label in ((0, "robust + caps"), (1, "grown (session 24)")):
            c0 = time.process_time()
            cpu_embree.search(*searches[grown_mode][1])
            if rep:
                res.setdefault((f"rayd cpu_embree.search (prep., trace, checks), {label}", "rayd"), []).append(time.process_time() - c0)
        if stand_in:
            embree_api.intersect_pointer = lambda width: stand_in
            c0 = time.process_time()
            cpu_embree.search(accel, rays, out, warp_search)
            if rep:
                res.setdefault(("rayd cpu_embree.search, Embree replaced by a stand-in", "rayd"), []).append(time.process_time() - c0)
            embree_api.intersect_pointer = real_pointer
        for name, (ver, sc) in scenes.items():
            for k, (ao, ad) in arrays.items():
                for query in ("closest", "occluded"):  # rtcIntersect16 / rtcOccluded16 (any hit)
                    if query == "occluded" and "rayd" not in name and "Mitsuba" not in name:
                        continue
                    hits = wp.zeros(1, dtype=wp.int32)
                    fn = (sc.fn if ver == 3 else fn4) if query == "closest" else (sc.occluded if ver == 3 else occ4)
                    c0 = time.process_time()
                    wp.launch(_trace, dim=(n + 15) // 16, inputs=[fn, sc.ptr, ver, coherent, n, ao, ad, hits])
                    dt = time.process_time() - c0
                    if rep:
                        res.setdefault((name + ("" if query == "closest" else ", rtcOccluded16"), k), []).append(dt)
    print(f"{wl.name}: Embree alone, 1 thread, {reps} repeats interleaved, load {os.getloadavg()[0]:.1f}; "
          f"process CPU ms, median (min); coherent flag {coherent}")
    for (name, k), t in res.items():
        print(f"  {name:66s} {k:6s} {np.median(t) * 1e3:7.1f} ({min(t) * 1e3:6.1f})")


if __name__ == "__main__":
    main()
