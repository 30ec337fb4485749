"""Differentiable evaluation of closest hits for a fixed winner (Dr.Jit ops).

The engine's search kernel picks the winning triangle per ray; this module recomputes
``t, u, v`` for that triangle from the live (differentiable) geometry by solving

    o + t d = (1 - u - v) v0 + u v1 + v v2

with Cramer's rule in the form of Moeller & Trumbore (1997, "Fast, Minimum Storage
Ray/Triangle Intersection", JGT 2(1)), then derives ``p, geo_n, n, barycentric, uv``.
Vertices are read with ``dr.gather`` from the live arrays, so Dr.Jit's AD carries
gradients back to them (reverse mode, ``dr.backward``) or forward from them
(``dr.forward``). Rays that missed are evaluated against a fixed, well-conditioned
stand-in triangle and masked out with ``dr.select``, so misses carry exactly zero
gradient and never NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType

import drjit as dr

from rayd.drjit._geometry import apply, linear
from rayd.flags import RayFlags


@dataclass
class LiveGeometry:
    """The scene's triangles as differentiable Dr.Jit arrays, one float type.

    vertices: (V_m, 3) object-space positions of every mesh, concatenated.
    faces: (F_m, 3) ``Array3u`` rows into ``vertices``, meshes concatenated.
    normals: (V_m, 3) object-space vertex normals, or ``None`` if no mesh has any.
    face_has_normals: (F_m,) ``Bool``, or ``None``.
    uv: (V_m, 2) texture coordinates, or ``None`` if no mesh has any.
    face_has_uv: (F_m,) ``Bool``, or ``None``.
    global_offset: (S,) ``Int`` first ``global_prim_id`` of each shape (ascending).
    face_row: (S,) ``Int`` row in ``faces`` of the first face of each shape's mesh.
    transform: per-shape world transform columns (width S, ``M_mesh`` or
        ``M_instance @ M_mesh``), or ``None`` when every shape is in world space.
    normal_transform: per-shape ``inv(L)^T`` columns, or ``None``.
    """

    vertices: dr.ArrayBase
    faces: dr.ArrayBase
    normals: dr.ArrayBase | None
    face_has_normals: dr.ArrayBase | None
    uv: dr.ArrayBase | None
    face_has_uv: dr.ArrayBase | None
    global_offset: dr.ArrayBase
    face_row: dr.ArrayBase
    transform: tuple | None
    normal_transform: tuple | None


def _normalize(x: dr.ArrayBase, fallback: dr.ArrayBase) -> tuple[dr.ArrayBase, dr.ArrayBase]:
    """``x / |x|`` with ``fallback`` where ``|x| = 0``; returns (result, ok-mask)."""
    sq = dr.squared_norm(x)
    ok = sq > 0
    safe = dr.select(ok, x, fallback)
    # Not dr.rsqrt, nor a vector divided by a scalar (Dr.Jit turns that into dr.rcp):
    # on CUDA both are approximate instructions (~5e-7 relative, in float64 too).
    # A scalar 1 / x is an IEEE division on every backend (measured on an H200).
    return safe * (1 / dr.sqrt(dr.select(ok, sq, 1))), ok


def _interpolate(kind: type, values: dr.ArrayBase, tri: dr.ArrayBase, w: dr.ArrayBase) -> dr.ArrayBase:
    """``w0 a[i0] + w1 a[i1] + w2 a[i2]`` for per-vertex attributes ``values``."""
    a0, a1, a2 = (dr.gather(kind, values, i) for i in (tri.x, tri.y, tri.z))
    return w.x * a0 + w.y * a1 + w.z * a2


def locate(m: ModuleType, Array3: type, global_prim_id: dr.ArrayBase, geometry: LiveGeometry) -> tuple:
    """Where the faces of (N,) ``Int`` ``global_prim_id`` (-1 = none) are, and their world corners.

    Returns ``(gid, hit, shape, prim, winner, tri, (v0, v1, v2), cols)``: ``hit`` where
    ``gid >= 0``, the shape, the face within its mesh, its row in the face table, its
    vertex ids, its world-space corners as ``Array3`` (face 0's where not ``hit``) and the
    shape's transform columns (``None`` when every shape is in world space).
    Differentiable in the corners (gathers of the live arrays).
    """
    Int, UInt = m.Int, m.UInt
    gid = Int(global_prim_id)
    hit = gid >= 0
    g = dr.select(hit, gid, 0)
    offsets = Int(geometry.global_offset)
    num_shapes = dr.width(offsets)
    if num_shapes == 1:
        shape = dr.zeros(UInt, dr.width(g))
    else:
        # The last shape whose first global_prim_id is <= g (empty shapes are skipped).
        index = dr.binary_search(0, num_shapes - 1, lambda i: dr.gather(Int, offsets, i) <= g)
        shape = UInt(index - dr.select(dr.gather(Int, offsets, index) > g, 1, 0))
    prim = g - dr.gather(Int, offsets, shape)
    winner = UInt(dr.gather(Int, Int(geometry.face_row), shape) + prim)  # row in the face table
    tri = dr.gather(m.Array3u, m.Array3u(geometry.faces), winner)
    v0 = dr.gather(Array3, geometry.vertices, tri.x)
    v1 = dr.gather(Array3, geometry.vertices, tri.y)
    v2 = dr.gather(Array3, geometry.vertices, tri.z)
    cols = None
    if geometry.transform is not None:
        cols = tuple(dr.gather(Array3, c, shape) for c in geometry.transform)
        v0, v1, v2 = apply(cols, v0), apply(cols, v1), apply(cols, v2)
    return gid, hit, shape, prim, winner, tri, (v0, v1, v2), cols


def evaluate(
    m: ModuleType,
    double: bool,
    o: dr.ArrayBase,
    d: dr.ArrayBase,
    global_prim_id: dr.ArrayBase,
    geometry: LiveGeometry,
    flags: RayFlags,
) -> dict[str, dr.ArrayBase]:
    """Intersection fields for rays (N, 3) and their winners (N,) ``Int`` (-1 = miss).

    ``m`` is the Dr.Jit namespace of the outputs (e.g. ``drjit.llvm.ad``), ``double``
    selects float64. ``o``, ``d`` and ``geometry`` arrays are of that float type.
    Returns a dict of width-N arrays named as the fields of
    :class:`rayd.drjit.Intersection`.
    """
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    Array2 = m.Array2f64 if double else m.Array2f
    Int = m.Int

    gid, hit, shape, prim, winner, tri, (v0, v1, v2), cols = locate(m, Array3, global_prim_id, geometry)
    normal_cols = None
    if cols is not None and geometry.normal_transform is not None:
        normal_cols = tuple(dr.gather(Array3, c, shape) for c in geometry.normal_transform)
    # Stand-in for misses: a triangle and a ray that hits it head-on at t = 1.
    v0 = dr.select(hit, v0, Array3(0, 0, 0))
    v1 = dr.select(hit, v1, Array3(1, 0, 0))
    v2 = dr.select(hit, v2, Array3(0, 1, 0))
    o = dr.select(hit, Array3(o), Array3(0.25, 0.25, 1))
    d = dr.select(hit, Array3(d), Array3(0, 0, -1))
    # The solve runs in float64 even for float32 inputs (differentiably cast back
    # below): grazing hits are ill-conditioned, and float32 rounding (with or without
    # FMA contraction) would otherwise make CPU, CUDA and rayd.torch disagree.
    Work = m.Array3f64
    o, d, v0, v1, v2 = (Work(x) for x in (o, d, v0, v1, v2))

    e1 = v1 - v0
    e2 = v2 - v0
    pvec = dr.cross(d, e2)
    det = dr.dot(e1, pvec)
    # A winner found in float32 can be degenerate or singular when re-evaluated (no
    # interior, or no unique t): a miss, as the search decides (watertight.confirmed_t).
    singular = (det == 0) | dr.all(dr.cross(e1, e2) == 0)
    hit = hit & ~singular
    det = dr.select(singular, 1, det)
    inv_det = 1 / det  # true division: dr.rcp is approximate on CUDA
    s = o - v0
    qvec = dr.cross(s, e1)
    t = dr.dot(e2, qvec) * inv_det

    out = {
        "t": dr.select(hit, Float(t), Float(math.inf)),
        "prim_id": dr.select(hit, prim, -1),
        "shape_id": dr.select(hit, Int(shape), -1),
        "global_prim_id": dr.select(hit, gid, -1),
    }
    if not flags & (RayFlags.Geometric | RayFlags.ShadingN | RayFlags.UV):
        return out

    u64 = dr.dot(s, pvec) * inv_det
    v64 = dr.dot(d, qvec) * inv_det
    u, v = Float(u64), Float(v64)
    w = Array3(Work(1 - u64 - v64, u64, v64))
    up = Array3(0, 0, 1)
    geo_n, _ = _normalize(dr.cross(e1, e2), Work(0, 0, 1))
    geo_n = dr.select(hit, Array3(geo_n), 0)
    if flags & RayFlags.Geometric:
        out["p"] = dr.select(hit, Array3(o + t * d), 0)
        out["geo_n"] = geo_n
        out["barycentric"] = dr.select(hit, w, 0)
    if flags & RayFlags.ShadingN:
        if geometry.normals is None:
            out["n"] = geo_n
        else:
            interpolated = _interpolate(Array3, geometry.normals, tri, w)
            if normal_cols is not None:
                interpolated = linear(normal_cols, interpolated)
            shading, ok = _normalize(interpolated, up)
            use = ok & dr.gather(m.Bool, m.Bool(geometry.face_has_normals), winner) & hit
            out["n"] = dr.select(use, shading, geo_n)
    if flags & RayFlags.UV:
        fallback = Array2(u, v)
        if geometry.uv is None:
            uv = fallback
        else:
            has_uv = dr.gather(m.Bool, m.Bool(geometry.face_has_uv), winner)
            uv = dr.select(has_uv, _interpolate(Array2, geometry.uv, tri, w), fallback)
        out["uv"] = dr.select(hit, uv, 0)
    return out


def empty(m: ModuleType, double: bool, flags: RayFlags) -> dict[str, dr.ArrayBase]:
    """The fields of a zero-ray batch (Dr.Jit cannot mix width 0 with literals)."""
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    Array2 = m.Array2f64 if double else m.Array2f
    out = {"t": Float(), "prim_id": m.Int(), "shape_id": m.Int(), "global_prim_id": m.Int()}
    if flags & RayFlags.Geometric:
        out.update(p=Array3(), geo_n=Array3(), barycentric=Array3())
    if flags & RayFlags.ShadingN:
        out["n"] = Array3()
    if flags & RayFlags.UV:
        out["uv"] = Array2()
    return out


def enforce(m: ModuleType, fields: dict[str, dr.ArrayBase], tmin: object, tmax: object) -> dict[str, dr.ArrayBase]:
    """``fields`` with hits outside ``(tmin, tmax)`` (compared exactly, in float64) turned into misses.

    The search bounds candidates by the ``t`` the evaluation computes, from its float32
    snapshot; a float64 or transformed scene is evaluated from other numbers, so a
    winner can fall on the wrong side of a bound by float32 rounding: it becomes a miss.
    """
    t = fields["t"]
    t64 = m.Float64(dr.detach(t))  # float64 holds every float32 exactly: compares the values as given
    ok = (t64 > _bound(m.Float64, tmin)) & (t64 < _bound(m.Float64, tmax))
    out = {}
    for name, value in fields.items():
        if name in ("prim_id", "shape_id", "global_prim_id"):
            out[name] = dr.select(ok, value, -1)
        elif name == "t":
            out[name] = dr.select(ok, value, math.inf)
        else:
            out[name] = dr.select(ok, value, 0)
    return out


def _bound(Float: type, bound: object) -> object:
    """A bound as a number or a non-differentiable ``Float`` array."""
    if isinstance(bound, (int, float)):
        return bound
    return Float(dr.detach(bound))
