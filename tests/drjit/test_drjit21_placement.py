"""rayd.drjit places transformed meshes in float64, as rayd.torch: parity 3e4 from the origin.

A bumpy sphere of 80 faces near the origin (with vertex normals) is placed by a ``to_world``
(a rotation and a translation of about 3e4: mesh 0) and instanced (shape 1, ``M_inst @
M_mesh``). Both frontends search in float32 and evaluate the winners from the float64
placement of their vertices, rounding each output once, so values and gradients (reverse
and forward mode, into the vertices, the mesh's ``to_world`` and the instance's matrix)
agree to the rounding of the output dtype. Before the fix rayd.drjit placed float32
meshes in float32: ``t`` and distances were up to 5e-4 off (half a float32 ulp of 3e4),
and the derivatives with them. Queries: ``intersect`` (``t, p, geo_n, n, barycentric``),
``closest_point``, ``nearest_edge`` (points and rays), ``trace_reflections``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

dr = pytest.importorskip("drjit")
torch = pytest.importorskip("torch")
fwAD = pytest.importorskip("torch.autograd.forward_ad")
rd = pytest.importorskip("rayd.drjit")
rt = pytest.importorskip("rayd.torch")

from drjit_testutil import rows, vec  # noqa: E402

OFFSET = np.array([1.0e4, -2.0e4, 3.0e4])
N = 96  # queries per shape
FIELDS = {
    "intersect": ("global_prim_id", ("t", "p", "geo_n", "n", "barycentric")),
    "closest_point": ("global_prim_id", ("distance", "p", "barycentric", "geo_n")),
    "edge_points": ("global_edge_id", ("distance", "edge_t", "edge_point")),
    "edge_ray": ("global_edge_id", ("distance", "edge_t", "edge_point", "ray_t", "ray_point")),
    "reflections": ("global_prim_id", ("t", "p", "geo_n", "d_out", "image_source", "path_length")),
}
QUERIES = list(FIELDS)
VECTORS = ("p", "geo_n", "n", "barycentric", "edge_point", "ray_point", "d_out", "image_source")


def _sphere(rings: int = 6, segments: int = 8):
    """A closed bumpy UV sphere (2 S (R - 1) faces) and perturbed unit vertex normals, float64."""
    th, ph = np.meshgrid(np.arange(1, rings) * math.pi / rings, np.arange(segments) * 2 * math.pi / segments,
                         indexing="ij")
    r = 1.0 + 0.08 * np.sin(3 * th) * np.cos(2 * ph)
    ring = np.stack([r * np.sin(th) * np.cos(ph), r * np.sin(th) * np.sin(ph), r * np.cos(th)], -1).reshape(-1, 3)
    v = np.concatenate([ring, [[0, 0, 1.05], [0, 0, -0.95]]])
    idx = np.arange((rings - 1) * segments).reshape(rings - 1, segments)
    nxt = np.roll(idx, -1, axis=1)
    a, b, c, d = idx[:-1], nxt[:-1], idx[1:], nxt[1:]
    f = np.concatenate([np.stack([np.full(segments, len(ring)), idx[0], nxt[0]], -1),
                        np.stack([a, c, d], -1).reshape(-1, 3), np.stack([a, d, b], -1).reshape(-1, 3),
                        np.stack([np.full(segments, len(ring) + 1), nxt[-1], idx[-1]], -1)])
    normals = v / np.linalg.norm(v, axis=1, keepdims=True) + 0.1 * np.random.default_rng(5).normal(size=v.shape)
    return v, f.astype(np.int32), normals


def _rotation(axis: int, angle: float) -> np.ndarray:
    i, j = [k for k in range(3) if k != axis]
    r = np.eye(3)
    r[i, i] = r[j, j] = math.cos(angle)
    r[i, j], r[j, i] = -math.sin(angle), math.sin(angle)
    return r


def _inputs(double: bool) -> dict:
    """The scene's arrays (in the dtype) and the queries around both shapes, as NumPy."""
    dtype = np.float64 if double else np.float32
    v, f, normals = _sphere()
    mesh = np.eye(4)
    mesh[:3, :3] = _rotation(2, 0.3) * 1.1
    mesh[:3, 3] = OFFSET
    inst = np.eye(4)
    inst[:3, :3] = _rotation(0, 1e-4)  # composed: the instance lands about 4 from mesh 0
    inst[:3, 3] = [0.0, 3.0, 4.0]
    mesh, inst = mesh.astype(dtype), inst.astype(dtype)
    centres = [mesh.astype(np.float64)[:3, 3], (inst.astype(np.float64) @ mesh.astype(np.float64))[:3, 3]]
    rng = np.random.default_rng(7)
    unit = rng.normal(size=(2 * N, 3))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    inside = np.concatenate([c + 0.3 * rng.uniform(-1, 1, (N, 3)) for c in centres])
    near = np.concatenate([c + u * rng.uniform(0.8, 1.3, (N, 1)) for c, u in zip(centres, np.split(unit, 2))])
    d = rng.normal(size=(2 * N, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return dict(v=v.astype(dtype), f=f, normals=normals.astype(dtype), mesh=mesh, inst=inst, o=inside.astype(dtype),
                d=d.astype(dtype), points=near.astype(dtype), double=double)


def _drjit_run(m, x: dict, query: str, grad: str | None, weights: dict | None = None, tangents: dict | None = None):
    """rayd.drjit's fields (NumPy rows), and the gradients (``'reverse'``) or tangents (``'forward'``)."""
    double = x["double"]
    A3 = m.Array3f64 if double else m.Array3f
    M4 = m.Matrix4f64 if double else m.Matrix4f
    vd, md, id_ = vec(A3, x["v"]), M4(x["mesh"].tolist()), M4(x["inst"].tolist())
    if grad:
        dr.enable_grad(vd, md, id_)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vd, m.Array3i(x["f"].T), normals=vec(A3, x["normals"]), to_world=md))
    scene.add_instance(0, id_)
    scene.build()
    if grad == "forward":
        dr.set_grad(vd, vec(A3, tangents["v"]))
        dr.set_grad(md, M4(tangents["mesh"].tolist()))
        dr.set_grad(id_, M4(tangents["inst"].tolist()))
    record = _drjit_query(m, A3, scene, x, query)
    key, names = FIELDS[query]
    out = {name: getattr(record, name) for name in names}
    result = {"id": rows(getattr(record, key)), **{k: rows(dr.detach(v)) for k, v in out.items()}}
    if grad == "forward":
        result.update({"d_" + k: rows(g) for k, g in zip(out, dr.forward_to(*out.values()))})
    elif grad == "reverse":
        loss = 0
        for name, value in out.items():
            w = weights[name]
            kind = type(value)
            w = vec(kind, w) if w.ndim == 2 else kind(w)
            loss += dr.sum(dr.sum(dr.select(dr.isfinite(dr.detach(value)), value, 0) * w))
        dr.backward(loss)
        result.update(g_v=rows(dr.grad(vd)), g_mesh=np.array(dr.grad(md)).reshape(4, 4),
                      g_inst=np.array(dr.grad(id_)).reshape(4, 4))
    return result


def _drjit_query(m, A3, scene, x, query):
    if query == "intersect":
        return scene.intersect(rd.Ray(vec(A3, x["o"]), vec(A3, x["d"])))
    if query == "closest_point":
        return scene.closest_point(vec(A3, x["points"]))
    if query == "edge_points":
        return scene.nearest_edge(vec(A3, x["points"]))
    if query == "edge_ray":
        tmax = (m.Float64 if x["double"] else m.Float)(0.5)
        return scene.nearest_edge(rd.Ray(vec(A3, x["o"]), vec(A3, x["d"]), tmax))
    return scene.trace_reflections(rd.Ray(vec(A3, x["o"]), vec(A3, x["d"])), 3)


def _torch_run(x: dict, query: str, grad: str | None, weights: dict | None = None, tangents: dict | None = None):
    """rayd.torch's fields (NumPy rows, lanes as rayd.drjit's), gradients or tangents."""
    dtype = torch.float64 if x["double"] else torch.float32
    vt, mt, it = (torch.tensor(x[k], dtype=dtype, requires_grad=grad == "reverse") for k in ("v", "mesh", "inst"))
    scene = rt.Scene()
    scene.add_mesh(rt.Mesh(vt, torch.tensor(x["f"], dtype=torch.int64), normals=torch.tensor(x["normals"], dtype=dtype),
                           to_world=mt), dynamic=grad == "forward")  # (update_mesh_vertices: a dual tensor)
    scene.add_instance(0, it)
    scene.build()
    with fwAD.dual_level():
        if grad == "forward":
            scene.update_mesh_vertices(0, fwAD.make_dual(vt, torch.tensor(tangents["v"], dtype=dtype)))
            scene.set_mesh_transform(0, fwAD.make_dual(mt, torch.tensor(tangents["mesh"], dtype=dtype)))
            scene.set_mesh_transform(1, fwAD.make_dual(it, torch.tensor(tangents["inst"], dtype=dtype)))
            scene.sync()
        o, d, p = (torch.tensor(x[k], dtype=dtype) for k in ("o", "d", "points"))
        record = {"intersect": lambda: scene.intersect(rt.Ray(o, d)),
                  "closest_point": lambda: scene.closest_point(p),
                  "edge_points": lambda: scene.nearest_edge(p),
                  "edge_ray": lambda: scene.nearest_edge(rt.Ray(o, d, 0.5)),
                  "reflections": lambda: scene.trace_reflections(rt.Ray(o, d), 3)}[query]()
        key, names = FIELDS[query]
        out = {name: getattr(record, name) for name in names}
        result = {"id": getattr(record, key).reshape(-1).numpy(),
                  **{k: _rows(k, v.detach()) for k, v in out.items()}}
        if grad == "forward":
            result.update({"d_" + k: _rows(k, fwAD.unpack_dual(v).tangent) for k, v in out.items()})
    if grad == "reverse":
        loss = 0
        for name, value in out.items():
            w = torch.tensor(weights[name], dtype=dtype).reshape(value.shape)
            loss = loss + (torch.where(torch.isfinite(value.detach()), value, 0) * w).sum()
        loss.backward()
        result.update(g_v=vt.grad.numpy(), g_mesh=mt.grad.numpy(), g_inst=it.grad.numpy())
    return result


def _rows(name: str, value) -> np.ndarray:
    """A torch field as rayd.drjit lays it out: lanes first (``(N, B)`` slots flattened), components last."""
    return value.numpy().reshape((-1, 3) if name in VECTORS else (-1,))


def _tolerance(double: bool, reference: np.ndarray) -> np.ndarray:
    """Per-entry tolerance: float32, two roundings of the value and 4e-7; float64, 1e-13 relative and 1e-9
    (a chain's third bounce differs by 1.6e-10 between the frontends' float64 operation orders)."""
    scale = np.abs(np.where(np.isfinite(reference), reference, 0))
    if double:
        return 1e-13 * scale + 1e-9
    return 2 * np.spacing(scale.astype(np.float32)).astype(np.float64) + 4e-7


def _assert_close(got, want, double, what, tol=None):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, what
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=what)
    bound = _tolerance(double, want) if tol is None else tol
    excess = np.abs(np.where(finite, got - want, 0)) - np.where(finite, bound, 0)
    assert excess.max() <= 0, f"{what}: off by up to {np.abs(np.where(finite, got - want, 0)).max():.3g}"


def _same(d: dict, t: dict, query: str) -> np.ndarray:
    """Lanes where both found the same face/edge (ties on shared edges may pick either), and found one."""
    same = d["id"] == t["id"]
    assert same.mean() > 0.9, "the frontends should mostly pick the same winners"
    assert (d["id"] >= 0).mean() > 0.5, "the queries should mostly find something"
    return same


@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("query", QUERIES)
def test_values_match_torch_far_from_the_origin(m, query, double):
    x = _inputs(double)
    d, t = _drjit_run(m, x, query, None), _torch_run(x, query, None)
    same = _same(d, t, query)
    for name in FIELDS[query][1]:
        lanes = same if d[name].shape[0] == same.shape[0] else _rays_all_same(same, d[name].shape[0])
        _assert_close(d[name][lanes], t[name][lanes], double, f"{query}.{name}")


def _rays_all_same(same: np.ndarray, n: int) -> np.ndarray:
    """Per ray: every slot of its chain has the same face in both frontends (``path_length``)."""
    return same.reshape(n, -1).all(axis=1)


def _weights(x: dict, query: str, d: dict, same: np.ndarray) -> dict:
    rng = np.random.default_rng(11)
    out = {}
    for name in FIELDS[query][1]:
        w = rng.uniform(0.5, 1.5, d[name].shape)
        lanes = same if d[name].shape[0] == same.shape[0] else _rays_all_same(same, d[name].shape[0])
        w[~lanes] = 0  # ties: gradients of different faces
        out[name] = w
    return out


def _grad_tolerance(double: bool, want: np.ndarray) -> float:
    return (1e-9 if double else 2e-5) * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("query", QUERIES)
def test_reverse_gradients_match_torch(m, query, double):
    x = _inputs(double)
    plain_d, plain_t = _drjit_run(m, x, query, None), _torch_run(x, query, None)
    weights = _weights(x, query, plain_d, _same(plain_d, plain_t, query))
    d, t = _drjit_run(m, x, query, "reverse", weights), _torch_run(x, query, "reverse", weights)
    for name in ("g_v", "g_mesh", "g_inst"):
        assert np.abs(t[name]).max() > 0, f"{query}: torch's {name} should not be 0"
        _assert_close(d[name], t[name], double, f"{query}.{name}", _grad_tolerance(double, t[name]))


@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("query", QUERIES)
def test_forward_tangents_match_torch(m, query, double):
    x = _inputs(double)
    rng = np.random.default_rng(13)
    tangents = {"v": rng.normal(size=x["v"].shape), "mesh": np.zeros((4, 4)), "inst": np.zeros((4, 4))}
    tangents["mesh"][:3] = rng.normal(size=(3, 4))
    tangents["inst"][:3] = rng.normal(size=(3, 4))
    d, t = _drjit_run(m, x, query, "forward", tangents=tangents), _torch_run(x, query, "forward", tangents=tangents)
    same = _same(d, t, query)
    for name in FIELDS[query][1]:
        lanes = same if d[name].shape[0] == same.shape[0] else _rays_all_same(same, d[name].shape[0])
        want = t["d_" + name][lanes]
        want = np.where(np.isfinite(t[name][lanes]), want, 0)
        got = np.where(np.isfinite(d[name][lanes]), d["d_" + name][lanes], 0)
        _assert_close(got, want, double, f"{query}.d_{name}", _grad_tolerance(double, want))


@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
def test_sample_edges_motion_far_from_the_origin(m, double):
    """``EdgeSamples.motion``'s forward tangent (a tangent on the mesh's ``to_world``) against the float64
    chain rule through the float64 placement of the edge point and the pinhole projection. rayd.drjit
    placed the point in float32, rounded it, and projected it in float32: float32 tangents were up to
    0.0135 off (4.5e-4 of the largest, 30)."""
    x = _inputs(double)
    A3 = m.Array3f64 if double else m.Array3f
    M4 = m.Matrix4f64 if double else m.Matrix4f
    matrix = M4(x["mesh"].tolist())
    dr.enable_grad(matrix)
    scene = rd.Scene()
    scene.add_mesh(rd.Mesh(vec(A3, x["v"]), m.Array3i(x["f"].T), to_world=matrix))
    scene.build()
    centre = OFFSET + [0.0, 0.0, -4.0]  # exact in float32; the camera looks along +z at the sphere
    pose = np.eye(4)
    pose[:3, 3] = centre
    camera = rd.Camera(64, 64, fx=60.0, fy=50.0, cx=32.0, cy=30.0, to_world=M4(pose.tolist()))
    rng = np.random.default_rng(17)
    tangent = np.zeros((4, 4))
    tangent[:3] = rng.normal(size=(3, 4))
    dr.set_grad(matrix, M4(tangent.tolist()))
    samples = camera.sample_edges(scene, 400, generator=np.random.default_rng(0))
    got = rows(dr.forward_to(samples.motion))
    # the reference: float64 NumPy, from the registered float32/float64 numbers
    top = scene.edge_topology()
    ends = rows(top.v)[rows(samples.global_edge_id)].astype(np.int64)
    t = rows(samples.edge_t).astype(np.float64)[:, None]
    v = x["v"].astype(np.float64)
    obj = v[ends[:, 0]] * (1 - t) + v[ends[:, 1]] * t
    mesh = x["mesh"].astype(np.float64)
    p = obj @ mesh[:3, :3].T + mesh[:3, 3] - centre  # camera space (identity rotation)
    dp = obj @ tangent[:3, :3].T + tangent[:3, 3]
    dxy = np.stack([60.0 * (dp[:, 0] * p[:, 2] - p[:, 0] * dp[:, 2]), 50.0 * (dp[:, 1] * p[:, 2] - p[:, 1] * dp[:, 2])],
                   -1) / p[:, 2:] ** 2
    want = np.sum(dxy * rows(samples.normal), axis=1)
    assert len(samples) == 400 and np.abs(want).max() > 1
    _assert_close(got, want, double, "motion tangent", (1e-9 if double else 2e-6) * np.abs(want).max())
