"""Issue 12, session 24: the cost of a fresh scene on the CPU Embree path, two rayd trees in one process
(the other renamed, as in ``cpu_ab.py``): ``build()``, the first query (Warp), the second (the Embree scene
built, then traced), the third (Embree); wall and process CPU ms, medians over repeats, trees alternated.

Usage: python benchmarks/cpu_build_ab.py OTHER_SRC OTHER_NAME terrain|sphere [repeats]
"""
import importlib, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
from benchmarks import workloads
import rayd.torch as rt

other = importlib.import_module(sys.argv[2] + ".torch")
wl = workloads.terrain(256, 512) if sys.argv[3] == "terrain" else workloads.sphere(129, 256, 1 << 18)
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
res = {}
for rep in range(reps + 1):
    for name, mod in ((sys.argv[2], other), ("this", rt))[:: 1 if rep % 2 else -1]:
        steps = []
        mark = lambda: steps.append((time.perf_counter(), time.process_time()))  # noqa: E731
        mark()
        scene = mod.Scene(); scene.add_mesh(mod.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces)), dynamic=True)
        scene.build(); mark()
        ray = mod.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
        for _ in range(3):
            scene.intersect(ray); mark()
        if rep:
            for k, label in enumerate(("build()", "query 1 (Warp)", "query 2 (Embree build + trace)", "query 3 (Embree)")):
                (w0, c0), (w1, c1) = steps[k], steps[k + 1]
                res.setdefault((name, label), []).append((w1 - w0, c1 - c0))
print(f"{wl.name}: {reps} repeats, trees alternated, load {os.getloadavg()[0]:.1f}; ms, median wall / process CPU")
for (name, label), v in res.items():
    v = np.array(v) * 1e3
    print(f"  {name:10s} {label:32s} wall {np.median(v[:, 0]):8.1f}  cpu {np.median(v[:, 1]):8.1f}")
