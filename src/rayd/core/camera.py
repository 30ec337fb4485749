"""Backend-neutral pinhole-camera and edge-sampling arithmetic (NumPy float64, no autograd).

Shared by rayd.torch and rayd.drjit: the frontends evaluate the differentiable parts
(projection of the live vertices at a fixed edge parameter) with their own ops and
use this module for the discrete choices of :meth:`Camera.sample_edges`: which edge
pieces are on screen, how long they are in the image, where the samples go and which
way each edge's normal points.

Camera convention (OpenCV): camera space x right, y down, z forward; a camera-space
point ``P = (X, Y, Z)`` with ``Z > 0`` lands on the pixel coordinates
``(fx X / Z + cx, fy Y / Z + cy)``; pixel ``(i, j)`` covers ``[i, i+1) x [j, j+1)``,
its centre is ``(i + 0.5, j + 0.5)``.

References:
    Hartley and Zisserman 2004, "Multiple View Geometry in Computer Vision", ch. 6
    (pinhole model), sec. 2.2 (lines as cross products of homogeneous points);
    Liang and Barsky 1984, "A New Concept and Method for Line Clipping", ACM TOG 3(1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Camera-space depth below which edge points are clipped away (the near plane), relative
#: to the largest depth of the edge's end points: a segment crossing ``Z = 0`` has an
#: unbounded image, so only its part with ``Z > NEAR_RELATIVE * max(Z_a, Z_b)`` is sampled.
NEAR_RELATIVE = 1e-6

#: The offset of ``ray_inside`` / ``ray_outside`` from the sample point, in pixels, along
#: the edge's image-space normal (DESIGN.md allows at most 0.01 pixel).
EDGE_OFFSET = 0.005


def check_intrinsics(call: str, fx, fy, cx, cy, fov_y=None) -> None:
    """``ValueError`` naming ``call`` unless the focal lengths are positive and every value finite.

    The frontends call it on the host values of their intrinsics (numbers, or NumPy
    copies of tensors / width-1 arrays; a ``torch.func.vmap`` batch of them is checked
    element by element) at ``Camera()`` and again in ``sample_edges``, which reads them
    anyway (a tensor may have changed in place since).
    """
    def first(value, bad) -> object:
        values = np.asarray(value, dtype=np.float64).reshape(-1)
        found = values[bad(values)]
        return found[0] if found.size else None

    if fov_y is not None:
        value = first(fov_y, lambda v: ~((v > 0.0) & (v < 180.0)))
        if value is not None:
            raise ValueError(f"{call}: 'fov_y' must be in (0, 180) degrees, got {value}")
    for name, value in (("fx", fx), ("fy", fy), ("cx", cx), ("cy", cy)):
        value = first(value, lambda v: ~np.isfinite(v))
        if value is not None:
            raise ValueError(f"{call}: '{name}' must be finite, got {value}")
    for name, value in (("fx", fx), ("fy", fy)):
        value = first(value, lambda v: ~(v > 0))
        if value is not None:
            raise ValueError(f"{call}: '{name}' must be positive, got {value}")


def fov_to_focal(fov_y_degrees: float, height: int) -> float:
    """``fy = (height / 2) / tan(fov_y / 2)`` for a vertical field of view in degrees."""
    return 0.5 * height / math.tan(math.radians(fov_y_degrees) / 2.0)


def clip_to_image(
    a: np.ndarray, b: np.ndarray, intrinsics: tuple[float, float, float, float], width: int, height: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clip camera-space segments to the near plane and their images to the image rectangle.

    Args:
        a, b: (E, 3) float64 camera-space end points of each segment.
        intrinsics: ``(fx, fy, cx, cy)``.
        width, height: the image size in pixels.

    Returns:
        ``(t0, t1, xy0, xy1)``: the clipped piece is ``a + t (b - a), t in [t0, t1]``
        (``0 <= t0 <= t1 <= 1``; ``t0 = t1 = 0`` for segments entirely off screen or
        behind the camera), with images ``xy0, xy1`` (E, 2) of its two ends. The image
        length of the piece is ``|xy1 - xy0|``. Concretely: first the part with depth
        above ``NEAR_RELATIVE * max(Z_a, Z_b)`` (a straight segment in the image), then
        Liang–Barsky clipping of that image segment to ``[0, width] x [0, height]``; the
        image parameter is mapped back to ``t`` perspective-correctly
        (:func:`image_to_edge_param`).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    e = a.shape[0]
    za, zb = a[:, 2], b[:, 2]
    near = NEAR_RELATIVE * np.maximum(np.maximum(za, zb), 0.0)
    ok = np.maximum(za, zb) > 0
    dz = zb - za
    with np.errstate(divide="ignore", invalid="ignore"):
        t_cross = np.where(dz != 0, (near - za) / dz, 0.0)
    t0 = np.where(za >= near, 0.0, t_cross)
    t1 = np.where(zb >= near, 1.0, t_cross)
    t0, t1 = np.clip(t0, 0.0, 1.0), np.clip(t1, 0.0, 1.0)
    ok &= t1 > t0
    pa = a + t0[:, None] * (b - a)
    pb = a + t1[:, None] * (b - a)
    xa, xb = project(pa, intrinsics), project(pb, intrinsics)
    xa = np.where(ok[:, None], xa, 0.0)
    xb = np.where(ok[:, None], xb, 0.0)
    # Liang–Barsky on xa + s (xb - xa), s in [0, 1].
    s0, s1 = np.zeros(e), np.ones(e)
    delta = xb - xa
    for axis, size in ((0, width), (1, height)):
        for p, q in ((-delta[:, axis], xa[:, axis]), (delta[:, axis], size - xa[:, axis])):
            with np.errstate(divide="ignore", invalid="ignore"):
                r = q / p
            parallel = p == 0
            ok &= ~(parallel & (q < 0))
            s0 = np.where(~parallel & (p < 0), np.maximum(s0, r), s0)
            s1 = np.where(~parallel & (p > 0), np.minimum(s1, r), s1)
    ok &= s1 > s0
    u0 = image_to_edge_param(s0, pa[:, 2], pb[:, 2])
    u1 = image_to_edge_param(s1, pa[:, 2], pb[:, 2])
    c0 = np.where(ok, t0 + u0 * (t1 - t0), 0.0)
    c1 = np.where(ok, t0 + u1 * (t1 - t0), 0.0)
    xy0 = np.where(ok[:, None], xa + s0[:, None] * delta, 0.0)
    xy1 = np.where(ok[:, None], xa + s1[:, None] * delta, 0.0)
    return c0, c1, xy0, xy1


def project(points: np.ndarray, intrinsics: tuple[float, float, float, float]) -> np.ndarray:
    """(N, 2) pixel coordinates of (N, 3) camera-space points (``Z > 0`` assumed)."""
    fx, fy, cx, cy = intrinsics
    z = points[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.stack((fx * points[:, 0] / z + cx, fy * points[:, 1] / z + cy), axis=-1)


def image_to_edge_param(s: np.ndarray, z0: np.ndarray, z1: np.ndarray) -> np.ndarray:
    """The segment parameter ``t`` whose point projects at image fraction ``s`` between the end points.

    For the camera-space segment ``p0 + t (p1 - p0)`` with depths ``z0, z1 > 0``, the
    image point ``(1 - s) x(p0) + s x(p1)`` is the projection of the point with
    ``t = s z0 / ((1 - s) z1 + s z0)`` (inverse depth is linear in the image).
    """
    den = (1.0 - s) * z1 + s * z0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(den > 0, s * z0 / den, s)
    return np.clip(t, 0.0, 1.0)


def stratified_positions(lengths: np.ndarray, jitter: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Place ``N = len(jitter)`` samples on segments, uniformly in total length, one per stratum.

    Args:
        lengths: (E,) float64 image lengths of the pieces (0 for pieces not on screen).
        jitter: (N,) uniform numbers in ``[0, 1)``.

    Returns:
        ``(index, s)``: (N,) int64 piece of each sample and (N,) float64 fraction
        along it. Concretely, with ``L = sum(lengths)``, sample ``i`` sits at arc length
        ``(i + jitter_i) L / N`` along the pieces laid end to end: each sample is
        uniform in its stratum, so the samples are uniform in length overall (density
        ``1 / L``) and ``L / N`` is every sample's weight ``1 / (N pdf)``.
    """
    n = jitter.shape[0]
    total = float(lengths.sum())
    ends = np.cumsum(lengths)
    pos = (np.arange(n, dtype=np.float64) + jitter) * (total / max(n, 1))
    index = np.searchsorted(ends, pos, side="right")
    index = np.minimum(index, max(lengths.shape[0] - 1, 0))
    # Skip pieces of length 0 that searchsorted may land on at the very end.
    nonzero = np.flatnonzero(lengths > 0)
    if nonzero.size:
        index = np.where(lengths[index] > 0, index, nonzero[np.searchsorted(nonzero, index).clip(max=nonzero.size - 1)])
    start = ends[index] - lengths[index]
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(lengths[index] > 0, (pos - start) / lengths[index], 0.5)
    return index.astype(np.int64), np.clip(s, 0.0, 1.0)


def edge_normals(
    a: np.ndarray, b: np.ndarray, opposite: np.ndarray, intrinsics: tuple[float, float, float, float]
) -> np.ndarray:
    """(E, 2) unit image-space normals of camera-space edges ``[a, b]``, pointing away from a face.

    Args:
        a, b: (E, 3) float64 camera-space end points.
        opposite: (E, 3) float64 camera-space third vertex of the face taken as the
            occluding one (any depth: the face's side near the edge is what counts).
        intrinsics: ``(fx, fy, cx, cy)``, ``fx, fy > 0``.

    Returns:
        Concretely, the edge's image line is ``l . h = 0`` with ``l = a x b`` and
        ``h = ((x - cx) / fx, (y - cy) / fy, 1)``; the face lies where ``l . h`` has the
        sign of ``l . opposite`` (its points near the edge are ``e + s (opposite - e)``,
        ``s > 0`` small). The normal is ``-sign(l . opposite) (l_0 / fx, l_1 / fy)``,
        normalised: perpendicular to the image line, pointing out of the face. Zero
        where the edge is degenerate in the image.
    """
    fx, fy, _, _ = intrinsics
    line = np.cross(a, b)
    side = np.sign(np.einsum("ij,ij->i", line, opposite))
    side = np.where(side == 0, 1.0, side)
    g = np.stack((line[:, 0] / fx, line[:, 1] / fy), axis=-1) * -side[:, None]
    norm = np.linalg.norm(g, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norm > 0, g / norm, 0.0)


def merge_seams(a: np.ndarray, b: np.ndarray, o: np.ndarray, is_boundary: np.ndarray) -> np.ndarray:
    """Which edges to sample once the boundary edges of unwelded seams are paired up.

    A mesh whose vertices are split along a seam (per-side vertices of a cube, UV or normal
    seams of scanned and exported meshes) has two boundary edges with the same end point
    positions where the surface is continuous. Sampled as two boundary edges, such a seam
    counts its visibility discontinuity twice (2x the boundary term), or counts one that
    does not exist. Each pair of coincident boundary edges (end points equal as positions,
    in either order; exactly two edges) is treated as one interior edge of its two faces:
    it is a silhouette, and sampled once (the first of the pair), when both faces lie on
    the same side of the plane through the camera centre and the edge (the surface folds
    away there; this needs no face orientation), and it is not sampled when they lie on
    opposite sides.

    Args:
        a, b: (E, 3) float64 camera-space end points of the candidate edges.
        o: (E, 3) float64 camera-space third vertex of each edge's (first) face.
        is_boundary: (E,) bool, the edge has one face.

    Returns:
        (E,) bool mask of the edges to keep.
    """
    a, b, o = (np.asarray(x, np.float64).reshape(-1, 3) for x in (a, b, o))
    keep = np.ones(len(a), bool)
    cand = np.flatnonzero(np.asarray(is_boundary, bool))
    if len(cand) < 2:
        return keep
    _, inverse, counts = np.unique(_end_points(a[cand], b[cand]), axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pairs = starts[counts == 2]
    i, j = cand[order[pairs]], cand[order[pairs + 1]]
    plane = np.cross(a[i], b[i])  # the plane through the centre (the origin) and the edge
    side_i = (plane * o[i]).sum(-1)
    side_j = (plane * o[j]).sum(-1)
    keep[j] = False
    keep[i[side_i * side_j < 0]] = False  # opposite sides: the surface continues, no silhouette
    return keep


def one_per_curve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(E,) bool: the first of the candidate edges with the same two end points (either order), each once.

    One image curve is one visibility boundary: the samples' ``ray_inside`` / ``ray_outside``
    see the whole scene on either side of it, so sampling it once gives the whole boundary
    term, and sampling it once per edge record counts it that many times. Several candidates
    share their end points where an edge has three or more faces (one record per pair of them,
    DESIGN.md "Edges": with every face on one side of the edge, each record is a silhouette),
    where separate meshes or unwelded patches meet along an edge (each mesh's own silhouette
    edge there), and where three or more boundary edges coincide (left by :func:`merge_seams`,
    which pairs exactly two). Three welded fins on one edge had their boundary term counted
    three times (helper breakit25, ``tests/torch/test_breakit25_nonmanifold_edges.py``).

    Args:
        a, b: (E, 3) float64 end points of the candidate edges (any one frame: equal points are
            equal there).

    Returns:
        (E,) bool mask keeping, of each group of candidates with the same end points, the
        first (lowest index).
    """
    a, b = (np.asarray(x, np.float64).reshape(-1, 3) for x in (a, b))
    keep = np.zeros(len(a), bool)
    if len(a):
        keep[np.unique(_end_points(a, b), axis=0, return_index=True)[1]] = True
    return keep


def _end_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(E, 6) float64 rows ``(lo, hi)``: each edge's two end points in lexicographic order (a key of
    the edge's position that does not depend on its direction)."""
    first = _lex_less(a, b) | (a == b).all(-1)
    return np.concatenate([np.where(first[:, None], a, b), np.where(first[:, None], b, a)], axis=1)


def _lex_less(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(N,) bool: row x < row y in lexicographic order."""
    less = np.zeros(len(x), bool)
    decided = np.zeros(len(x), bool)
    for k in range(x.shape[1]):
        less |= ~decided & (x[:, k] < y[:, k])
        decided |= x[:, k] != y[:, k]
    return less


def coincident_faces(opposite: np.ndarray, rest) -> tuple[np.ndarray, np.ndarray] | None:
    """How ``sample_edges`` treats the edge records of faces listed more than once.

    Two faces of one edge with the same opposite vertex have the same three vertex indices
    (a face listed twice, with either winding). The silhouette rule compares the two faces
    of a record, so a record of two such faces is never a silhouette when their windings
    agree and always one when they differ, and the records of a third face with each copy
    repeat one another: a triangle listed twice had no sampled outline (no boundary term),
    and an edge next to a doubled face was sampled twice. For sampling, coincident faces
    count as one (the first listed): a record is dropped when an earlier record of its edge
    has the same two opposite vertices, or when it joins two coincident faces while its edge
    has another face; it is sampled as a boundary edge when it joins two coincident faces
    and its edge has no other face.

    Args:
        opposite: (E, 2) int host array, ``EdgeTopology.opposite`` (``-1`` for none).
        rest: ``rest() -> (v, shape_id)``, the (E, 2) and (E,) int host arrays of the
            topology, called only when a record joins two coincident faces.

    Returns:
        ``None`` when no record joins two coincident faces (nothing changes), else
        ``(drop, as_boundary)``, (E,) bool masks.
    """
    opposite = np.asarray(opposite, np.int64).reshape(-1, 2)
    same = (opposite[:, 0] == opposite[:, 1]) & (opposite[:, 0] >= 0)
    if not same.any():
        return None
    v, shape_id = (np.asarray(x, np.int64) for x in rest())
    edge = np.concatenate([shape_id.reshape(-1, 1), v.reshape(-1, 2)], axis=1)
    pair = np.sort(opposite, axis=1)
    _, first = np.unique(np.concatenate([edge, pair], axis=1), axis=0, return_index=True)
    repeated = np.ones(len(opposite), bool)
    repeated[first] = False
    # distinct opposite vertices of each edge: one means every face of the edge is one face
    _, edge_of = np.unique(edge, axis=0, return_inverse=True)
    edge_of = edge_of.reshape(-1)
    ends = np.concatenate([np.stack([edge_of, opposite[:, 0]], 1), np.stack([edge_of, opposite[:, 1]], 1)])
    ends = np.unique(ends[ends[:, 1] >= 0], axis=0)
    single = np.bincount(ends[:, 0], minlength=edge_of.max() + 1)[edge_of] == 1
    as_boundary = same & single & ~repeated
    return repeated | (same & ~single), as_boundary


@dataclass(frozen=True)
class SamplePlan:
    """The discrete choices of ``sample_edges`` (host, float64; see :func:`plan_samples`).

    Attributes:
        edge: (N,) int64 index of each sample's edge into the candidate list.
        edge_t: (N,) float64 parameter of the sample along its edge (0 at ``a``, 1 at ``b``).
        normal: (N, 2) float64 unit image-space normal, away from the edge's first face.
        total: the total clipped image length ``L`` of the candidate edges (pixels).
        xy: (N, 2) float64 pixel coordinates of the samples, projected on the host (the
            frontends' float32 re-projection of a float32 scene far from the origin was off by
            more than ``EDGE_OFFSET``: ``ray_inside``/``ray_outside`` then crossed the edge).
        point: (N, 3) float64 world-space sample points (``None`` without ``world``), the end
            of the ``visible`` segments (a float32 point fell inside closed meshes, hidden).
    """

    edge: np.ndarray
    edge_t: np.ndarray
    normal: np.ndarray
    total: float
    xy: np.ndarray
    point: np.ndarray | None = None

    @property
    def count(self) -> int:
        """N, the number of samples."""
        return int(self.edge.shape[0])

    @property
    def weight(self) -> float:
        """``L / N``, every sample's ``1 / (N pdf)``."""
        return self.total / max(self.count, 1)


def merge_coincident_faces(rule, chosen, boundary, convert) -> tuple:
    """The silhouette and boundary masks of ``sample_edges`` with :func:`coincident_faces`' rule applied.

    Args:
        rule: what :func:`coincident_faces` returned (``None``: nothing changes).
        chosen, boundary: (E,) bool masks of the frontend's array type (``&``, ``|``, ``~``).
        convert: host bool array -> the frontend's array type (on the masks' device).

    Returns:
        ``(chosen, boundary)``: a dropped record is not chosen; a record sampled as a boundary
        edge is chosen and a boundary edge.
    """
    if rule is None:
        return chosen, boundary
    drop, extra = (convert(x) for x in rule)
    return (chosen & ~drop) | extra, boundary | extra


def plan_samples(a: np.ndarray, b: np.ndarray, o: np.ndarray, is_boundary: np.ndarray,
                 intrinsics: tuple[float, float, float, float], width: int, height: int,
                 num_samples: int, jitter, world: tuple | None = None) -> SamplePlan:
    """Where ``sample_edges`` puts its samples, given the candidate edges in camera space.

    Args:
        a, b: (E, 3) float64 camera-space end points of the candidate edges.
        o: (E, 3) float64 camera-space opposite vertex of each edge's first face.
        is_boundary: (E,) bool, boundary edges.
        intrinsics: ``(fx, fy, cx, cy)``.
        width, height: the image size.
        num_samples: N >= 0.
        jitter: ``jitter(n)`` -> (n,) float64 uniform numbers in ``[0, 1)`` (called once,
            only when ``n > 0``: no edge on screen draws nothing).
        world: ``(a, b)``, the (E, 3) float64 world-space end points of the same edges, for
            :attr:`SamplePlan.point` (optional).

    Returns:
        :class:`SamplePlan`: seams merged (:func:`rayd.core.camera.merge_seams`), each image
        curve once (:func:`one_per_curve`), edges clipped to the near plane and the image, N
        stratified samples in image length.
    """
    kept = np.flatnonzero(merge_seams(a, b, o, is_boundary))
    kept = kept[one_per_curve(a[kept], b[kept])]
    a, b, o = a[kept], b[kept], o[kept]
    t0, t1, xy0, xy1 = clip_to_image(a, b, intrinsics, width, height)
    lengths = np.linalg.norm(xy1 - xy0, axis=-1)
    total = float(lengths.sum())
    n = num_samples if total > 0 else 0
    if n == 0:
        return SamplePlan(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, 2)), total, np.zeros((0, 2)),
                          np.zeros((0, 3)))
    pick, s = stratified_positions(lengths, np.asarray(jitter(n), dtype=np.float64))
    pa = a[pick] + t0[pick, None] * (b[pick] - a[pick])
    pb = a[pick] + t1[pick, None] * (b[pick] - a[pick])
    u = image_to_edge_param(s, pa[:, 2], pb[:, 2])
    edge_t = t0[pick] + u * (t1[pick] - t0[pick])
    normal = edge_normals(a[pick], b[pick], o[pick], intrinsics)
    xy = project(a[pick] + edge_t[:, None] * (b[pick] - a[pick]), intrinsics)
    point = None
    if world is not None:
        wa, wb = (np.asarray(x, np.float64)[kept[pick]] for x in world)
        point = wa + edge_t[:, None] * (wb - wa)
    return SamplePlan(kept[pick].astype(np.int64), edge_t, normal, total, xy, point)


def to_camera(world: np.ndarray, to_world: np.ndarray | None) -> np.ndarray:
    """(K, 3) float64 camera-space positions of world points, ``to_world`` a (4, 4) host matrix or ``None``."""
    if to_world is None:
        return world
    return (world - to_world[:3, 3]) @ np.linalg.inv(to_world[:3, :3]).T
