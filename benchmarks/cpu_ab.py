"""Issue 12: same-process A/B of two rayd source trees on the CPU Embree path, beside Mitsuba llvm.

The other tree is a copy of rayd whose package (and ``torch.library`` namespace) was renamed, e.g.
``git archive main src/rayd | tar -x -C /tmp/m && cd /tmp/m/src && mv rayd rayd_main &&
grep -rlE '\\brayd\\b' rayd_main | xargs sed -i -E 's/\\brayd\\b/rayd_main/g'``. Cases run in a new random
order per repeat (process CPU and wall ms, medians); the answers of both trees are compared bit for bit.

Usage: python benchmarks/cpu_ab.py OTHER_SRC OTHER_NAME terrain|sphere [repeats] [--no-mitsuba]
(Mitsuba needs DRJIT_LIBLLVM_PATH, e.g. /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1).
"""
import importlib, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
from benchmarks import workloads
import rayd.torch as rt
from rayd.engine import cpu_embree

other = importlib.import_module(sys.argv[2] + ".torch")
other_embree = importlib.import_module(sys.argv[2] + ".engine.cpu_embree")
wl = workloads.terrain(256, 512) if sys.argv[3] == "terrain" else workloads.sphere(129, 256, 1 << 18)
reps = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4].isdigit() else 9
cases = {}
if "--no-mitsuba" not in sys.argv:
    import benchmarks.engines.mitsuba3 as m3
    E = [v for k, v in vars(m3).items() if isinstance(v, type) and getattr(v, "name", "") == "mitsuba3"][0]
    mi = E("cpu"); mi.load(wl)
    cases["mitsuba All"] = lambda: (mi.closest(), mi.synchronize())
# Trees before cpu19b's fix (6ca0ece) crash at the second query of a fresh process when their search
# kernel's module is first loaded by two threads at once: load it here, on one thread.
import warp as wp
for ce in (other_embree, cpu_embree):
    wp.load_module(ce._search16_kernel.module, device="cpu")
trees = {}
for name, mod in (("A " + sys.argv[2], other), ("B this", rt)):
    scene = mod.Scene(); scene.add_mesh(mod.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces)), dynamic=True)
    scene.build()
    ray = mod.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
    trees[name] = (scene, ray)
    cases[name + " All"] = (lambda s=scene, r=ray: s.intersect(r))
    cases[name + " shadow"] = (lambda s=scene, r=ray: s.shadow_test(r))
for f in cases.values():
    for _ in range(2): f()
(sa, ra), (sb, rb) = trees.values()
ha, hb = sa.intersect(ra), sb.intersect(rb)
same = bool(torch.equal(ha.t, hb.t) and torch.equal(ha.prim_id, hb.prim_id) and torch.equal(ha.n, hb.n)
            and torch.equal(sa.shadow_test(ra), sb.shadow_test(rb)))
res = {k: ([], []) for k in cases}
red0 = (other_embree.stats["redone"], cpu_embree.stats["redone"], other_embree.stats["rays"], cpu_embree.stats["rays"])
names = list(cases)
# A new random order per repeat (seeded): a rotation keeps each case's successor, so one tree's All always
# ran right after Mitsuba's, and its process CPU time took in the spinning of Mitsuba's pool threads
# (main against main: B / A = 0.69 for All; cpu19b).
rng = np.random.default_rng(0)
PAUSE = 0.03
for rep in range(reps):
    for k in [names[i] for i in rng.permutation(len(names))]:
        f = cases[k]
        t0, c0 = time.perf_counter(), time.process_time(); f()
        res[k][0].append(time.perf_counter() - t0); res[k][1].append(time.process_time() - c0)
        time.sleep(PAUSE)  # outside every window: pool threads that spin on after a call (Mitsuba's) settle
red = [(other_embree.stats["redone"] - red0[0]) / max(1, other_embree.stats["rays"] - red0[2]),
       (cpu_embree.stats["redone"] - red0[1]) / max(1, cpu_embree.stats["rays"] - red0[3])]
print(f"{wl.name}: {reps} repeats (random order, {PAUSE * 1e3:.0f} ms pauses), load {os.getloadavg()[0]:.1f}, torch threads {torch.get_num_threads()}, "
      f"answers bit-equal: {same}, re-searched A {100 * red[0]:.3f} % / B {100 * red[1]:.3f} %")
base = np.median(res["mitsuba All"][1]) if "mitsuba All" in res else None
for k, (w, c) in res.items():
    ratio = f"  {np.median(c) / base:5.2f}x Mitsuba All (CPU)" if base else ""
    print(f"  {k:22s} wall {np.median(w)*1e3:7.1f} (min {min(w)*1e3:6.1f})  cpu {np.median(c)*1e3:7.1f} (min {min(c)*1e3:6.1f}){ratio}")
wbase = np.median(res["mitsuba All"][0]) if "mitsuba All" in res else None
for kind in ("All", "shadow"):
    a, b = (np.median(res[f"{t} {kind}"][1]) for t in ("A " + sys.argv[2], "B this"))
    wa, wb = (np.median(res[f"{t} {kind}"][0]) for t in ("A " + sys.argv[2], "B this"))
    vs = f" (wall / Mitsuba All: A {wa / wbase:.2f}x, B {wb / wbase:.2f}x)" if wbase else ""
    print(f"  B / A {kind}: CPU {b / a:.3f}, wall {wb / wa:.3f}{vs}")
