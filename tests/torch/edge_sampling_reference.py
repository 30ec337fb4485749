"""Float64 references for the edge-sampling tests: supersampled and exact pixel coverage.

Images are of layered scenes: each layer is a set of image-space triangles with one
colour, layers ordered front to back (the tests' geometry never interpenetrates), so a
point's colour is that of the first layer whose triangles contain it, else 0. This is
what a camera ray through the point sees, evaluated in float64 without any BVH.
"""

from __future__ import annotations

import numpy as np
import torch


def grid_points(width: int, height: int, side: int, seed: int | None = None, dtype=torch.float64) -> torch.Tensor:
    """(height, width, side * side, 2) stratified sample positions per pixel.

    ``side x side`` strata per pixel; one point per stratum, at its centre (``seed=None``)
    or jittered uniformly in it by a fixed generator (the same points for every
    evaluation, so finite differences see only the strata an edge sweeps).
    """
    k = torch.arange(side, dtype=dtype) / side
    sy, sx = torch.meshgrid(k, k, indexing="ij")
    offs = torch.stack((sx.reshape(-1), sy.reshape(-1)), -1)
    py, px = torch.meshgrid(torch.arange(height, dtype=dtype), torch.arange(width, dtype=dtype), indexing="ij")
    base = torch.stack((px, py), -1)[:, :, None, :] + offs
    if seed is None:
        return base + 0.5 / side
    gen = torch.Generator().manual_seed(seed)
    return base + torch.rand(base.shape, generator=gen, dtype=dtype) / side


def in_triangles(points: torch.Tensor, tris: torch.Tensor) -> torch.Tensor:
    """(...) bool: points (..., 2) inside any of the image triangles (T, 3, 2) (either winding)."""
    x, y = points[..., 0], points[..., 1]
    inside = torch.zeros(points.shape[:-1], dtype=torch.bool)
    for tri in tris:
        pos = neg = None
        for k in range(3):
            a, b = tri[k], tri[(k + 1) % 3]
            # edge function (b - a) x (p - a) = A x + B y + C
            d = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0])
            pos = d >= 0 if pos is None else pos & (d >= 0)
            neg = d <= 0 if neg is None else neg & (d <= 0)
        inside |= pos | neg
    return inside


def layered_image(layers, points: torch.Tensor) -> torch.Tensor:
    """(H, W) pixel means of the colour over ``points`` (H, W, S, 2); layers = [(tris, colour)]."""
    colour = torch.zeros(points.shape[:-1], dtype=points.dtype)
    covered = torch.zeros(points.shape[:-1], dtype=torch.bool)
    for tris, value in layers:
        hit = in_triangles(points, tris) & ~covered
        colour = torch.where(hit, torch.as_tensor(value, dtype=points.dtype), colour)
        covered |= hit
    return colour.mean(-1)


def _clip(poly: list, axis: int, bound: float, keep_above: bool) -> list:
    out = []
    for i in range(len(poly)):
        p, q = poly[i], poly[(i + 1) % len(poly)]
        pin = (p[axis] >= bound) if keep_above else (p[axis] <= bound)
        qin = (q[axis] >= bound) if keep_above else (q[axis] <= bound)
        if pin:
            out.append(p)
        if pin != qin:
            s = (bound - p[axis]) / (q[axis] - p[axis])
            out.append(p + s * (q - p))
    return out


def _area(poly: list) -> float:
    if len(poly) < 3:
        return 0.0
    p = np.array(poly)
    return 0.5 * abs(float(np.dot(p[:, 0], np.roll(p[:, 1], -1)) - np.dot(p[:, 1], np.roll(p[:, 0], -1))))


def exact_triangle_coverage(tri: np.ndarray, width: int, height: int) -> np.ndarray:
    """(H, W) exact area of image triangle ``tri`` (3, 2) inside each unit pixel (Sutherland–Hodgman)."""
    out = np.zeros((height, width))
    lo = np.floor(tri.min(0)).astype(int)
    hi = np.ceil(tri.max(0)).astype(int)
    for j in range(max(lo[1], 0), min(hi[1], height)):
        for i in range(max(lo[0], 0), min(hi[0], width)):
            poly = [np.asarray(v, dtype=np.float64) for v in tri]
            for axis, bound, above in ((0, i, True), (0, i + 1, False), (1, j, True), (1, j + 1, False)):
                poly = _clip(poly, axis, bound, above)
                if not poly:
                    break
            out[j, i] = _area(poly)
    return out


def pixel_jacobian(image: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """(H, W, P): d image / d params for a zero-valued boundary-term image, by double backward.

    ``g(u) = J^T u`` is linear in a dummy ``u``; differentiating ``g_j`` by ``u`` gives
    column ``j`` of ``J``.
    """
    u = torch.zeros_like(image, requires_grad=True)
    (g,) = torch.autograd.grad(image, params, grad_outputs=u, create_graph=True)
    g = g.reshape(-1)
    cols = [torch.autograd.grad(g[j], u, retain_graph=True)[0] for j in range(g.numel())]
    return torch.stack(cols, -1)


def convex_hull(points: np.ndarray) -> np.ndarray:
    """(M, 2) counter-clockwise convex hull of (N, 2) points (Andrew's monotone chain)."""
    pts = sorted(map(tuple, np.asarray(points, dtype=np.float64)))

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                                     - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])) <= 0:
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(reversed(pts))
    return np.array(lower[:-1] + upper[:-1])


def clip_convex(poly: list, clipper: np.ndarray) -> list:
    """Sutherland–Hodgman: ``poly`` (list of (2,) points) inside the counter-clockwise convex ``clipper``."""
    for k in range(len(clipper)):
        a, b = clipper[k], clipper[(k + 1) % len(clipper)]
        side = lambda p: (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])  # noqa: E731
        out = []
        for i in range(len(poly)):
            p, q = poly[i], poly[(i + 1) % len(poly)]
            sp, sq = side(p), side(q)
            if sp >= 0:
                out.append(p)
            if (sp >= 0) != (sq >= 0):
                out.append(p + sp / (sp - sq) * (q - p))
        poly = out
        if not poly:
            break
    return poly


def exact_layered_image(layers, width: int, height: int) -> np.ndarray:
    """(H, W) exact pixel means for convex layers ``[(ccw polygon (M, 2), colour)]``, front to back.

    Pixel value: ``Σ_l colour_l · area(pixel ∩ P_l \\ (P_0 ∪ … ∪ P_{l-1}))``; exact for up to
    two layers (the area behind the first is ``area(pixel ∩ P_1) − area(pixel ∩ P_1 ∩ P_0)``).
    """
    if len(layers) > 2:
        raise ValueError("exact_layered_image: at most two layers")
    out = np.zeros((height, width))
    for j in range(height):
        for i in range(width):
            pixel = [np.array(p, dtype=np.float64) for p in ((i, j), (i + 1, j), (i + 1, j + 1), (i, j + 1))]
            front = clip_convex(pixel, layers[0][0])
            value = layers[0][1] * _area(front)
            if len(layers) == 2:
                back = clip_convex(pixel, layers[1][0])
                both = clip_convex(back, layers[0][0]) if back else []
                value += layers[1][1] * (_area(back) - _area(both))
            out[j, i] = value
    return out
