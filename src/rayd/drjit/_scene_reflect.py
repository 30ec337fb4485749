"""Reflection queries of :class:`rayd.drjit.Scene`: ``trace_reflections`` and ``specular_paths``.

``trace_reflections`` finds every chain in one engine launch (``rayd.engine.trace_chain``)
and evaluates all slots for their fixed winners with Dr.Jit ops (``_chain.chain``), so
Dr.Jit's AD carries gradients through the chain. The slots are interleaved into fields of width ``N B`` (slot ``b`` of ray ``i`` at lane
``i B + b``), like the top-k records.

``specular_paths`` decides validity with :mod:`rayd.core.paths` on host float64 copies
(shared with rayd.torch) and evaluates the image method (Borish 1984, "Extension of the
image model to arbitrary polyhedra", JASA 75(6)) with Dr.Jit ops in float64, so AD
carries gradients to sources, targets, vertices and transforms.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import drjit as dr
import numpy as np

from rayd.core import specular
from rayd.core.docs import scene_annotations
from rayd.flags import RayFlags
from rayd.drjit import _chain, _check, _convert, _trace
from rayd.drjit._intersect import locate
from rayd.drjit._scene_docs import TYPES
from rayd.drjit.ray import Ray
from rayd.drjit.reflections import ReflectionChain, SpecularPaths

#: :class:`rayd.core.specular.ImageOps` on ``Array3f64`` / ``Float64`` arrays. ``divide`` multiplies
#: by the reciprocal: CUDA divides a vector by a scalar with an approximate reciprocal.
_IMAGE_OPS = SimpleNamespace(dot=lambda a, b: a.x * b.x + a.y * b.y + a.z * b.z, cross=dr.cross, select=dr.select,
                             sqrt=dr.sqrt, divide=lambda a, b: a * (1 / b))


# The hooks of rayd.core.specular.ReflectionQueries (bound through rayd.drjit._parts.reflections, fenced):
# trace_reflections and specular_paths after the checks written there, the argument checks of
# specular_paths and the host arrays of the shared validity rules.
def trace_reflections(scene, call: str, ray, bounces: int, active, ignore) -> ReflectionChain:
    # float64 chains: segment 0's float32 search bound widened above tmax (the chain decides on the
    # float64 t, as intersect does); was: a hit at t with tmax = t (1 + 1e-12) missed
    n, rays, keep, ray = _trace.prepare(scene, call, ray, active, ignore, widen="tmax")
    m, double = scene._precision(ray.o, ray.d)
    if n == 0:
        kinds = {"slot": m.Float64 if double else m.Float, "slot3": m.Array3f64 if double else m.Array3f,
                 "slot_id": m.Int, "ray_count": m.Int}
        kinds["ray"] = kinds["slot"]
        return ReflectionChain((0, bounces), **{name: kinds[kind]() for name, kind in specular.CHAIN_FIELDS.items()})
    return ReflectionChain((n, bounces), **_chain.chain(scene, m, double, rays, keep, n, bounces, ray))


def path_points(scene, call: str, name: str, value) -> tuple:
    value = _check.float_array(call, name, value, 3)
    _check.same_backend(call, name, value, scene._device, "the scene")
    return value, dr.width(value)


def path_sequences(scene, call: str, prim_sequence) -> tuple[np.ndarray, int, int]:
    seq = _sequences(call, prim_sequence)
    _check.same_backend(call, "prim_sequence", prim_sequence, scene._device, "the scene")
    return seq, seq.shape[0], seq.shape[1]


def path_active(scene, call: str, active) -> tuple:
    active = _check.bool_array(call, "active", active)
    _check.same_backend(call, "active", active, scene._device, "the scene")
    return active, dr.width(active)


def specular_paths(scene, call: str, source, target, seq: np.ndarray, active, n: int) -> SpecularPaths:
    bounces = seq.shape[1]
    m, double = scene._precision(source, target)
    Float, Array3 = (m.Float64, m.Array3f64) if double else (m.Float, m.Array3f)
    src_host, dst_host = (_rows(x, n) for x in (source, target))
    seq = np.broadcast_to(seq, (n, bounces))
    prior = None if active is None else np.broadcast_to(np.array(dr.detach(active), dtype=bool), (n,))
    ok, used, ids, _ = scene._host_validity(src_host, dst_host, seq, prior, double)
    if n == 0:
        return SpecularPaths((0, bounces), points=Array3(), num_bounces=m.Int(), length=Float(), valid=m.Bool())
    corners = _slot_corners(scene, m, ids)
    points, length = _image_method(m, m.Array3f64(source), m.Array3f64(target), corners, used)
    valid = m.Bool(ok)
    out = dr.zeros(Array3, n * bounces)
    keep = m.Bool((used & ok[:, None]).reshape(-1))
    if bounces:
        lanes = dr.arange(m.UInt, n) * bounces
        for k, p in enumerate(points):
            dr.scatter(out, Array3(p), lanes + k)
        out = dr.select(keep, out, 0)
    return SpecularPaths((n, bounces), points=out, num_bounces=m.Int(used.sum(-1).astype(np.int32)),
                         length=dr.select(valid, Float(length), math.inf), valid=valid)


# ------------------------------------------------------------------ face corners; host arrays of the validity rules
def _slot_corners(scene, m, ids: np.ndarray) -> list[tuple]:
    """Per slot ``k``, the float64 world corners ``(v0, v1, v2)`` (width n) of the faces ``ids[:, k]``."""
    n, bounces = ids.shape
    if not bounces:
        return []
    geometry = scene._state.live_geometry(m, True)
    _, _, _, _, _, _, (v0, v1, v2) = locate(m, m.Array3f64, m.Int(ids.reshape(-1)), geometry)
    lanes = dr.arange(m.UInt, n) * bounces
    return [tuple(dr.gather(m.Array3f64, v, lanes + k) for v in (v0, v1, v2)) for k in range(bounces)]


def host_points(scene, x: np.ndarray, double: bool) -> np.ndarray:
    return x if double else x.astype(np.float32).astype(np.float64)  # as the evaluation rounds them


def host_corners(scene, ids: np.ndarray, double: bool) -> np.ndarray:
    n, bounces = ids.shape
    if not (n and bounces):
        return np.zeros((n, bounces, 3, 3))
    m = _convert.module(scene._backend, True)
    with dr.suspend_grad():
        flat = _slot_corners_flat(scene, m, ids, double)
    return np.stack(flat, axis=-2).reshape(n, bounces, 3, 3)


def _slot_corners_flat(scene, m, ids: np.ndarray, double: bool) -> list[np.ndarray]:
    Array3 = m.Array3f64 if double else m.Array3f
    geometry = scene._state.live_geometry(m, double)
    _, _, _, _, _, _, corners = locate(m, Array3, m.Int(ids.reshape(-1)), geometry)
    return [np.array(dr.detach(v), dtype=np.float64).T for v in corners]


def host_search(scene, double: bool, o, d, tmin, tmax, flag, skip):
    """The closest-hit search on host (NumPy) rays, for :mod:`rayd.core.paths`: the engine's
    float32 winners for float32 paths; for float64 paths ``intersect``'s, decided on the float64
    ``t`` (a face the float32 search rounds into ``(tmin, tmax)``, such as one a segment's end
    lies on at a grazing angle, does not win)."""
    call = "rayd.drjit.Scene.specular_paths()"
    plain = _convert.module(scene._backend, False)
    ray = Ray(plain.Array3f64(np.ascontiguousarray(o.T)), plain.Array3f64(np.ascontiguousarray(d.T)),
              plain.Float64(tmax) if double else plain.Float(tmax), tmin=plain.Float64(tmin) if double else plain.Float(tmin))
    if double:
        with dr.suspend_grad():
            hit = scene._intersect(call, ray, plain.Bool(flag), RayFlags.Minimal, plain.Int(skip))
        return np.array(hit.global_prim_id, dtype=np.int32)
    _, winner = _trace.trace(scene, call, ray, plain.Bool(flag), plain.Int(skip), any_hit=False)
    return np.array(winner, dtype=np.int32)


def _sequences(call: str, value: object) -> np.ndarray:
    """``prim_sequence`` as host int64 rows (R, B), R the tensor's first extent (1 for a 1-d tensor)."""
    value = _check.jit_array(call, "prim_sequence", value)
    if not dr.is_tensor_v(value) or dr.type_v(value) not in _check._INDEX:
        raise TypeError(f"{call}: 'prim_sequence' must be a Dr.Jit integer tensor (e.g. TensorXi) of shape (N, B), "
                        f"got {_convert.type_name(value)}")
    shape = tuple(value.shape)
    if len(shape) == 1:
        shape = (1,) + shape
    if len(shape) != 2:
        raise ValueError(f"{call}: 'prim_sequence' must have shape (N, B) or (B,), got {tuple(value.shape)}")
    host = np.array(dr.detach(value.array), dtype=np.int64)
    if dr.type_v(value) in (dr.VarType.UInt32,):
        host = np.where(host == 2**32 - 1, -1, host)
    return host.reshape(shape)


def _rows(value: dr.ArrayBase, n: int) -> np.ndarray:
    """(n, 3) float64 host rows of a width-n or width-1 3-vector array."""
    host = np.array(dr.detach(value), dtype=np.float64).reshape(3, -1).T
    return np.broadcast_to(host, (n, 3)) if host.shape[0] == 1 else host


def _image_method(m, src, dst, corners: list[tuple], used: np.ndarray):
    """Reflection points (one ``Array3f64`` of width n per slot) and the total length (``Float64``)
    by :func:`rayd.core.specular.image_method`; unused slots hold the target."""
    use = [m.Bool(np.ascontiguousarray(used[:, k])) for k in range(len(corners))]
    return specular.image_method(_IMAGE_OPS, src, dst, corners, use)


#: The docstrings of the :class:`rayd.core.specular.ReflectionQueries` methods on :class:`rayd.drjit.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "trace_reflections": """The specular chain of each ray, as :meth:`rayd.torch.Scene.trace_reflections`.

    Args:
        ray: :class:`rayd.drjit.Ray` of width N.
        max_bounces: ``B``, an int in ``[1, 16]``.
        active: optional ``Bool`` of width N or 1; inactive rays get empty chains.
        ignore: optional ``global_prim_id`` per ray for segment 0 (-1 for none).

    Returns:
        :class:`ReflectionChain` of shape ``(N, B)`` (slot ``b`` of ray ``i`` at lane
        ``i B + b``); the fields and miss values of :class:`rayd.torch.ReflectionChain`.

    Units:
        ``t`` in multiples of ``|d|`` (each reflected direction keeps ``d``'s length);
        ``p``, ``image_source`` and ``path_length`` in world units.

    Gradients:
        ``t, p, geo_n, d_out, image_source, path_length`` are differentiable (Dr.Jit AD,
        reverse and forward mode) with respect to vertices, transforms, ``ray.o`` and
        ``ray.d``, for the fixed chain of faces.

    Raises:
        TypeError: ``max_bounces`` is not an int; and as :meth:`intersect`.
        ValueError: ``max_bounces`` outside ``[1, 16]``; and as :meth:`intersect`.
        RuntimeError: as :meth:`intersect`.

    References:
        Whitted 1980, "An Improved Illumination Model for Shaded Display", CACM 23(6)
        (the mirror direction); Allen, Berkley 1979, "Image Method for Efficiently
        Simulating Small-Room Acoustics", JASA 65(4) (``image_source``).
    """,
    "specular_paths": """The exact specular path from ``source`` to ``target`` off the faces ``prim_sequence``.

    The same paths, validity rules and values as :meth:`rayd.torch.Scene.specular_paths`
    (image method; valid iff every reflection point lies in its closed triangle, every
    reflection is real and every segment is unblocked; decided by
    :func:`rayd.core.paths.validate` on host float64 copies: one read back).

    Args:
        source: (N, 3) ``Array3f``/``Array3f64`` of width N or 1 on the scene's backend.
        target: (N, 3) the same, width N or 1.
        prim_sequence: a Dr.Jit integer tensor (``TensorXi``, ``TensorXu``, ``TensorXi64``,
            ...) of shape ``(N, B)`` (or ``(1, B)`` / ``(B,)`` for one sequence for every
            path), ``0 <= B <= 16``, of ``global_prim_id`` s, ``-1`` padding at the end;
            ``B = 0`` or all ``-1`` is the line of sight. From a chain:
            ``TensorXi(chain.global_prim_id, shape=chain.shape)``.
        active: optional ``Bool`` of width N or 1; inactive paths are invalid.

    Returns:
        :class:`SpecularPaths` of shape ``(N, B)``: ``points`` (width ``N B``),
        ``num_bounces``, ``length`` (``inf`` invalid), ``valid`` (width N). Float64
        when any of source, target or the vertices is, else float32.

    Units:
        ``points`` and ``length`` in world units.

    Gradients:
        ``points`` and ``length`` with respect to ``source``, ``target``, vertices and
        transforms (Dr.Jit AD, reverse and forward mode), for the fixed sequence.

    Raises:
        TypeError: non-float points, a non-integer or non-tensor ``prim_sequence``,
            non-``Bool`` ``active``.
        ValueError: wrong shapes or widths, ``B > 16``, inputs on another backend.
        RuntimeError: the scene is not built or has pending changes.

    References:
        Allen, Berkley 1979, "Image Method for Efficiently Simulating Small-Room
        Acoustics", JASA 65(4).
    """,
}

ANNOTATIONS = scene_annotations(TYPES, DOCS)
