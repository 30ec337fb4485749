"""Calls from several Python threads: answered correctly, never a crash.

Each case runs in a fresh process, since the failure it guards against (Warp loading a
module at its first launch from two threads at once: a segfault or ``KeyError`` in
``Module.load``; a recorded launch re-parameterised by two threads; the CPU Embree scene
made lazily at a geometry's second query) only shows before the first launches.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

TORCH_OWN = """
import threading, torch, rayd.torch as rt
res, errs = [], []
def own(k):
    try:
        sc = rt.Scene()
        sc.add_mesh(rt.Mesh(torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0.]]) + k, torch.tensor([[0, 1, 2]])))
        sc.build()
        ray = rt.Ray(torch.tensor([0.2, 0.2, 1.0]) + k, torch.tensor([0., 0., -1.]))
        for _ in range(6):
            res.append(sc.intersect(ray).t.item())
            res.append(float(sc.nearest_edge(torch.tensor([[0.5 + k, -1.0 + k, k]])).distance.item()))
    except Exception as e:
        errs.append(repr(e))
ts = [threading.Thread(target=own, args=(k,)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not errs, errs
assert sorted(set(res)) == [1.0], sorted(set(res))
assert len(res) == 4 * 6 * 2
print("ok")
"""

TORCH_SHARED = """
import threading, torch, rayd.torch as rt
sc = rt.Scene()
sc.add_mesh(rt.Mesh(torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0.]]), torch.tensor([[0, 1, 2]])))
sc.build()
ray = rt.Ray(torch.tensor([0.2, 0.2, 1.0]), torch.tensor([0., 0., -1.]))
assert sc.intersect(ray).t.item() == 1.0  # the first query; the second one may switch accelerators
res, errs = [], []
def work():
    try:
        for _ in range(10):
            res.append(sc.intersect(ray).t.item())
            res.append(float(sc.shadow_test(ray).item()))
    except Exception as e:
        errs.append(repr(e))
ts = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not errs, errs
assert sorted(set(res)) == [1.0], sorted(set(res))
assert len(res) == 80
print("ok")
"""

DRJIT = """
import threading, drjit as dr, rayd.drjit as rd
from drjit.llvm import Array3f, Array3u, Float
res, errs = [], []
def own(k):
    try:
        sc = rd.Scene()
        sc.add_mesh(rd.Mesh(Array3f([0 + k, 1 + k, k], [k, k, 1 + k], [0, 0, 0]), Array3u([0], [1], [2])))
        sc.build()
        for _ in range(6):
            hit = sc.intersect(rd.Ray(Array3f(0.2 + k, 0.2 + k, 1.0), Array3f(0, 0, -1)))
            res.append(float(hit.t[0]))
    except Exception as e:
        errs.append(repr(e))
ts = [threading.Thread(target=own, args=(k,)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not errs, errs
assert sorted(set(res)) == [1.0], sorted(set(res))
assert len(res) == 24
print("ok")
"""


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("case", ["own", "shared"])
@pytest.mark.parametrize("accel", ["default", "warp"])
def test_torch_scenes_queried_from_four_threads(accel, case):
    pytest.importorskip("torch")
    code = TORCH_OWN if case == "own" else TORCH_SHARED
    code = code if accel == "default" else "import os; os.environ['RAYD_CPU_ACCEL'] = 'warp'\n" + code
    out = _run(code)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-4000:]


def test_drjit_scenes_built_and_queried_from_four_threads():
    pytest.importorskip("drjit")
    out = _run(DRJIT)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-4000:]
