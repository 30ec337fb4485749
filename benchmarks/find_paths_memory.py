"""Host memory of ``find_specular_paths`` with many bounces (helper breakit25, session 25).

Runs rayd.torch's ``find_specular_paths`` in ``tests/torch/test_find_paths.py``'s room (24 faces),
one source and one target, ``max_bounces=16``, and prints the number of candidate sequences, the
paths found, NumPy's peak traced allocation (``tracemalloc``) and the process's peak RSS.

    PYTHONPATH=src python benchmarks/find_paths_memory.py --rays 30000
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import torch

import rayd.torch as rt
from rayd.core import paths


def _room() -> rt.Scene:
    def box(lo, hi, offset):
        (x0, y0, z0), (x1, y1, z1) = lo, hi
        v = [[x0, y0, z0], [x1, y0, z0], [x1, y1, z0], [x0, y1, z0], [x0, y0, z1], [x1, y0, z1], [x1, y1, z1],
             [x0, y1, z1]]
        f = [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [2, 3, 7], [2, 7, 6], [1, 2, 6],
             [1, 6, 5], [0, 4, 7], [0, 7, 3]]
        return v, [[a + offset, b + offset, c + offset] for a, b, c in f]

    v1, f1 = box([0, 0, 0], [10, 8, 4], 0)
    v2, f2 = box([3, 3, 0], [5, 4.5, 2.5], 8)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(v1 + v2, dtype=torch.float64), torch.tensor(f1 + f2)))
    scene.build()
    return scene


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rays", type=int, default=10_000)
    parser.add_argument("--bounces", type=int, default=16)
    args = parser.parse_args()
    scene = _room()
    count = []
    original = paths.candidate_sequences

    def counted(*a, **k):
        out = original(*a, **k)
        count.append(out.shape[0])
        return out

    paths.candidate_sequences = counted
    src = torch.tensor([[1.0, 1.0, 1.5]], dtype=torch.float64)
    dst = torch.tensor([[9.0, 7.0, 2.0]], dtype=torch.float64)
    tracemalloc.start()
    start = time.perf_counter()
    found = rt.find_specular_paths(scene, src, dst, args.bounces, num_rays=args.rays)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rays {args.rays} bounces {args.bounces}: candidates {sum(count)}, paths {int(found.valid.sum())}, "
          f"NumPy peak {peak / 2**20:.0f} MB, peak RSS {rss:.0f} MB, {seconds:.1f} s")


if __name__ == "__main__":
    main()
