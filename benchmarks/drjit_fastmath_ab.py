"""Session 22: the cost of running rayd.drjit's calls with ``drjit.JitFlag.FastMath`` off (``_check.exact_math``).

A / B in one process, interleaved: each public call as shipped (FastMath off inside) against the same call with the
flag left at Dr.Jit's default (the method under the wrapper, ``Scene.<name>.__wrapped__``). Queries: ``intersect``
(All) forward only and forward + ``dr.backward`` into the vertices, ``closest_point``; a bumpy sphere, float32 and
float64 rays. Wall ms (synchronised with ``dr.sync_thread``), medians; also the largest difference of the
vertex gradients between the two (float64: FastMath's approximate ``rcp`` on CUDA).

Usage: python benchmarks/drjit_fastmath_ab.py [--backend cuda|llvm] [--faces-k 256] [--rays 1048576] [--repeats 9]
"""
import argparse, os, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
import drjit as dr
import rayd.drjit as rd
from benchmarks import workloads

parser = argparse.ArgumentParser()
parser.add_argument("--backend", default="cuda")
parser.add_argument("--rays", type=int, default=1 << 20)
parser.add_argument("--repeats", type=int, default=9)
args = parser.parse_args()
m = __import__(f"drjit.{args.backend}.ad", fromlist=["x"])

v, f = workloads.bumpy_sphere_mesh(256, 512)
v, f = np.asarray(v, dtype=np.float64), np.asarray(f)
rng = np.random.default_rng(3)
o = rng.normal(size=(args.rays, 3)); o = 3 * o / np.linalg.norm(o, axis=1, keepdims=True)
d = -o + 0.3 * rng.normal(size=o.shape)


def run(double: bool):
    A3 = m.Array3f64 if double else m.Array3f
    vd = A3(*[np.ascontiguousarray(v[:, i]) for i in range(3)])
    dr.enable_grad(vd)
    scene = rd.Scene(); scene.add_mesh(rd.Mesh(vd, m.Array3u(*[np.ascontiguousarray(f[:, i]).astype(np.uint32) for i in range(3)])))
    scene.build()
    ray = rd.Ray(A3(*[o[:, i] for i in range(3)]), A3(*[d[:, i] for i in range(3)]))
    pts = A3(*[0.5 * o[: args.rays // 4, i] for i in range(3)])
    fns = {}
    for name, exact in (("as shipped", True), ("FastMath on", False)):
        inter = type(scene).intersect if exact else type(scene).intersect.__wrapped__
        close = type(scene).closest_point if exact else type(scene).closest_point.__wrapped__

        def fwd(inter=inter):
            h = inter(scene, ray); dr.eval(h.t, h.p, h.n); dr.sync_thread()

        def bwd(inter=inter):
            dr.clear_grad(vd); h = inter(scene, ray); dr.backward(dr.sum(dr.select(dr.isfinite(h.t), h.t, 0))); dr.eval(dr.grad(vd)); dr.sync_thread()

        def cp(close=close):
            c = close(scene, pts); dr.eval(c.distance, c.p); dr.sync_thread()
        fns[name] = (fwd, bwd, cp)
    grads = {}
    for name, (fwd, bwd, cp) in fns.items():
        bwd(); grads[name] = np.array(dr.grad(vd))
    times = {(n, k): [] for n in fns for k in range(3)}
    for r in range(args.repeats + 1):
        for n in (list(fns) if r % 2 else list(fns)[::-1]):
            for k, fn in enumerate(fns[n]):
                t0 = time.perf_counter(); fn(); dt = (time.perf_counter() - t0) * 1e3
                if r:
                    times[(n, k)].append(dt)
    diff = np.abs(grads["as shipped"] - grads["FastMath on"]).max() / max(np.abs(grads["as shipped"]).max(), 1e-30)
    label = "float64" if double else "float32"
    for k, q in enumerate(("intersect All", "intersect + backward", "closest_point")):
        a, b = (statistics.median(times[(n, k)]) for n in fns)
        print(f"{args.backend} {label:7s} {q:22s} as shipped {a:8.3f} ms  FastMath on {b:8.3f} ms  ratio {a / b:5.3f}")
    print(f"{args.backend} {label:7s} vertex gradient: max |shipped - FastMath on| / max |grad| = {diff:.3g}")


for double in (False, True):
    run(double)
