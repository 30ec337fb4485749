"""Scene lifecycle, shape table and instances against a merged scene (helper breakit21d, session 21).

Ground truth: a freshly built scene holding the same geometry as plain meshes, one per shape
in the same order (so shape ids and ``global_prim_id`` ranges coincide), whose world-space
vertices are placed in NumPy float64 (``M_instance @ M_mesh`` for an instance).

Found: ``rayd.torch`` refused at ``build()`` a mesh whose empty vertex tensor has zero strides
(``torch.tensor(np.zeros((0, 3)))``, stride ``(0, 0)``: torch calls any empty tensor
contiguous) with Warp's raw "source inner strides are not contiguous" RuntimeError; the
scene's reused vertex view (``TorchArrays.vec3_view``) now makes empty tensors dense, as the
other hand-overs do.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import rayd.torch as rt


# ---------------------------------------------------------------------------- scene spec (NumPy)
def _affine(rng: np.random.Generator) -> np.ndarray:
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    m = np.eye(4)
    m[:3, :3] = q @ np.diag(rng.uniform(0.5, 1.5, 3))
    m[:3, 3] = rng.uniform(-8, 8, 3)
    return m


def _mesh(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random vertices and distinct faces (general position: no ties), the last vertex referenced."""
    nv = int(rng.integers(4, 9))
    combos = list(itertools.combinations(range(nv), 3))
    pick = rng.choice(len(combos), min(len(combos), int(rng.integers(1, 7))), replace=False)
    if len(combos) - 1 not in pick:
        pick[0] = len(combos) - 1
    return rng.uniform(-1, 1, (nv, 3)), np.array([combos[j] for j in pick], dtype=np.int64)


def _spec(seed: int, meshes: int = 40, instances: int = 240) -> list[tuple]:
    """Shapes in insertion order: ``("mesh", V, F, M or None)`` / ``("inst", mesh_id, M)``;
    mesh 3 has no vertices, mesh 4 no faces, and a mesh is added after every 60 instances."""
    rng = np.random.default_rng(seed)
    shapes: list[tuple] = []
    for k in range(meshes):
        if k == 3:
            shapes.append(("mesh", np.zeros((0, 3)), np.zeros((0, 3), np.int64), None))
        elif k == 4:
            shapes.append(("mesh", rng.uniform(-1, 1, (4, 3)), np.zeros((0, 3), np.int64), _affine(rng)))
        else:
            shapes.append(("mesh", *_mesh(rng), _affine(rng) if k % 3 else None))
    for k in range(instances):
        ids = [i for i, s in enumerate(shapes) if s[0] == "mesh"]
        shapes.append(("inst", int(rng.choice(ids)), _affine(rng)))
        if k % 60 == 59:
            shapes.append(("mesh", *_mesh(rng), _affine(rng)))
    return shapes


def _world(shapes: list[tuple], i: int) -> tuple[np.ndarray, np.ndarray]:
    """Shape ``i``'s world-space vertices (float64) and faces."""
    s = shapes[i]
    base = s if s[0] == "mesh" else shapes[s[1]]
    m = np.eye(4) if base[3] is None else base[3]
    if s[0] == "inst":
        m = s[2] @ m
    return base[1] @ m[:3, :3].T + m[:3, 3], base[2]


def _rays(seed: int, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    o = rng.uniform(-10, 10, (n, 3))
    return o, rng.uniform(-10, 10, (n, 3)) - o


def _points(seed: int, n: int = 400) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-10, 10, (n, 3))


# ---------------------------------------------------------------------------- rayd.torch
def _torch_scene(shapes, dynamic=()):
    scene, held = rt.Scene(), {}
    for i, s in enumerate(shapes):
        if s[0] == "mesh":
            # torch.tensor of an empty NumPy array has strides (0, 0): the zero-stride case
            v = torch.tensor(s[1], dtype=torch.float32)
            m = None if s[3] is None else torch.tensor(s[3], dtype=torch.float32)
            held[i] = v
            assert scene.add_mesh(rt.Mesh(v, torch.tensor(s[2]), to_world=m), dynamic=i in dynamic) == i
        else:
            assert scene.add_instance(s[1], torch.tensor(s[2], dtype=torch.float32)) == i
    return scene, held


def _torch_merged(shapes, disabled=()):
    scene = rt.Scene()
    for i in range(len(shapes)):
        v, f = _world(shapes, i)
        scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32).reshape(-1, 3), torch.tensor(f).reshape(-1, 3)))
    for i in disabled:
        scene.set_shape_enabled(i, False)
    scene.build()
    return scene


def _torch_agree(scene, merged, seed):
    o, d = _rays(seed)
    ray = rt.Ray(torch.tensor(o, dtype=torch.float32), torch.tensor(d, dtype=torch.float32))
    hit, want = scene.intersect(ray), merged.intersect(ray)
    assert int(want.is_valid().sum()) > 300
    for name in ("shape_id", "prim_id", "global_prim_id"):
        assert torch.equal(getattr(hit, name), getattr(want, name)), name
    ok = want.is_valid()
    assert torch.allclose(hit.t[ok], want.t[ok], rtol=1e-5, atol=1e-5)
    assert torch.allclose(hit.p[ok], want.p[ok], atol=1e-4)
    pts = torch.tensor(_points(seed), dtype=torch.float32)
    for query in ("closest_point", "nearest_edge"):
        got, ref = getattr(scene, query)(pts), getattr(merged, query)(pts)
        assert torch.allclose(got.distance, ref.distance, atol=1e-5), query


def test_torch_empty_vertex_tensor_with_zero_strides():
    empty = torch.tensor(np.zeros((0, 3)), dtype=torch.float32)
    assert empty.stride() == (0, 0)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(empty, torch.tensor(np.zeros((0, 3), np.int64))), dynamic=True)
    scene.add_instance(0, torch.eye(4))
    scene.add_mesh(rt.Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])))
    scene.build()  # was: RuntimeError from wp.from_torch ("source inner strides are not contiguous")
    hit = scene.intersect(rt.Ray(torch.tensor([0.2, 0.2, 1.0]), torch.tensor([0.0, 0, -1])))
    assert (int(hit.shape_id), int(hit.prim_id), int(hit.global_prim_id)) == (2, 0, 0)
    assert float(hit.t) == pytest.approx(1.0)
    scene.update_mesh_vertices(0, torch.tensor(np.zeros((0, 3))))  # float64, zero strides too
    scene.sync()
    assert float(scene.closest_point(torch.tensor([0.2, 0.2, 2.0])).distance) == pytest.approx(2.0)


def test_torch_instances_match_the_merged_scene_through_the_lifecycle():
    shapes = _spec(1)
    insts = [i for i, s in enumerate(shapes) if s[0] == "inst"]
    base = max({shapes[i][1] for i in insts} - {3, 4}, key=lambda b: sum(shapes[i][1] == b for i in insts))
    scene, held = _torch_scene(shapes, dynamic=(base,))
    scene.build()
    _torch_agree(scene, _torch_merged(shapes), 11)
    # a mesh with instances disabled: its instances stay
    scene.set_shape_enabled(base, False)
    scene.sync()
    _torch_agree(scene, _torch_merged(shapes, disabled=(base,)), 12)
    scene.set_shape_enabled(base, True)
    # its vertices moved in place (instances follow), its matrix and three others set in one call
    rng = np.random.default_rng(5)
    with torch.no_grad():
        held[base] += 0.25
    shapes[base] = ("mesh", shapes[base][1] + 0.25, shapes[base][2], shapes[base][3])
    ids = [base, insts[0], insts[7], 4]
    mats = np.stack([_affine(rng) for _ in ids])
    scene.set_mesh_transform(torch.tensor(ids), torch.tensor(mats, dtype=torch.float32))
    for k, i in enumerate(ids):
        s = shapes[i]
        shapes[i] = (*s[:3], mats[k]) if s[0] == "mesh" else (s[0], s[1], mats[k])
    with pytest.raises(RuntimeError, match="call sync"):
        scene.intersect(rt.Ray(torch.zeros(3), torch.ones(3)))
    scene.sync()
    _torch_agree(scene, _torch_merged(shapes), 13)
    # shapes added after build(): refused until build(), then the same ids and answers
    v, f = _mesh(rng)
    assert scene.add_mesh(rt.Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(f))) == len(shapes)
    shapes.append(("mesh", v, f, None))
    m = _affine(rng)
    assert scene.add_instance(len(shapes) - 1, torch.tensor(m, dtype=torch.float32)) == len(shapes)
    shapes.append(("inst", len(shapes) - 1, m))
    with pytest.raises(RuntimeError, match=r"build\(\) again"):
        scene.closest_point(torch.zeros(3))
    scene.build()
    scene.build()
    _torch_agree(scene, _torch_merged(shapes), 14)


# ---------------------------------------------------------------------------- rayd.drjit
def _dr():
    dr = pytest.importorskip("drjit")
    rd = pytest.importorskip("rayd.drjit")
    import drjit.llvm.ad as m

    return dr, rd, m


def _vec(kind, rows):
    return kind(np.ascontiguousarray(np.asarray(rows).T)) if len(rows) else kind()


def _rows(value):
    a = np.array(value)
    return a.T if a.ndim == 2 else a


def _dr_merged(rd, m, shapes, disabled=()):
    scene = rd.Scene()
    for i in range(len(shapes)):
        v, f = _world(shapes, i)
        scene.add_mesh(rd.Mesh(_vec(m.Array3f, v), _vec(m.Array3u, f.astype(np.uint32))))
    for i in disabled:
        scene.set_shape_enabled(i, False)
    scene.build()
    return scene


def _dr_agree(dr, rd, m, scene, merged, seed):
    o, d = _rays(seed)
    ray = rd.Ray(_vec(m.Array3f, o), _vec(m.Array3f, d))
    hit, want = scene.intersect(ray), merged.intersect(ray)
    ok = _rows(want.is_valid())
    assert ok.sum() > 300
    for name in ("shape_id", "prim_id", "global_prim_id"):
        np.testing.assert_array_equal(_rows(getattr(hit, name)), _rows(getattr(want, name)), err_msg=name)
    np.testing.assert_allclose(_rows(hit.t)[ok], _rows(want.t)[ok], rtol=1e-5, atol=1e-5)
    pts = _vec(m.Array3f, _points(seed))
    for query in ("closest_point", "nearest_edge"):
        got, ref = getattr(scene, query)(pts), getattr(merged, query)(pts)
        np.testing.assert_allclose(_rows(got.distance), _rows(ref.distance), atol=1e-5, err_msg=query)


def test_drjit_instances_match_the_merged_scene_through_the_lifecycle():
    dr, rd, m = _dr()
    shapes = _spec(2)
    insts = [i for i, s in enumerate(shapes) if s[0] == "inst"]
    base = max({shapes[i][1] for i in insts} - {3, 4}, key=lambda b: sum(shapes[i][1] == b for i in insts))
    scene, held = rd.Scene(), {}
    for i, s in enumerate(shapes):
        if s[0] == "mesh":
            held[i] = _vec(m.Array3f, s[1])
            mat = None if s[3] is None else m.Matrix4f(s[3].tolist())
            faces = _vec(m.Array3u, s[2].astype(np.uint32))
            assert scene.add_mesh(rd.Mesh(held[i], faces, to_world=mat), dynamic=i == base) == i
        else:
            assert scene.add_instance(s[1], m.Matrix4f(s[2].tolist())) == i
    scene.build()
    _dr_agree(dr, rd, m, scene, _dr_merged(rd, m, shapes), 21)
    scene.set_shape_enabled(base, False)
    scene.sync()
    _dr_agree(dr, rd, m, scene, _dr_merged(rd, m, shapes, disabled=(base,)), 22)
    scene.set_shape_enabled(base, True)
    v = held[base]
    v.x = v.x + 0.25  # an in-place change of the dynamic mesh's registered array
    moved = shapes[base][1].copy()
    moved[:, 0] += 0.25
    shapes[base] = ("mesh", moved, shapes[base][2], shapes[base][3])
    rng = np.random.default_rng(6)
    ids = [base, insts[0], insts[7], 4]
    mats = np.stack([_affine(rng) for _ in ids])
    batch = m.Matrix4f(mats.transpose(1, 2, 0).tolist())
    scene.set_mesh_transform(ids, batch)
    for k, i in enumerate(ids):
        s = shapes[i]
        shapes[i] = (*s[:3], mats[k]) if s[0] == "mesh" else (s[0], s[1], mats[k])
    assert scene.has_pending_updates()
    scene.sync()
    _dr_agree(dr, rd, m, scene, _dr_merged(rd, m, shapes), 23)
