import sys, traceback, collections
import numpy as np
import drjit as dr
import warp as wp
import rayd.drjit as rd
from rayd.drjit import _convert
sys.path.insert(0, "/work/wt-sync/tests/drjit")
from drjit_testutil import vec

m = dr.llvm.ad
found = collections.Counter()
active = [False]
def record(name):
    if not active[0]:
        return
    st = traceback.extract_stack()[:-2]
    fr = [f for f in st if "src/rayd" in f.filename]
    key = (name, fr[-1].filename.split("src/")[-1] + ":" + str(fr[-1].lineno) if fr else "?")
    found[key] += 1

def patch(owner, name, label, cond=None):
    orig = getattr(owner, name)
    def f(*a, **k):
        out = orig(*a, **k)
        if cond is None or cond(a, out):
            record(label)
        return out
    setattr(owner, name, f)

for n in ("item", "numpy", "__bool__", "__array__", "torch"):
    patch(dr.ArrayBase, n, "dr." + n)
patch(dr.ArrayBase, "__getitem__", "dr.__getitem__->scalar", lambda a, out: not isinstance(out, dr.ArrayBase))
patch(dr, "sync_thread", "dr.sync_thread")
patch(wp.array, "numpy", "wp.numpy")
for n in ("synchronize", "synchronize_device", "synchronize_stream"):
    patch(wp, n, "wp." + n)
# a fence that would synchronise on CUDA (it is a no-op on LLVM)
orig_fence = _convert.fence
def fence(device):
    record("fence")
    return orig_fence(device)
_convert.fence = fence

def make(F, A3, M4, instances=3):
    s = rd.Scene()
    v = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], float) - 0.5
    f = np.array([[0,2,1],[1,2,3],[4,5,6],[5,7,6],[0,1,4],[1,5,4],[2,6,3],[3,6,7],[0,4,2],[2,4,6],[1,3,5],[3,7,5]])
    faces = m.Array3u(*[m.UInt(f[:, i].tolist()) for i in range(3)])
    for k in range(2):
        vv = A3(vec(A3, v))
        if k == 0: dr.enable_grad(vv)
        s.add_mesh(rd.Mesh(vv, faces, to_world=M4([[1, 0, 0, 3.0 * k], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])), dynamic=(k == 0))
    for j in range(instances):
        s.add_instance(0, M4([[1, 0, 0, 0], [0, 1, 0, 3.0 * (j + 1)], [0, 0, 1, 0], [0, 0, 0, 1]]))
    s.build()
    return s

def queries(s, A3):
    o = vec(A3, [[0.1, 0.2, 5.0], [3.1, 0.1, 5.0], [0.2, 3.1, 5.0], [9, 9, 9]])
    d = A3(0, 0, -1)
    ray = rd.Ray(o, d)
    p = vec(A3, [[0.1, 0.2, 0.1], [3.1, 0.1, 2.0], [0.0, 3.0, 0.0]])
    return {
        "intersect": lambda: s.intersect(ray),
        "intersect_tmin": lambda: s.intersect(rd.Ray(o, d, tmin=4.5)),
        "shadow_test": lambda: s.shadow_test(ray),
        "visible": lambda: s.visible(o, A3(0.1, 0.2, 0.1)),
        "intersect_all": lambda: s.intersect_all(ray, 4),
        "count_intersections": lambda: s.count_intersections(ray),
        "nearest_edge": lambda: s.nearest_edge(p),
        "nearest_edge_ray": lambda: s.nearest_edge(ray),
        "nearest_edges": lambda: s.nearest_edges(p, 2),
        "closest_point": lambda: s.closest_point(p),
        "winding_number": lambda: s.winding_number(p),
        "contains": lambda: s.contains(p),
        "signed_distance": lambda: s.signed_distance(p),
        "trace_reflections": lambda: s.trace_reflections(ray, 2),
        "silhouette_edges": lambda: s.silhouette_edges(A3(0.0, 0, 5)),
    }

for F, A3, M4 in ((m.Float, m.Array3f, m.Matrix4f), (m.Float64, m.Array3f64, m.Matrix4f64)):
    s = make(F, A3, M4)
    for name, q in queries(s, A3).items():
        try:
            r = q(); dr.eval(r)
        except Exception as e:
            print("ERR", name, type(e).__name__, e); continue
        found.clear(); active[0] = True
        r = q()
        active[0] = False
        dr.eval(r)
        print(A3.__name__, name, sum(found.values()), dict(found))
