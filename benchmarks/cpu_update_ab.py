"""Issue 12, session 25: an optimisation step's queries on the CPU, two rayd trees in one process beside Mitsuba llvm.

Each case is one step: every vertex moved (the workload's two vertex sets in turn), ``sync()``, then the closest hits
with ``RayFlags.Minimal`` (Mitsuba: its parameters updated, i.e. the scene rebuilt, then
``ray_intersect_preliminary``). Cases run in a new random order per repeat; process CPU and wall ms, medians. The
other tree is a renamed copy of rayd as in ``cpu_ab.py``; both trees' answers are compared bit for bit.

Usage: python benchmarks/cpu_update_ab.py OTHER_SRC OTHER_NAME terrain|sphere [repeats]
(Mitsuba needs DRJIT_LIBLLVM_PATH, e.g. /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1).
"""
import importlib, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
from benchmarks import workloads
import rayd.torch as rt

other = importlib.import_module(sys.argv[2] + ".torch")
wl = workloads.terrain(256, 512) if sys.argv[3] == "terrain" else workloads.sphere(129, 256, 1 << 18)
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 9
sets = [torch.from_numpy(wl.vertices), torch.from_numpy(wl.moved_vertices())]
import benchmarks.engines.mitsuba3 as m3
E = [v for k, v in vars(m3).items() if isinstance(v, type) and getattr(v, "name", "") == "mitsuba3"][0]
mi = E("cpu"); mi.load(wl)
step = {"mitsuba": 0}


def mitsuba_step():
    step["mitsuba"] += 1
    mi.update(step["mitsuba"] % 2)
    mi.closest(minimal=True)
    mi.synchronize()


cases = {"mitsuba update+Minimal": mitsuba_step}
trees = {}
for name, mod in (("A " + sys.argv[2], other), ("B this", rt)):
    scene = mod.Scene(); scene.add_mesh(mod.Mesh(sets[0].clone(), torch.from_numpy(wl.faces)), dynamic=True)
    scene.build()
    ray = mod.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
    trees[name] = [scene, ray, 0, None]

    def run(t=trees[name], mod=mod):
        t[2] += 1
        t[0].update_mesh_vertices(0, sets[t[2] % 2])
        t[0].sync()
        t[3] = t[0].intersect(t[1], flags=mod.RayFlags.Minimal)
    cases[name + " update+Minimal"] = run
for f in cases.values():
    for _ in range(2):
        f()
res = {k: ([], []) for k in cases}
names = list(cases)
rng = np.random.default_rng(0)
for rep in range(reps):
    for k in [names[i] for i in rng.permutation(len(names))]:
        t0, c0 = time.perf_counter(), time.process_time()
        cases[k]()
        res[k][0].append((time.process_time() - c0) * 1e3); res[k][1].append((time.perf_counter() - t0) * 1e3)
        time.sleep(0.03)
(a, b) = trees.values()
same = a[2] % 2 == b[2] % 2 and torch.equal(a[3].t, b[3].t) and torch.equal(a[3].prim_id, b[3].prim_id)
load = open("/proc/loadavg").read().split()[:3]
print(f"# {sys.argv[3]}: {wl.num_triangles} tris, {wl.num_rays} rays, {reps} repeats, load {' '.join(load)}; "
      f"same answers A/B: {same}")
base = np.median(res["mitsuba update+Minimal"][0])
for k, (cpu, wall) in res.items():
    print(f"{k:34s} CPU {np.median(cpu):8.1f} ms  wall {np.median(wall):8.1f} ms  CPU / Mitsuba {np.median(cpu) / base:.2f}")
ka, kb = names[1], names[2]
print(f"B / A: CPU {np.median(res[kb][0]) / np.median(res[ka][0]):.3f}  wall {np.median(res[kb][1]) / np.median(res[ka][1]):.3f}")
