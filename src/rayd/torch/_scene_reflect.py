"""Reflection queries of :class:`rayd.torch.Scene`: specular chains and exact specular paths.

``trace_reflections`` finds every chain in one engine launch (``rayd.engine.trace_chain``:
B closest-hit searches per ray, reflected in the kernel, no host work between bounces)
and evaluates all slots for their fixed winners in one differentiable pass
(``_chain.chain``), so gradients flow through the whole chain. ``specular_paths`` is
the image method (e.g. Borish 1984, "Extension of the image model to arbitrary
polyhedra", JASA 75(6)) in float64 torch ops, with the visibility of each segment
decided by engine searches.
"""

from __future__ import annotations

import math
import operator
from types import SimpleNamespace

import torch

import numpy as np

from rayd.core import specular
from rayd.core.docs import scene_annotations
from rayd.flags import RayFlags
from rayd.torch import _chain, _check, _convert, _ops, _trace
from rayd.torch._geometry import gather
from rayd.torch._nearest_edge import _search_rows
from rayd.torch._scene_docs import TYPES
from rayd.torch.ray import Ray
from rayd.torch.reflections import ReflectionChain, SpecularPaths

_PATHS = "rayd.torch.Scene.specular_paths()"


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1, keepdim=True)


#: :class:`rayd.core.specular.ImageOps` on (n, 3) tensors; scalars are (n, 1).
_IMAGE_OPS = SimpleNamespace(dot=_dot, cross=torch.linalg.cross, select=torch.where, sqrt=torch.sqrt,
                             divide=operator.truediv)


def search(scene, o: torch.Tensor, d: torch.Tensor, tmin: torch.Tensor, tmax: torch.Tensor,
           flag: torch.Tensor, skip: torch.Tensor, any_hit: bool,
           call: str = "rayd.torch.Scene.trace_reflections()") -> torch.Tensor:
    """Engine search for flat rays: ``o, d`` (N, 3), ``tmin, tmax`` (N,) float, ``flag`` (N,) bool,
    ``skip`` (N,) int ids; returns (N,) int32 winners (-1 none). Launched on the current stream."""
    n = o.shape[0]
    if n == 0:
        return torch.empty(n, dtype=torch.int32, device=scene._device)
    rows = _search_rows(o, o.shape[:-1], scene._state.centre)  # float32, relative to the search centre
    f32 = [rows] + [_convert.primal(x).to(torch.float32).contiguous() for x in (d, tmin, tmax)]
    return _ops.ray_search(scene, call, *f32,
                           _convert.primal(flag).to(torch.uint8).contiguous(),
                           _convert.primal(skip).to(torch.int32).contiguous(), n, any_hit)


# The hooks of rayd.core.specular.ReflectionQueries (bound through rayd.torch._parts.reflections):
# trace_reflections and specular_paths after the checks written there, the argument checks of
# specular_paths and the host arrays of the shared validity rules.
def trace_reflections(scene, call: str, ray, bounces: int, active, ignore) -> ReflectionChain:
    # float64 chains: segment 0's float32 search bound widened above tmax (the chain decides on the
    # float64 t, as intersect does); was: a hit at t with tmax = t (1 + 1e-12) missed
    batch, n, rows, ray = _trace.prepare(scene, call, ray, active, ignore, widen="tmax")
    dtype = scene._output_dtype(ray.o, ray.d)
    if n == 0:
        out = _empty_chain(bounces, dtype, scene._device)
    else:
        origin = ray.o.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
        direction = ray.d.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
        out = _chain.chain(scene, call, rows, n, bounces, origin, direction, ray.tmin, ray.tmax, batch, dtype)
    out = {k: v.reshape(tuple(batch) + v.shape[1:]) for k, v in out.items()}
    return ReflectionChain(**out)


def path_points(scene, call: str, name: str, value) -> tuple[torch.Tensor, torch.Size]:
    value = _check.float_tensor(call, name, value, last=3)
    _check.same_device(call, name, value, scene._device, "the scene")
    return value, value.shape[:-1]


def path_sequences(scene, call: str, prim_sequence) -> tuple[torch.Tensor, torch.Size, int]:
    seq = _check.index_tensor(call, "prim_sequence", prim_sequence)
    if seq.dim() < 1:
        raise ValueError(f"{call}: 'prim_sequence' must have shape (..., B), got a 0-d tensor")
    _check.same_device(call, "prim_sequence", seq, scene._device, "the scene")
    return seq, seq.shape[:-1], seq.shape[-1]


def path_active(scene, call: str, active) -> tuple[torch.Tensor, torch.Size]:
    active = _check.tensor(call, "active", active)
    if active.dtype != torch.bool:
        raise TypeError(f"{call}: 'active' must have dtype bool, got {active.dtype}")
    _check.same_device(call, "active", active, scene._device, "the scene")
    return active, active.shape


def specular_paths(scene, call: str, source, target, seq, active, batch: torch.Size) -> SpecularPaths:
    device, bounces = scene._device, seq.shape[-1]
    n = batch.numel()
    dtype = scene._output_dtype(source, target)
    src = source.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3).double()
    dst = target.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3).double()
    seq = _convert.primal(seq).expand(tuple(batch) + (bounces,)).reshape(n, bounces).to(torch.int64)
    if active is None:
        prior = torch.ones(1, dtype=torch.bool, device=device)
    else:
        prior = _convert.primal(active).expand(batch).reshape(n)
    # one read back: the validity is decided on the host (rayd.core.paths), in the rayd::path_validity op
    ok, used, ids = _ops.path_validity(scene, call, src, dst, seq, prior, n, dtype)
    corners = _corners(scene, ids, dtype)
    points, length = _image_method(src, dst, corners, used)
    length = torch.where(ok, length, math.inf).to(dtype)
    pts = torch.where((used & ok.unsqueeze(-1)).unsqueeze(-1), points, 0.0).to(dtype)
    return SpecularPaths(points=pts.reshape(tuple(batch) + (bounces, 3)),
                         num_bounces=used.sum(-1).to(torch.int32).reshape(batch), length=length.reshape(batch),
                         valid=ok.reshape(batch))


# ------------------------------------------------------------------ face corners; host arrays of the validity rules
def _corners(scene, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(n, B, 3, 3) float64 world-space corners of the faces ``ids`` (n, B) (differentiable)."""
    n, bounces = ids.shape
    geometry = gather(scene._state.table, scene._state.live(dtype), ids.reshape(-1))
    return geometry.corners.double().reshape(n, bounces, 3, 3)


def host_points(scene, x: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    return x  # already in the output dtype (rayd::path_validity)


def host_corners(scene, ids: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    with _convert.outside_transforms(), torch.no_grad():
        corners = _corners(scene, torch.from_numpy(ids).to(scene._device), dtype)
        return _convert.primal(corners).cpu().numpy()


def host_search(scene, dtype: torch.dtype, o, d, tmin, tmax, flag, skip):
    """The closest-hit search on host (NumPy) rays, for :mod:`rayd.core.paths`: the engine's
    float32 winners for float32 paths; for float64 paths ``intersect``'s, decided on the float64
    ``t`` (a face the float32 search rounds into ``(tmin, tmax)``, such as one a segment's end
    lies on at a grazing angle, does not win)."""
    device = scene._device
    with _convert.outside_transforms():
        t = [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in (o, d, tmin, tmax, flag, skip)]
        if dtype != torch.float64:
            return search(scene, *t, False, _PATHS).cpu().numpy()
        o, d, tmin, tmax, flag, skip = t
        ray = Ray(o, d, tmax.to(torch.float64), tmin=tmin.to(torch.float64))
        with torch.no_grad():
            hit = scene._intersect(_PATHS, ray, flag.to(torch.bool), RayFlags.Minimal, skip.to(torch.int32))
        return hit.global_prim_id.reshape(-1).cpu().numpy()


def _image_method(src: torch.Tensor, dst: torch.Tensor, corners: torch.Tensor, used: torch.Tensor):
    """Reflection points (n, B, 3) and total length (n,) by :func:`rayd.core.specular.image_method`.

    ``src, dst`` (n, 3) and ``corners`` (n, B, 3, 3) float64, ``used`` (n, B) bool; unused
    slots hold the target (zero-length segments).
    """
    n, bounces = used.shape
    slots = [(corners[:, k, 0], corners[:, k, 1], corners[:, k, 2]) for k in range(bounces)]
    points, length = specular.image_method(_IMAGE_OPS, src, dst, slots, [used[:, k:k + 1] for k in range(bounces)])
    pts = torch.stack(points, dim=1) if bounces else torch.zeros((n, 0, 3), dtype=src.dtype, device=src.device)
    return pts, length.squeeze(-1)


def _empty_chain(bounces: int, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    """The fields of a chain of zero rays (:data:`rayd.core.specular.CHAIN_FIELDS`)."""
    shapes = {"slot": (0, bounces), "slot3": (0, bounces, 3), "slot_id": (0, bounces), "ray_count": (0,), "ray": (0,)}
    return {name: torch.empty(shapes[kind], dtype=torch.int32 if kind in ("slot_id", "ray_count") else dtype,
                              device=device)
            for name, kind in specular.CHAIN_FIELDS.items()}


#: The docstrings of the :class:`rayd.core.specular.ReflectionQueries` methods on :class:`rayd.torch.Scene`
#: (bound by :class:`rayd.core.docs.FrontendDocs` when the Scene class is made).
DOCS = {
    "trace_reflections": """The specular chain of each ray: up to ``max_bounces`` closest hits, mirror-reflected.

    Segment 0 is ``ray`` with its own ``tmin``, ``tmax`` and ``ignore``. After a hit at
    ``p_b`` on a face with unit geometric normal ``g_b``, the next direction is
    ``d_{b+1} = d_b - 2 (d_b . g_b) g_b`` (same length as ``d_b``) and the next segment
    starts at ``p_b`` with ``tmin = 0``, ``tmax = inf``, skipping the face it leaves.
    The chain ends at the first miss; later slots are empty.

    Args:
        ray: :class:`rayd.torch.Ray`, ``o``, ``d`` of shape (..., 3) on the scene's device.
        max_bounces: ``B``, an int in ``[1, 16]``.
        active: optional bool tensor broadcastable to ``...``; inactive rays get empty chains.
        ignore: optional ``global_prim_id`` per ray for segment 0 (-1 for none).

    Returns:
        :class:`rayd.torch.ReflectionChain` with slot fields ``[..., B]`` / ``[..., B, 3]``.

    Units:
        ``t`` in multiples of ``|d|`` (each reflected direction keeps ``d``'s length);
        ``p``, ``image_source`` and ``path_length`` in world units.

    Gradients:
        ``t, p, geo_n, d_out, image_source, path_length`` are differentiable (reverse
        and forward mode) with respect to vertices, transforms, ``ray.o`` and ``ray.d``,
        for the fixed chain of faces.

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

    Image method: the source is mirrored across the planes of the faces in order
    (``I_k = I_{k-1} - 2 ((I_{k-1} - v0_k) . n_k) n_k``, ``I_{-1} = source``), then the
    path is traced back from ``target`` through ``I_{B-1}, ..., I_0``.

    A path is valid iff every reflection point lies in its closed triangle
    (barycentric weights ``>= -1e-9``, in float64), every reflection is real (the
    incoming and outgoing points lie strictly on the same side of the face plane,
    and each back-traced point lies strictly between its start and its image),
    every segment is unblocked (no face other than the faces at its ends crosses
    ``s in (1e-4, 1 - 1e-4)`` of it, by closest-hit searches from both ends that
    skip the end's own face; float64 paths decide on the float64 ``t``, as
    :meth:`intersect`), the sequence is well formed (ids in range, ``-1``
    padding only at the end) and source and target are finite. These rules are
    :func:`rayd.core.paths.validate`'s (shared with rayd.drjit), applied to host float64
    copies of the inputs: the call reads them back once (a synchronisation on CUDA).

    Args:
        source: (..., 3) float32/float64 points on the scene's device.
        target: (..., 3) float32/float64, broadcastable against ``source``.
        prim_sequence: (..., B) integer ``global_prim_id`` s, ``0 <= B <= 16``; ``-1``
            pads the end. ``B = 0`` or all ``-1`` is the line-of-sight path.
        active: optional bool tensor broadcastable to ``...``; inactive paths are invalid.

    Returns:
        :class:`rayd.torch.SpecularPaths`: ``points (..., B, 3)``, ``num_bounces``,
        ``length`` (``+inf`` invalid), ``valid``.

    Units:
        ``points`` and ``length`` in world units.

    Gradients:
        ``points`` and ``length`` with respect to ``source``, ``target``, vertices and
        transforms (reverse and forward mode), for the fixed sequence.

    Raises:
        TypeError: non-float points, a non-integer ``prim_sequence``, non-bool ``active``.
        ValueError: wrong shapes, ``B > 16``, inputs on another device.
        RuntimeError: the scene is not built or has pending changes.

    References:
        Allen, Berkley 1979, "Image Method for Efficiently Simulating Small-Room
        Acoustics", JASA 65(4).
    """,
}

ANNOTATIONS = scene_annotations(TYPES, DOCS)
