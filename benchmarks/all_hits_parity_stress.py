"""count_intersections' parity through the vertices and edges of closed meshes, many seeds (session 20, helper limits20).

Rays through every vertex and a point of every edge of rotated bumpy spheres (``tests/touch_reference.py``: random and
tangent directions, origins inside and outside), float32 and float64, at the origin and moved by ``--offset``: a ray
from ``o`` must cross the closed mesh an odd number of times exactly where ``o`` is inside (float64 winding number).
Prints the rays whose count has the wrong parity and the totals.

Usage: python benchmarks/all_hits_parity_stress.py [--seeds 20:32] [--offset 300]
"""
import argparse, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import numpy as np, torch
import rayd.torch as rt
from touch_reference import bumpy_sphere, inside, rotation, vertex_and_edge_rays

parser = argparse.ArgumentParser()
parser.add_argument("--seeds", default="20:32")
parser.add_argument("--offset", type=float, default=300.0)
args = parser.parse_args()
first, last = (int(x) for x in args.seeds.split(":"))
total = wrong = 0
for seed in range(first, last):
    for dtype in (torch.float32, torch.float64):
        for offset in (0.0, args.offset):
            rng = np.random.default_rng(seed)
            v, f = bumpy_sphere(seed, 2 + seed % 2)
            v = v @ rotation(rng).T + rng.normal(size=3) + offset
            o, d = vertex_and_edge_rays(v, f, rng, per_target=2)
            want, clear = inside(o, v, f)
            scene = rt.Scene()
            scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=dtype), torch.tensor(f)))
            scene.build()
            count = scene.count_intersections(rt.Ray(torch.tensor(o, dtype=dtype), torch.tensor(d, dtype=dtype))).numpy()
            bad = clear & ((count % 2 == 1) != want)
            total += int(clear.sum())
            wrong += int(bad.sum())
            if bad.any():
                print(f"seed {seed} {dtype} offset {offset}: rays {np.nonzero(bad)[0][:8]} count {count[bad][:8]}")
print(f"rays {total}, wrong parity {wrong}")
