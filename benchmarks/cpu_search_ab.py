"""Issue 12: rayd's CPU Embree search alone, one thread, two source trees in one process (A/B).

The arguments of one ``Scene.shadow_test`` call are captured per tree, then each tree's
``cpu_embree.search`` runs with its chunks in turn on the calling thread (process CPU time,
medians, the trees interleaved per repeat); the outputs (ids and re-search flags) are compared
bit for bit. With a stand-in library (``fake16``, as for ``cpu_embree_versions.py``: every lane
a hit halfway) in place of ``rtcIntersect16``, what is timed is ray loads, preparation, checks and
Python, without Embree.

Usage: python benchmarks/cpu_search_ab.py OTHER_SRC OTHER_NAME terrain|sphere [repeats] [stand-in.so]
(the other tree as for ``cpu_ab.py``).
"""
import ctypes, importlib, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
from benchmarks import workloads

wl = workloads.terrain(256, 512) if sys.argv[3] == "terrain" else workloads.sphere(129, 256, 1 << 18)
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 15
stand_in = ctypes.cast(ctypes.CDLL(sys.argv[5]).fake16, ctypes.c_void_p).value if len(sys.argv) > 5 else None
runs = {}
for tag, pkg in (("A " + sys.argv[2], sys.argv[2]), ("B this", "rayd")):
    mod, ce = importlib.import_module(pkg + ".torch"), importlib.import_module(pkg + ".engine.cpu_embree")
    api = importlib.import_module(pkg + ".engine.embree_api")
    scene = mod.Scene(); scene.add_mesh(mod.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces))); scene.build()
    ray = mod.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
    captured, real = [], ce.search
    ce.search = lambda *a, real=real, captured=captured: (captured.append(a), real(*a))
    for _ in range(3):
        scene.shadow_test(ray)
    ce.search = real
    ce.run_parallel = lambda run, parts: [run(k) for k in range(parts)]
    if stand_in:
        api.intersect_pointer = lambda width: stand_in
    accel, rays, out, warp_search = captured[-1]
    redo = lambda ce=ce, accel=accel, out=out: ce.mirror(accel.flat)._scratch["redo"]
    runs[tag] = (lambda ce=ce, a=captured[-1]: ce.search(*a), out, redo)
res = {k: [] for k in runs}
for rep in range(reps + 1):
    for k in (list(runs) if rep % 2 else list(runs)[::-1]):
        c0 = time.process_time(); runs[k][0](); dt = time.process_time() - c0
        if rep:
            res[k].append(dt)
(fa, oa, ra), (fb, ob, rb) = runs.values()
same = np.array_equal(oa.numpy(), ob.numpy()) and np.array_equal(ra().numpy(), rb().numpy())
print(f"{wl.name}: search on one thread{' (Embree replaced by a stand-in)' if stand_in else ''}, {reps} repeats, "
      f"load {os.getloadavg()[0]:.1f}, outputs bit-equal: {same}")
for k, v in res.items():
    print(f"  {k:16s} cpu {np.median(v) * 1e3:7.2f} ms (min {min(v) * 1e3:6.2f})")
a, b = (np.median(v) for v in res.values())
print(f"  B / A: {b / a:.3f}")
