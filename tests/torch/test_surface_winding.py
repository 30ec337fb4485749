"""Hierarchical (fast) winding numbers vs the exact sum; instances; refits (rayd.torch).

The reference is an independent float64 NumPy sum of signed solid angles (Van
Oosterom, Strackee 1983) over the world-space faces. The fast evaluation must stay
within the documented bound (docs/api.md, "Surface queries"); ``contains`` must equal
the exact decision.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import rayd.torch as rt

trimesh = pytest.importorskip("trimesh")

#: The documented accuracy of the hierarchical winding number (max abs error vs the exact sum).
WINDING_BOUND = 1e-2


def reference(points, vertices, faces):
    """(N,) float64 exact winding numbers of triangles ``vertices[faces]`` around ``points``."""
    tri = np.asarray(vertices, np.float64)[np.asarray(faces)]
    out = []
    for chunk in np.array_split(np.asarray(points, np.float64), max(1, len(points) // 256)):
        p = chunk[:, None, :]
        x, y, z = tri[None, :, 0] - p, tri[None, :, 1] - p, tri[None, :, 2] - p
        lx, ly, lz = (np.linalg.norm(u, axis=-1) for u in (x, y, z))
        num = (x * np.cross(y, z)).sum(-1)
        den = lx * ly * lz + (x * y).sum(-1) * lz + (y * z).sum(-1) * lx + (z * x).sum(-1) * ly
        out.append((2.0 * np.arctan2(num, den)).sum(-1) / (4.0 * math.pi))
    return np.concatenate(out)


def scene_of(vertices, faces, device, dynamic=False, dtype=torch.float32):
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.as_tensor(np.asarray(vertices), dtype=dtype, device=device),
                           torch.as_tensor(np.asarray(faces, np.int64), device=device)), dynamic=dynamic)
    scene.build()
    return scene


def _bunny():
    for root in (os.environ.get("RAYD_MESHES"), Path(__file__).resolve().parents[2] / ".device" / "meshes"):
        if root and (Path(root) / "bunny.npz").exists():
            data = np.load(Path(root) / "bunny.npz")
            return data["vertices"], data["faces"]
    pytest.skip("bunny.npz not fetched (python examples/get_bunny.py)")


def _closed(name):
    if name == "icosphere":
        m = trimesh.creation.icosphere(subdivisions=4)
        return m.vertices, m.faces
    if name == "torus":
        m = trimesh.creation.torus(1.0, 0.35, major_sections=48, minor_sections=24)
        return m.vertices, m.faces
    return _bunny()


@pytest.mark.parametrize("name", ["icosphere", "torus", "bunny"])
def test_fast_vs_exact_on_closed_meshes(device, name):
    v, f = _closed(name)
    scene = scene_of(v, f, device)
    lo, hi = v.min(0), v.max(0)
    rng = np.random.default_rng(5)
    pts = rng.uniform(lo - 0.25 * (hi - lo), hi + 0.25 * (hi - lo), (3000, 3))
    q = torch.as_tensor(pts, dtype=torch.float32, device=device)
    ref = scene.winding_number(q, exact=True).double().cpu().numpy()
    fast = scene.winding_number(q).double().cpu().numpy()
    sub = slice(0, 400)  # the exact kernel vs the NumPy sum on a subset (the NumPy sum is slow)
    np.testing.assert_allclose(ref[sub], reference(q[sub].double().cpu().numpy(), v.astype(np.float32), f),
                               rtol=0, atol=1e-6)
    assert np.abs(fast - ref).max() <= WINDING_BOUND
    # contains: 100 % equal to the exact decision; away from the surface it is 0 or 1
    inside = scene.contains(q).cpu().numpy()
    assert (inside == (ref > 0.5)).all()
    dist = scene.closest_point(q).distance.cpu().numpy()
    away = dist > 1e-3 * np.linalg.norm(hi - lo)
    assert away.mean() > 0.9
    np.testing.assert_allclose(ref[away], np.round(ref[away]), atol=1e-5)
    assert np.abs(fast[away] - np.round(ref[away])).max() <= WINDING_BOUND
    sd = scene.signed_distance(q).cpu().numpy()
    assert ((sd < 0) == (ref > 0.5)).all()


def test_fast_on_open_hemisphere(device):
    sphere = trimesh.creation.icosphere(subdivisions=4)
    keep = sphere.faces[sphere.vertices[sphere.faces].mean(1)[:, 2] > 0]
    scene = scene_of(sphere.vertices, keep, device)
    pts = np.random.default_rng(8).uniform(-1.5, 1.5, (3000, 3))
    q = torch.as_tensor(pts, dtype=torch.float32, device=device)
    ref = scene.winding_number(q, exact=True).double().cpu().numpy()
    np.testing.assert_allclose(ref[:400], reference(q[:400].double().cpu().numpy(), sphere.vertices.astype(np.float32),
                                                    keep), rtol=0, atol=1e-6)
    fast = scene.winding_number(q).double().cpu().numpy()
    assert np.abs(fast - ref).max() <= WINDING_BOUND
    assert ((ref > 0.1) & (ref < 0.9)).mean() > 0.2  # fractional over much of the box
    # points near the 0.5 level are decided by the exact sum
    assert (scene.contains(q).cpu().numpy() == (ref > 0.5)).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_on_random_soups(device, seed):
    rng = np.random.default_rng(seed)
    count = 1500
    tri = rng.uniform(0, 1, (count, 1, 3)) + rng.normal(size=(count, 3, 3)) * (0.05 + 0.1 * seed)
    v, f = tri.reshape(-1, 3), np.arange(3 * count).reshape(count, 3)
    scene = scene_of(v, f, device)
    q = torch.as_tensor(rng.uniform(-0.3, 1.3, (1000, 3)), dtype=torch.float32, device=device)
    ref = reference(q.double().cpu().numpy(), v.astype(np.float32), f)
    fast = scene.winding_number(q).double().cpu().numpy()
    exact = scene.winding_number(q, exact=True).double().cpu().numpy()
    np.testing.assert_allclose(exact, ref, rtol=0, atol=1e-5)
    assert np.abs(fast - ref).max() <= WINDING_BOUND
    assert (scene.contains(q).cpu().numpy() == (ref > 0.5)).all()


def _placement(kind):
    m = np.eye(4)
    if kind == "translated":
        m[:3, 3] = [2.5, -1.0, 0.5]
    elif kind == "rotated":
        c, s = math.cos(0.8), math.sin(0.8)
        m[:3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
        m[:3, 3] = [0.0, 3.0, 0.0]
    elif kind == "mirrored":
        m[:3, :3] = np.diag([-1.0, 1.0, 1.0])
        m[:3, 3] = [-3.0, 0.0, 0.0]
    else:  # sheared and scaled non-uniformly (affine)
        m[:3, :3] = [[1.5, 0.4, 0.0], [0.0, 0.7, 0.2], [0.1, 0.0, 1.2]]
        m[:3, 3] = [0.0, -3.0, 1.0]
    return m


@pytest.mark.parametrize("surface", ["closed", "open"])
def test_instances_vs_transformed_copies(device, surface):
    sphere = trimesh.creation.icosphere(subdivisions=3)
    faces = sphere.faces if surface == "closed" else sphere.faces[sphere.vertices[sphere.faces].mean(1)[:, 2] > 0]
    kinds = ["translated", "rotated", "mirrored", "affine"]
    mats = [_placement(k) for k in kinds]
    scene = rt.Scene()
    mid = scene.add_mesh(rt.Mesh(torch.as_tensor(sphere.vertices, dtype=torch.float32, device=device),
                                 torch.as_tensor(faces, device=device)))
    scene.set_shape_enabled(mid, False)
    for m in mats:
        scene.add_instance(mid, torch.as_tensor(m, dtype=torch.float32, device=device))
    scene.build()
    v32 = sphere.vertices.astype(np.float32).astype(np.float64)
    world = np.concatenate([v32 @ m.astype(np.float32)[:3, :3].T.astype(np.float64) + m.astype(np.float32)[:3, 3]
                            for m in mats])
    wfaces = np.concatenate([faces + k * len(v32) for k in range(len(mats))])
    rng = np.random.default_rng(3)
    centres = np.array([m[:3, 3] for m in mats])
    pts = np.concatenate([c + rng.uniform(-1.6, 1.6, (250, 3)) for c in centres])
    q = torch.as_tensor(pts, dtype=torch.float32, device=device)
    ref = reference(q.double().cpu().numpy(), world, wfaces)
    exact = scene.winding_number(q, exact=True).double().cpu().numpy()
    fast = scene.winding_number(q).double().cpu().numpy()
    np.testing.assert_allclose(exact, ref, rtol=0, atol=1e-5)
    assert np.abs(fast - ref).max() <= WINDING_BOUND
    if surface == "closed":
        # the mirrored copy is inside out: -1 inside it
        mirrored = torch.as_tensor(centres[2], dtype=torch.float32, device=device)[None]
        assert scene.winding_number(mirrored).item() == pytest.approx(-1.0, abs=WINDING_BOUND)
        assert scene.contains(q).cpu().numpy().tolist() == (ref > 0.5).tolist()
    # disabling an instance removes it from the fast sum (node data is per mesh, object space)
    scene.set_shape_enabled(1, False)
    scene.sync()
    ref1 = reference(q.double().cpu().numpy(), world, wfaces[len(faces):])
    assert np.abs(scene.winding_number(q).double().cpu().numpy() - ref1).max() <= WINDING_BOUND


def test_dynamic_refit_and_enable_flags(device):
    sphere = trimesh.creation.icosphere(subdivisions=3)
    v = torch.as_tensor(sphere.vertices, dtype=torch.float32, device=device)
    f = torch.as_tensor(sphere.faces, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.add_mesh(rt.Mesh(v * 0.5 + torch.tensor([0.0, 0.0, 4.0], device=device), f))
    scene.build()
    pts = torch.tensor([[0.0, 0, 0], [3.0, 0, 0], [0.0, 0, 4.0], [3.0, 0.3, 0.1]], device=device)
    torch.testing.assert_close(scene.winding_number(pts).cpu(), torch.tensor([1.0, 0, 1, 0]), atol=WINDING_BOUND,
                               rtol=0)
    moved = v * torch.tensor([1.0, 2.0, 1.0], device=device) + torch.tensor([3.0, 0.0, 0.0], device=device)
    scene.update_mesh_vertices(0, moved)
    scene.sync()
    torch.testing.assert_close(scene.winding_number(pts).cpu(), torch.tensor([0.0, 1, 1, 1]), atol=WINDING_BOUND,
                               rtol=0)
    rng = np.random.default_rng(0)
    q = torch.as_tensor(rng.uniform(-1.5, 5.0, (800, 3)), dtype=torch.float32, device=device)
    world = np.concatenate([moved.double().cpu().numpy(), (v * 0.5).double().cpu().numpy() + [0, 0, 4.0]])
    both = np.concatenate([sphere.faces, sphere.faces + len(sphere.vertices)])
    ref = reference(q.double().cpu().numpy(), world, both)
    assert np.abs(scene.winding_number(q).double().cpu().numpy() - ref).max() <= WINDING_BOUND
    scene.set_shape_enabled(1, False)
    scene.sync()
    ref0 = reference(q.double().cpu().numpy(), world, sphere.faces)
    assert np.abs(scene.winding_number(q).double().cpu().numpy() - ref0).max() <= WINDING_BOUND
    assert (scene.contains(q).cpu().numpy() == (ref0 > 0.5)).all()


def test_gradients_use_the_exact_sum_with_instances(device):
    """With gradients the exact torch sum runs, over instances too: d w / d translation vs finite differences."""
    sphere = trimesh.creation.icosphere(subdivisions=2)
    faces = sphere.faces[sphere.vertices[sphere.faces].mean(1)[:, 2] > 0]  # open: w varies smoothly
    v = torch.as_tensor(sphere.vertices, dtype=torch.float64, device=device)
    m = torch.eye(4, dtype=torch.float64, device=device)
    m[:3, 3] = torch.tensor([0.2, -0.1, 0.3], dtype=torch.float64)
    leaf = m.clone().requires_grad_(True)

    def value(mat, exact=False):
        scene = rt.Scene()
        mid = scene.add_mesh(rt.Mesh(v, torch.as_tensor(faces, device=device)))
        scene.set_shape_enabled(mid, False)
        scene.add_instance(mid, mat)
        scene.build()
        return scene.winding_number(torch.tensor([[0.1, 0.2, -0.4], [0.0, 0.0, 1.7]], dtype=torch.float64,
                                                 device=device), exact=exact)

    w = value(leaf)
    torch.testing.assert_close(w.detach(), value(m, exact=True), atol=1e-6, rtol=0)
    torch.testing.assert_close(w.detach(), value(m), atol=WINDING_BOUND, rtol=0)
    w.sum().backward()
    eps = 1e-6
    for k in range(3):
        hi, lo = m.clone(), m.clone()
        hi[k, 3] += eps
        lo[k, 3] -= eps
        # the float64 torch sum (a matrix that requires grad), not the float32-geometry kernel
        scene_hi, scene_lo = value(hi.requires_grad_(True)).detach(), value(lo.requires_grad_(True)).detach()
        fd = (scene_hi - scene_lo).sum().item() / (2 * eps)
        assert leaf.grad[k, 3].item() == pytest.approx(fd, rel=1e-4, abs=1e-6)


def test_exact_keyword_checked(device):
    scene = scene_of([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 2]], device)
    for name in ("winding_number", "contains", "signed_distance"):
        with pytest.raises(TypeError, match=rf"^rayd\.torch\.Scene\.{name}\(\): 'exact'"):
            getattr(scene, name)(torch.zeros(1, 3, device=device), exact=1)


def test_contains_with_differentiable_vertices_uses_the_engine(device, monkeypatch):
    """contains()/signed_distance() need no gradient of w: no O(N F) torch sum even if vertices require grad."""
    from rayd.torch import _closest_point

    sphere = trimesh.creation.icosphere(subdivisions=2)
    v = torch.as_tensor(sphere.vertices, dtype=torch.float64, device=device).requires_grad_(True)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.as_tensor(sphere.faces, device=device)))
    scene.build()

    def refuse(*args):
        raise AssertionError("the torch solid-angle sum ran")

    monkeypatch.setattr(_closest_point, "_solid_angle_sum", refuse)
    pts = torch.tensor([[0.0, 0, 0], [2.0, 0, 0]], dtype=torch.float64, device=device)
    assert scene.contains(pts).tolist() == [True, False]
    sd = scene.signed_distance(pts)
    sd.sum().backward()
    assert sd[0].item() < 0 < sd[1].item() and torch.isfinite(v.grad).all()
