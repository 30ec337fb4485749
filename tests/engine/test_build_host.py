"""The host shortcuts of ``Scene.build()`` (issue 18, "build"; session 23): launches kept for the process
(``runtime.BUILD_LAUNCHES``, ``runtime.kept_launch``), arrays carved from one allocation (``runtime.carve``),
the checks of every mesh read at once. Scenes built one after another, or while another lives, or on
another device, share no array and answer as scenes built alone."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import warp as wp

torch = pytest.importorskip("torch")

import rayd.core.scene as core_scene  # noqa: E402
import rayd.torch as rt  # noqa: E402
from rayd.engine import runtime, triangles  # noqa: E402

from test_build_bit_equal import _arrays, _mesh, digests  # noqa: E402


@pytest.fixture(params=[("ploc", "wide4"), ("auto", "auto")], ids=["cuda_defaults", "cpu_defaults"])
def builder(request):
    old = triangles.bvh_constructor(), triangles.bvh_layout()
    triangles.set_bvh_constructor(request.param[0])
    triangles.set_bvh_layout(request.param[1])
    yield request.param
    triangles.set_bvh_constructor(old[0])
    triangles.set_bvh_layout(old[1])


def _scene(device, parts):
    scene = rt.Scene()
    for k, (rows, cols, seed) in enumerate(parts):
        v, f = _mesh(rows, cols, seed, shift=15.0 * k)
        scene.add_mesh(rt.Mesh(v.to(device), f.to(device)))
    scene.build()
    return scene


def _rays(device, n=256, seed=0):
    rng = np.random.default_rng(seed)
    o = torch.tensor(rng.uniform([-2, -2, 2], [40, 14, 4], (n, 3)), dtype=torch.float32, device=device)
    d = torch.tensor(rng.normal([0, 0, -1], 0.3, (n, 3)), dtype=torch.float32, device=device)
    return rt.Ray(o, d)


def _hits(scene, ray):
    h = scene.intersect(ray)
    return h.t.cpu().numpy(), h.global_prim_id.cpu().numpy()


def _spans(scene) -> list[tuple[int, int]]:
    core = scene._core
    found: dict = {}
    _arrays(core.flat, "flat", found)
    for name in ("points", "indices", "flat_global", "flat_shape", "shape_enabled"):
        found[name] = getattr(core, name)
    return [(a.ptr, a.ptr + a.capacity) for a in found.values() if a.ptr is not None and a.capacity]


def test_second_scene_built_while_the_first_lives_shares_and_clobbers_nothing(device, builder):
    a_parts, b_parts = [(6, 7, 1)], [(9, 4, 2), (3, 3, 3)]
    a = _scene(device, a_parts)
    before, hits_before = digests(a), _hits(a, _rays(device))
    b = _scene(device, b_parts)  # the same kept commands, re-bound to b's arrays
    assert digests(a) == before
    np.testing.assert_array_equal(_hits(a, _rays(device))[1], hits_before[1])
    np.testing.assert_array_equal(_hits(a, _rays(device))[0], hits_before[0])
    # no array of one scene lies in memory of the other's
    sa, sb = _spans(a), _spans(b)
    assert not [(x, y) for x in sa for y in sb if x[0] < y[1] and y[0] < x[1]]
    # each answers as a scene built alone, in a fresh order
    del a
    gc.collect()
    b_alone = _scene(device, b_parts)
    for got, want in zip(_hits(b, _rays(device, seed=3)), _hits(b_alone, _rays(device, seed=3))):
        np.testing.assert_array_equal(got, want)
    assert digests(b) == digests(b_alone)


def test_scene_built_on_one_device_then_another(cuda_device, builder):
    parts = [(8, 5, 4)]
    first = _scene("cpu", parts)
    on_cuda = _scene(cuda_device, parts)
    again = _scene("cpu", parts)
    assert digests(first) == digests(again)
    for got, want in zip(_hits(on_cuda, _rays(cuda_device)), _hits(first, _rays("cpu"))):
        np.testing.assert_array_equal(got, want)


def test_kept_commands_hold_no_array_alive(builder):
    """The kept commands and recorded launches reference no array: a built scene and its scratch are freed."""
    scene = _scene("cpu", [(6, 6, 5)])
    ref = weakref.ref(scene._core.flat.lowers)
    owner = weakref.ref(scene._core.flat.lowers._ref)  # (the allocation carved into the boxes)
    assert all(cmd.fwd_args is None for cmd in runtime._KEPT.values())
    del scene
    gc.collect()
    assert ref() is None and owner() is None


def test_build_checks_read_once(monkeypatch):
    """Three meshes: their finite checks, face ranges and boxes in one host read (main: three per mesh)."""
    reads = []
    real = core_scene.read_back

    def counting(stream, *arrays):
        reads.append(len(arrays))
        return real(stream, *arrays)

    monkeypatch.setattr(core_scene, "read_back", counting)
    scene = _scene("cpu", [(3, 4, 1), (2, 2, 2), (5, 3, 3)])
    assert reads == [3 * 5]  # per mesh: the finite flags, the face range's two, the box's two
    assert sorted(scene._core._mesh_boxes) == [0, 1, 2]
    for shape_id, (lo, hi) in scene._core._mesh_boxes.items():
        v = scene._core.table[shape_id].vertices.numpy().astype(np.float64)
        np.testing.assert_array_equal(lo, v.min(0))
        np.testing.assert_array_equal(hi, v.max(0))


def test_build_checks_raise_for_the_first_bad_mesh():
    """Non-finite vertices and faces out of range (changed in place after Mesh()), in two of three meshes:
    the first bad mesh is named, and a mesh's vertices before its faces."""
    meshes = [_mesh(3, 3, k, shift=10.0 * k) for k in range(3)]
    meshes[2] = (meshes[2][0].double(), meshes[2][1])  # (float64: room for values beyond float32)
    scene = rt.Scene()
    for v, f in meshes:
        scene.add_mesh(rt.Mesh(v, f))
    meshes[2][0][4, 1] = float("nan")
    meshes[1][1][3, 2] = 99  # 16 vertices
    with pytest.raises(ValueError, match=r"build\(\): 'faces of mesh 1' must index vertices in \[0, 16\), got "
                                         r"values in \[0, 99\]"):
        scene.build()
    meshes[1][0][0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"build\(\): 'vertices of mesh 1' holds non-finite values \(first at row 0\)"):
        scene.build()
    meshes[1][0][0, 0] = 0.0
    meshes[1][1][3, 2] = 5
    with pytest.raises(ValueError, match=r"build\(\): 'vertices of mesh 2' holds non-finite values \(first at row 4\)"):
        scene.build()
    meshes[2][0][4, 1] = 1e39
    with pytest.raises(ValueError, match=r"'vertices of mesh 2' holds values beyond the float32 range"):
        scene.build()
    meshes[2][0][4, 1] = 1.0
    scene.build()
    assert scene.is_ready()


@wp.kernel
def _fill_kernel(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.int32), c: wp.array(dtype=float), k: int):
    i = wp.tid()
    a[i] = wp.vec3(float(i + k), 0.0, 0.0)
    b[i] = i * k
    c[i] = float(k)


def test_carve_views(device, monkeypatch):
    monkeypatch.setattr(runtime, "BUILD_KEPT_CUDA", True)  # (the mechanics themselves, whatever RAYD_BUILD_KEPT_CUDA says)
    dev = runtime.warp_device("cuda:0" if device == "cuda" else "cpu")
    a, b, c, z = runtime.carve(dev, [(wp.vec3, 5), (wp.int32, 7), (float, 3), (wp.int64, 2)])
    assert [x.dtype for x in (a, b, c, z)] == [wp.vec3, wp.int32, wp.float32, wp.int64]
    assert [x.shape for x in (a, b, c, z)] == [(5,), (7,), (3,), (2,)]
    assert all(x._ref is a._ref and (x.ptr - a._ref.ptr) % runtime.CARVE_ALIGN == 0 for x in (a, b, c, z))
    spans = sorted((x.ptr, x.ptr + x.capacity) for x in (a, b, c, z))
    assert all(p[1] <= q[0] for p, q in zip(spans, spans[1:]))
    ref = wp.array(ptr=a.ptr, dtype=wp.vec3, shape=(5,), device=dev)
    assert {k: v for k, v in vars(a).items() if k not in ("_ref", "ctype")} == \
        {k: v for k, v in vars(ref).items() if k not in ("_ref", "ctype")}
    wp.launch(_fill_kernel, 3, [a, b, c, 4], device=dev)
    np.testing.assert_array_equal(a.numpy()[:3, 0], [4, 5, 6])
    np.testing.assert_array_equal(b.numpy()[:3], [0, 4, 8])
    np.testing.assert_array_equal(c.numpy(), [4, 4, 4])
    zeros = runtime.carve(dev, [(wp.vec4, 3), (wp.mat44d, 1)], zero=True)
    assert not zeros[0].numpy().any() and not zeros[1].numpy().any()
    owner = weakref.ref(a._ref)
    del ref, b, c, z
    gc.collect()
    assert owner() is not None  # a view keeps the allocation
    del a
    gc.collect()
    assert owner() is None


@wp.kernel
def _axpy(s: float, x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = s * x[i] + y[i]


def test_kept_launch_rebinds_every_argument(device, monkeypatch):
    monkeypatch.setattr(runtime, "BUILD_KEPT_CUDA", True)  # (the mechanics themselves, whatever RAYD_BUILD_KEPT_CUDA says)
    dev = runtime.warp_device("cuda:0" if device == "cuda" else "cpu")
    x1 = wp.array(np.arange(6, dtype=np.float32), device=dev)
    y1 = wp.zeros(6, dtype=float, device=dev)
    cmd = runtime.kept_launch(_axpy, ("test", 0), 6, [2.0, x1, y1], dev)
    cmd.launch()
    x2 = wp.array(np.arange(6, dtype=np.float32) * 10, device=dev)
    y2 = wp.full(6, 1.0, dtype=float, device=dev)
    again = runtime.kept_launch(_axpy, ("test", 0), 4, [0.5, x2, y2], dev)
    assert again is cmd and cmd.fwd_args is None
    again.launch()
    np.testing.assert_array_equal(y1.numpy(), 2 * np.arange(6))
    np.testing.assert_array_equal(y2.numpy(), [1, 6, 11, 16, 1, 1])
    other = runtime.kept_launch(_axpy, ("test", 1), 6, [1.0, x1, y2], dev)
    assert other is not cmd


def test_launch_once_equals_wp_launch(device):
    dev = runtime.warp_device("cuda:0" if device == "cuda" else "cpu")
    outs = []
    for k in (3, 7, 3):  # new arrays and values each time, as builds give it
        a = wp.empty(4, dtype=wp.vec3, device=dev)
        b = wp.empty(4, dtype=wp.int32, device=dev)
        c = wp.empty(4, dtype=float, device=dev)
        runtime.launch_once(_fill_kernel, 4, [a, b, c, k], dev)
        outs.append((a.numpy().copy(), b.numpy().copy(), c.numpy().copy()))
        wp.launch(_fill_kernel, 4, [a, b, c, k + 1], device=dev)
        runtime.launch_once(_fill_kernel, 0, [a, b, c, 99], dev)  # (no threads: nothing launched)
        np.testing.assert_array_equal(b.numpy(), np.arange(4) * (k + 1))
    for (a, b, c), k in zip(outs, (3, 7, 3)):
        np.testing.assert_array_equal(a[:, 0], np.arange(4) + k)
        np.testing.assert_array_equal(b, np.arange(4) * k)
        np.testing.assert_array_equal(c, np.full(4, k, np.float32))


def test_alias_is_wp_array_from_a_pointer(device, monkeypatch):
    monkeypatch.setattr(runtime, "BUILD_KEPT_CUDA", True)  # (the mechanics themselves, whatever RAYD_BUILD_KEPT_CUDA says)
    dev = runtime.warp_device("cuda:0" if device == "cuda" else "cpu")
    base = wp.array(np.arange(16, dtype=np.float32), device=dev)
    for dtype, n in ((wp.vec4, None), (wp.int32, 16), (wp.vec4i, 2), (float, 8)):
        made = runtime.alias(base, dtype, n)
        count = n if n is not None else 4
        ref = wp.array(ptr=base.ptr, dtype=dtype if dtype is not float else wp.float32, shape=(count,), device=dev)
        assert made._ref is base
        assert {k: v for k, v in vars(made).items() if k not in ("_ref", "ctype")} == \
            {k: v for k, v in vars(ref).items() if k not in ("_ref", "ctype")}
        np.testing.assert_array_equal(made.numpy(), ref.numpy())
    view = runtime.alias(base, wp.vec4)
    owner = weakref.ref(base)
    del base, ref, made
    gc.collect()
    assert owner() is not None  # the alias keeps its base
    np.testing.assert_array_equal(view.numpy()[1], [4, 5, 6, 7])
