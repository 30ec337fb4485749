"""``intersect`` on 2^18 rays with a finite ``tmin`` (number, array) and with ``tmin = -inf``.

One tree per process (``PYTHONPATH`` picks it); run trees alternately, e.g.::

    for r in 1 2 3; do
      PYTHONPATH=/work/main/src python3 benchmarks/tmin_ab.py main torch
      PYTHONPATH=src python3 benchmarks/tmin_ab.py branch torch --inf
      PYTHONPATH=/work/main/src python3 benchmarks/tmin_ab.py main drjit
      PYTHONPATH=src python3 benchmarks/tmin_ab.py branch drjit --inf
    done

Prints one JSON line: median process CPU time (ms) of 9 calls per case. Icosphere of
20,480 faces; origins uniform in [-3, 3]^3 aimed at points of [-0.8, 0.8]^3 (CPU only).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from reference import icosphere  # noqa: E402


def _median_ms(fn, repeats: int = 9) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return 1e3 * float(np.median(times))


def main() -> None:
    tree, frontend, with_inf = sys.argv[1], sys.argv[2], "--inf" in sys.argv
    v, f = icosphere(5)
    n = 2**18
    rng = np.random.default_rng(0)
    o = rng.uniform(-3, 3, (n, 3))
    d = rng.uniform(-0.8, 0.8, (n, 3)) - o
    out = {"tree": tree, "frontend": frontend}
    if frontend == "torch":
        import torch

        import rayd.torch as rt

        torch.set_num_threads(2)
        for dtype in (torch.float32, torch.float64):
            scene = rt.Scene()
            scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype), torch.tensor(f)))
            scene.build()
            to, td = torch.tensor(o, dtype=dtype), torch.tensor(d, dtype=dtype)
            cases = {"tmin=0": rt.Ray(to, td), "tmin tensor": rt.Ray(to, td, tmin=torch.zeros(n, dtype=dtype))}
            if with_inf:
                cases["tmin=-inf"] = rt.Ray(to, td, tmin=-math.inf)
            for name, ray in cases.items():
                out[f"{str(dtype)[6:]} {name}"] = _median_ms(lambda: scene.intersect(ray))
    else:
        import drjit as dr
        from drjit.llvm import Array3f, Array3u, Float

        import rayd.drjit as rd

        scene = rd.Scene()
        scene.add_mesh(rd.Mesh(Array3f(*v.T), Array3u(*f.T.astype(np.uint32))))
        scene.build()
        do, dd = Array3f(*o.T), Array3f(*d.T)
        cases = {"tmin=0": rd.Ray(do, dd), "tmin array": rd.Ray(do, dd, tmin=Float(np.zeros(n, np.float32)))}
        if with_inf:
            cases["tmin=-inf"] = rd.Ray(do, dd, tmin=-math.inf)

        def run(ray):
            hit = scene.intersect(ray)
            dr.eval(hit.t, hit.p)

        for name, ray in cases.items():
            out[f"float32 {name}"] = _median_ms(lambda: run(ray))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
