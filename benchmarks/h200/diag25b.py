import sys, torch
sys.path[:0] = ["tests/torch", "tests"]
import rayd.torch as rt
from reference import icosphere
torch._logging.set_logs(recompiles_verbose=True, guards=False)
from torch._dynamo.testing import CompileCounterWithBackend
F64, INF, device = torch.float64, float("inf"), "cuda"
v, f = icosphere(1)
tv = torch.tensor(v, dtype=F64, device=device)
scene = rt.Scene(); scene.add_mesh(rt.Mesh(tv, torch.tensor(f, device=device)), dynamic=True); scene.build()
o = torch.tensor([[0.1, 0.05, 0.0]], dtype=F64, device=device); d = torch.tensor([[0.0, 0.0, 1.0]], dtype=F64, device=device)
def fn(o, d):
    return scene.intersect(rt.Ray(o, d, 0.0, tmin=-INF)).t
counter = CompileCounterWithBackend("aot_eager"); torch._dynamo.reset()
compiled = torch.compile(fn, backend=counter, fullgraph=True)
torch.testing.assert_close(compiled(o, d), fn(o, d)); print("A frames", counter.frame_count)
assert fn(o, d).item() < -0.9; print("B frames", counter.frame_count)
with torch.no_grad():
    tv += torch.tensor([0.0, 0.0, -50.0], dtype=F64, device=device)
scene.sync(); print("C")
want = fn(o, d); print("D want", want.item())
torch.testing.assert_close(compiled(o, d), want); print("E frames", counter.frame_count)
