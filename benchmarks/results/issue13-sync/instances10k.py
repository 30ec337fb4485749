"""Host time of a one-ray query on 10,000 instances (rayd.torch CPU, rayd.drjit LLVM)."""
import sys, time, statistics
import torch
import rayd.torch as rt

def torch_scene(count, dtype=torch.float32):
    s = rt.Scene()
    s.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=dtype), torch.tensor([[0, 1, 2]])))
    ids = [s.add_instance(0, torch.eye(4, dtype=dtype)) for _ in range(count)]
    s.build()
    mats = torch.eye(4, dtype=dtype).repeat(count, 1, 1); mats[:, 0, 3] = torch.arange(count, dtype=dtype) * 2 + 2
    s.set_mesh_transform(ids, mats); s.sync()
    return s

def best(f, repeat=200):
    f(); f()
    wall, cpu = [], []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        f()
        cpu.append(time.process_time() - c0); wall.append(time.perf_counter() - w0)
    return min(wall) * 1e3, statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3

for dtype in (torch.float32, torch.float64):
    s = torch_scene(10_000, dtype)
    ray = rt.Ray(torch.tensor([2.2, 0.2, 1.0], dtype=dtype), torch.tensor([0.0, 0, -1], dtype=dtype))
    assert int(s.intersect(ray).shape_id) == 1
    for name, f in (("intersect", lambda: s.intersect(ray)), ("shadow_test", lambda: s.shadow_test(ray))):
        print(f"torch cpu {str(dtype)[6:]} {name}: min {best(f)[0]:.3f} ms, median wall {best(f)[1]:.3f} ms, median cpu {best(f)[2]:.3f} ms")

if "--drjit" in sys.argv:
    import drjit as dr, numpy as np
    import rayd.drjit as rd
    m = dr.llvm.ad
    for A3, M4 in ((m.Array3f, m.Matrix4f), (m.Array3f64, m.Matrix4f64)):
        s = rd.Scene()
        s.add_mesh(rd.Mesh(A3([0, 1, 0], [0, 0, 1], [0, 0, 0]), m.Array3u([0], [1], [2])))
        count = 10_000
        ids = [s.add_instance(0, M4(1.0)) for _ in range(count)]
        s.build()
        mats = np.tile(np.eye(4), (count, 1, 1)); mats[:, 0, 3] = np.arange(count) * 2 + 2
        flat = M4(*[[m.Float64(mats[:, i, j].tolist()) if A3 is m.Array3f64 else m.Float(mats[:, i, j].tolist()) for j in range(4)] for i in range(4)]) if False else None
        s.set_mesh_transform(ids, M4(mats.transpose(1, 2, 0))) if False else None
        for k in range(0, count, 1):
            pass
        ray = rd.Ray(A3(2.2, 0.2, 1.0), A3(0, 0, -1))
        # place by one batched call (width-K matrix)
        K = M4(np.ascontiguousarray(mats.transpose(1, 2, 0)))
        s.set_mesh_transform(ids, K); s.sync()
        hit = s.intersect(ray); print("drjit shape_id", np.array(hit.shape_id))
        for name, f in (("intersect", lambda: dr.eval(s.intersect(ray).t)), ("shadow_test", lambda: dr.eval(s.shadow_test(ray)))):
            r = best(f, 100)
            print(f"drjit llvm {A3.__name__} {name}: min {r[0]:.3f} ms, median wall {r[1]:.3f} ms, median cpu {r[2]:.3f} ms")
