"""torch.compile through every differentiable query of rayd.torch (custom ops in ``rayd.torch._ops``).

Each query compiles with ``fullgraph=True`` into one graph (a graph break would raise),
gives the eager values and gradients, and a training loop on a dynamic mesh (updated in
place and synced outside the compiled region) runs without recompiling. Lifecycle
faults raise from inside the compiled graph as in eager mode. ``torch.library.opcheck``
passes for each custom op.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import rayd.torch as rt
from rayd.torch import _ops
from sphere_mesh import uv_sphere

F64 = torch.float64


def make_scene(device, dtype=torch.float32):
    v, f = uv_sphere(dtype=dtype, device=device)
    v = v.clone().requires_grad_()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f), dynamic=True)
    scene.build()
    scene.edge_topology()  # the lazily built edge state exists before compiling (docs/compile.md)
    return scene, v


def compiled(fn):
    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    return torch.compile(fn, backend=counter, fullgraph=True), counter


def _grads(value, inputs):
    return torch.autograd.grad(value, inputs, allow_unused=True)


def _inputs(device, dtype):
    gen = torch.Generator().manual_seed(3)
    o = torch.tensor([0.1, -0.05, -3.0], dtype=dtype).repeat(12, 1)
    d = torch.randn(12, 3, generator=gen, dtype=dtype) * 0.15 + torch.tensor([0.0, 0.0, 1.0], dtype=dtype)
    pts = torch.randn(12, 3, generator=gen, dtype=dtype) * 0.8
    return (o.to(device).requires_grad_(), d.to(device).requires_grad_(), pts.to(device).requires_grad_())


def _finite(x):
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


QUERIES = {
    "intersect": lambda s, o, d, q: s.intersect(rt.Ray(o, d)).p.sum() + _finite(s.intersect(rt.Ray(o, d)).t).sum(),
    "intersect_minimal": lambda s, o, d, q: _finite(s.intersect(rt.Ray(o, d), flags=rt.RayFlags.Minimal).t).sum(),
    "shadow_visible": lambda s, o, d, q: (s.shadow_test(rt.Ray(o, d)).sum() + s.visible(o, q).sum()).double(),
    "nearest_edge_points": lambda s, o, d, q: s.nearest_edge(q).distance.sum(),
    "nearest_edge_ray": lambda s, o, d, q: _finite(s.nearest_edge(rt.Ray(o, d)).distance).sum()
    + s.nearest_edge(rt.Ray(o, d)).ray_point.sum(),
    "nearest_edges": lambda s, o, d, q: s.nearest_edges(q, 3).edge_point.sum(),
    "closest_point": lambda s, o, d, q: s.closest_point(q).distance.sum() + s.closest_point(q).p.sum(),
    "signed_distance": lambda s, o, d, q: s.signed_distance(q).sum(),
    "trace_reflections": lambda s, o, d, q: s.trace_reflections(rt.Ray(0.1 * q, d), 3).path_length.sum(),
    "specular_paths": lambda s, o, d, q: _finite(
        s.specular_paths(0.2 * q, 0.2 * q.flip(0), torch.full((12, 1), 7, device=q.device)).length).sum(),
    "specular_paths_active": lambda s, o, d, q: _finite(
        s.specular_paths(0.2 * q, 0.2 * q.flip(0), torch.full((12, 2), 7, device=q.device),
                         active=q[:, 0] > -0.5).length).sum(),
    "intersect_all": lambda s, o, d, q: _finite(s.intersect_all(rt.Ray(o, d), 3).t).sum()
    + s.intersect_all(rt.Ray(o, d), 3).p.sum(),
    "count_intersections": lambda s, o, d, q: s.count_intersections(rt.Ray(o, d), active=d[:, 0] > -0.1).double().sum()
    + 10.0 * s.count_intersections(rt.Ray(o, d), ignore=3)[0],
    "winding_number_fast": lambda s, o, d, q: s.winding_number(q.detach(), exact=False).sum()
    + s.contains(q, exact=True).double().sum(),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_query_compiles_to_one_graph_with_eager_values_and_gradients(device, name):
    scene, v = make_scene(device, F64)
    o, d, q = _inputs(device, F64)
    fn = QUERIES[name]
    cfn, counter = compiled(lambda: fn(scene, o, d, q))
    got = cfn()
    want = fn(scene, o, d, q)
    assert counter.frame_count == 1  # one graph, fullgraph=True: no break
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    if want.requires_grad:
        for g, w in zip(_grads(got, [v, o, d, q]), _grads(want, [v, o, d, q])):
            assert (g is None) == (w is None)
            if w is not None:
                assert torch.allclose(g, w, rtol=1e-10, atol=1e-12)
    cfn()
    assert counter.frame_count == 1  # no recompilation on a second call


def test_explain_counts_no_graph_break(device):
    scene, v = make_scene(device)
    o, d, _ = _inputs(device, torch.float32)
    explained = torch._dynamo.explain(lambda: scene.intersect(rt.Ray(o, d)).t.sum())()
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_training_loop_on_a_dynamic_mesh(device):
    """Forward + loss compiled once; backward through the compiled graph; step and sync() outside."""
    scene, v = make_scene(device)
    o, d, _ = _inputs(device, torch.float32)
    ray = rt.Ray(o.detach(), d.detach())

    def loss_fn():
        hit = scene.intersect(ray)
        return (_finite(hit.t) ** 2).sum() + hit.p[..., 0].sum()

    cfn, counter = compiled(loss_fn)
    for _ in range(3):
        want = loss_fn()
        (grad_want,) = torch.autograd.grad(want, [v])
        got = cfn()
        got.backward()
        assert torch.allclose(got, want, rtol=1e-6)
        assert torch.allclose(v.grad, grad_want, rtol=1e-5, atol=1e-6)
        with torch.no_grad():
            v -= 0.05 * v.grad  # in place: marks the scene pending (version counter)
        v.grad = None
        assert scene.has_pending_updates()
        scene.sync()
    assert counter.frame_count == 1  # the updates did not recompile


def test_lifecycle_faults_raise_inside_the_compiled_graph(device):
    scene, v = make_scene(device)
    o, d, q = _inputs(device, torch.float32)
    ray = rt.Ray(o.detach(), d.detach())
    for fn in (lambda: scene.intersect(ray).t, lambda: scene.nearest_edge(q).distance,
               lambda: scene.closest_point(q).distance):
        cfn, _ = compiled(fn)
        cfn()
        with torch.no_grad():
            v.mul_(1.01)  # in-place change without sync()
        with pytest.raises(RuntimeError, match=r"rayd.torch.Scene.\w+\(\): .*(pending|changed in place).*sync\(\)"):
            cfn()
        scene.sync()
        assert torch.allclose(cfn(), fn(), rtol=1e-6, atol=1e-7)  # float32: eager may use the fused kernel
    scene.update_mesh_vertices(0, v.detach() * 1.01)
    cfn, _ = compiled(lambda: scene.intersect(ray).t)
    with pytest.raises(RuntimeError, match=r"rayd.torch.Scene.intersect\(\): mesh 0 has pending updates"):
        cfn()


def test_full_step_with_autograd_grad_in_the_graph(device):
    """With ``trace_autograd_ops``: forward and ``torch.autograd.grad`` in one graph; the update and sync() outside.

    (With the in-place update inside the graph too, the next call's lifecycle check
    reported a change since ``sync()`` in torch 2.13: keep the update outside.)
    """
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        pytest.skip("this torch has no torch._dynamo.config.trace_autograd_ops")
    scene, v = make_scene(device)
    ref, v_ref = make_scene(device)
    o, d, _ = _inputs(device, torch.float32)
    ray = rt.Ray(o.detach(), d.detach())

    def step(scene, v):
        loss = _finite(scene.intersect(ray).t).sum()
        (grad,) = torch.autograd.grad(loss, [v])
        return loss.detach(), grad

    with torch._dynamo.config.patch(trace_autograd_ops=True):
        cfn, counter = compiled(lambda: step(scene, v))
        for _ in range(3):
            loss, grad = cfn()
            want, grad_want = step(ref, v_ref)
            with torch.no_grad():
                v -= 0.05 * grad
                v_ref -= 0.05 * grad_want
            assert scene.has_pending_updates()
            scene.sync()
            ref.sync()
            assert torch.allclose(loss, want, rtol=1e-6)
            assert torch.allclose(v, v_ref, rtol=1e-6, atol=1e-7)
    assert counter.frame_count == 1
    assert not torch.equal(v, uv_sphere(device=device)[0])  # the steps moved the mesh


def _op_cases(scene, device):
    n = 6
    gen = torch.Generator().manual_seed(1)
    o = torch.tensor([[0.0, 0.0, -3.0]]).to(device)
    d = (torch.randn(n, 3, generator=gen) * 0.1 + torch.tensor([0.0, 0.0, 1.0])).to(device)
    pts = torch.randn(n, 3, generator=gen).to(device)
    t0 = torch.zeros(1, device=device)
    t1 = torch.full((1,), math.inf, device=device)
    flag = torch.ones(1, dtype=torch.uint8, device=device)
    skip = torch.full((1,), -1, dtype=torch.int32, device=device)
    key, call = scene._op_key, "test()"
    return {
        "ray_search": (key, call, o, d, t0, t1, flag, skip, n, False),
        "edge_search_point": (key, call, pts, flag, math.inf, n, 0),
        "edge_search_ray": (key, call, o, d, t0, t1, flag, math.inf, n),
        "closest_point_search": (key, call, pts, flag, math.inf, n),
        "winding_number": (key, call, pts, flag, n, False, 0.0),
        "trace_chain": (key, call, o, d, t0, t1, flag, skip, n, 3),
        "all_hits": (key, call, o, d, t0, t1, flag, skip, n, 4),
        "count_hits": (key, call, o, d, t0, t1, flag, skip, n),
        "path_validity": (key, call, pts.double(), pts.flip(0).double(), torch.full((n, 2), 5, device=device),
                          torch.ones(1, dtype=torch.bool, device=device), n, torch.float32),
    }


@pytest.mark.parametrize("name", sorted(_ops.OPS))
def test_opcheck(device, name):
    scene, _ = make_scene(device)
    args = _op_cases(scene, device)[name]
    op = getattr(torch.ops.rayd, name).default
    torch.library.opcheck(op, args)
    grad_args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                      for a in args)
    torch.library.opcheck(op, grad_args)
    if name == "edge_search_point":
        torch.library.opcheck(op, args[:-1] + (4,))  # top-k form
    if name == "winding_number":
        torch.library.opcheck(op, args[:-2] + (True, 0.0))  # exact form


def test_new_ops_give_the_eager_winners(device):
    """The chain, all-hits and count ops return what the eager queries' engine launches give."""
    scene, _ = make_scene(device)
    args = _op_cases(scene, device)
    chain = torch.ops.rayd.trace_chain(*args["trace_chain"])
    o, d = args["trace_chain"][2], args["trace_chain"][3]
    ray = rt.Ray(o.expand(d.shape), d)
    assert torch.equal(chain[..., 0], scene.trace_reflections(ray, 3).global_prim_id)
    hits = torch.ops.rayd.all_hits(*args["all_hits"])
    assert torch.equal(hits, scene.intersect_all(ray, 4).global_prim_id)
    counts = torch.ops.rayd.count_hits(*args["count_hits"])
    assert torch.equal(counts, scene.count_intersections(ray))
    assert counts.tolist() == [2] * 6  # every ray crosses the sphere twice (in, out)


def test_registry_is_weak_and_reports_a_dropped_scene(device):
    scene, _ = make_scene(device)
    key = scene._op_key
    assert _ops.scene_of(key, "f()") is scene
    scene.build()
    assert scene._op_key == key  # kept across rebuilds
    del scene
    import gc

    gc.collect()
    with pytest.raises(RuntimeError, match=r"f\(\): the scene this query was compiled against no longer exists"):
        _ops.scene_of(key, "f()")


def test_transforms_instances_normals_compile_once(device):
    """Differentiable transforms (mesh and instance), vertex normals: one graph across transform updates."""
    v, f = uv_sphere(dtype=F64, device=device)
    v = v.clone().requires_grad_()
    normals = torch.nn.functional.normalize(v.detach(), dim=-1).requires_grad_()
    m = torch.eye(4, dtype=F64, device=device)
    m[0, 3] = 0.3
    m.requires_grad_()
    mi = torch.eye(4, dtype=F64, device=device)
    mi[1, 3] = 2.5
    mi.requires_grad_()
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f, normals=normals, to_world=m), dynamic=True)
    scene.add_instance(0, mi)
    scene.build()
    scene.edge_topology()
    gen = torch.Generator().manual_seed(4)
    o = torch.tensor([0.0, 0.0, -3.0], dtype=F64, device=device)
    d = (torch.randn(16, 3, generator=gen, dtype=F64) * 0.3 + torch.tensor([0, 0.5, 1.0], dtype=F64)).to(device)
    pts = (torch.randn(16, 3, generator=gen, dtype=F64) + torch.tensor([0, 1.0, 0], dtype=F64)).to(device)

    def fn():
        hit = scene.intersect(rt.Ray(o, d))
        return (_finite(hit.t).sum() + hit.n.sum() + scene.nearest_edge(pts).distance.sum()
                + scene.closest_point(pts).distance.sum())

    cfn, counter = compiled(fn)
    for _ in range(3):
        got, want = cfn(), fn()
        assert torch.allclose(got, want, rtol=1e-12)
        for g, w in zip(_grads(got, [v, m, mi, normals]), _grads(want, [v, m, mi, normals])):
            assert torch.allclose(g, w, rtol=1e-10, atol=1e-12)
        with torch.no_grad():
            m[0, 3] += 0.01  # in place: picked up at sync()
            v.mul_(1.001)
        mi = (mi.detach() + 0.0).requires_grad_()  # a new instance matrix tensor
        scene.set_mesh_transform(1, mi)
        scene.sync()
    assert (scene.intersect(rt.Ray(o, d)).shape_id == 1).any()
    assert counter.frame_count == 1


def test_edge_queries_need_the_edge_state_before_tracing(device):
    v, f = uv_sphere(device=device)
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(v, f))
    scene.build()
    pts = torch.zeros(4, 3, device=device)
    cfn, _ = compiled(lambda: scene.nearest_edge(pts).distance)
    with pytest.raises(Exception, match=r"rayd.torch.Scene.nearest_edge\(\): under torch.compile the scene's edge "
                                        r"topology must exist before tracing; call scene.edge_topology\(\)"):
        cfn()
    scene.edge_topology()
    cfn, counter = compiled(lambda: scene.nearest_edge(pts).distance)
    # compiled graphs use the op-by-op formulas, eager the fused kernel: equal to float32
    # rounding (bitwise on the CPU; on CUDA the two contract FMAs differently)
    torch.testing.assert_close(cfn(), scene.nearest_edge(pts).distance, rtol=2e-6, atol=1e-7)
    assert counter.frame_count == 1


def test_camera_made_inside_the_compiled_step(device):
    """A step that makes its ``Camera`` from tensor parameters (a pose being fitted) compiles into
    one graph with eager values and gradients. ``Camera()``'s value check read the tensors on the
    host and stopped tracing (``Unsupported``: a data-dependent branch, or a functorch builtin
    Dynamo cannot trace); while tracing only the devices are checked now, and ``sample_edges``
    still checks the values (tested in test_camera_edges.py)."""
    scene, v = make_scene(device, F64)
    fx = torch.tensor(12.0, dtype=F64, device=device, requires_grad=True)
    pose = torch.eye(4, dtype=F64, device=device)
    pose[:3, 3] = torch.tensor([0.1, -0.05, -3.0], dtype=F64)
    pose.requires_grad_()

    def step():
        cam = rt.Camera(8, 6, fx=fx, cx=3.5, to_world=pose)
        hit = scene.intersect(cam.generate_rays())
        return _finite(hit.t).sum() + cam.project(v[:5])[0].sum()

    cfn, counter = compiled(step)
    got, want = cfn(), step()
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    grads = _grads(want, [v, fx, pose])
    for g, w in zip(_grads(got, [v, fx, pose]), grads):
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12)
    assert float(want.detach()) > 0 and grads[1].abs() > 0 and grads[2].abs().max() > 0
    explained = torch._dynamo.explain(step)()
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    with pytest.raises(ValueError, match=r"^rayd\.torch\.Camera\(\): 'fx' must be positive"):
        rt.Camera(8, 6, fx=torch.tensor(-1.0, dtype=F64))  # eager: still checked
