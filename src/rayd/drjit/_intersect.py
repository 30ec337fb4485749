"""Differentiable evaluation of closest hits for a fixed winner (Dr.Jit ops).

The engine's search kernel picks the winning triangle per ray; this module gathers
the winners' live (differentiable) geometry with ``dr.gather`` and hands it to
:func:`rayd.core.hits.evaluate`, which recomputes ``t, u, v`` by Moeller & Trumbore
(1997, "Fast, Minimum Storage Ray/Triangle Intersection", JGT 2(1)) and derives
``p, geo_n, n, barycentric, uv`` with the Dr.Jit ops of :mod:`rayd.drjit._vector`
(one formula for both frontends). Dr.Jit's AD carries gradients back to the vertices
(``dr.backward``) or forward from them (``dr.forward``); misses are evaluated on a
stand-in triangle and masked out with ``dr.select``: zero gradient, never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import drjit as dr

from rayd.core import hits
from rayd.drjit import _vector
from rayd.drjit._geometry import linear, place
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
    transform: per-shape world transform columns (width S ``Array3f64``, ``M_mesh`` or
        ``M_instance @ M_mesh``, float64 whatever the vertices' type:
        :func:`rayd.drjit._geometry.place`), or ``None`` when every shape is in world space.
    normal_transform: per-shape ``inv(L)^T`` columns (``Array3f64``), or ``None``.
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


def _interpolate(kind: type, values: dr.ArrayBase, tri: dr.ArrayBase, w: dr.ArrayBase) -> dr.ArrayBase:
    """``w0 a[i0] + w1 a[i1] + w2 a[i2]`` for per-vertex attributes ``values``."""
    a0, a1, a2 = (dr.gather(kind, values, i) for i in (tri.x, tri.y, tri.z))
    return w.x * a0 + w.y * a1 + w.z * a2


def locate(m: ModuleType, Array3: type, global_prim_id: dr.ArrayBase, geometry: LiveGeometry) -> tuple:
    """Where the faces of (N,) ``Int`` ``global_prim_id`` (-1 = none) are, and their world corners.

    Returns ``(gid, hit, shape, prim, winner, tri, (v0, v1, v2))``: ``hit`` where
    ``gid >= 0``, the shape, the face within its mesh, its row in the face table, its
    vertex ids and its world-space corners as ``Array3f64`` (face 0's where not ``hit``),
    placed in float64 from the ``Array3`` vertices (:func:`rayd.drjit._geometry.place`;
    the caller rounds its outputs once). Differentiable in the vertices and transforms.
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
    corners = place(geometry.transform, shape, *(dr.gather(Array3, geometry.vertices, i) for i in tri))
    return gid, hit, shape, prim, winner, tri, corners


def evaluate(
    m: ModuleType,
    double: bool,
    o: dr.ArrayBase,
    d: dr.ArrayBase,
    global_prim_id: dr.ArrayBase,
    geometry: LiveGeometry,
    flags: RayFlags,
    face: tuple[float, float, float] | None = None,
) -> dict[str, dr.ArrayBase]:
    """Intersection fields for rays (N, 3) and their winners (N,) ``Int`` (-1 = miss).

    ``m`` is the Dr.Jit namespace of the outputs (e.g. ``drjit.llvm.ad``), ``double``
    selects float64. ``o``, ``d`` and ``geometry`` arrays are of that float type.
    ``face``: the search centre where a winner whose crossing lies off its face is a miss
    (:func:`rayd.core.hits.off_face`; float64 queries, :func:`rayd.core.hits.face_frame`).
    Returns a dict of width-N arrays named as the fields of
    :class:`rayd.drjit.Intersection`.
    """
    Array3 = m.Array3f64 if double else m.Array3f
    Array2 = m.Array2f64 if double else m.Array2f
    Work = m.Array3f64
    gid, hit, shape, prim, winner, tri, corners = locate(m, Array3, global_prim_id, geometry)
    normal_cols = None
    if geometry.transform is not None and geometry.normal_transform is not None:
        normal_cols = tuple(dr.gather(Work, c, shape) for c in geometry.normal_transform)
    # The solve runs in float64 even for float32 inputs (differentiably cast back):
    # grazing hits are ill-conditioned, and float32 rounding (with or without FMA
    # contraction) would otherwise make CPU, CUDA and rayd.torch disagree.
    ids = {"prim_id": prim, "shape_id": m.Int(shape), "global_prim_id": gid}

    def normals(w: dr.ArrayBase) -> tuple[dr.ArrayBase, dr.ArrayBase]:
        interpolated = _interpolate(Array3, geometry.normals, tri, w)
        if normal_cols is not None:  # mapped in float64 (the columns' type), rounded once
            interpolated = Array3(linear(normal_cols, Work(interpolated)))
        return interpolated, dr.gather(m.Bool, m.Bool(geometry.face_has_normals), winner)

    def uv(w: dr.ArrayBase) -> tuple[dr.ArrayBase, dr.ArrayBase]:
        return _interpolate(Array2, geometry.uv, tri, w), dr.gather(m.Bool, m.Bool(geometry.face_has_uv), winner)

    def cast(x: dr.ArrayBase) -> dr.ArrayBase:
        return x if double else dr.float32_array_t(type(x))(x)

    return hits.evaluate(_vector, flags, hit, Work(o), Work(d), corners, ids, cast,
                         None if geometry.normals is None else normals, None if geometry.uv is None else uv, face)


def empty(m: ModuleType, double: bool, flags: RayFlags) -> dict[str, dr.ArrayBase]:
    """The fields of a zero-ray batch (Dr.Jit cannot mix width 0 with literals)."""
    Float = m.Float64 if double else m.Float
    Array3 = m.Array3f64 if double else m.Array3f
    Array2 = m.Array2f64 if double else m.Array2f
    kinds = {"t": Float, "p": Array3, "geo_n": Array3, "barycentric": Array3, "n": Array3, "uv": Array2}
    return {name: kinds.get(name, m.Int)() for name in hits.field_names(flags)}


def enforce(m: ModuleType, fields: dict[str, dr.ArrayBase], tmin: object, tmax: object) -> dict[str, dr.ArrayBase]:
    """``fields`` with hits outside ``(tmin, tmax)`` (compared exactly, in float64) turned into misses.

    The search bounds candidates by the ``t`` the evaluation computes, from its float32
    snapshot; a float64 or transformed scene is evaluated from other numbers, so a
    winner can fall on the wrong side of a bound by float32 rounding: it becomes a miss.
    """
    t64 = m.Float64(dr.detach(fields["t"]))  # float64 holds every float32 exactly: compares the values as given
    ok = (t64 > _bound(m.Float64, tmin)) & (t64 < _bound(m.Float64, tmax))
    return hits.as_misses(fields, ok, dr.select)


def _bound(Float: type, bound: object) -> object:
    """A bound as a number or a non-differentiable ``Float`` array."""
    return bound if isinstance(bound, (int, float)) else Float(dr.detach(bound))
