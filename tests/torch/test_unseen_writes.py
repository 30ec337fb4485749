"""In-place writes that torch's version counter does not see (session 19, helper breakit19).

Writes through ``.data``, NumPy and DLPack views, ``untyped_storage()`` and into tensors
made under ``torch.inference_mode()`` move no autograd version counter. Every one of
them, into every array a scene holds (vertices of static and dynamic meshes, faces, a
mesh's ``to_world``, an instance's matrix, a ``set_mesh_transform`` batch), is seen now
(rayd.core.contents): the query answers for the new geometry, or raises the contract's
``RuntimeError`` until ``sync()`` / ``build()``, after which it does.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.utils.dlpack

import rayd.torch as rt


@pytest.fixture(autouse=True)
def _content_check_everywhere(monkeypatch):
    """These tests also run the opt-in CUDA check (``RAYD_CONTENT_CHECK=1``; the default compares on the CPU only)."""
    from rayd.core import contents

    monkeypatch.setattr(contents, "MODE", "1")

PATHS = ["data", "numpy", "dlpack", "storage", "inference"]
DTYPES = [torch.float32, torch.float64]

# Triangle 0-1-2 at z = 0 and 3-4-5 at z = -0.5, both over (0.2, 0.2).
VERTS = [[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, -0.5], [1, 0, -0.5], [0, 1, -0.5]]


def _mode(path):
    return torch.inference_mode() if path == "inference" else contextlib.nullcontext()


def _make(path, values, dtype, device):
    """A tensor the user registers (made under inference mode for that path)."""
    with _mode(path):
        return torch.tensor(values, dtype=dtype, device=device)


def _alias(t, path):
    """Something that writes into ``t``'s memory without moving its version counter."""
    if path == "data":
        return t.data
    if path == "numpy":
        return t.detach().numpy()
    if path == "dlpack":
        return torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t.detach()))
    if path == "storage":
        u = torch.empty(0, dtype=t.dtype, device=t.device)
        u.set_(t.untyped_storage(), t.storage_offset(), t.shape, t.stride())
        return u
    return t  # inference: a tensor without a version counter, written under inference mode


def _write(t, path, fn):
    version = t._version if path != "inference" else None
    with _mode(path):
        fn(_alias(t, path))
    if version is not None:
        assert t._version == version  # the write is invisible to the version counter


def _t(scene, device, dtype):
    ray = rt.Ray(torch.tensor([0.2, 0.2, 1.0], dtype=dtype, device=device),
                 torch.tensor([0.0, 0, -1], dtype=dtype, device=device))
    return float(scene.intersect(ray).t)


def _moved(scene, device, dtype, apply):
    """The scene raises until ``apply`` (sync or build) is called, then answers t."""
    assert not scene.is_ready()
    with pytest.raises(RuntimeError, match=r"^rayd\.torch\.Scene\.intersect\(\): .*changed in place"):
        _t(scene, device, dtype)
    apply()
    assert scene.is_ready() and not scene.has_pending_updates()
    return _t(scene, device, dtype)


def _device_paths(device):
    return [p for p in PATHS if not (p == "numpy" and device != "cpu")]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_vertex_writes_are_seen(device, path, dtype, dynamic):
    if path not in _device_paths(device):
        pytest.skip("NumPy views are of CPU tensors")
    v = _make(path, VERTS[:3], dtype, device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)), dynamic=dynamic)
    scene.build()
    assert _t(scene, device, dtype) == pytest.approx(1.0)

    def down(a):
        a[:, 2] -= 0.5

    _write(v, path, down)
    assert scene.has_pending_updates() == dynamic  # a static mesh is stale, not pending
    assert _moved(scene, device, dtype, scene.sync if dynamic else scene.build) == pytest.approx(1.5)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_face_writes_are_seen(device, path, dtype):
    if path not in _device_paths(device):
        pytest.skip("NumPy views are of CPU tensors")
    f = _make(path, [[0, 1, 2]], torch.int64, device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(VERTS, dtype=dtype, device=device), f), dynamic=True)
    scene.build()
    assert _t(scene, device, dtype) == pytest.approx(1.0)

    def swap(a):
        a[0, 0], a[0, 1], a[0, 2] = 3, 4, 5

    _write(f, path, swap)
    with pytest.raises(RuntimeError, match=r"faces of mesh 0 changed in place since build\(\)"):
        scene.sync()
    assert _moved(scene, device, dtype, scene.build) == pytest.approx(1.5)


def _matrix(path, dtype, device):
    return _make(path, torch.eye(4, dtype=torch.float64).tolist(), dtype, device)


def _lower(a):
    a[..., 2, 3] -= 0.5


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_mesh_to_world_writes_are_seen(device, path, dtype, dynamic):
    if path not in _device_paths(device):
        pytest.skip("NumPy views are of CPU tensors")
    m = _matrix(path, dtype, device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(VERTS[:3], dtype=dtype, device=device),
                           torch.tensor([[0, 1, 2]], device=device), to_world=m), dynamic=dynamic)
    scene.build()
    assert _t(scene, device, dtype) == pytest.approx(1.0)
    _write(m, path, _lower)
    assert scene.has_pending_updates()
    assert _moved(scene, device, dtype, scene.sync) == pytest.approx(1.5)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batched", [False, True])
def test_instance_matrix_writes_are_seen(device, path, dtype, batched):
    if path not in _device_paths(device):
        pytest.skip("NumPy views are of CPU tensors")
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(torch.tensor(VERTS[:3], dtype=dtype, device=device),
                           torch.tensor([[0, 1, 2]], device=device)))
    if batched:
        ids = [scene.add_instance(0, torch.eye(4, dtype=dtype, device=device)) for _ in range(2)]
        scene.set_shape_enabled(0, False)
        scene.build()
        m = _make(path, torch.eye(4, dtype=torch.float64).repeat(2, 1, 1).tolist(), dtype, device)
        with _mode(path):
            _alias(m, path)[1, 0, 3] += 5.0  # instance 2 out of the way
        scene.set_mesh_transform(ids, m)
    else:
        m = _matrix(path, dtype, device)
        scene.add_instance(0, m)
        scene.set_shape_enabled(0, False)
        scene.build()
    scene.sync()
    assert _t(scene, device, dtype) == pytest.approx(1.0)
    _write(m, path, lambda a: _lower(a[0] if batched else a))
    assert scene.has_pending_updates()
    assert _moved(scene, device, dtype, scene.sync) == pytest.approx(1.5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_write_then_update_then_write_again(device, dtype):
    """Copies follow the registered tensor: a replaced tensor, then a write into the new one, are seen."""
    v = torch.tensor(VERTS[:3], dtype=dtype, device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)), dynamic=True)
    scene.build()
    w = v.clone()
    w[:, 2] += 0.25
    scene.update_mesh_vertices(0, w)
    scene.sync()
    assert _t(scene, device, dtype) == pytest.approx(0.75)
    w.data[:, 2] -= 1.0
    assert scene.has_pending_updates()
    scene.sync()
    assert _t(scene, device, dtype) == pytest.approx(1.75)
    v.data[:, 2] += 7.0  # the old tensor is no longer registered: nothing pending
    assert not scene.has_pending_updates() and scene.is_ready()


def test_unchanged_values_written_back_are_not_pending(device):
    """A write of the same values (e.g. ``v.data.copy_(v)``) changes no geometry: nothing to do."""
    v = torch.tensor(VERTS[:3], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device)), dynamic=True)
    scene.build()
    v.data.copy_(v.detach().clone())
    assert scene.is_ready() and not scene.has_pending_updates()


def test_sync_copies_only_what_changed(device, monkeypatch):
    """``build()`` copies every registered array; ``sync()`` only those that changed (not the faces)."""
    from rayd.torch._convert import TorchArrays

    copied = []
    original = TorchArrays.snapshot
    monkeypatch.setattr(TorchArrays, "snapshot", lambda self, a: (copied.append(a), original(self, a))[1])
    v = torch.tensor(VERTS[:3], device=device)
    m = torch.eye(4, device=device)
    f = torch.tensor([[0, 1, 2]], device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f, to_world=m), dynamic=True)
    scene.build()
    assert [id(a) for a in copied] == [id(m), id(v), id(f)]
    copied.clear()
    v.data[:, 2] -= 0.5
    scene.sync()
    assert [id(a) for a in copied] == [id(v)]
    copied.clear()
    m.data[2, 3] -= 0.5
    scene.sync()
    assert [id(a) for a in copied] == [id(m)]
    assert _t(scene, device, torch.float32) == pytest.approx(2.0)


@pytest.mark.parametrize("path", ["data", "inference"])
def test_writes_into_one_of_many_small_arrays(device, path):
    """Small arrays (matrices, small meshes) are compared stacked, per group: a write into one member
    marks exactly its shape, and the answers follow it."""
    scene = rt.Scene()
    verts, mats = [], []
    for k in range(4):
        v = _make(path, [[x + 3.0 * k, y, z] for x, y, z in VERTS[:3]], torch.float32, device)
        m = _make(path, torch.eye(4).tolist(), torch.float32, device)
        verts.append(v)
        mats.append(m)
        scene.add_mesh(rt.Mesh(v, torch.tensor([[0, 1, 2]], device=device), to_world=m), dynamic=True)
    scene.build()
    _write(verts[2], path, lambda a: a[:, 2].sub_(0.5))
    _write(mats[3], path, _lower)
    table = scene._core.table
    assert table.has_pending() and not table.unchanged()
    assert [table.vertices_changed(s) for s in table.shapes] == [False, False, True, False]
    assert [table.matrix_changed(s, {}) for s in table.shapes] == [False, False, False, True]
    scene.sync()
    ray = rt.Ray(torch.tensor([[0.2 + 3.0 * k, 0.2, 1.0] for k in range(4)], device=device),
                 torch.tensor([0.0, 0, -1], device=device))
    torch.testing.assert_close(scene.intersect(ray).t, torch.tensor([1.0, 1.0, 1.5, 1.5], device=device))
