"""Session 25 diagnostics on CUDA: the torus parity (float64 rays along edges: drjit CUDA vs torch CPU) and
tmin22's recompile."""
import sys, numpy as np, torch
sys.path[:0] = ["tests/drjit", "tests/torch", "tests"]
import drjit as dr
import rayd.drjit as rd, rayd.torch as rt
from breakit22a_reference import along_edges, torus
from offface23_reference import brute_force
from drjit_testutil import rows, vec
m = dr.cuda.ad
v, f = torus()
o32, d32 = along_edges(v, f, 1500, 3)
o, d = o32.astype(np.float64), d32.astype(np.float64)
loose, strict = brute_force(o, d, v, f)
res = {}
for name in ("drjit-cuda", "torch-cpu", "torch-cuda", "drjit-llvm"):
    if name.startswith("drjit"):
        mm = dr.cuda.ad if name.endswith("cuda") else dr.llvm.ad
        s = rd.Scene(); s.add_mesh(rd.Mesh(vec(mm.Array3f64, v), vec(mm.Array3u, f))); s.build()
        r = rd.Ray(vec(mm.Array3f64, o), vec(mm.Array3f64, d))
        s.intersect(r); h = s.intersect(r)
        res[name] = (rows(h.prim_id), rows(h.t))
    else:
        dev = name.split("-")[1]
        s = rt.Scene(); s.add_mesh(rt.Mesh(torch.tensor(v, device=dev), torch.tensor(f, device=dev))); s.build()
        r = rt.Ray(torch.tensor(o, device=dev), torch.tensor(d, device=dev))
        s.intersect(r); h = s.intersect(r)
        res[name] = (h.prim_id.cpu().numpy(), h.t.cpu().numpy())
ref = res["torch-cpu"]
for k, (p, t) in res.items():
    bad = np.flatnonzero(p != ref[0])
    print(k, "mismatch vs torch-cpu", bad.size, "of", len(p), "rows", bad[:6].tolist(), "prim", p[bad[:6]].tolist(), "cpu", ref[0][bad[:6]].tolist())
    print("   t", t[bad[:6]].tolist(), "cpu t", ref[1][bad[:6]].tolist(), "loose", loose[bad[:6]].tolist(), "strict", strict[bad[:6]].tolist())
    ok = ~((t < loose * (1 - 1e-9)) | (t > strict * (1 + 1e-9)))
    print("   brute-force bounds hold:", ok.all(), "violations", int((~ok).sum()))
# tmin22: why the compiled query recompiles on CUDA
import torch._dynamo, logging
torch._logging.set_logs(recompiles=True, graph_breaks=True)
from reference import icosphere
INF = float("inf")
vv, ff = icosphere(1)
tv = torch.tensor(vv, dtype=torch.float64, device="cuda")
sc = rt.Scene(); sc.add_mesh(rt.Mesh(tv, torch.tensor(ff, device="cuda")), dynamic=True); sc.build()
oo = torch.tensor([[0.1, 0.05, 0.0]], dtype=torch.float64, device="cuda"); dd = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64, device="cuda")
fn = lambda o, d: sc.intersect(rt.Ray(o, d, 0.0, tmin=-INF)).t
from torch._dynamo.testing import CompileCounterWithBackend
cnt = CompileCounterWithBackend("aot_eager"); torch._dynamo.reset()
cf = torch.compile(fn, backend=cnt, fullgraph=True)
cf(oo, dd)
with torch.no_grad():
    tv += torch.tensor([0.0, 0.0, -50.0], dtype=torch.float64, device="cuda")
sc.sync()
print("after sync", cf(oo, dd).item(), fn(oo, dd).item(), "frames", cnt.frame_count)
