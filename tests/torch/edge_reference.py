"""Brute-force float64 torch references for the nearest-edge tests, and test meshes."""

from __future__ import annotations

import math

import torch


def segments(scene) -> tuple[torch.Tensor, torch.Tensor]:
    """World-space float64 endpoints (E, 3) of every edge of a (one-mesh, untransformed) scene."""
    top = scene.edge_topology()
    vertices = torch.cat([s.vertices.detach().double() for s in scene._shapes])
    offsets = torch.tensor([s.vertex_offset for s in scene._shapes], device=vertices.device)
    ends = top.v.long() + offsets[top.shape_id.long()].unsqueeze(-1)
    return vertices[ends[:, 0]], vertices[ends[:, 1]]


def point_distances(p: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N, E) distance from each point to each segment (float64, all pairs)."""
    p, a, b = p.double(), a.double(), b.double()
    ab = b - a
    t = ((p[:, None] - a) * ab).sum(-1) / (ab * ab).sum(-1).clamp_min(1e-300)
    q = a + t.clamp(0, 1)[..., None] * ab
    return (p[:, None] - q).norm(dim=-1)


def _project(x, o, d, lo, hi):
    """Parameter in [lo, hi] of the point of ``o + s d`` closest to ``x``."""
    return ((((x - o) * d).sum(-1)) / (d * d).sum(-1)).clamp(lo, hi)


def ray_distances(o, d, tmin, tmax, a, b) -> torch.Tensor:
    """(N, E) distance between ray segments ``o + s d, s in [tmin, tmax]`` and segments.

    Independent of the library's branch logic: the minimum of the convex quadratic over
    the box ``[tmin, tmax] x [0, 1]`` is the smallest of its interior stationary point
    (when inside) and the minima along the four sides.
    """
    o, d = o.double()[:, None], d.double()[:, None]
    s0 = torch.as_tensor(tmin, dtype=torch.float64, device=o.device).expand(o.shape[0])[:, None]
    s1 = torch.as_tensor(tmax, dtype=torch.float64, device=o.device).expand(o.shape[0])[:, None]
    a, b = a.double()[None], b.double()[None]
    e = b - a

    def dist(s, t):
        return (o + s[..., None] * d - a - t[..., None] * e).norm(dim=-1)

    zero = torch.zeros_like(s0 + a[..., 0])
    one = torch.ones_like(zero)
    candidates = [dist(_project(a, o, d, s0, s1), zero), dist(_project(b, o, d, s0, s1), one)]
    for s in (s0, s1):
        s_full = s.expand_as(zero)
        finite = torch.isfinite(s_full)
        s_safe = torch.where(finite, s_full, 0.0)
        t = _project(o + s_safe[..., None] * d, a, e, 0.0, 1.0)
        candidates.append(torch.where(finite, dist(s_safe, t), math.inf))
    r = o - a
    dd, ee, de = (d * d).sum(-1), (e * e).sum(-1), (d * e).sum(-1)
    c, f = (d * r).sum(-1), (e * r).sum(-1)
    den = dd * ee - de * de
    ok = den > 1e-12 * dd * ee
    s = torch.where(ok, (de * f - c * ee) / torch.where(ok, den, 1.0), 0.0)
    t = torch.where(ok, (dd * f - de * c) / torch.where(ok, den, 1.0), 0.0)
    inside = ok & (s >= s0) & (s <= s1) & (t >= 0) & (t <= 1)
    candidates.append(torch.where(inside, dist(s, t), math.inf))
    return torch.stack(candidates).min(0).values


def bumpy_sphere(n_theta: int = 24, n_phi: int = 48, seed: int = 0, dtype=torch.float32, device="cpu"):
    """A closed, bumpy UV sphere: (V, 3) vertices and (F, 3) int64 faces."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.linspace(0, math.pi, n_theta + 1, dtype=torch.float64)[1:-1]
    phi = torch.arange(n_phi, dtype=torch.float64) * (2 * math.pi / n_phi)
    th, ph = torch.meshgrid(theta, phi, indexing="ij")
    radius = 1 + 0.1 * torch.rand(th.shape, generator=g, dtype=torch.float64)
    ring = torch.stack((radius * th.sin() * ph.cos(), radius * th.sin() * ph.sin(), radius * th.cos()), -1)
    vertices = torch.cat([torch.tensor([[0, 0, 1.0]], dtype=torch.float64), ring.reshape(-1, 3),
                          torch.tensor([[0, 0, -1.0]], dtype=torch.float64)])
    faces = []
    idx = lambda i, j: 1 + i * n_phi + (j % n_phi)  # noqa: E731
    south = 1 + (n_theta - 1) * n_phi
    for j in range(n_phi):
        faces.append([0, idx(0, j), idx(0, j + 1)])
        faces.append([south, idx(n_theta - 2, j + 1), idx(n_theta - 2, j)])
        for i in range(n_theta - 2):
            faces.append([idx(i, j), idx(i + 1, j), idx(i + 1, j + 1)])
            faces.append([idx(i, j), idx(i + 1, j + 1), idx(i, j + 1)])
    return vertices.to(dtype=dtype, device=device), torch.tensor(faces, device=device)
