import sys, traceback, collections
import torch, warp as wp
from torch.utils._python_dispatch import TorchDispatchMode
import rayd.torch as rt
from rayd.torch import _interval
aten = torch.ops.aten

EMULATE_CUDA = "--cuda-paths" in sys.argv
if EMULATE_CUDA:
    _interval.host_ok = lambda t: False

SYNC_OPS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
            aten.equal.default, aten.is_nonzero.default}
found = collections.Counter()
where = {}

def record(name):
    st = traceback.extract_stack()[:-2]
    frames = [f for f in st if "rayd" in f.filename]
    key = (name, frames[-1].filename.split("src/")[-1] + ":" + str(frames[-1].lineno) if frames else "?")
    found[key] += 1
    where.setdefault(key, "".join(traceback.format_list(frames[-4:])))

class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS or "unique" in func.__name__:
            record(str(func))
        elif func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default):
            idx = args[1]
            if any(i is not None and i.dtype == torch.bool for i in idx):
                record(str(func) + "[bool]")
        elif func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
            record(str(func))
        return func(*args, **kwargs)

active = [False]
def wrap(owner, name):
    orig = getattr(owner, name)
    def f(*a, **k):
        if active[0]:
            record(f"{owner.__name__}.{name}")
        return orig(*a, **k)
    setattr(owner, name, f)
for n in ("tolist", "numpy", "__array__", "item", "cpu"):
    wrap(torch.Tensor, n)
for n in ("numpy", "list"):
    wrap(wp.array, n)
for n in ("synchronize", "synchronize_device", "synchronize_stream"):
    wrap(wp, n) if False else None
orig_sync = {n: getattr(wp, n) for n in ("synchronize", "synchronize_device", "synchronize_stream")}
for n, o in orig_sync.items():
    def g(*a, _o=o, _n=n, **k):
        if active[0]: record("wp." + _n)
        return _o(*a, **k)
    setattr(wp, n, g)

def scene(dtype, count):
    from tests.torch.sphere_mesh import sphere  # noqa
    raise

TRI = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
def box(dtype):
    v = torch.tensor([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], dtype=dtype) - 0.5
    f = torch.tensor([[0,2,1],[1,2,3],[4,5,6],[5,7,6],[0,1,4],[1,5,4],[2,6,3],[3,6,7],[0,4,2],[2,4,6],[1,3,5],[3,7,5]], dtype=torch.int32)
    return v, f

def make(dtype, meshes=2, instances=3, normals=True):
    s = rt.Scene()
    for k in range(meshes):
        v, f = box(dtype)
        m = torch.eye(4, dtype=dtype); m[0, 3] = 3.0 * k
        kw = dict(normals=v / v.norm(dim=-1, keepdim=True)) if normals and k == 0 else {}
        s.add_mesh(rt.Mesh(v.clone().requires_grad_(k == 0), f, to_world=m, **kw), dynamic=(k == 0))
    mats = torch.eye(4, dtype=dtype).repeat(instances, 1, 1)
    mats[:, 1, 3] = 3.0 * (1 + torch.arange(instances, dtype=dtype))
    ids = [s.add_instance(0, torch.eye(4, dtype=dtype)) for _ in range(instances)]
    s.build()
    s.set_mesh_transform(ids, mats.requires_grad_(True))
    s.sync()
    return s

def queries(s, dtype):
    o = torch.tensor([[0.1, 0.2, 5.0], [3.1, 0.1, 5.0], [0.2, 3.1, 5.0], [9, 9, 9]], dtype=dtype)
    d = torch.tensor([[0.0, 0, -1]] * 4, dtype=dtype)
    ray = rt.Ray(o, d)
    p = torch.tensor([[0.1, 0.2, 0.1], [3.1, 0.1, 2.0], [0.0, 3.0, 0.0]], dtype=dtype)
    return {
        "intersect": lambda: s.intersect(ray),
        "intersect_tmin": lambda: s.intersect(rt.Ray(o, d, tmin=4.5)),
        "shadow_test": lambda: s.shadow_test(ray),
        "visible": lambda: s.visible(o, p[:1]),
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
        "silhouette_edges": lambda: s.silhouette_edges(torch.tensor([0.0, 0, 5], dtype=dtype)),
        "intersect_backward": lambda: s.intersect(ray).t.nan_to_num(0, 0, 0).sum().backward(),
    }

for dtype in (torch.float32, torch.float64):
    s = make(dtype)
    for name, q in queries(s, dtype).items():
        try:
            q()
        except Exception as e:
            print("ERR", name, type(e).__name__, e); continue
        found.clear(); where.clear()
        active[0] = True
        with Mode():
            q()
        active[0] = False
        print(dtype, name, dict(found) if found else "clean")
        if "-v" in sys.argv:
            for k, w in where.items():
                print("   ", k, "\n", w)
