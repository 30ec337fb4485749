"""No host synchronisation in any rayd.torch query (DESIGN.md, engine: "no hidden device synchronisation").

After ``build()`` / ``sync()``, a query must not read a device value on the host: no
``.item()`` / ``bool()`` / ``.tolist()`` / ``.numpy()`` of a tensor, no op whose output
size depends on values (``nonzero``, boolean-mask indexing, ``masked_select``,
``unique``), no Warp ``array.numpy()`` or ``wp.synchronize*``.

On CUDA, ``torch.cuda.set_sync_debug_mode("error")`` makes torch itself raise at any
synchronising call, and Warp's host reads are guarded as on the CPU. On the CPU, where a
read is no synchronisation, the queries are run on their device code paths (the CPU-only
shortcuts that branch on values, ``rayd.torch._interval.host_ok``, are turned off) and every
host read or value-sized op is recorded by a ``TorchDispatchMode`` and patched methods.

Queries: ``intersect`` (float32 fused, op by op, float64 with its walk-on past ``tmin``,
backward), ``shadow_test``, ``visible``, ``intersect_all``, ``count_intersections``,
``trace_reflections``, ``nearest_edge`` (points and rays), ``nearest_edges``,
``silhouette_edges``, ``closest_point`` (and its backward), ``winding_number``,
``contains``, ``signed_distance``, on scenes of meshes, transformed meshes and instances.
Not here: ``specular_paths`` / ``find_specular_paths``, which decide validity on the host by
design (documented: one read back per call).
"""

from __future__ import annotations

import contextlib
import traceback

import pytest
import torch
import warp as wp
from torch.utils._python_dispatch import TorchDispatchMode

import rayd.torch as rt
from rayd.torch import _interval

aten = torch.ops.aten

_VALUE_SIZED = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
                aten.is_nonzero.default, aten.equal.default}
_INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
# CPU-only code: the CPU accelerator, and the CPU branch of rayd.torch._intersect_fused._zeros
_HOST_ONLY = ("cpu_embree.py", "embree_api.py", "_intersect_fused.py::_zeros")


class _HostReads(TorchDispatchMode):
    """Records every host read and value-sized op while active (``found``: (what, where) pairs)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def note(self, what: str) -> None:
        frames = [f for f in traceback.extract_stack()[:-2] if "rayd" in f.filename and "tests" not in f.filename]
        if any(name in f"{f.filename}::{f.name}" for f in frames for name in _HOST_ONLY):
            return
        where = f"{frames[-1].filename.rsplit('src/', 1)[-1]}:{frames[-1].lineno}" if frames else "?"
        self.found.append((what, where))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _VALUE_SIZED or "unique" in func.__name__:
            self.note(str(func))
        elif func in _INDEXING and any(i is not None and i.dtype == torch.bool for i in args[1]):
            self.note(f"{func} with a bool mask")
        elif func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
            self.note(str(func))
        out = func(*args, **kwargs)
        if func is aten.lift_fresh.default and out.dim() > 0:  # torch.tensor(host data): on CUDA a synchronising
            self.note(f"{func} (a host-to-device copy)")  # copy (0-dim: a Python scalar, e.g. of x[i] = 1.0)
        return out


@contextlib.contextmanager
def _no_host_reads(device: str, monkeypatch: pytest.MonkeyPatch):
    """Fail the test if the block reads the host (see the module docstring)."""
    mode = _HostReads()

    def guard(owner, name, only_cuda=False):
        original = getattr(owner, name)

        def wrapper(self, *args, **kwargs):
            device_of = getattr(self, "device", None)
            if not only_cuda or (device_of is not None and "cuda" in str(device_of)):
                mode.note(f"{getattr(owner, '__name__', owner)}.{name}")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    for name in ("tolist", "numpy", "item", "__array__"):
        guard(torch.Tensor, name)
    guard(wp.array, "numpy")
    guard(wp.array, "list")
    for name in ("synchronize", "synchronize_device", "synchronize_stream"):
        original = getattr(wp, name)
        monkeypatch.setattr(wp, name, lambda *a, _o=original, _n=name, **k: (mode.note(f"wp.{_n}"), _o(*a, **k))[1])
    if device == "cpu":  # the device code paths: no CPU shortcut that branches on values
        monkeypatch.setattr(_interval, "host_ok", lambda tensor: False)
    previous = torch.cuda.get_sync_debug_mode() if device == "cuda" else None
    try:
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("error")
        with mode:
            yield mode
    finally:
        if device == "cuda":
            torch.cuda.set_sync_debug_mode(previous)
    assert not mode.found, f"host reads: {mode.found}"


def _box(dtype, device):
    v = torch.tensor([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], dtype=dtype) - 0.5
    f = torch.tensor([[0, 2, 1], [1, 2, 3], [4, 5, 6], [5, 7, 6], [0, 1, 4], [1, 5, 4], [2, 6, 3], [3, 6, 7],
                      [0, 4, 2], [2, 4, 6], [1, 3, 5], [3, 7, 5]], dtype=torch.int32)
    return v.to(device), f.to(device)


def _scene(kind: str, dtype, device):
    scene = rt.Scene()
    if kind == "plain":  # one mesh, no transform: the fused kernels
        v, f = _box(dtype, device)
        scene.add_mesh(rt.Mesh(v, f))
        scene.build()
        return scene
    # two transformed meshes and three instances; "grad": the first dynamic, with normals and gradients
    grad = kind == "grad"
    for k in range(2):
        v, f = _box(dtype, device)
        m = torch.eye(4, dtype=dtype, device=device)
        m[0, 3] = 3.0 * k
        normals = v / v.norm(dim=-1, keepdim=True) if grad and k == 0 else None
        scene.add_mesh(rt.Mesh(v.clone().requires_grad_(grad and k == 0), f, normals=normals, to_world=m),
                       dynamic=grad and k == 0)
    ids = [scene.add_instance(0, torch.eye(4, dtype=dtype, device=device)) for _ in range(3)]
    scene.build()
    mats = torch.eye(4, dtype=dtype, device=device).repeat(3, 1, 1)
    mats[:, 1, 3] = 3.0 * (1 + torch.arange(3, dtype=dtype, device=device))
    mats[0, 0, 1] = 0.1  # sheared: transformed normals need the inverse
    scene.set_mesh_transform(ids, mats.requires_grad_(kind == "grad"))
    scene.sync()
    return scene


def _queries(scene, dtype, device):
    o = torch.tensor([[0.1, 0.2, 5.0], [3.1, 0.1, 5.0], [0.2, 3.1, 5.0], [9.0, 9.0, 9.0]], dtype=dtype, device=device)
    d = torch.tensor([[0.0, 0.0, -1.0]] * 4, dtype=dtype, device=device)
    ray = rt.Ray(o, d)
    # tmin at the first face: the float64 walk-on runs (masked, on the device path)
    at_face = rt.Ray(o, d, tmin=torch.tensor([4.5, 4.5, 4.5, 0.0], dtype=dtype, device=device))
    p = torch.tensor([[0.1, 0.2, 0.1], [3.1, 0.1, 2.0], [0.0, 3.0, 0.0]], dtype=dtype, device=device)
    viewpoint = torch.tensor([0.0, 0.0, 5.0], dtype=dtype, device=device)
    active = torch.tensor([True, False, True, True], device=device)
    ignore = torch.tensor([0, -1, 3, -1], device=device)

    def backward(query):  # through the ray too, so that every scene has something to differentiate
        o_grad = o.clone().requires_grad_()
        query(rt.Ray(o_grad, d, tmin=at_face.tmin)).nan_to_num(0.0, 0.0, 0.0).sum().backward()

    return {
        "intersect": lambda: scene.intersect(ray),
        "intersect_masked": lambda: scene.intersect(ray, active, ignore=ignore),
        "intersect_tmin": lambda: scene.intersect(at_face),
        "intersect_backward": lambda: backward(lambda r: scene.intersect(r).t),
        "shadow_test": lambda: scene.shadow_test(ray),
        "shadow_test_tmin": lambda: scene.shadow_test(at_face, active),
        "visible": lambda: scene.visible(o, p[:1]),
        "intersect_all": lambda: scene.intersect_all(ray, 4),
        "count_intersections": lambda: scene.count_intersections(ray),
        "trace_reflections": lambda: scene.trace_reflections(ray, 2),
        "nearest_edge": lambda: scene.nearest_edge(p),
        "nearest_edge_ray": lambda: scene.nearest_edge(ray),
        "nearest_edges": lambda: scene.nearest_edges(p, 2),
        "silhouette_edges": lambda: scene.silhouette_edges(viewpoint),
        "closest_point": lambda: scene.closest_point(p),
        "closest_point_backward": lambda: backward(lambda r: scene.closest_point(r.o.reshape(-1, 3)).distance),
        "winding_number": lambda: scene.winding_number(p),
        "contains": lambda: scene.contains(p),
        "signed_distance": lambda: scene.signed_distance(p),
    }


QUERIES = [
    "intersect", "intersect_masked", "intersect_tmin", "intersect_backward", "shadow_test", "shadow_test_tmin",
    "visible", "intersect_all", "count_intersections", "trace_reflections", "nearest_edge", "nearest_edge_ray",
    "nearest_edges", "silhouette_edges", "closest_point", "closest_point_backward", "winding_number", "contains",
    "signed_distance"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["plain", "placed", "grad"])  # fused kernels, fused placed, op by op
def test_queries_read_nothing_back(device, kind, dtype, monkeypatch):
    scene = _scene(kind, dtype, device)
    queries = _queries(scene, dtype, device)
    assert sorted(queries) == sorted(QUERIES)
    failures = {}
    for name, query in queries.items():
        query()  # warm-up: kernels loaded, caches made
        try:
            with monkeypatch.context() as patch, _no_host_reads(device, patch):
                query()
        except (AssertionError, RuntimeError) as error:  # RuntimeError: torch's sync debug mode on CUDA
            failures[name] = str(error)[:300]
    assert not failures, failures


def test_the_guard_sees_host_reads(device, monkeypatch):
    """The detector itself: each kind of read it must catch is caught."""
    x = torch.arange(4.0, device=device)
    for read in (lambda: bool((x > 1).any()), lambda: x.tolist(), lambda: x[x > 1], lambda: x.nonzero(),
                 lambda: float(x.sum()), lambda: torch.tensor([1.0, 2.0], device=device)):
        with pytest.raises((AssertionError, RuntimeError)):
            with monkeypatch.context() as patch, _no_host_reads(device, patch):
                read()
    with monkeypatch.context() as patch, _no_host_reads(device, patch):  # fixed-size work is fine
        torch.where(x > 1, x, 0.0).argmin()


def test_float64_walk_on_answers_alike_on_both_paths(monkeypatch):
    """The device path (fixed-size re-check) and the CPU shortcut give the same winners, ``t`` and occlusion."""
    scene = _scene("placed", torch.float64, "cpu")
    o = torch.tensor([[0.1, 0.2, 5.0], [0.1, 3.2, 5.0], [3.1, 0.1, 5.0], [9.0, 9.0, 9.0]], dtype=torch.float64)
    d = torch.tensor([[0.0, 0.0, -1.0]] * 4, dtype=torch.float64)
    first = scene.intersect(rt.Ray(o, d))
    assert first.is_valid()[:3].all()
    rays = [rt.Ray(o, d, tmin=first.t.nan_to_num(0.0, 0.0, 0.0)),  # tmin exactly at the first face's t
            rt.Ray(o, d, first.t.nan_to_num(0.0, 0.0, 0.0))]  # tmax exactly there
    host = [(scene.intersect(r), scene.shadow_test(r)) for r in rays]
    monkeypatch.setattr(_interval, "host_ok", lambda tensor: False)
    device = [(scene.intersect(r), scene.shadow_test(r)) for r in rays]
    for (hit_a, blocked_a), (hit_b, blocked_b) in zip(host, device):
        assert torch.equal(hit_a.global_prim_id, hit_b.global_prim_id)
        assert torch.equal(hit_a.t, hit_b.t)
        assert torch.equal(blocked_a, blocked_b)
    # past tmin = t of the near face, the far face of the same box (1 further) is hit
    behind = device[0][0]
    torch.testing.assert_close(behind.t[:3], first.t[:3] + 1.0, rtol=1e-12, atol=1e-12)
    assert not device[1][1][:3].any()  # tmax = t of the first face: nothing strictly before it


def test_float64_walk_on_of_a_two_dimensional_ray_batch(monkeypatch):
    """An image-shaped (H, W) float64 batch through the device path of the walk-on (always taken on CUDA):
    it gave (H, W, 1, 3) origins to a (H W, K, 3) expand and raised; winners, ``t`` and occlusion must
    equal the flat batch's, on the device path and on the CPU shortcut."""
    scene = _scene("placed", torch.float64, "cpu")
    o = torch.tensor([[0.1, 0.2, 5.0], [0.1, 3.2, 5.0], [3.1, 0.1, 5.0], [9.0, 9.0, 9.0],
                      [0.3, 0.1, 5.0], [3.2, 3.1, 5.0]], dtype=torch.float64)
    d = torch.tensor([[0.0, 0.0, -1.0]] * 6, dtype=torch.float64)
    first = scene.intersect(rt.Ray(o, d))
    tmin = first.t.nan_to_num(0.0, 0.0, 0.0)
    flat = rt.Ray(o, d, tmin=tmin)
    image = rt.Ray(o.reshape(2, 3, 3), d.reshape(2, 3, 3), tmin=tmin.reshape(2, 3))
    want = (scene.intersect(flat), scene.shadow_test(flat))
    for host_ok in (True, False):
        if not host_ok:
            monkeypatch.setattr(_interval, "host_ok", lambda tensor: False)
        hit, blocked = scene.intersect(image), scene.shadow_test(image)
        assert hit.t.shape == (2, 3) and blocked.shape == (2, 3)
        assert torch.equal(hit.global_prim_id.reshape(-1), want[0].global_prim_id)
        assert torch.equal(hit.t.reshape(-1).nan_to_num(-1.0), want[0].t.nan_to_num(-1.0))
        assert torch.equal(blocked.reshape(-1), want[1])
    behind = scene.intersect(image).t.reshape(-1)
    valid = first.is_valid()
    torch.testing.assert_close(behind[valid], first.t[valid] + 1.0, rtol=1e-12, atol=1e-12)
