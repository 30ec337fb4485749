"""Issue 12 (4): nearest-edge queries on the CPU, this tree against another rayd tree in one process.

``nearest_edge`` of points and of rays on the terrain (256 k queries), round-robin per repeat; process CPU
and wall ms, medians; the answers of both trees compared bit for bit. The other tree as in ``cpu_ab.py``.

Usage: python benchmarks/cpu_edges_ab.py OTHER_SRC OTHER_NAME [repeats]
"""
import importlib, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
from benchmarks import workloads
import rayd.torch as rt

other = importlib.import_module(sys.argv[2] + ".torch")
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 7
wl = workloads.terrain(256, 512)
rng = np.random.default_rng(0)
points = torch.from_numpy(rng.uniform(-1, 1, (1 << 18, 3)).astype(np.float32))
cases, out = {}, {}
for name, mod in (("A " + sys.argv[2], other), ("B this", rt)):
    scene = mod.Scene(); scene.add_mesh(mod.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces))); scene.build()
    ray = mod.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
    cases[name + " points"] = (lambda s=scene: s.nearest_edge(points))
    cases[name + " rays"] = (lambda s=scene, r=ray: s.nearest_edge(r))
for f in cases.values():
    for _ in range(2): f()
a, b = [cases[k]() for k in cases if k.endswith("points")]
c, d = [cases[k]() for k in cases if k.endswith("rays")]
same = all(torch.equal(x.distance, y.distance) and torch.equal(x.global_edge_id, y.global_edge_id) for x, y in ((a, b), (c, d)))
res = {k: ([], []) for k in cases}
names = list(cases)
for rep in range(reps):
    for k in names[rep % len(names):] + names[: rep % len(names)]:
        t0, c0 = time.perf_counter(), time.process_time(); cases[k]()
        res[k][0].append(time.perf_counter() - t0); res[k][1].append(time.process_time() - c0)
print(f"{wl.name} edges: {reps} round-robin repeats, load {os.getloadavg()[0]:.1f}, answers bit-equal: {same}")
for k, (w, c) in res.items():
    print(f"  {k:22s} wall {np.median(w)*1e3:7.1f} (min {min(w)*1e3:6.1f})  cpu {np.median(c)*1e3:7.1f} (min {min(c)*1e3:6.1f})")
