"""Reflection queries of :class:`rayd.torch.Scene`: specular chains and exact specular paths.

``trace_reflections`` runs one engine search per bounce (the next rays are built on the
device from the previous winners, no host synchronisation) and evaluates every bounce
for its fixed winner with the differentiable torch ops of ``intersect``
(``_geometry.gather`` + ``_intersect.evaluate``), so gradients flow through the whole
chain. ``specular_paths`` is the image method (e.g. Borish 1984, "Extension of the
image model to arbitrary polyhedra", JASA 75(6)) in float64 torch ops, with the
visibility of each segment decided by engine searches.
"""

from __future__ import annotations

import math

import torch

from rayd.flags import RayFlags
from rayd.torch import _check, _convert, _interval, _intersect_fused, _ops, _trace
from rayd.torch._geometry import gather, ids
from rayd.torch._intersect import evaluate
from rayd.torch.reflections import ReflectionChain, SpecularPaths

#: Largest ``max_bounces`` / sequence length.
MAX_BOUNCES = 16
#: Segments of a specular path are tested on ``s in (EPSILON, 1 - EPSILON)`` of their length.
SEGMENT_EPSILON = 1e-4
#: Closed-triangle test of a reflection point: barycentric weights ``>= -TOLERANCE`` (float64).
TOLERANCE = 1e-9
_PATHS = "rayd.torch.Scene.specular_paths()"


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1, keepdim=True)


def _safe_norm(x: torch.Tensor) -> torch.Tensor:
    """``|x|`` over the last dim (kept), 0 with zero gradient where ``x = 0`` (never NaN)."""
    sq = _dot(x, x)
    ok = sq > 0
    return torch.where(ok, torch.sqrt(torch.where(ok, sq, torch.ones_like(sq))), torch.zeros_like(sq))


def search(scene, o: torch.Tensor, d: torch.Tensor, tmin: torch.Tensor, tmax: torch.Tensor,
           flag: torch.Tensor, skip: torch.Tensor, any_hit: bool,
           call: str = "rayd.torch.Scene.trace_reflections()") -> torch.Tensor:
    """Engine search for flat rays: ``o, d`` (N, 3), ``tmin, tmax`` (N,) float, ``flag`` (N,) bool,
    ``skip`` (N,) int ids; returns (N,) int32 winners (-1 none). Launched on the current stream."""
    n = o.shape[0]
    if n == 0:
        return torch.empty(n, dtype=torch.int32, device=scene._device)
    o = _convert.primal(o)
    centre = scene._state.centre
    if centre is not None:
        o = o.to(torch.float64) - centre
    f32 = [_convert.primal(x).to(torch.float32).contiguous() for x in (o, d, tmin, tmax)]
    return _ops.ray_search(scene, call, *f32,
                           _convert.primal(flag).to(torch.uint8).contiguous(),
                           _convert.primal(skip).to(torch.int32).contiguous(), n, any_hit)


class ReflectionQueries:
    """Mixin of :class:`rayd.torch.Scene`: ``trace_reflections`` and ``specular_paths``."""

    def trace_reflections(self, ray, max_bounces: int, active: torch.Tensor | None = None, *,
                          ignore: torch.Tensor | int | None = None) -> ReflectionChain:
        """The specular chain of each ray: up to ``max_bounces`` closest hits, mirror-reflected.

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

        Gradients:
            ``t, p, geo_n, d_out, image_source, path_length`` are differentiable (reverse
            and forward mode) with respect to vertices, transforms, ``ray.o`` and ``ray.d``,
            for the fixed chain of faces.

        Raises:
            TypeError: ``max_bounces`` is not an int; and as :meth:`intersect`.
            ValueError: ``max_bounces`` outside ``[1, 16]``; and as :meth:`intersect`.
            RuntimeError: as :meth:`intersect`.
        """
        call = "rayd.torch.Scene.trace_reflections()"
        bounces = _bounces(call, max_bounces)
        batch, n, winner, ray = _trace.trace(self, call, ray, active, ignore, any_hit=False)
        dtype = self._output_dtype(ray)
        state = self._state
        device = self._device
        meshes = [sh.vertices for sh in self._core.table.meshes]
        fused = (state.plain and not state.has_matrix()
                 and _intersect_fused.usable([ray.o, ray.d, *meshes]))
        if fused:  # the fused Warp evaluation of intersect (float32, no transforms, reverse mode)
            vertices = meshes[0] if len(meshes) == 1 else torch.cat(meshes)
        else:
            live = state.live(dtype)
        origin = ray.o.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
        direction = ray.d.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3)
        length = _safe_norm(direction).squeeze(-1)
        image = origin
        zeros = torch.zeros(n, dtype=torch.float32, device=device)
        inf = torch.full((n,), math.inf, dtype=torch.float32, device=device)
        slots = []
        for b in range(bounces):
            if b > 0:
                winner = search(self, origin, direction, zeros, inf, hit, slots[-1]["global_prim_id"], False)
            if fused:
                fields = _intersect_fused.evaluate_fused(origin, direction, torch.Size((n,)), winner, vertices,
                                                         state.indices)
                fields["shape_id"], fields["prim_id"] = ids(state.table, winner)
                fields["global_prim_id"] = winner
            else:
                fields = evaluate(origin, direction, winner, gather(state.table, live, winner), RayFlags.Geometric)
            if b == 0:
                fields = _interval.enforce(fields, ray.tmin, ray.tmax, batch)
            else:
                fields = _interval.enforce(fields, 0.0, math.inf, batch)
            hit = fields["global_prim_id"] >= 0
            hit3 = hit.unsqueeze(-1)
            g = fields["geo_n"]
            p = fields["p"]
            d_out = torch.where(hit3, direction - 2.0 * _dot(direction, g) * g, 0.0)
            image = torch.where(hit3, image - 2.0 * _dot(image - p, g) * g, 0.0)
            slots.append({"t": fields["t"], "p": p, "geo_n": g, "d_out": d_out, "image_source": image,
                          "prim_id": fields["prim_id"], "shape_id": fields["shape_id"],
                          "global_prim_id": fields["global_prim_id"]})
            origin, direction = p, d_out
        out = {name: torch.stack([s[name] for s in slots], dim=1) for name in slots[0]}
        valid = out["global_prim_id"] >= 0
        out["num_bounces"] = valid.sum(-1).to(torch.int32)
        out["path_length"] = torch.where(valid, out["t"], 0.0).sum(-1) * length
        out = {k: v.reshape(tuple(batch) + v.shape[1:]) for k, v in out.items()}
        return ReflectionChain(**out)

    def specular_paths(self, source: torch.Tensor, target: torch.Tensor, prim_sequence: torch.Tensor,
                       active: torch.Tensor | None = None) -> SpecularPaths:
        """The exact specular path from ``source`` to ``target`` off the faces ``prim_sequence``.

        Image method: the source is mirrored across the planes of the faces in order
        (``I_k = I_{k-1} - 2 ((I_{k-1} - v0_k) . n_k) n_k``, ``I_{-1} = source``), then the
        path is traced back from ``target`` through ``I_{B-1}, ..., I_0``.

        A path is valid iff every reflection point lies in its closed triangle
        (barycentric weights ``>= -1e-9``, in float64), every reflection is real (the
        incoming and outgoing points lie strictly on the same side of the face plane,
        and each back-traced point lies strictly between its start and its image),
        every segment is unblocked (no face other than the faces at its ends crosses
        ``s in (1e-4, 1 - 1e-4)`` of it, by closest-hit searches from both ends that
        skip the end's own face), the sequence is well formed (ids in range, ``-1``
        padding only at the end) and source and target are finite.

        Args:
            source: (..., 3) float32/float64 points on the scene's device.
            target: (..., 3) float32/float64, broadcastable against ``source``.
            prim_sequence: (..., B) integer ``global_prim_id`` s, ``0 <= B <= 16``; ``-1``
                pads the end. ``B = 0`` or all ``-1`` is the line-of-sight path.
            active: optional bool tensor broadcastable to ``...``; inactive paths are invalid.

        Returns:
            :class:`rayd.torch.SpecularPaths`: ``points (..., B, 3)``, ``num_bounces``,
            ``length`` (``+inf`` invalid), ``valid``.

        Gradients:
            ``points`` and ``length`` with respect to ``source``, ``target``, vertices and
            transforms (reverse and forward mode), for the fixed sequence.

        Raises:
            TypeError: non-float points, a non-integer ``prim_sequence``, non-bool ``active``.
            ValueError: wrong shapes, ``B > 16``, inputs on another device.
            RuntimeError: the scene is not built or has pending changes.
        """
        call = "rayd.torch.Scene.specular_paths()"
        self._require_ready(call)
        device = self._device
        source = _check.float_tensor(call, "source", source, last=3)
        target = _check.float_tensor(call, "target", target, last=3)
        seq = _check.index_tensor(call, "prim_sequence", prim_sequence)
        if seq.dim() < 1:
            raise ValueError(f"{call}: 'prim_sequence' must have shape (..., B), got a 0-d tensor")
        bounces = seq.shape[-1]
        if bounces > MAX_BOUNCES:
            raise ValueError(f"{call}: 'prim_sequence' must have at most {MAX_BOUNCES} faces per path, got {bounces}")
        shapes = [("source", source.shape[:-1]), ("target", target.shape[:-1]), ("prim_sequence", seq.shape[:-1])]
        for name, value in (("source", source), ("target", target), ("prim_sequence", seq)):
            _check.same_device(call, name, value, device, "the scene")
        if active is not None:
            active = _check.tensor(call, "active", active)
            if active.dtype != torch.bool:
                raise TypeError(f"{call}: 'active' must have dtype bool, got {active.dtype}")
            _check.same_device(call, "active", active, device, "the scene")
            shapes.append(("active", active.shape))
        batch = _check.broadcast(call, shapes)
        n = batch.numel()
        dtype = self._output_dtype_points(source, target)
        src = source.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3).double()
        dst = target.to(dtype).expand(tuple(batch) + (3,)).reshape(n, 3).double()
        seq = _convert.primal(seq).expand(tuple(batch) + (bounces,)).reshape(n, bounces).long()
        ok = torch.isfinite(src).all(-1) & torch.isfinite(dst).all(-1)
        if active is not None:
            ok = ok & _convert.primal(active).expand(batch).reshape(n)
        used = seq >= 0
        ok = ok & ((seq >= -1) & (seq < self._core.table.num_global_faces)).all(-1)
        if bounces > 1:
            ok = ok & (used[:, 1:] <= used[:, :-1]).all(-1)
        ids = torch.where(used & (seq < self._core.table.num_global_faces), seq, -1).to(torch.int32)
        geometry = gather(self._state.table, self._state.live(dtype), ids.reshape(-1))
        corners = geometry.corners.double().reshape(n, bounces, 3, 3)
        v0, e1, e2 = corners[:, :, 0], corners[:, :, 1] - corners[:, :, 0], corners[:, :, 2] - corners[:, :, 0]
        normal = torch.linalg.cross(e1, e2)
        area = _safe_norm(normal)
        ok = ok & ((area.squeeze(-1) > 0) | ~used).all(-1)
        normal = normal / torch.where(area > 0, area, torch.ones_like(area))
        images, image = [], src
        for k in range(bounces):
            u3 = used[:, k:k + 1]
            image = torch.where(u3, image - 2.0 * _dot(image - v0[:, k], normal[:, k]) * normal[:, k], image)
            images.append(image)
        points, x = [None] * bounces, dst
        for k in reversed(range(bounces)):
            u = used[:, k]
            ray = images[k] - x
            denom = _dot(ray, normal[:, k])
            nonzero = denom != 0
            s = _dot(v0[:, k] - x, normal[:, k]) / torch.where(nonzero, denom, torch.ones_like(denom))
            s1 = s.squeeze(-1)
            ok = ok & (~u | (nonzero.squeeze(-1) & (s1 > 0) & (s1 < 1)))
            x = torch.where(u.unsqueeze(-1), x + s * ray, x)
            points[k] = x
        chain = [src] + points + [dst]  # unused slots hold the target: zero-length segments
        for k in range(bounces):
            u = used[:, k]
            before = _dot(chain[k] - v0[:, k], normal[:, k]).squeeze(-1)
            after = _dot(chain[k + 2] - v0[:, k], normal[:, k]).squeeze(-1)
            inside = _inside(chain[k + 1], v0[:, k], e1[:, k], e2[:, k])
            ok = ok & (~u | ((before * after > 0) & inside))
        starts = torch.stack(chain[:-1], dim=1)  # (n, B + 1, 3)
        ends = torch.stack(chain[1:], dim=1)
        minus = torch.full((n, 1), -1, dtype=torch.long, device=device)
        start_face = torch.cat([minus, seq.clamp(min=-1)], dim=1)
        end_face = torch.cat([seq.clamp(min=-1), minus], dim=1)
        num = used.sum(-1)
        real = torch.arange(bounces + 1, device=device).unsqueeze(0) <= num.unsqueeze(-1)
        ok = ok & ~self._blocked(starts, ends, start_face, end_face, real & ok.unsqueeze(-1)).any(-1)
        segment = _safe_norm(ends - starts).squeeze(-1)
        length = torch.where(ok, segment.sum(-1), math.inf).to(dtype)
        if bounces:
            pts = torch.stack(points, dim=1)
            pts = torch.where((used & ok.unsqueeze(-1)).unsqueeze(-1), pts, 0.0).to(dtype)
        else:
            pts = torch.zeros((n, 0, 3), dtype=dtype, device=device)
        return SpecularPaths(points=pts.reshape(tuple(batch) + (bounces, 3)),
                             num_bounces=num.to(torch.int32).reshape(batch), length=length.reshape(batch),
                             valid=ok.reshape(batch))

    # ------------------------------------------------------------------ internals
    def _output_dtype_points(self, *points: torch.Tensor) -> torch.dtype:
        dtype = torch.promote_types(points[0].dtype, points[1].dtype)
        for shape in self._core.table.meshes:
            dtype = torch.promote_types(dtype, shape.vertices.dtype)
        return dtype

    def _blocked(self, starts, ends, start_face, end_face, active) -> torch.Tensor:
        """(n, m) bool: is a face other than the end faces crossing the segment's interior?

        A closest-hit search from each end that skips that end's face: the segment is
        blocked if either finds a face that is not the other end's.
        """
        shape = active.shape
        a = _convert.primal(starts).reshape(-1, 3)
        b = _convert.primal(ends).reshape(-1, 3)
        fa, fb, act = start_face.reshape(-1), end_face.reshape(-1), active.reshape(-1)
        act = act & (a != b).any(-1)
        m = a.shape[0]
        tmin = torch.full((m,), SEGMENT_EPSILON, dtype=torch.float32, device=a.device)
        tmax = torch.full((m,), 1.0 - SEGMENT_EPSILON, dtype=torch.float32, device=a.device)
        forward = search(self, a, b - a, tmin, tmax, act, fa, False, _PATHS)
        backward = search(self, b, a - b, tmin, tmax, act, fb, False, _PATHS)
        blocked = ((forward >= 0) & (forward != fb)) | ((backward >= 0) & (backward != fa))
        return (blocked & act).reshape(shape)


def _inside(p, v0, e1, e2) -> torch.Tensor:
    """(n,) bool: ``p`` (on the plane) in the closed triangle ``v0, v0 + e1, v0 + e2`` (float64)."""
    w = p - v0
    d00, d01, d11 = _dot(e1, e1), _dot(e1, e2), _dot(e2, e2)
    d20, d21 = _dot(w, e1), _dot(w, e2)
    den = d00 * d11 - d01 * d01
    den = torch.where(den != 0, den, torch.ones_like(den))
    u = (d11 * d20 - d01 * d21) / den
    v = (d00 * d21 - d01 * d20) / den
    u, v = u.squeeze(-1), v.squeeze(-1)
    return (u >= -TOLERANCE) & (v >= -TOLERANCE) & (1.0 - u - v >= -TOLERANCE)


def _bounces(call: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np
            if isinstance(value, np.integer):
                value = int(value)
        except ImportError:  # pragma: no cover
            pass
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{call}: 'max_bounces' must be an int in [1, {MAX_BOUNCES}], got {type(value).__name__}")
    if not 1 <= value <= MAX_BOUNCES:
        raise ValueError(f"{call}: 'max_bounces' must be an int in [1, {MAX_BOUNCES}], got {value}")
    return value
