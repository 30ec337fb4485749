"""Issue: count_intersections counts crossings (session 20, helper limits20): the all-hits queries of two rayd
source trees in one process (A/B), on the CPU or CUDA.

``count_intersections`` (float32 and float64 rays) and ``intersect_all(ray, 8, flags=Minimal)`` on the bumpy
sphere workload (incoherent rays through the sphere, 2 crossings each), four nested copies of it (``shells``,
about 6) and the terrain (coherent, 1 hit). The trees run interleaved, a new order per repeat; CPU: process CPU time, CUDA:
wall time between synchronisations; medians and the ratio B / A. Counts and listed hits are compared
(they may differ only on rays that touch a surface: none of these workloads' random rays should).

The other tree is a renamed copy of rayd, as for ``cpu_ab.py``:
``git archive main src/rayd | tar -x -C /tmp/m && cd /tmp/m/src && mv rayd rayd_main &&
grep -rlE '\\brayd\\b' rayd_main | xargs sed -i -E 's/\\brayd\\b/rayd_main/g'``.

Usage: python benchmarks/all_hits_ab.py OTHER_SRC OTHER_NAME [--device cpu|cuda] [--rays N] [--repeats R]
"""
import argparse, importlib, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
parser = argparse.ArgumentParser()
parser.add_argument("other_src")
parser.add_argument("other_name")
parser.add_argument("--device", default="cpu")
parser.add_argument("--rays", type=int, default=1 << 16)
parser.add_argument("--repeats", type=int, default=9)
parser.add_argument("--workloads", default="sphere,shells,terrain")
args = parser.parse_args()
sys.path.insert(0, args.other_src)
import numpy as np, torch
from benchmarks import workloads

trees = {"A " + args.other_name: importlib.import_module(args.other_name + ".torch"),
         "B this": importlib.import_module("rayd.torch")}
dev = args.device
cuda = dev.startswith("cuda")


def clock():
    if cuda:
        torch.cuda.synchronize()
        return time.perf_counter()
    return time.process_time()


def shells(rays: int) -> workloads.Workload:
    """Four nested bumpy spheres (radii 1, 0.85, 0.7, 0.55) and the sphere workload's rays: about 6 crossings a ray."""
    wl = workloads.sphere(129, 256, rays)
    v, f = wl.vertices, wl.faces
    wl.vertices = np.concatenate([v * r for r in (1.0, 0.85, 0.7, 0.55)]).astype(np.float32)
    wl.faces = np.concatenate([f + k * len(v) for k in range(4)]).astype(np.int32)
    wl.name = wl.name.replace("sphere", "shells4")
    return wl


for name in args.workloads.split(","):
    wl = {"terrain": lambda: workloads.terrain(256, 512), "shells": lambda: shells(args.rays)}.get(
        name, lambda: workloads.sphere(129, 256, args.rays))()
    n = min(args.rays, len(wl.o))
    cases, answers = {}, {}
    for tag, mod in trees.items():
        scene = mod.Scene()
        scene.add_mesh(mod.Mesh(torch.from_numpy(wl.vertices).to(dev), torch.from_numpy(wl.faces).to(dev)))
        scene.build()
        minimal = mod.RayFlags.Minimal
        r32 = mod.Ray(torch.from_numpy(wl.o[:n]).to(dev), torch.from_numpy(wl.d[:n]).to(dev))
        r64 = mod.Ray(torch.from_numpy(wl.o[:n]).double().to(dev), torch.from_numpy(wl.d[:n]).double().to(dev))
        cases[(tag, "count f32")] = lambda s=scene, r=r32: s.count_intersections(r)
        cases[(tag, "count f64")] = lambda s=scene, r=r64: s.count_intersections(r)
        cases[(tag, "intersect_all K=8 Minimal")] = lambda s=scene, r=r32, f=minimal: s.intersect_all(r, 8, flags=f)
        answers[tag] = (cases[(tag, "count f32")](), cases[(tag, "count f64")](),
                        cases[(tag, "intersect_all K=8 Minimal")]().global_prim_id)
    times = {k: [] for k in cases}
    rng = np.random.default_rng(0)
    for rep in range(args.repeats + 1):
        for k in rng.permutation(len(cases)):
            key = list(cases)[k]
            c0 = clock(); cases[key](); dt = clock() - c0
            if rep:
                times[key].append(dt)
    (a32, a64, agid), (b32, b64, bgid) = answers.values()
    print(f"{wl.name} ({n} rays, {dev}, {args.repeats} repeats, load {os.getloadavg()[0]:.1f}): "
          f"count f32 equal on {float((a32 == b32).float().mean()):.6f}, f64 {float((a64 == b64).float().mean()):.6f}, "
          f"intersect_all ids equal {bool(torch.equal(agid, bgid))}; mean count {float(b32.float().mean()):.2f}")
    for what in ("count f32", "count f64", "intersect_all K=8 Minimal"):
        a, b = (np.median(times[(tag, what)]) * 1e3 for tag in trees)
        print(f"  {what:26s} A {a:8.2f} ms  B {b:8.2f} ms  B / A {b / a:.3f}")
