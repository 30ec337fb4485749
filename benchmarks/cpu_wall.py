"""Issue 12: wall and CPU time of rayd (CPU Embree path) and Mitsuba llvm in one process, interleaved.

Per repeat, in a rotating order: rayd ``intersect`` (All) and ``shadow_test`` with torch at 2 and at 1
intra-op threads (``torch.set_num_threads``), Mitsuba ``ray_intersect`` (All) and ``ray_test`` (any hit),
each case timed as the 3rd of 3 calls in a row (``warm``: what ``run.py``'s loop of timed calls does), right
after one Mitsuba ``ray_intersect`` (``after Mitsuba``) and right after one rayd ``shadow_test`` (``after rayd``;
``cpu_ab.py`` interleaves the engines so). Wall (``perf_counter``) and process CPU
(``process_time``, all threads) ms, medians (min).

Usage: python benchmarks/cpu_wall.py terrain|sphere [repeats]
(Mitsuba needs DRJIT_LIBLLVM_PATH, e.g. /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1).
"""
import os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, torch
from benchmarks import workloads
import rayd.torch as rt
import benchmarks.engines.mitsuba3 as m3

wl = workloads.terrain(256, 512) if sys.argv[1] == "terrain" else workloads.sphere(129, 256, 1 << 18)
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
E = [v for k, v in vars(m3).items() if isinstance(v, type) and getattr(v, "name", "") == "mitsuba3"][0]
mi = E("cpu"); mi.load(wl)
scene = rt.Scene(); scene.add_mesh(rt.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces)), dynamic=True)
scene.build()
ray = rt.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))


def threads(k, f):
    def run():
        torch.set_num_threads(k)
        try:
            return f()
        finally:
            torch.set_num_threads(2)
    return run


def mitsuba_test():
    m = mi.scene.ray_test(mi.ray, coherent=mi.coherent)
    mi.dr.eval(m)
    mi.dr.sync_thread()


cases = {
    "rayd All, torch 2 threads": lambda: scene.intersect(ray),
    "rayd All, torch 1 thread": threads(1, lambda: scene.intersect(ray)),
    "rayd shadow_test, torch 2": lambda: scene.shadow_test(ray),
    "rayd shadow_test, torch 1": threads(1, lambda: scene.shadow_test(ray)),
    "mitsuba All": lambda: (mi.closest(), mi.synchronize()),
    "mitsuba ray_test": mitsuba_test,
}
for f in cases.values():
    for _ in range(3):
        f()
res = {}
names = list(cases)
modes = {"warm": None, "after Mitsuba": cases["mitsuba All"], "after rayd": cases["rayd shadow_test, torch 2"]}
for rep in range(reps):
    for k in names[rep % len(names):] + names[: rep % len(names)]:
        for mode, before in modes.items():
            f = cases[k]
            if before is None:
                f(); f()
            else:
                before()
            t0, c0 = time.perf_counter(), time.process_time()
            f()
            res.setdefault((k, mode), []).append((time.perf_counter() - t0, time.process_time() - c0))
print(f"{wl.name}: {reps} repeats, load {os.getloadavg()[0]:.1f}; wall / process CPU ms, median (min)")
base = {m: np.median([w for w, c in res[("mitsuba All", m)]]) for m in modes}
for (k, mode), v in res.items():
    w, c = np.array(v).T * 1e3
    print(f"  {k:28s} {mode:13s} wall {np.median(w):7.1f} ({w.min():6.1f})  cpu {np.median(c):7.1f} ({c.min():6.1f})"
          f"  wall / Mitsuba All {np.median(w) / base[mode] / 1e3:5.2f}x")
