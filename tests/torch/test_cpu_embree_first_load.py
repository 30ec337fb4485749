"""The CPU Embree path's first query in a fresh process: its chunks start on several threads at once,
and Warp's load of a kernel's module at its first launch is not thread-safe (two threads loading the
search kernel's module kept a recorded launch of a copy that the other load then unloaded: the next
query crashed in 3 runs of 4, 12-07). Each run: a new interpreter, three queries of one batch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rayd.engine import cpu_embree

pytestmark = pytest.mark.skipif(not cpu_embree.active() or (os.cpu_count() or 1) < 2,
                                reason="needs the CPU Embree path and two cores")

_SCRIPT = textwrap.dedent("""
    import torch
    from edge_reference import bumpy_sphere
    import rayd.torch as rt
    v, f = bumpy_sphere(32, 64)
    scene = rt.Scene(); scene.add_mesh(rt.Mesh(v, f), dynamic=True); scene.build()
    g = torch.Generator().manual_seed(0)
    n = 40_000  # several chunks, an incoherent (sorted) batch
    o = 3.0 * torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    d = torch.rand(n, 3, generator=g) - 0.5 - o
    first = scene.intersect(rt.Ray(o, d))
    for _ in range(2):
        again = scene.intersect(rt.Ray(o, d))
        assert torch.equal(again.t, first.t) and torch.equal(again.prim_id, first.prim_id)
    print("ok")
""")


@pytest.mark.parametrize("run", range(3))
def test_first_queries_in_a_fresh_process(run):
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.abspath(os.path.join(here, "..", "..", "src"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, here, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (done.returncode, done.stderr[-2000:])
