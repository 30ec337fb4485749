"""Specular paths, the part the frontends share in their own array ops: the image method.

:mod:`rayd.core.paths` decides *which* paths are valid on host float64 copies; the
frontends then evaluate the chosen paths differentiably (``Scene.specular_paths``).
That evaluation is one computation, written once here over a small namespace of array
ops each frontend hands in (:class:`ImageOps`), so that torch tensors and Dr.Jit arrays
run the same steps and gradients flow through the frontend's own autodiff.

The bounce loop of ``trace_reflections`` (:func:`bounce_chain`: the reflection law, the
interval of each segment, the end of a chain at its first miss) is written once the same way.

Also here: :class:`ReflectionQueries`, the scene methods with the host-side validity of paths (well-formed
sequences, then :func:`rayd.core.paths.validate`) from the corners the frontend gathers,
and :data:`CHAIN_FIELDS`, the fields of a ``ReflectionChain`` and their kinds.

References:
    Borish 1984, "Extension of the image model to arbitrary polyhedra", JASA 75(6).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Protocol

import numpy as np

from rayd.core import hits, paths
from rayd.core.docs import FrontendDocs

#: The fields of a ``ReflectionChain`` by kind: ``slot`` fields hold one value per bounce
#: (float; ``slot3``: a 3-vector; ``slot_id``: an int32 id), ``ray`` fields one per ray
#: (``ray_count``: int32; ``ray``: float). The frontends build their records (and the
#: empty record of zero rays) from this table.
CHAIN_FIELDS: dict[str, str] = {
    "t": "slot", "p": "slot3", "geo_n": "slot3", "d_out": "slot3", "image_source": "slot3",
    "prim_id": "slot_id", "shape_id": "slot_id", "global_prim_id": "slot_id",
    "num_bounces": "ray_count", "path_length": "ray",
}


class ImageOps(Protocol):
    """The array ops :func:`image_method` needs, on a frontend's batches of 3-vectors.

    A "vector" is a batch of 3-vectors (torch: ``(n, 3)``; Dr.Jit: ``Array3f64`` of
    width n), a "scalar" a batch of numbers that multiplies a vector (torch: ``(n, 1)``;
    Dr.Jit: ``Float64``). ``+``, ``-``, ``*`` by a scalar or a number, and comparisons
    are the arrays' own operators.
    """

    def dot(self, a: Any, b: Any) -> Any:
        """The scalar ``a . b`` of each pair of vectors."""

    def cross(self, a: Any, b: Any) -> Any:
        """The vector ``a x b``."""

    def select(self, mask: Any, a: Any, b: Any) -> Any:
        """``a`` where ``mask``, else ``b`` (either may be a number)."""

    def sqrt(self, x: Any) -> Any:
        """The square root of a scalar."""

    def divide(self, a: Any, b: Any) -> Any:
        """``a / b`` for a vector or scalar ``a`` and a scalar ``b`` (never 0 here)."""


def safe_norm(ops: ImageOps, x: Any) -> Any:
    """``|x|`` of each vector: 0 with zero gradient where ``x = 0`` (never NaN)."""
    sq = ops.dot(x, x)
    ok = sq > 0
    return ops.select(ok, ops.sqrt(ops.select(ok, sq, 1.0)), 0.0)


def image_method(ops: ImageOps, src: Any, dst: Any, corners: list[tuple[Any, Any, Any]],
                 use: list[Any]) -> tuple[list[Any], Any]:
    """Reflection points and total length of paths by the image method, in the frontend's ops.

    Args:
        ops: the frontend's :class:`ImageOps`.
        src, dst: the sources and targets (vectors, float64).
        corners: per slot ``k``, the world corners ``(v0, v1, v2)`` (vectors) of face ``k``
            of each path.
        use: per slot, the mask (a scalar-shaped bool) of the paths that use it (padding
            slots are unused).

    Returns:
        ``(points, length)``: per slot the reflection points (vectors), and the total
        length (a scalar). Concretely ``I_k = I_{k-1} - 2 ((I_{k-1} - v0_k) . n_k) n_k``
        (``I_{-1} = src``, unit face normals ``n_k``), then back from ``dst`` through
        ``I_{B-1}, ..., I_0``: ``x_k`` is where the line from ``x_{k+1}`` to ``I_k`` meets
        plane ``k``. Unused slots hold the point after them (the target for padding:
        zero-length segments). Degenerate cases (zero-area faces, lines parallel to a
        plane) give finite values; validity is decided by :func:`rayd.core.paths.validate`.
    """
    bounces = len(corners)
    src, dst = finite_rows(ops, ops.select, src, dst)
    planes = []
    for v0, v1, v2 in corners:
        normal = ops.cross(v1 - v0, v2 - v0)
        area = safe_norm(ops, normal)
        planes.append((v0, ops.divide(normal, ops.select(area > 0, area, 1.0))))
    images, image = [], src
    for (v0, normal), u in zip(planes, use):
        image = ops.select(u, image - 2.0 * ops.dot(image - v0, normal) * normal, image)
        images.append(image)
    points, x = [None] * bounces, dst
    for k in reversed(range(bounces)):
        v0, normal = planes[k]
        ray = images[k] - x
        denom = ops.dot(ray, normal)
        nonzero = denom != 0
        s = ops.divide(ops.dot(v0 - x, normal), ops.select(nonzero, denom, 1.0))
        x = ops.select(use[k] & nonzero, x + s * ray, x)
        points[k] = x
    chain = [src] + points + [dst]
    length = safe_norm(ops, chain[1] - chain[0])
    for a, b in zip(chain[1:-1], chain[2:]):
        length = length + safe_norm(ops, b - a)
    return points, length


def finite_rows(ops: Any, select: Callable[[Any, Any, Any], Any], a: Any, b: Any) -> tuple[Any, Any]:
    """``(a, b)`` with every row where either holds NaN or inf set to zero in both.

    Malformed rays (``o`` or ``d``) and paths (``source`` or ``target``) are misses and
    invalid paths (DESIGN.md); their search finds nothing, but the differentiable
    evaluation still runs on their rows, where ``0 * inf`` (``path_length = sum(t) |d|``
    with no hit) or an adjoint through ``inf`` gives NaN values and NaN derivatives even
    under a mask. On the zero stand-in every formula is finite, so such rows report their
    documented empty values with derivative 0.

    Args:
        ops: the frontend's ops (``dot``).
        select: ``select(mask, vector, number)`` of the frontend, a per-row mask over
            vectors (``ops.select`` of :class:`ImageOps`, ``where3`` of the chain's ops).
        a, b: vectors (float64 rows).
    """
    ok = (ops.dot(a, a) < math.inf) & (ops.dot(b, b) < math.inf)  # False for a NaN too
    return select(ok, a, 0.0), select(ok, b, 0.0)


def slot_planes(ops: Any, v0: Any, v1: Any, v2: Any, hit: Any) -> tuple[Any, Any, Any, Any]:
    """The plane of every slot's winning face, for :func:`bounce_chain` (float64, the frontend's ops).

    Args:
        ops: as for :func:`bounce_chain`, plus ``cross(a, b)``, ``where(mask, a, b)``,
            ``rsqrt(x)`` (a correctly rounded ``1 / sqrt``) and ``scale(x, v)`` (``x v``).
        v0, v1, v2: the world corners of each slot's face (vectors).
        hit: whether the slot has a winner (scalar-shaped bool).

    Returns:
        ``(normal, unit, offset, ok)``: ``normal = (v1 - v0) x (v2 - v0)``, the plane
        ``x . normal = offset`` (``offset = v0 . normal``), the reported unit normal
        ``g = normal / |normal|`` (rounded as the record reports it; ``normal`` itself
        where the face is degenerate) and ``ok`` (a hit on a face of non-zero area).
    """
    normal = ops.cross(v1 - v0, v2 - v0)
    sq = ops.dot(normal, normal)
    plane = sq > 0
    unit = ops.reported(ops.scale(ops.rsqrt(ops.where(plane, sq, 1.0)), normal))
    return normal, unit, ops.dot(v0, normal), hit & plane


def bounce_chain(ops: Any, bounces: int, slot: Callable[[int], tuple], o: Any, d: Any, first_bounds: tuple,
                 emit: Callable[..., None], counted: Callable[[int], Any] | None = None,
                 corners: Callable[[int], tuple] | None = None, face: tuple[float, float, float] | None = None) -> None:
    """The sequential solve of specular chains for their fixed winners, in the frontend's ops.

    Segment ``b`` starts at ``o_b`` (``o_0`` the ray origin) with direction ``d_b`` and is
    solved against the plane of slot ``b``'s winner: ``t_b = (offset_b - o_b . n_b) / (d_b . n_b)``.
    The slot counts iff its winner counts, the segment is not parallel to the plane and
    ``t_b`` (compared as the frontend reports it) lies in the segment's open interval:
    ``first_bounds`` = ``(tmin, tmax)`` for segment 0, ``(0, inf)`` after it; once a slot
    does not count, the later ones are empty (``t = 0`` there). Then
    ``p_b = o_b + t_b d_b``, ``d_{b+1} = d_b - 2 (d_b . g_b) g_b`` and the image source
    ``I_b = I_{b-1} - 2 ((I_{b-1} - p_b) . g_b) g_b`` (``I_{-1} = o_0``), each rounded as
    the record reports it, the next segment starting from the rounded values (as
    ``intersect`` from the reported ``p``, ``d_out``).

    Args:
        ops: the frontend's ops on float64 vectors and scalars: ``dot(a, b)``,
            ``select(mask, a, b)``, ``divide(a, b)``, ``madd(x, a, y, scale)`` (``x + scale a y``,
            ``a`` a scalar), ``compared(t)`` (``t`` detached, in the output precision) and
            ``reported(x)`` (``x`` rounded to the output precision, back in float64).
        bounces: ``B``.
        slot: ``slot(b) -> (normal, unit, offset, ok)``: slot ``b``'s plane of each ray
            (``x . normal = offset``), its reported unit normal ``g_b``, and whether its
            winner counts (a hit on a non-degenerate plane).
        o, d: the rays' origins and directions (float64 vectors).
        first_bounds: ``(tmin, tmax)`` of segment 0, as ``compared(t)`` is compared.
        emit: ``emit(b, t, valid, p, geo_n, d_out, image_source)``, called once per slot.
        counted: optional ``counted(b)``: which rays' slot ``b`` counts, decided elsewhere
            (a fused forward's decision, replayed by its backward) instead of here.
        corners, face: for float64 chains (whose search saw the float32 snapshot of the scene),
            ``corners(b) -> (v0, v1, v2)`` (slot ``b``'s world corners, float64) and the search
            centre (:func:`rayd.core.hits.face_frame`): a slot whose segment crosses its face's
            plane off the face (:func:`rayd.core.hits.off_face`) does not count, and the chain
            ends there. ``None``: no such check (float32 chains: the search made it).
    """
    image = o
    valid = None
    for b in range(bounces):
        normal, unit, offset, ok = slot(b)
        den = ops.dot(d, normal)
        facing = den != 0
        t = ops.divide(offset - ops.dot(o, normal), ops.select(facing, den, 1.0))
        lo, hi = first_bounds if b == 0 else (0.0, math.inf)
        td = ops.compared(t)
        inside = ok & facing & (td > lo) & (td < hi)
        if face is not None:
            v012 = corners(b)
            u, v = hits.crossing_weights(ops, o, d, v012)
            inside = inside & ~hits.dropped_off_face(ops, inside, o, v012, normal, u, v, face)
        valid = inside if valid is None else valid & inside
        if counted is not None:
            valid = counted(b)
        t = ops.select(valid, t, 0.0)
        p = ops.madd(o, t, d, 1.0)
        d = ops.madd(d, ops.dot(d, unit), unit, -2.0)
        image = ops.madd(image, ops.dot(image - p, unit), unit, -2.0)
        p, d, image = ops.reported(p), ops.reported(d), ops.reported(image)
        emit(b, t, valid, p, unit, d, image)
        o = p


class ReflectionQueries(FrontendDocs):
    """``trace_reflections`` and ``specular_paths`` of a frontend's ``Scene`` (a mixin over
    :class:`rayd.core.frontend.SceneBase`), and the validity of specular paths given as host arrays.

    The frontend documents the two methods in its own words, in ``rayd.<frontend>._scene_reflect.DOCS``
    (:class:`rayd.core.docs.FrontendDocs`).
    Hook: ``_REFLECT``, the frontend's module ``_parts.reflections`` (bound by
    :class:`rayd.core.frontend.SceneBase`, as the edge, surface and all-hits query modules),
    of functions of the scene: ``trace_reflections(scene, call, ray, bounces, active,
    ignore)``, the chains with ``bounces`` already checked; ``path_points``,
    ``path_sequences``, ``path_active``, the checks of :meth:`_path_arguments`;
    ``specular_paths(scene, call, source, target, seq, active, batch)``, the paths of a ready
    scene for checked arguments; ``host_points(scene, x, precision)``, the (n, 3) float64
    points as the frontend evaluates them in ``precision`` (its dtype, or whether it is
    double); ``host_corners(scene, ids, precision)``, the (n, B, 3, 3) float64 world corners
    of the faces ``ids`` (n, B) (:func:`rayd.core.paths.check_sequences`' ids, ``-1`` in the
    slots not to gather, where any values do); ``host_search(scene, precision, o, d, tmin, tmax,
    flag, skip)``, its host closest-hit search (:mod:`rayd.core.paths`; float64 paths decide on
    the float64 ``t``, as ``intersect`` does).
    """

    _PREFIX = "rayd.Scene"
    _DOCS_MODULE = "_scene_reflect"
    _REFLECT: Any = None  # bound from the frontend's ``_parts.reflections`` (rayd.core.frontend)

    def trace_reflections(self, ray, max_bounces: int, active=None, *, ignore=None):
        call = f"{self._PREFIX}.trace_reflections()"
        return self._REFLECT.trace_reflections(self, call, ray, paths.check_bounces(call, max_bounces), active, ignore)

    def specular_paths(self, source, target, prim_sequence, active=None):
        call = f"{self._PREFIX}.specular_paths()"
        self._require_ready(call)
        source, target, seq, active, batch = self._path_arguments(call, source, target, prim_sequence, active)
        return self._REFLECT.specular_paths(self, call, source, target, seq, active, batch)

    def _path_arguments(self, call: str, source, target, prim_sequence, active) -> tuple:
        """``specular_paths``' argument checks, in the contract's order, through the frontend's hooks.

        ``source`` and ``target`` (the frontend's ``path_points``: float points on the
        scene's device), ``prim_sequence`` (``path_sequences``: integer, at least one
        slot, then :func:`rayd.core.paths.check_length`), ``active`` (``path_active``:
        bool, on the scene's device), then the common batch (the frontend's ``Ray._broadcast`` rule).

        Returns:
            ``(source, target, seq, active, batch)``: the checked arrays (``seq`` as the
            frontend holds it, ``active`` ``None`` if not given) and the batch the
            frontend's ``Ray._broadcast`` returns (a shape or a width).

        Raises:
            TypeError, ValueError: naming ``call`` and the argument (the frontend's
                ``specular_paths`` docstring lists them).
        """
        reflect = self._REFLECT
        source, source_batch = reflect.path_points(self, call, "source", source)
        target, target_batch = reflect.path_points(self, call, "target", target)
        seq, seq_batch, bounces = reflect.path_sequences(self, call, prim_sequence)
        paths.check_length(call, bounces)
        batches = [("source", source_batch), ("target", target_batch), ("prim_sequence", seq_batch)]
        if active is not None:
            active, active_batch = reflect.path_active(self, call, active)
            batches.append(("active", active_batch))
        return source, target, seq, active, self._PARTS.Ray._broadcast(call, batches)

    def _host_validity(self, src: np.ndarray, dst: np.ndarray, seq: np.ndarray, prior: np.ndarray | None,
                       precision: Any, with_points: bool = False) -> tuple[np.ndarray, ...]:
        """``(ok, used, ids, length[, points])`` of paths, NumPy: :func:`rayd.core.paths.validate`'s rules.

        Args:
            src, dst: (n, 3) float64 sources and targets.
            seq: (n, B) int face sequences (``global_prim_id`` s, ``-1`` padding at the end).
            prior: (n,) bool paths that may be valid at all (``active``), or ``None``.
            precision: the frontend's output precision (handed to its hooks).
            with_points: also return the reflection points (n, B, 3).

        Returns:
            ``ok`` (n,) bool, ``used`` (n, B) bool (non-padding slots), ``ids`` (n, B)
            int32 (the ids gathered), ``length`` (n,) float64[, ``points``].
        """
        reflect = self._REFLECT
        src, dst = reflect.host_points(self, src, precision), reflect.host_points(self, dst, precision)
        ok, used, ids = paths.check_sequences(seq, self._core.table.num_global_faces, self._core.table.shapes)
        if prior is not None:
            ok &= prior
        out = paths.validate(src, dst, reflect.host_corners(self, ids, precision), seq, ok, used,
                             functools.partial(reflect.host_search, self, precision), with_points)
        return (out[0], used, ids) + tuple(out[1:])
