"""Specular paths, the backend-neutral part: argument rules, validity, candidates (NumPy only).

Both frontends' ``Scene.specular_paths`` and ``find_specular_paths`` decide *which*
paths exist here, on host float64 copies of their inputs, and keep only the
differentiable evaluation of the image method (in their own ops) for themselves:

- :func:`check_sequences`: a face sequence is well formed (ids in range, ``-1`` padding
  only at the end);
- :func:`validate`: the image method without derivatives (Borish 1984, "Extension of the
  image model to arbitrary polyhedra", JASA 75(6)) and the validity rules of
  DESIGN.md: every reflection point in its closed triangle, every reflection real, every
  segment unblocked (by the frontend's engine search, passed in as a callable);
- :func:`candidate_sequences`, :func:`find_sequences`: shoot-and-bounce candidates
  (``trace_reflections`` from each source, a callable), their deduplication, and the
  valid paths of every (source, target) pair sorted by length and padded.

Search callables take and return NumPy arrays: ``search(o, d, tmin, tmax, active, ignore)``
with ``o, d`` (m, 3) float64, ``tmin, tmax`` (m,) float32, ``active`` (m,) bool,
``ignore`` (m,) int32 ``global_prim_id`` s, returning (m,) int32 closest-hit winners
(-1 for none).
"""

from __future__ import annotations

import importlib
import math
from typing import Callable

import numpy as np

from rayd.core.checks import type_name

#: Largest ``max_bounces`` / sequence length.
MAX_BOUNCES = 16
#: Segments of a specular path are tested on ``s in (EPSILON, 1 - EPSILON)`` of their length.
SEGMENT_EPSILON = 1e-4
#: Closed-triangle test of a reflection point: barycentric weights ``>= -TOLERANCE`` (float64).
TOLERANCE = 1e-9
#: Default number of rays ``find_specular_paths`` launches per source.
NUM_RAYS = 100_000

Search = Callable[..., np.ndarray]


# ---------------------------------------------------------------------- argument rules
def check_bounces(call: str, value: object) -> int:
    """``max_bounces`` as an int in ``[1, 16]``: ``TypeError`` for a non-int, ``ValueError`` out of range."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{call}: 'max_bounces' must be an int in [1, {MAX_BOUNCES}], got {type(value).__name__}")
    if not 1 <= value <= MAX_BOUNCES:
        raise ValueError(f"{call}: 'max_bounces' must be an int in [1, {MAX_BOUNCES}], got {value}")
    return value


def check_num_rays(call: str, value: object) -> int:
    """``num_rays`` as a positive int."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{call}: 'num_rays' must be a positive int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{call}: 'num_rays' must be a positive int, got {value}")
    return value


def check_line_of_sight(call: str, value: object) -> bool:
    """``line_of_sight`` as a bool (a NumPy bool too): ``TypeError`` otherwise (a string is not a flag)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{call}: 'line_of_sight' must be a bool, got {type(value).__name__}")
    return bool(value)


def check_options(call: str, max_bounces: object, num_rays: object, line_of_sight: object) -> tuple[int, int, bool]:
    """``find_specular_paths``' options checked: ``(bounces, num_rays, line_of_sight)``."""
    return check_bounces(call, max_bounces), check_num_rays(call, num_rays), check_line_of_sight(call, line_of_sight)


def check_find_arguments(scene_type: type, scene: object, sources: object, targets: object, max_bounces: object,
                         num_rays: object, line_of_sight: object, check_points: Callable, check_device: Callable):
    """The checks of ``find_specular_paths``, in order.

    Returns ``(sources, targets, bounces, num_rays, line_of_sight)``.

    Args:
        scene_type: the frontend's ``Scene`` (its ``_PREFIX`` names the call:
            ``rayd.torch.find_specular_paths()``).
        check_points: ``check_points(call, name, value)``, the frontend's checked (K, 3)
            float array, else raise.
        check_device: ``check_device(call, name, value, device, owner)``: raise unless ``value``
            is on ``device`` (the scene's; ``owner`` is ``"the scene"``, for the message).

    Raises:
        TypeError: ``scene`` is not a ``scene_type``; and as the checks.
        RuntimeError: the scene is not ready.
    """
    call = f"{scene_type._PREFIX.rsplit('.', 1)[0]}.find_specular_paths()"
    if not isinstance(scene, scene_type):
        raise TypeError(f"{call}: 'scene' must be a {scene_type._PREFIX}, got {type_name(scene)}")
    scene._require_ready(call)
    points = [(name, check_points(call, name, value)) for name, value in (("sources", sources), ("targets", targets))]
    for name, value in points:
        check_device(call, name, value, scene.device, "the scene")
    return (points[0][1], points[1][1]) + check_options(call, max_bounces, num_rays, line_of_sight)


def path_finder(frontend: str, find: Callable, check_points: Callable, check_device: Callable, doc: str,
                array: type, record: type) -> Callable:
    """A frontend's public ``find_specular_paths``: its signature and argument checks, written once.

    The function made runs :func:`check_find_arguments` against ``rayd.<frontend>.Scene``
    (imported at the first call: the scene module imports the frontend's paths module),
    then ``find(scene, sources, targets, bounces, num_rays, line_of_sight)`` on the checked
    values (the frontend's candidate search and evaluation).

    Args:
        frontend: ``"torch"`` or ``"drjit"`` (names the module, the call and the ``Scene``).
        find: the frontend's search and evaluation, returning its ``SpecularPathSet``.
        check_points, check_device: as :func:`check_find_arguments` (``check_device`` is called
            as ``check_device(call, name, value, scene.device, "the scene")``).
        doc: the function's docstring, in the frontend's words.
        array: the frontend's array type, shown in the signature (``torch.Tensor``).
        record: the frontend's ``SpecularPathSet`` (the return annotation). The ``scene``
            annotation names ``"Scene"``; the frontend's package sets it to its ``Scene``
            class once that exists.

    Returns:
        ``find_specular_paths(scene, sources, targets, max_bounces, *, num_rays=NUM_RAYS,
        line_of_sight=True)``, with module ``rayd.<frontend>.paths``.
    """
    def find_specular_paths(scene, sources, targets, max_bounces, *, num_rays=NUM_RAYS, line_of_sight=True):
        scene_type = importlib.import_module(f"rayd.{frontend}.scene").Scene
        return find(scene, *check_find_arguments(scene_type, scene, sources, targets, max_bounces, num_rays,
                                                 line_of_sight, check_points, check_device))

    find_specular_paths.__doc__ = doc
    find_specular_paths.__module__ = f"rayd.{frontend}.paths"
    find_specular_paths.__qualname__ = "find_specular_paths"
    find_specular_paths.__annotations__ = {"scene": "Scene", "sources": array, "targets": array, "max_bounces": int,
                                           "num_rays": int, "line_of_sight": bool, "return": record}
    return find_specular_paths


def length_check(validity, precision: object):
    """The ``check(src, dst, seq) -> (ok, length)`` of :func:`find_sequences` from a frontend's
    ``Scene._host_validity(src, dst, seq, active, precision)``."""
    def check(src, dst, seq):
        ok, _, _, length, points = validity(src, dst, seq, None, precision, with_points=True)
        return ok, length, points
    return check


def check_length(call: str, bounces: int) -> None:
    """``ValueError`` if a sequence is longer than 16 faces."""
    if bounces > MAX_BOUNCES:
        raise ValueError(f"{call}: 'prim_sequence' must have at most {MAX_BOUNCES} faces per path, got {bounces}")


# ---------------------------------------------------------------------- validity
def check_sequences(seq: np.ndarray, num_faces: int, shapes=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which rows of ``seq`` (n, B) are well formed, which slots are used, and the ids to gather.

    Returns ``(ok (n,) bool, used (n, B) bool, ids (n, B) int32)``: a row is well formed
    when every entry is ``-1`` or a ``global_prim_id`` below ``num_faces`` and the ``-1``
    padding comes only at the end; ``used`` marks the non-negative entries, ``ids`` holds
    them where they are in range and ``-1`` elsewhere (the slots the frontend gathers).
    With ``shapes`` (the scene's shapes, numbered), a face of a disabled shape makes its
    row invalid too: a disabled shape is not in the scene, so nothing reflects off it.
    """
    seq = np.asarray(seq, dtype=np.int64)
    used = seq >= 0
    ok = ((seq >= -1) & (seq < num_faces)).all(-1)
    if seq.shape[-1] > 1:
        ok &= (used[:, 1:] <= used[:, :-1]).all(-1)
    ids = np.where(used & (seq < num_faces), seq, -1).astype(np.int32)
    if shapes is not None and not all(shape.enabled for shape in shapes):
        offsets = np.array([shape.face_offset for shape in shapes], dtype=np.int64)
        enabled = np.array([shape.enabled for shape in shapes], dtype=bool)
        owner = np.searchsorted(offsets, ids, side="right") - 1
        ok &= ~((ids >= 0) & ~enabled[np.maximum(owner, 0)]).any(-1)
    return ok, used, ids


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("...i,...i->...", a, b)


def image_points(src: np.ndarray, dst: np.ndarray, corners: np.ndarray,
                 used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The image method in float64 without derivatives, and its own validity.

    Args:
        src, dst: (n, 3) float64 source and target.
        corners: (n, B, 3, 3) float64 world-space vertices of each slot's face.
        used: (n, B) bool, the non-padding slots.

    Returns:
        ``(points (n, B, 3), ok (n,))``: the reflection points (the target in unused
        slots) and whether every used slot has a non-degenerate face, a back-traced point
        strictly between its start and its image, incoming and outgoing points strictly
        on the same side of the plane, and its point in the closed triangle.
    """
    n, bounces = used.shape
    v0 = corners[:, :, 0]
    e1 = corners[:, :, 1] - v0
    e2 = corners[:, :, 2] - v0
    normal = np.cross(e1, e2)
    area = np.sqrt(_dot(normal, normal))
    ok = ((area > 0) | ~used).all(-1)
    normal = normal / np.where(area > 0, area, 1.0)[..., None]
    images, image = [], src
    for k in range(bounces):
        mirrored = image - 2.0 * _dot(image - v0[:, k], normal[:, k])[:, None] * normal[:, k]
        image = np.where(used[:, k:k + 1], mirrored, image)
        images.append(image)
    points = np.empty((n, bounces, 3))
    x = dst
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in reversed(range(bounces)):
            u = used[:, k]
            ray = images[k] - x
            denom = _dot(ray, normal[:, k])
            s = _dot(v0[:, k] - x, normal[:, k]) / np.where(denom != 0, denom, 1.0)
            ok &= ~u | ((denom != 0) & (s > 0) & (s < 1))
            x = np.where(u[:, None], x + s[:, None] * ray, x)
            points[:, k] = x
        chain = [src] + [points[:, k] for k in range(bounces)] + [dst]
        for k in range(bounces):
            before = _dot(chain[k] - v0[:, k], normal[:, k])
            after = _dot(chain[k + 2] - v0[:, k], normal[:, k])
            inside = _inside(chain[k + 1], v0[:, k], e1[:, k], e2[:, k])
            ok &= ~used[:, k] | ((before * after > 0) & inside)
    return points, ok & np.isfinite(points).all((-1, -2))


def _inside(p: np.ndarray, v0: np.ndarray, e1: np.ndarray, e2: np.ndarray) -> np.ndarray:
    """(n,) bool: ``p`` (on the plane) in the closed triangle ``v0, v0 + e1, v0 + e2``."""
    w = p - v0
    d00, d01, d11 = _dot(e1, e1), _dot(e1, e2), _dot(e2, e2)
    d20, d21 = _dot(w, e1), _dot(w, e2)
    den = d00 * d11 - d01 * d01
    den = np.where(den != 0, den, 1.0)
    u = (d11 * d20 - d01 * d21) / den
    v = (d00 * d21 - d01 * d20) / den
    return (u >= -TOLERANCE) & (v >= -TOLERANCE) & (1.0 - u - v >= -TOLERANCE)


def blocked(starts: np.ndarray, ends: np.ndarray, start_face: np.ndarray, end_face: np.ndarray,
            active: np.ndarray, search: Search) -> np.ndarray:
    """(m,) bool: does a face other than the end faces cross a segment's interior?

    A closest-hit search from each end over ``s in (1e-4, 1 - 1e-4)``, skipping that
    end's face: the segment is blocked if either finds a face that is not the other
    end's. Zero-length segments (padding) and inactive ones are not blocked.
    """
    active = active & (starts != ends).any(-1)
    m = starts.shape[0]
    tmin = np.full(m, SEGMENT_EPSILON, dtype=np.float32)
    tmax = np.full(m, 1.0 - SEGMENT_EPSILON, dtype=np.float32)
    forward = search(starts, ends - starts, tmin, tmax, active, start_face.astype(np.int32))
    backward = search(ends, starts - ends, tmin, tmax, active, end_face.astype(np.int32))
    hit = ((forward >= 0) & (forward != end_face)) | ((backward >= 0) & (backward != start_face))
    return hit & active


def validate(src: np.ndarray, dst: np.ndarray, corners: np.ndarray, seq: np.ndarray, ok: np.ndarray,
             used: np.ndarray, search: Search, with_points: bool = False) -> tuple[np.ndarray, ...]:
    """Which specular paths are valid, and their lengths (float64, no derivatives).

    Args:
        src, dst: (n, 3) float64 sources and targets.
        corners: (n, B, 3, 3) float64 world-space vertices of each slot's face (any values
            in unused slots).
        seq: (n, B) int ``global_prim_id`` s (``-1`` padding).
        ok: (n,) bool, the rows that may be valid (well formed, active).
        used: (n, B) bool from :func:`check_sequences`.
        search: the frontend's closest-hit search (see the module docstring).

    Returns:
        ``(valid (n,) bool, length (n,) float64)``, ``length = inf`` where invalid; with
        ``with_points`` also the reflection points ``(n, B, 3)`` (the target in unused slots).
        Concretely, valid iff ``ok``, source and target are finite, :func:`image_points`
        accepts the path and no segment is :func:`blocked`.
    """
    seq = np.asarray(seq, dtype=np.int64)
    n, bounces = seq.shape
    ok = ok & np.isfinite(src).all(-1) & np.isfinite(dst).all(-1)
    src = np.where(ok[:, None], src, 0.0)
    dst = np.where(ok[:, None], dst, 0.0)
    points, fine = image_points(src, dst, np.where(used[..., None, None], corners, 0.0), used)
    ok = ok & fine
    chain = np.concatenate([src[:, None], points, dst[:, None]], axis=1)  # (n, B + 2, 3)
    starts, ends = chain[:, :-1], chain[:, 1:]
    minus = np.full((n, 1), -1, dtype=np.int64)
    ids = np.where(used, seq, -1)
    start_face = np.concatenate([minus, ids], axis=1)
    end_face = np.concatenate([ids, minus], axis=1)
    real = np.arange(bounces + 1)[None, :] <= used.sum(-1)[:, None]
    active = real & ok[:, None]
    hit = blocked(starts.reshape(-1, 3), ends.reshape(-1, 3), start_face.reshape(-1), end_face.reshape(-1),
                  active.reshape(-1), search)
    ok = ok & ~hit.reshape(n, bounces + 1).any(-1)
    segment = np.sqrt(_dot(ends - starts, ends - starts)).sum(-1)
    if with_points:
        return ok, np.where(ok, segment, math.inf), points
    return ok, np.where(ok, segment, math.inf)


# ---------------------------------------------------------------------- candidates
def sphere_directions(count: int) -> np.ndarray:
    """(count, 3) float64 unit directions on a Fibonacci sphere (nearly uniform, deterministic)."""
    i = np.arange(count, dtype=np.float64) + 0.5
    z = 1.0 - 2.0 * i / count
    r = np.sqrt(np.clip(1.0 - z * z, 0.0, None))
    phi = i * (math.pi * (3.0 - math.sqrt(5.0)))
    return np.stack((r * np.cos(phi), r * np.sin(phi), z), axis=-1)


def candidate_sequences(global_prim_id: np.ndarray, num_bounces: np.ndarray, line_of_sight: bool) -> np.ndarray:
    """The distinct face-sequence prefixes of traced chains, padded: (C, B) int64.

    Args:
        global_prim_id: (R, B) int faces of each ray's chain (``-1`` empty slots).
        num_bounces: (R,) int valid slots of each chain.
        line_of_sight: put the all ``-1`` row (order 0) first.

    Every prefix of order ``1..B`` of every chain is a candidate, once.
    """
    seq = np.asarray(global_prim_id, dtype=np.int64)
    bounces = seq.shape[1]
    num = np.asarray(num_bounces)
    out = [np.full((1, bounces), -1, dtype=np.int64)] if line_of_sight else []
    for k in range(1, bounces + 1):
        rows = seq[num >= k, :k]
        if rows.shape[0]:
            rows = np.unique(rows, axis=0)
            out.append(np.concatenate([rows, np.full((rows.shape[0], bounces - k), -1, dtype=np.int64)], axis=1))
    return np.concatenate(out) if out else np.zeros((0, bounces), dtype=np.int64)


def find_sequences(sources: np.ndarray, targets: np.ndarray, max_bounces: int, num_rays: int, line_of_sight: bool,
                   trace: Callable, check: Callable) -> tuple[np.ndarray, np.ndarray]:
    """The valid face sequences of every (source, target) pair, sorted by length and padded.

    Args:
        sources: (S, 3), targets: (T, 3) float64.
        max_bounces, num_rays, line_of_sight: as ``find_specular_paths``.
        trace: ``trace(origin (3,), directions (R, 3), B) -> (global_prim_id (R, B), num_bounces (R,))``,
            the frontend's ``trace_reflections`` on host arrays.
        check: ``check(src (n, 3), dst (n, 3), seq (n, B)) -> (valid (n,), length (n,))``, the frontend's
            :func:`validate` on host arrays.

    Returns:
        ``(sequences (S, T, P, B) int64, used (S, T, P) bool)``, ``P`` the largest count of
        any pair; unused slots hold ``-1`` rows.
    """
    num_s, num_t = sources.shape[0], targets.shape[0]
    directions = sphere_directions(num_rays)
    found: list[list[np.ndarray]] = []
    for s in range(num_s):
        gid, num = trace(sources[s], directions, max_bounces)
        cand = candidate_sequences(gid, num, line_of_sight)
        row = [np.zeros((0, max_bounces), dtype=np.int64)] * num_t
        if cand.shape[0] and num_t:
            row = _valid_per_target(sources[s], targets, cand, check)
        found.append(row)
    count = max([len(x) for row in found for x in row] + [0])
    sequences = np.full((num_s, num_t, count, max_bounces), -1, dtype=np.int64)
    used = np.zeros((num_s, num_t, count), dtype=bool)
    for s in range(num_s):
        for t in range(num_t):
            k = len(found[s][t])
            sequences[s, t, :k] = found[s][t]
            used[s, t, :k] = True
    return sequences, used


#: Candidate rows (target x sequence) :func:`find_sequences` checks per call of ``check``: bounds the host
#: memory of the validity arrays (corners, images, points: about 1.3 kB a row at 16 bounces).
CHECK_ROWS = 65_536


def _valid_per_target(source: np.ndarray, targets: np.ndarray, cand: np.ndarray, check: Callable) -> list:
    """Per target, the valid candidate sequences from ``source``, each physical path once (:func:`_distinct`).

    The (target, candidate) rows are checked in chunks of :data:`CHECK_ROWS`, and only the valid
    rows' lengths and points are kept: all rows at once took about 2 GB of host memory for 10,000
    rays of 16 bounces in a 24-face room, and 100,000 rays (the default) would take about 20 GB
    (helper breakit25, session 25).
    """
    num_t, c = targets.shape[0], cand.shape[0]
    kept_rows, kept_len, kept_pts = [], [], []
    for lo in range(0, num_t * c, CHECK_ROWS):
        rows = np.arange(lo, min(lo + CHECK_ROWS, num_t * c))
        valid, length, points = check(np.broadcast_to(source, (rows.size, 3)), targets[rows // c], cand[rows % c])
        kept_rows.append(rows[valid])
        kept_len.append(length[valid])
        kept_pts.append(points[valid])
    rows, length, points = np.concatenate(kept_rows), np.concatenate(kept_len), np.concatenate(kept_pts)
    target = rows // c
    return [_distinct(cand[rows[target == t] % c], length[target == t], points[target == t]) for t in range(num_t)]


def _distinct(seq: np.ndarray, length: np.ndarray, points: np.ndarray) -> np.ndarray:
    """One pair's valid sequences sorted by length, each physical path once.

    A reflection point exactly on the edge shared by two coplanar faces (a floor or a wall
    made of two triangles) lies in both closed triangles, so the same path is valid once per
    face (found beside Sionna RT, which reports it once). Sequences with the same number of
    bounces, equal lengths and equal reflection points (both within ``1e-9`` relative) are
    one path; the first in (length, sequence) order is kept. The tolerance is relative to the
    path's own size (its length and the magnitude of its points), so the set does not depend on
    the unit the scene is written in (it was ``1e-9 * max(length, 1)``: absolute below a length
    of 1, so a scene 1e-12 in size merged nearly every path of a pair into one; helper breakit25,
    ``tests/torch/test_breakit25_find_paths_scale.py``).
    """
    order = np.lexsort(tuple(seq[:, k] for k in reversed(range(seq.shape[1]))) + (length,))
    seq, length, points = seq[order], length[order], points[order]
    bounces = (seq >= 0).sum(-1)
    keep = np.ones(len(seq), bool)
    for i in range(len(seq)):
        if not keep[i]:
            continue
        b = bounces[i]
        tol = 1e-9 * max(length[i], np.abs(points[i, :b]).max() if b else 0.0)
        j = i + 1
        while j < len(seq) and length[j] - length[i] <= tol:
            if keep[j] and bounces[j] == b:
                gap = np.abs(points[j, :b] - points[i, :b]).max() if b else 0.0
                if gap <= tol:
                    keep[j] = False
            j += 1
    return seq[keep]


def by_length(length: np.ndarray) -> np.ndarray:
    """The permutation (S, T, P) int64 along the last axis that sorts each pair's paths by ``length``.

    Applied by the frontends to their differentiable results, so the order is that of the
    lengths they return (ties, equal up to rounding, keep their order).
    """
    return np.argsort(np.asarray(length), axis=-1, kind="stable")
