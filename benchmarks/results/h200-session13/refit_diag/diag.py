import sys, numpy as np, warp as wp
sys.path.insert(0, "tests/engine"); sys.path.insert(0, ".")
import importlib.util
spec = importlib.util.spec_from_file_location("t", "tests/engine/test_refit_update.py"); t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
wp.init()
for constructor in ("sah", "ploc"):
    rng = np.random.default_rng(5000)
    count = 5000
    v = rng.uniform(-1, 1, (3 * count, 3)).astype(np.float32)
    f = rng.permutation(3 * count).reshape(-1, 3).astype(np.int32)
    one = t._tri(v, f, 3, "cuda", constructor, "wide4"); two = t._tri(v, f, 3, "cuda", constructor, "wide4")
    a0 = one.wide.data.numpy().view(np.int32).copy(); b0 = two.wide.data.numpy().view(np.int32).copy()
    print(constructor, "built equal:", np.array_equal(a0, b0), a0.shape)
    moved = (v * rng.uniform(0.5, 3.0, (len(v), 1)) + 7.0).astype(np.float32)
    for step in range(2):
        for tri in (one, two):
            tri.points.assign(moved if step == 0 else moved[::-1].copy()); tri.refit()
        names = ["lowers", "uppers", "pairboxes", "pairtris", "mag", "tlo", "thi", "wide"]
        for n, a, b in zip(names, t._state(one), t._state(two)):
            a = np.ascontiguousarray(a).view(np.int32); b = np.ascontiguousarray(b).view(np.int32)
            if not np.array_equal(a, b):
                idx = np.argwhere(a != b)
                print(" step", step, n, "differs at", len(idx), "entries; first", idx[:6].tolist(), "rows mod 8", np.unique(idx[:, 0] % 8).tolist() if n == "wide" else "")
                if n == "wide":
                    r = idx[0][0]; print("   a", a[r], a.view(np.float32)[r], "\n   b", b[r], b.view(np.float32)[r])
        written = one.wide.data.numpy().view(np.int32).copy(); one.wide.refresh(); ref = one.wide.data.numpy().view(np.int32)
        d = np.argwhere(written != ref); print(" step", step, "climb vs refresh differ:", len(d), np.unique(d[:, 0] % 8).tolist() if len(d) else "")
