"""Surface queries of rayd.torch: closest point, winding number, inside test, signed distance.

The engine (:mod:`rayd.engine.closest_point`) picks the closest triangle per point
(float32 BVH search); this module recomputes the closest point on that triangle from
the live (differentiable) vertex and transform tensors with torch ops, in float64
(Ericson 2004, "Real-Time Collision Detection", 5.1.5: the Voronoi region of the
query decides which formula applies; the region is a discrete choice held fixed,
the formula is differentiated). Queries without a winner are evaluated on a
stand-in and masked: zero gradient, never NaN.

The winding number is the exact sum of signed solid angles (Van Oosterom, Strackee
1983) over the enabled triangles, ``O(F)`` per point: an engine kernel when no
gradient is needed, else the same sum in torch (chunked over points).
"""

from __future__ import annotations

import math

import torch

from rayd.records import FieldRecord
from rayd.torch import _convert, _ops
from rayd.torch._geometry import gather
from rayd.torch._live import differentiable
from rayd.torch._nearest_edge import _check_active, _check_points, _search_rows, check_max_distance
from rayd.torch.edges import placed_vertices
from rayd.torch.intersection import TorchRecord


class ClosestPoint(TorchRecord, FieldRecord):
    """The closest point on the scene's enabled triangles per query point.

    Attributes (``...`` is the query batch shape):
        distance: (...) float, Euclidean distance from the query point to ``p``;
            ``+inf`` where no triangle lies within ``max_distance``.
        p: (..., 3) the closest point on the winning triangle; 0 if none.
        barycentric: (..., 3) weights ``(w0, w1, w2)`` of the face's vertices,
            ``p = w0 v0 + w1 v1 + w2 v2``; 0 if none.
        geo_n: (..., 3) unit geometric normal ``normalize((v1 - v0) x (v2 - v0))`` in
            world space; 0 if none (or for a zero-area face).
        prim_id: (...) int32 face index within its mesh; -1 if none.
        shape_id: (...) int32 mesh id; -1 if none.
        global_prim_id: (...) int32 scene-wide face id; -1 if none.

    Float fields have the promoted dtype of the points and the scene's vertices and
    are differentiable for the fixed winning triangle (DESIGN.md). Never NaN.
    Supports ``detach()``, ``to(device)`` and indexing of the batch dims.
    """

    __slots__ = ()
    _name = "rayd.torch.ClosestPoint"

    def is_valid(self) -> torch.Tensor:
        """(...) bool: True where a triangle was found."""
        return self._fields["global_prim_id"] >= 0

    @property
    def shape(self) -> torch.Size:
        """The query batch shape ``...``."""
        return self._fields["distance"].shape


def _dtype(points: torch.Tensor, scene) -> torch.dtype:
    dtype = points.dtype
    for shape in scene._core.table.meshes:
        dtype = torch.promote_types(dtype, shape.vertices.dtype)
    return dtype


def _refuse_instances(call: str, scene) -> None:
    if scene._core.accel.instances is not None:
        raise RuntimeError(f"{call}: scenes with instances are not supported yet (the winding number sums "
                           f"mesh faces only); add the instanced geometry as meshes instead")


def _prepare(scene, call: str, points: object, active: object, instances: bool = False):
    scene._require_ready(call)
    if not instances:
        _refuse_instances(call, scene)
    device = scene._device
    points = _check_points(call, points, device)
    batch, flag = _check_active(call, points.shape[:-1], "points", active, device)
    return points, batch, flag


def _safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    ok = den > 0
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(num))


def closest_on_triangles(p: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """(N, 3) barycentric weights of the closest points of triangles ``abc`` to ``p`` (all (N, 3)).

    Ericson 2004, 5.1.5: the Voronoi region (three vertices, three edges, the face) is
    chosen with the same tests as the engine's search, then the region's formula is
    evaluated with torch ops (differentiable for the fixed region).
    """
    ab, ac, ap = b - a, c - a, p - a
    bp, cp = p - b, p - c
    dot = lambda x, y: (x * y).sum(-1)  # noqa: E731
    d1, d2 = dot(ab, ap), dot(ac, ap)
    d3, d4 = dot(ab, bp), dot(ac, bp)
    d5, d6 = dot(ab, cp), dot(ac, cp)
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4
    with torch.no_grad():
        r_a = (d1 <= 0) & (d2 <= 0)
        r_b = (d3 >= 0) & (d4 <= d3)
        r_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
        r_c = (d6 >= 0) & (d5 <= d6)
        r_ac = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
        r_bc = (va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0)
        # first matching test wins, as in the engine's cascade
        r_b = r_b & ~r_a
        r_ab = r_ab & ~(r_a | r_b)
        r_c = r_c & ~(r_a | r_b | r_ab)
        r_ac = r_ac & ~(r_a | r_b | r_ab | r_c)
        r_bc = r_bc & ~(r_a | r_b | r_ab | r_c | r_ac)
        r_face = ~(r_a | r_b | r_ab | r_c | r_ac | r_bc)
    zero = torch.zeros_like(d1)
    one = torch.ones_like(d1)
    t_ab = _safe_div(d1, d1 - d3)
    t_ac = _safe_div(d2, d2 - d6)
    t_bc = _safe_div(d4 - d3, (d4 - d3) + (d5 - d6))
    den = va + vb + vc
    v, w = _safe_div(vb, den), _safe_div(vc, den)
    options = [
        (r_a, (one, zero, zero)),
        (r_b, (zero, one, zero)),
        (r_ab, (1 - t_ab, t_ab, zero)),
        (r_c, (zero, zero, one)),
        (r_ac, (1 - t_ac, zero, t_ac)),
        (r_bc, (zero, 1 - t_bc, t_bc)),
    ]
    w0, w1, w2 = 1 - v - w, v, w
    face_degenerate = r_face & ~(den > 0)  # the engine returns vertex a there
    w0 = torch.where(face_degenerate, one, w0)
    w1 = torch.where(face_degenerate, zero, w1)
    w2 = torch.where(face_degenerate, zero, w2)
    for mask, (x0, x1, x2) in reversed(options):
        w0, w1, w2 = torch.where(mask, x0, w0), torch.where(mask, x1, w1), torch.where(mask, x2, w2)
    return torch.stack((w0, w1, w2), -1)


def _safe_norm(x: torch.Tensor) -> torch.Tensor:
    """|x| over the last dim with gradient 0 (not NaN) where it is 0."""
    sq = (x * x).sum(-1)
    ok = sq > 0
    return torch.where(ok, torch.sqrt(torch.where(ok, sq, torch.ones_like(sq))), torch.zeros_like(sq))


def closest_point(scene, points: object, active: object, max_distance: object,
                  call: str = "rayd.torch.Scene.closest_point()") -> ClosestPoint:
    """``Scene.closest_point``: see its docstring."""
    points, batch, flag = _prepare(scene, call, points, active, instances=True)
    max_distance = check_max_distance(call, max_distance)
    device = scene._device
    state = scene._state
    n = batch.numel()
    winner = _ops.closest_point_search(scene, call, _search_rows(points, batch, state.centre), flag, max_distance, n)
    dtype = _dtype(points, scene)
    geometry = gather(state.table, state.live(dtype), winner)
    corners = geometry.corners.to(torch.float64)
    q = points.to(torch.float64).expand(tuple(batch) + (3,)).reshape(n, 3)
    hit = geometry.hit
    a, b, c = corners[:, 0], corners[:, 1], corners[:, 2]
    bary = closest_on_triangles(torch.where(hit[:, None], q, a), a, b, c)
    p = bary[:, 0:1] * a + bary[:, 1:2] * b + bary[:, 2:3] * c
    distance = _safe_norm(torch.where(hit[:, None], q - p, torch.zeros_like(p)))
    normal = torch.linalg.cross(b - a, c - a)
    length = _safe_norm(normal)
    geo_n = normal / torch.where(length > 0, length, torch.ones_like(length))[:, None]
    keep = hit[:, None]
    fields = {
        "distance": torch.where(hit, distance, torch.full_like(distance, math.inf)).to(dtype),
        "p": torch.where(keep, p, torch.zeros_like(p)).to(dtype),
        "barycentric": torch.where(keep, bary, torch.zeros_like(bary)).to(dtype),
        "geo_n": torch.where(keep, geo_n, torch.zeros_like(geo_n)).to(dtype),
        "prim_id": geometry.prim_id,
        "shape_id": geometry.shape_id,
        "global_prim_id": winner,
    }
    return ClosestPoint(**{k: v.reshape(tuple(batch) + v.shape[1:]) for k, v in fields.items()})


#: Points per chunk of the differentiable (torch) winding-number sum.
_CHUNK_ELEMENTS = 1 << 22


def winding_number(scene, points: object, active: object, call: str = "rayd.torch.Scene.winding_number()",
                   grad: bool = True) -> torch.Tensor:
    """``Scene.winding_number``: see its docstring (``grad=False``: the engine kernel whatever needs gradients)."""
    points, batch, flag = _prepare(scene, call, points, active)
    device = scene._device
    core = scene._core
    n = batch.numel()
    dtype = _dtype(points, scene)
    num_faces = core.table.num_flat_faces
    meshes = core.table.meshes
    if grad and (differentiable(points)
                 or any(differentiable(s.vertices) or differentiable(s.to_world) for s in meshes)):
        vertices = placed_vertices(meshes, torch.float64)
        faces = scene._state.table.faces
        if not all(s.enabled for s in meshes):  # (all enabled: no data-dependent shape, as torch.compile wants)
            enabled = torch.as_tensor([s.enabled for s in meshes], device=device)
            counts = torch.as_tensor([s.num_faces for s in meshes], device=device)
            face_on = torch.repeat_interleave(enabled, counts)
            faces = faces[face_on]
        tri = vertices[faces]  # (F, 3, 3)
        q = points.to(torch.float64).expand(tuple(batch) + (3,)).reshape(n, 3)
        step = max(1, _CHUNK_ELEMENTS // max(1, faces.shape[0]))
        parts = [_solid_angle_sum(q[i:i + step], tri) for i in range(0, n, step)]
        total = torch.cat(parts) if parts else q.new_zeros(0)
        result = total / (4.0 * math.pi)
        on = flag.bool().expand(n) if flag.numel() == 1 else flag.bool()
        result = torch.where(on & torch.isfinite(q).all(-1), result, torch.zeros_like(result))
        return result.to(dtype).reshape(batch)
    out = _ops.winding_number(scene, call, _search_rows(points, batch, scene._state.centre), flag, n)
    return out.to(dtype).reshape(batch)


def _solid_angle_sum(q: torch.Tensor, tri: torch.Tensor) -> torch.Tensor:
    """(M,) sum over triangles ``tri`` (F, 3, 3) of their signed solid angles seen from ``q`` (M, 3)."""
    x = tri[None, :, 0] - q[:, None]
    y = tri[None, :, 1] - q[:, None]
    z = tri[None, :, 2] - q[:, None]
    lx, ly, lz = x.norm(dim=-1), y.norm(dim=-1), z.norm(dim=-1)
    num = (x * torch.linalg.cross(y, z)).sum(-1)
    den = lx * ly * lz + (x * y).sum(-1) * lz + (y * z).sum(-1) * lx + (z * x).sum(-1) * ly
    return (2.0 * torch.atan2(num, den)).sum(-1)


def contains(scene, points: object, active: object) -> torch.Tensor:
    """``Scene.contains``: see its docstring."""
    call = "rayd.torch.Scene.contains()"
    with torch.no_grad():
        w = winding_number(scene, _convert.primal(points) if isinstance(points, torch.Tensor) else points, active,
                           call, grad=False)
    return w > 0.5


def signed_distance(scene, points: object, active: object) -> torch.Tensor:
    """``Scene.signed_distance``: see its docstring."""
    call = "rayd.torch.Scene.signed_distance()"
    scene._require_ready(call)
    _refuse_instances(call, scene)
    points = _check_points(call, points, scene._device)
    inside = contains(scene, points, active)
    near = closest_point(scene, points, active, math.inf, call)
    return torch.where(inside, -near.distance, near.distance)
