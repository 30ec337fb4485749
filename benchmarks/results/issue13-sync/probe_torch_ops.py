import sys, collections
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.overrides import TorchFunctionMode
import rayd.torch as rt

class Count(TorchDispatchMode):
    def __init__(self): super().__init__(); self.n = 0; self.ops = collections.Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1; self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))
class FCount(TorchFunctionMode):
    def __init__(self): super().__init__(); self.n = 0
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") != "__get__": self.n += 1
        return func(*args, **(kwargs or {}))

def box(dtype):
    v = torch.tensor([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], dtype=dtype) - 0.5
    f = torch.tensor([[0,2,1],[1,2,3],[4,5,6],[5,7,6],[0,1,4],[1,5,4],[2,6,3],[3,6,7],[0,4,2],[2,4,6],[1,3,5],[3,7,5]], dtype=torch.int32)
    return v, f

def make(kind, count, dtype, grad):
    s = rt.Scene()
    if kind == "meshes":
        for k in range(count):
            v, f = box(dtype); m = torch.eye(4, dtype=dtype); m[0, 3] = 3.0 * k
            s.add_mesh(rt.Mesh(v.requires_grad_(grad), f, to_world=m))
        s.build(); return s
    v, f = box(dtype)
    s.add_mesh(rt.Mesh(v.requires_grad_(grad), f))
    ids = [s.add_instance(0, torch.eye(4, dtype=dtype)) for _ in range(count)]
    s.build()
    mats = torch.eye(4, dtype=dtype).repeat(count, 1, 1); mats[:, 0, 3] = 3.0 * (1 + torch.arange(count, dtype=dtype))
    s.set_mesh_transform(ids, mats.requires_grad_(grad)); s.sync(); return s

def queries(s, dtype):
    o = torch.tensor([[0.1, 0.2, 5.0], [3.1, 0.1, 5.0], [9, 9, 9]], dtype=dtype)
    d = torch.tensor([[0.0, 0, -1]] * 3, dtype=dtype)
    ray = rt.Ray(o, d); p = torch.tensor([[0.1, 0.2, 0.1], [3.1, 0.1, 2.0]], dtype=dtype)
    vp = torch.tensor([0.0, 0, 5], dtype=dtype)
    return {"intersect": lambda: s.intersect(ray), "shadow_test": lambda: s.shadow_test(ray),
            "visible": lambda: s.visible(o, p[:1]), "intersect_all": lambda: s.intersect_all(ray, 4),
            "count_intersections": lambda: s.count_intersections(ray), "trace_reflections": lambda: s.trace_reflections(ray, 2),
            "nearest_edge": lambda: s.nearest_edge(p), "nearest_edges": lambda: s.nearest_edges(p, 2),
            "silhouette_edges": lambda: s.silhouette_edges(vp),
            "closest_point": lambda: s.closest_point(p), "winding_number": lambda: s.winding_number(p),
            "contains": lambda: s.contains(p), "signed_distance": lambda: s.signed_distance(p)}

counts_list = [int(c) for c in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 10, 100]
for kind in ("meshes", "instances"):
    for dtype, grad in ((torch.float32, False), (torch.float32, True), (torch.float64, True)):
        table = collections.defaultdict(list)
        for c in counts_list:
            s = make(kind, c, dtype, grad)
            for name, q in queries(s, dtype).items():
                q()
                with Count() as cd, FCount() as cf:
                    q()
                table[name].append((cd.n, cf.n))
        grow = {k: v for k, v in table.items() if len(set(x[0] for x in v)) > 1 or len(set(x[1] for x in v)) > 1}
        print(kind, str(dtype)[6:], "grad" if grad else "nograd", "growing (aten, torch-fn) per", counts_list, ":", grow or "none")
