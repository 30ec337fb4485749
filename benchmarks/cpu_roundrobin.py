"""Issue 12: rayd (Embree CPU path) vs Mitsuba llvm vs raw embreex in one process, round-robin per repeat; CPU (process) and wall ms.

Usage: python benchmarks/cpu_roundrobin.py terrain|sphere [repeats]  (Mitsuba needs DRJIT_LIBLLVM_PATH on system LLVM 15)
"""
import sys, time, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, torch
from benchmarks import workloads
import benchmarks.engines.mitsuba3 as m3
import rayd.torch as rt
wl = workloads.terrain(256, 512) if sys.argv[1] == "terrain" else workloads.sphere(129, 256, 1 << 18)
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
E = [v for k, v in vars(m3).items() if isinstance(v, type) and getattr(v, "name", "") == "mitsuba3"][0]
mi = E("cpu"); mi.load(wl)
import embreex.rtcore_scene as ers, embreex.mesh_construction as emc
es = ers.EmbreeScene(); emc.TriangleMesh(es, wl.vertices, wl.faces); es.run(wl.o[:1], wl.d[:1])
scene = rt.Scene(); scene.add_mesh(rt.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces)), dynamic=True); scene.build()
ray = rt.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
cases = {
    "rayd All": lambda: scene.intersect(ray),
    "rayd Minimal": lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal),
    "rayd shadow_test": lambda: scene.shadow_test(ray),
    "mitsuba All": lambda: (mi.closest(), mi.synchronize()),
    "mitsuba Minimal": lambda: (mi.closest(minimal=True), mi.synchronize()),
    "embreex 1 thread": lambda: es.run(wl.o, wl.d, output=1),
}
for f in cases.values():
    for _ in range(2): f()
res = {k: ([], []) for k in cases}
for _ in range(reps):
    for k, f in cases.items():
        t0, c0 = time.perf_counter(), time.process_time(); f()
        res[k][0].append(time.perf_counter() - t0); res[k][1].append(time.process_time() - c0)
mw, mc = np.median(res["mitsuba All"][0]), np.median(res["mitsuba All"][1])
print(f"{wl.name}: {reps} round-robin repeats, load {os.getloadavg()[0]:.1f}, torch threads {torch.get_num_threads()}")
for k, (w, c) in res.items():
    print(f"  {k:18s} wall {np.median(w)*1e3:7.1f} (min {min(w)*1e3:6.1f})  cpu {np.median(c)*1e3:7.1f} (min {min(c)*1e3:6.1f})")
