"""Session 19 (breakit19): cost of the content check (rayd.core.contents) per query and per sync.

Interleaved A/B in one process: the same scene with the check on and off (``contents.enabled``),
medians of wall ms. Cases: closest hit (Minimal) on the terrain of C cells (2 C^2 triangles) with
S x S rays and with 1,024 rays; update_mesh_vertices + sync of the dynamic terrain; the same for
rayd.drjit (LLVM) when Dr.Jit is present.

Usage: python benchmarks/content_check.py [C] [S] [repeats]
"""
import os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
import torch

from benchmarks import workloads
import rayd.torch as rt

C = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
S = int(sys.argv[2]) if len(sys.argv) > 2 else 512
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 9
wl = workloads.terrain(C, S)
device = "cuda" if torch.cuda.is_available() else "cpu"


def sync_device():
    if device == "cuda":
        torch.cuda.synchronize()


def ab(cases, contents):
    """{name: (median wall ms on, off, median process CPU ms on, off)} over REPS interleaved rounds."""
    res = {k: ([], [], [], []) for k in cases}
    for rep in range(REPS):
        for k, f in cases.items():
            for on in ((True, False) if rep % 2 == 0 else (False, True)):
                contents.enabled = on
                f()
                sync_device()
                t0, c0 = time.perf_counter(), time.process_time()
                f()
                sync_device()
                res[k][0 if on else 1].append(time.perf_counter() - t0)
                res[k][2 if on else 3].append(time.process_time() - c0)
    contents.enabled = True
    return {k: tuple(np.median(x) * 1e3 for x in v) for k, v in res.items()}


def report(title, out):
    print(title)
    for k, (on, off, con, coff) in out.items():
        print(f"  {k:34s} wall on {on:8.3f} off {off:8.3f} ms ({100 * (on / off - 1):+6.1f} %)   "
              f"cpu on {con:8.3f} off {coff:8.3f} ms ({100 * (con / coff - 1):+6.1f} %)")


v = torch.from_numpy(wl.vertices).to(device)
f = torch.from_numpy(wl.faces).to(device)
scene = rt.Scene()  # queried, never updated (a sync re-makes the CPU Embree mirror: not what is measured)
scene.add_mesh(rt.Mesh(v, f), dynamic=True)
scene.build()
moving = rt.Scene()  # updated and synced
moving.add_mesh(rt.Mesh(v.clone(), f), dynamic=True)
moving.build()
ray = rt.Ray(torch.from_numpy(wl.o).to(device), torch.from_numpy(wl.d).to(device))
small = rt.Ray(ray.o[:1024], ray.d[:1024])
w = v.clone()
w[:, 2] += 0.01
state = [v, w]


def update():
    state.reverse()
    moving.update_mesh_vertices(0, state[0])
    moving.sync()


cases = {
    f"torch closest Minimal {S * S} rays": lambda: scene.intersect(ray, flags=rt.RayFlags.Minimal),
    "torch closest Minimal 1024 rays": lambda: scene.intersect(small, flags=rt.RayFlags.Minimal),
}
print(f"terrain C={C}: V={v.shape[0]}, F={f.shape[0]}, device {device}, load {os.getloadavg()[0]:.1f}, "
      f"{REPS} interleaved rounds")
report("rayd.torch", ab(cases, scene._core.table.contents))
report("rayd.torch", ab({"torch update + sync": update}, moving._core.table.contents))
try:
    import drjit as dr
    import rayd.drjit as rd
except ImportError:
    sys.exit(0)
m = __import__("drjit.cuda.ad" if device == "cuda" else "drjit.llvm.ad", fromlist=["x"])
dv = m.Array3f(*(wl.vertices[:, k] for k in range(3)))
df = m.Array3i(*(wl.faces[:, k].astype(np.int32) for k in range(3)))
dscene = rd.Scene()
dscene.add_mesh(rd.Mesh(dv, df), dynamic=True)
dscene.build()
dray = rd.Ray(m.Array3f(*(wl.o[:, k] for k in range(3))), m.Array3f(*(wl.d[:, k] for k in range(3))))
dcases = {f"drjit closest Minimal {S * S} rays": lambda: dr.eval(dscene.intersect(dray, flags=rd.RayFlags.Minimal).t)}
report("rayd.drjit", ab(dcases, dscene._core.table.contents))
