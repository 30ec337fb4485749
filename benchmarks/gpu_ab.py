"""Same-process A/B of two rayd source trees on CUDA: closest hit (All, Minimal) and any hit on the run.py workloads.

The other tree is a renamed copy of rayd (as for ``cpu_ab.py``: ``git archive REV src/rayd | tar -x -C /tmp/m &&
cd /tmp/m/src && mv rayd rayd_main && grep -rlE '\\brayd\\b' rayd_main | xargs sed -i -E 's/\\brayd\\b/rayd_main/g'``).
Cases interleaved, a new random order per repeat, wall time between synchronisations (CUDA events would time
only the kernels; the frontends' host work counts here), medians and B / A; answers compared (hits, ``t``).

Usage: python benchmarks/gpu_ab.py OTHER_SRC OTHER_NAME [--repeats 15] [--workloads terrain,sphere]
"""
import argparse, importlib, os, random, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
parser = argparse.ArgumentParser()
parser.add_argument("other_src")
parser.add_argument("other_name")
parser.add_argument("--repeats", type=int, default=15)
parser.add_argument("--workloads", default="terrain,sphere")
parser.add_argument("--device", default="cuda")
args = parser.parse_args()
sys.path.insert(0, args.other_src)
import torch
from benchmarks import workloads
import rayd.torch as rt


def sync():
    if args.device == "cuda":
        torch.cuda.synchronize()


other = importlib.import_module(args.other_name + ".torch")
trees = {"A (" + args.other_name + ")": other, "B (this tree)": rt}
big = args.device == "cuda"
make = {"terrain": lambda: workloads.terrain(1024, 2048) if big else workloads.terrain(64, 128),
        "sphere": lambda: workloads.sphere(513, 1024, 1 << 22) if big else workloads.sphere(33, 64, 1 << 14)}
for name in args.workloads.split(","):
    wl = make[name]()
    dev = args.device
    v = torch.as_tensor(wl.vertices, dtype=torch.float32, device=dev)
    f = torch.as_tensor(wl.faces.astype("int32"), device=dev)
    o = torch.as_tensor(wl.o, dtype=torch.float32, device=dev)
    d = torch.as_tensor(wl.d, dtype=torch.float32, device=dev)
    cases, answers = {}, {}
    for label, mod in trees.items():
        scene = mod.Scene(); scene.add_mesh(mod.Mesh(v, f)); scene.build()
        ray = mod.Ray(o, d)
        for q, fn in (("All", lambda s=scene, r=ray, m=mod: s.intersect(r)),
                      ("Minimal", lambda s=scene, r=ray, m=mod: s.intersect(r, flags=m.RayFlags.Minimal)),
                      ("shadow", lambda s=scene, r=ray: s.shadow_test(r))):
            cases[(q, label)] = fn
        h = scene.intersect(ray); answers[label] = (h.prim_id.clone(), h.t.clone(), scene.shadow_test(ray).clone())
        for _ in range(3):
            for q in ("All", "Minimal", "shadow"):
                cases[(q, label)]()
    sync()
    times = {k: [] for k in cases}
    keys = list(cases)
    for _ in range(args.repeats):
        random.shuffle(keys)
        for k in keys:
            sync(); t0 = time.perf_counter(); cases[k](); sync()
            times[k].append((time.perf_counter() - t0) * 1e3)
    (la, a), (lb, b) = answers.items()
    same_prim = (a[0] == b[0]).float().mean().item()
    both = torch.isfinite(a[1]) & torch.isfinite(b[1])
    dt = (a[1][both] - b[1][both]).abs().max().item() if both.any() else 0.0
    print(f"{name}: prim_id equal on {100 * same_prim:.4f} % of rays, max |t_A - t_B| {dt:.3g}, "
          f"shadow equal {100 * (a[2] == b[2]).float().mean().item():.4f} %")
    for q in ("All", "Minimal", "shadow"):
        ma, mb = (statistics.median(times[(q, l)]) for l in trees)
        print(f"  {q:8s} A {ma:7.3f} ms  B {mb:7.3f} ms  B/A {mb / ma:6.3f}")
