"""Issue 12, session 24: rayd's CPU Embree search with robust mode + caps (``GROWN = 0``) against the grown
non-robust scene (``GROWN = 1``, :mod:`rayd.engine.cpu_embree_grown`) at several margins ``GROW``, one
process, one thread (``run_parallel`` made serial), configurations interleaved per repeat; process CPU ms
of ``cpu_embree.search`` (preparation, Embree, checks, second traces, Warp re-search), medians (min), the
share of rays re-searched by Warp, and the answers against the Warp path.

Usage: python benchmarks/cpu_grown_ab.py terrain|sphere [repeats] [GROW,GROW,...] [--shadow]
"""
import os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, torch, warp as wp
from benchmarks import workloads
import rayd.torch as rt
from rayd.engine import cpu_embree

wp.config.quiet = True
which = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
grows = [float(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 and not sys.argv[3].startswith("-") else [2.0**-13, 2.0**-12]
wl = workloads.terrain(256, 512) if which == "terrain" else workloads.sphere(129, 256, 1 << 18)
ray = rt.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
query = (lambda s: s.shadow_test(ray)) if "--shadow" in sys.argv else (lambda s: s.intersect(ray).prim_id)


def scene_of():
    s = rt.Scene()
    s.add_mesh(rt.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces)), dynamic=True)
    s.build()
    return s


cpu_embree.set_enabled(False)
ref = query(scene_of())
cpu_embree.set_enabled(True)
configs = [("robust + caps (main)", 0, cpu_embree.GROW)] + [(f"grown {g:.3g} R", 1, g) for g in grows]
searches, agree = {}, {}
for label, grown, grow in configs:
    cpu_embree.GROWN, cpu_embree.GROW = grown, grow
    s = scene_of()
    captured, real = [], cpu_embree.search
    cpu_embree.search = lambda *a: (captured.append(a), real(*a))
    for _ in range(3):
        out = query(s)
    cpu_embree.search = real
    searches[label] = captured[-1]
    agree[label] = bool(torch.equal(out, ref))
parallel = cpu_embree.run_parallel
cpu_embree.run_parallel = lambda run, parts: [run(k) for k in range(parts)]
res = {k: [] for k in searches}
redone = {k: 0.0 for k in searches}
rng = np.random.default_rng(0)
for rep in range(reps + 1):
    for k in [list(searches)[i] for i in rng.permutation(len(searches))]:
        st = dict(cpu_embree.stats)
        c0 = time.process_time()
        cpu_embree.search(*searches[k])
        dt = time.process_time() - c0
        if rep:
            res[k].append(dt)
        redone[k] = (cpu_embree.stats["redone"] - st["redone"]) / (cpu_embree.stats["rays"] - st["rays"])
cpu_embree.run_parallel = parallel
print(f"{wl.name} ({'shadow_test' if '--shadow' in sys.argv else 'intersect'}): cpu_embree.search, 1 thread, {reps} repeats "
      f"interleaved, load {os.getloadavg()[0]:.1f}; process CPU ms, median (min)")
base = np.median(res[configs[0][0]])
for k, t in res.items():
    print(f"  {k:22s} {np.median(t) * 1e3:7.1f} ({min(t) * 1e3:6.1f})  {np.median(t) / base:5.3f}x  re-searched "
          f"{100 * redone[k]:.3f} %  answers = Warp path: {agree[k]}")
