"""Ops per query (10 vs 100 shapes) and single-shape CPU timings of the edge and winding queries (issue 13).

    PYTHONPATH=src python benchmarks/ops_per_shape.py [--counts] [--repeats 15]

Counts: the aten ops one query dispatches, as ``tests/torch/test_ops_per_shape.py`` counts
them (scenes of 10/100 transformed meshes and one mesh with 10/100 instances). Timings:
median ms of one query on one mesh (``/work/meshes/bunny_69k.npz``, or a sphere-like grid
if absent), plain float32 (fused paths), with a transform (op by op), and float64 with
gradients into vertices and the transform (forward + backward).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import rayd.torch as rt

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["nearest_edge", "nearest_edges", "silhouette_edges", "winding_number"]


def counts() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "torch"))
    import test_ops_per_shape as t

    for kind, dtype, grad in t._CASES:
        c = t._ops(kind, dtype, grad)
        row = ", ".join(f"{n} {c[10][n]}/{c[100][n]}" for n in NAMES)
        print(f"ops {kind:9s} {str(dtype)[6:]:7s} {'grad' if grad else 'nograd'}: {row}", flush=True)


def _sphere(n: int = 186) -> tuple[np.ndarray, np.ndarray]:
    """A UV sphere of ``2 n (n - 1)`` faces (186: 68,820, about the bunny's 69k), vertices (V, 3), faces (F, 3)."""
    theta = np.linspace(0.0, np.pi, n + 1)[1:-1]
    phi = np.linspace(0.0, 2.0 * np.pi, n, endpoint=False)
    t, q = np.meshgrid(theta, phi, indexing="ij")
    ring = np.stack([np.sin(t) * np.cos(q), np.sin(t) * np.sin(q), np.cos(t)], -1).reshape(-1, 3)
    vertices = np.concatenate([[[0.0, 0.0, 1.0]], ring, [[0.0, 0.0, -1.0]]])
    rows, cols = n - 1, n
    idx = 1 + np.arange(rows * cols).reshape(rows, cols)
    nxt = np.roll(idx, -1, axis=1)
    faces = [np.stack([np.zeros(cols, dtype=np.int64), idx[0], nxt[0]], -1)]
    for r in range(rows - 1):
        a, b, c, d = idx[r], nxt[r], idx[r + 1], nxt[r + 1]
        faces += [np.stack([a, c, b], -1), np.stack([b, c, d], -1)]
    last = vertices.shape[0] - 1
    faces.append(np.stack([np.full(cols, last), nxt[-1], idx[-1]], -1))
    return vertices, np.concatenate(faces)


def _mesh():
    path = Path("/work/meshes/bunny_69k.npz")
    if path.exists():
        data = np.load(path)
        vertices, faces = data["vertices"], data["faces"]
    else:
        print(f"({path} absent: a UV sphere of the same face count)", flush=True)
        vertices, faces = _sphere()
    data = {"vertices": vertices, "faces": faces}
    v = torch.as_tensor(data["vertices"], dtype=torch.float64)
    v = (v - v.mean(0)) / (v.max(0).values - v.min(0).values).max()
    return v, torch.as_tensor(data["faces"].astype(np.int32))


def _median_ms(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def timings(repeats: int) -> None:
    v64, f = _mesh()
    gen = torch.Generator().manual_seed(0)
    p64 = torch.rand((4096, 3), generator=gen, dtype=torch.float64) - 0.5
    eye = torch.eye(4, dtype=torch.float64)
    eye[:3, 3] = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    for label, dtype, transformed, grad in (("float32", torch.float32, False, False),
                                            ("float32 transformed", torch.float32, True, False),
                                            ("float64 transformed grad", torch.float64, True, True)):
        v = v64.to(dtype).clone().requires_grad_(grad)
        m = eye.to(dtype).clone().requires_grad_(grad) if transformed else None
        scene = rt.Scene()
        scene.add_mesh(rt.Mesh(v, f, to_world=m))
        scene.build()
        p = p64.to(dtype)
        view = torch.tensor([0.0, 0.0, 3.0], dtype=dtype)
        queries = {
            "nearest_edge": lambda: scene.nearest_edge(p).distance.sum(),
            "nearest_edges": lambda: scene.nearest_edges(p, 4).distance.sum(),
            "silhouette_edges": lambda: scene.silhouette_edges(view),
            "winding_number": lambda: scene.winding_number(p[:64]).sum(),
        }
        for name, query in queries.items():
            def run(query=query, name=name):
                out = query()
                if grad and name != "silhouette_edges":
                    out.backward()
            print(f"time {label:25s} {name:17s} {_median_ms(run, repeats):8.2f} ms", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", action="store_true", help="only the op counts")
    parser.add_argument("--timings", action="store_true", help="only the timings")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.timings:
        counts()
    if not args.counts:
        timings(args.repeats)
