"""A generated test mesh for the compile / vmap / double-backward tests (no files needed)."""

from __future__ import annotations

import math

import torch


def uv_sphere(n: int = 8, dtype=torch.float32, device="cpu"):
    """(V, 3) vertices and (F, 3) faces of a closed, outward-oriented UV sphere of radius 1.

    ``n`` rings of ``2 n`` quads (two triangles each); the poles repeat per column.
    """
    rows = []
    for i in range(n + 1):
        th = math.pi * i / n
        for j in range(2 * n):
            ph = math.pi * j / n
            rows.append([math.sin(th) * math.cos(ph), math.sin(th) * math.sin(ph), math.cos(th)])
    faces = []
    for i in range(n):
        for j in range(2 * n):
            a, b = i * 2 * n + j, i * 2 * n + (j + 1) % (2 * n)
            faces += [[a, a + 2 * n, b], [b, a + 2 * n, b + 2 * n]]
    return torch.tensor(rows, dtype=dtype, device=device), torch.tensor(faces, device=device)
