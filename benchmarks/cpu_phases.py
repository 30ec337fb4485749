"""Issue 12: wall vs CPU time of each phase of one CPU Embree-path query (terrain or sphere).

Wraps the phases of ``Scene.intersect`` / ``shadow_test`` with timers (wall ``perf_counter``, process
CPU ``process_time`` over all threads, calling-thread CPU ``thread_time``): ray conversion
(``_ops.ray_batch``), the incoherence sample, the image-width probe, the key pass and the trace
(``run_parallel`` calls), the radix sort, the permutation, the Warp re-search, the fields
(``engine.closest_fields``), the Warp re-search (``intersect._warp_search``); "rest" is the query minus the phases. Medians over the repeats.

With ``--ref`` (session 25), Mitsuba llvm's ``ray_intersect`` (All), ``ray_intersect_preliminary`` and
``ray_test`` and embreex's ``run`` (one thread) are timed in the same repeats, in turn with rayd's queries
(Mitsuba needs DRJIT_LIBLLVM_PATH, e.g. /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1).

Usage: python benchmarks/cpu_phases.py terrain|sphere [repeats] [--ref]
"""
import collections, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, torch, warp as wp
from benchmarks import workloads
import rayd.engine as engine
import rayd.torch as rt
from rayd.engine import cpu_embree
from rayd.torch import _ops

times = collections.defaultdict(list)
stack = []


def timed(label_fn, fn):
    def wrapper(*a, **k):
        label = label_fn(a) if callable(label_fn) else label_fn
        t = (time.perf_counter(), time.process_time(), time.thread_time())
        try:
            return fn(*a, **k)
        finally:
            times[label].append([x1 - x0 for x0, x1 in zip(t, (time.perf_counter(), time.process_time(), time.thread_time()))])
    return wrapper


calls = {"run_parallel": 0}


def trace_label(a):
    calls["run_parallel"] += 1
    return "run_parallel #%d" % calls["run_parallel"]


cpu_embree._incoherent = timed("incoherence sample", cpu_embree._incoherent)
cpu_embree.image_width = timed("image width probe", cpu_embree.image_width)
cpu_embree._permuted = timed("permutation (gather)", cpu_embree._permuted)
cpu_embree.run_parallel = timed(trace_label, cpu_embree.run_parallel)
wp.utils.radix_sort_pairs = timed("radix sort", wp.utils.radix_sort_pairs)
engine.closest_fields = timed("fields (closest_fields)", engine.closest_fields)
_ops.ray_batch = timed("ray conversion (ray_batch)", _ops.ray_batch)
cpu_embree.search = timed("cpu_embree.search", cpu_embree.search)
from rayd.engine import intersect as _intersect
_intersect._warp_search = timed("Warp re-search (_warp_search)", _intersect._warp_search)

wl = workloads.terrain(256, 512) if sys.argv[1] == "terrain" else workloads.sphere(129, 256, 1 << 18)
reps = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 9
scene = rt.Scene(); scene.add_mesh(rt.Mesh(torch.from_numpy(wl.vertices), torch.from_numpy(wl.faces)), dynamic=True); scene.build()
ray = rt.Ray(torch.from_numpy(wl.o), torch.from_numpy(wl.d))
queries = {"All": lambda: scene.intersect(ray), "Minimal": lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal),
           "shadow_test": lambda: scene.shadow_test(ray)}
refs = {}
if "--ref" in sys.argv:
    import benchmarks.engines.mitsuba3 as m3
    from benchmarks.engines.embree import Embree
    mi = m3.Mitsuba3("cpu"); mi.load(wl); M, dr = mi.mi, mi.dr
    refs = {"mitsuba ray_intersect (All)": lambda: (mi.closest(), mi.synchronize()),
            "mitsuba ray_intersect_preliminary": lambda: (mi.closest(minimal=True), mi.synchronize()),
            "mitsuba ray_test": lambda: (dr.eval(mi.scene.ray_test(mi.ray, coherent=mi.coherent)), mi.synchronize())}
    em = Embree("cpu"); em.load(wl)
    refs["embreex run (1 thread, full output)"] = lambda: em.closest()
    PAUSE = 0.03  # after each reference call: Mitsuba's pool threads spin on for a while
for q in (*queries.values(), *refs.values()):
    for _ in range(2): q()
ref_times = {k: [] for k in refs}
print(f"{wl.name}: {reps} repeats, load {os.getloadavg()[0]:.1f}, torch threads {torch.get_num_threads()}; "
      "wall / process CPU / thread CPU ms, medians")
for name, q in queries.items():
    per = collections.defaultdict(list)
    for _ in range(reps):
        for k, f in refs.items():  # the references in turn with each of rayd's repeats
            time.sleep(PAUSE)
            t = (time.perf_counter(), time.process_time(), time.thread_time()); f()
            ref_times[k].append([x1 - x0 for x0, x1 in zip(t, (time.perf_counter(), time.process_time(), time.thread_time()))])
        if refs:
            time.sleep(PAUSE)
        times.clear(); calls["run_parallel"] = 0
        t = (time.perf_counter(), time.process_time(), time.thread_time()); q()
        total = [x1 - x0 for x0, x1 in zip(t, (time.perf_counter(), time.process_time(), time.thread_time()))]
        per["query"].append(total)
        inner = np.zeros(3)
        for k, v in times.items():
            s = np.sum(v, 0); per[k].append(s)
            if k != "cpu_embree.search":
                inner += s if not k.startswith(("incoherence", "image", "permutation", "run_parallel", "radix", "Warp")) else 0
        search = np.sum(times.get("cpu_embree.search", [[0, 0, 0]]), 0)
        parts = sum(np.sum(v, 0) for k, v in times.items() if k.startswith(("incoherence", "image", "permutation", "run_parallel", "radix", "Warp")))
        per["  search other (Python, re-search)"].append(search - parts)
        per["rest (frontend, torch ops)"].append(np.array(total) - search - inner)
    print(f" {name}:")
    for k, v in per.items():
        m = np.median(np.array(v), 0) * 1e3
        print(f"   {k:36s} {m[0]:7.2f} {m[1]:7.2f} {m[2]:7.2f}")
if refs:
    print(" references (timed between rayd's repeats):")
    for k, v in ref_times.items():
        m = np.median(np.array(v), 0) * 1e3
        print(f"   {k:36s} {m[0]:7.2f} {m[1]:7.2f} {m[2]:7.2f}")
