"""Occupancy grid: the inside decision ``w > 1/2`` of whole grid cells, found once per scene (CPU).

``contains()`` needs only whether the winding number ``w`` exceeds 1/2. Off the surface
``w`` is harmonic and, for a *closed* surface (every edge used as often in each
direction), integer-valued, hence constant on each connected region of space the
surface does not cut. The grid uses that:

1. **Cells.** A grid of :data:`GRID_CELLS` cubic cells along the longest axis of the
   enabled faces' box grown by :data:`GROW` per side. A cell is *free* when no face's
   bounding box meets the cell grown by :data:`PAD` of a cell (conservative: a face that
   meets the cell has a box that meets it).
2. **Closing the surface.** The boundary chain of the faces (net count of each directed
   edge; duplicate, flipped, degenerate and non-manifold faces included) splits into
   closed loops; each loop ``h`` gets a cap ``C_h``, the fan of triangles from its
   vertices' mean ``P_h`` over its edges (``m_e (P_h, a_e, b_e)``). ``S' = S - C`` is
   closed, so ``w_S = w_S' + w_C`` with ``w_S'`` an integer constant on every connected
   set of free cells (the caps' triangles are rasterised into the cells too). Closed
   meshes have no caps and ``w_S = w_S'``.
3. **Components.** Free cells are labelled into 6-connected components
   (``scipy.ndimage.label``); ``w_S'`` is evaluated once per component (the
   :data:`MAX_COMPONENTS` largest) at a cell centre, as the exact sum over the faces
   (:func:`rayd.engine.winding.winding_number_exact`) minus the exact sum over the caps,
   and rounded (a value farther than :data:`INTEGER_TOL` from an integer leaves the
   component undecided).
4. **Caps' share.** A face set of area ``A`` at distance at least ``delta`` from ``q``
   subtends a solid angle of at most ``A / delta^2``, so over a box of half-diagonal
   ``h`` centred at ``c``: ``|w_C| <= sum_h A_h / (4 pi (|c - P_h| - R_h - h)^2)`` (``R_h``
   bounds the cap about ``P_h``). Boxes of 32 cells are tested first and the failing
   ones split down to single cells; a cell is decided where the bound is below
   :data:`CAP_LIMIT` (< 1/2), and then ``w_S > 1/2`` exactly when ``w_S' >= 1``.

A decided cell stores ``w_S'`` (int8); a query point in it gets that value (as
``w``: the same decision ``w > 1/2`` as the exact winding number, not its value
where caps exist); points of cells the surface cuts take ``w_S'`` of a decided cell nearby plus the signed
crossings of the segment between them (:mod:`rayd.engine.occupancy_query`, which holds
the lookup); every other point (undecided cells, outside the grid) takes the
hierarchical walk with exact refinement near 1/2 (:mod:`rayd.engine.winding`). The
grid is built on the host (NumPy, SciPy) on the first ``contains`` query after a
build, refit or change of the enable flags, for scenes of flat meshes (no instances),
on the CPU; where SciPy is missing the walk answers everything.

References:
    Jacobson, Kavan, Sorkine-Hornung 2013, "Robust Inside-Outside Segmentation using
    Generalized Winding Numbers", ACM TOG 32(4) (the winding number of closed and
    open surfaces, its jump by one across the surface).
"""

from __future__ import annotations

import math

import numpy as np
import warp as wp

from rayd.engine.accel import SceneAccel

wp.set_module_options({"enable_backward": False})

#: Cells along the longest axis of the grid.
GRID_CELLS = 256
#: The grid box: the enabled faces' box grown by this fraction of its largest side, per side.
GROW = 0.125
#: A face's box is tested against the cell grown by this fraction of a cell.
PAD = 1.0e-3
#: Components (largest first) whose integer winding number is evaluated.
MAX_COMPONENTS = 32
#: A component's evaluated ``w_S'`` must lie this close to an integer.
INTEGER_TOL = 1.0e-4
#: Cells where the caps' winding number is bounded below this are decided.
CAP_LIMIT = 0.45
#: Stored in undecided cells.
UNDECIDED = -128
_BLOCK = 32
#: A segment-triangle crossing is accepted only where each edge's triple product and the
#: crossing parameter are this far (relative) from their sign changes; else the point walks.
CROSS_MARGIN = 1.0e-9
#: A query of at least this many points builds the grid (its cost, about a second of one core per
#: 100 k faces, is that of walking a few hundred thousand points).
GRID_MIN_POINTS = 1 << 16

#: Large queries of one geometry that walk before the grid is built (see :func:`grid`).
GRID_AFTER_QUERIES = 1
#: Queries below this many points are looked up in one launch (on one core).
SPLIT_MIN = 1 << 17
#: Cells per side of a block of the coarse level.
COARSE = 4
#: Partner cells up to this many steps along a face direction (see :func:`_partners`).
PARTNER_REACH = 4
_OFFSETS = np.array([[-1, 0, 0], [1, 0, 0], [0, -1, 0], [0, 1, 0], [0, 0, -1], [0, 0, 1]])


def _coarse(values: np.ndarray) -> np.ndarray:
    """int8: per block of ``COARSE^3`` cells, their common value where all are decided alike, else ``UNDECIDED``.

    Looked up first (a small array that stays in cache; most points lie in uniform blocks)."""
    pad = [(0, (-n) % COARSE) for n in values.shape]
    v = np.pad(values, pad, constant_values=UNDECIDED).astype(np.int16)
    shape = [n // COARSE for n in v.shape]
    blocks = v.reshape(shape[0], COARSE, shape[1], COARSE, shape[2], COARSE)
    lo, hi = blocks.min(axis=(1, 3, 5)), blocks.max(axis=(1, 3, 5))
    return np.where((lo == hi) & (lo != UNDECIDED), lo, UNDECIDED).astype(np.int8)


class OccupancyGrid:
    """The decided cells of one scene: ``values`` int8 (X, Y, Z) (``UNDECIDED`` or ``w_S'``), ``lo``, ``cell``."""

    def __init__(self, values: np.ndarray, partner: np.ndarray, lo: np.ndarray, cell: float, device) -> None:
        self.values = wp.array(values, dtype=wp.int8, device=device)
        self.coarse = wp.array(_coarse(values), dtype=wp.int8, device=device)
        self.partner = wp.array(partner, dtype=wp.int8, device=device)
        self.lo = wp.vec3d(*[float(x) for x in lo])
        self.inv_cell = float(1.0 / cell)
        self.dims = wp.vec3i(*values.shape)
        self.decided = float(np.mean(values != UNDECIDED))


def _enabled_faces(accel: SceneAccel) -> tuple[np.ndarray, np.ndarray]:
    """(float64 (V, 3) points in the search frame, int64 (F, 3) enabled flat faces)."""
    points = accel.flat.points.numpy().astype(np.float64)
    faces = accel.flat.indices.numpy().astype(np.int64).reshape(-1, 3)
    view = accel.view_for(None)  # (CPU only)
    if view.all_enabled == 0:
        on = view.shape_enabled.numpy()[view.flat_shape.numpy()] != 0
        faces = faces[on]
    return points, faces


def boundary_loops(faces: np.ndarray, num_vertices: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The boundary chain of ``faces`` (int64 (F, 3)) split into closed loops.

    Returns one ``(a, b, m)`` per loop: int64 edge ends and the net count ``m`` of the
    directed edge ``a -> b`` (nonzero). Empty for a closed surface. The loops are the
    connected components of the edges with nonzero net count (each one a closed chain:
    every vertex is entered as often as it is left).
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    e = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
    sign = np.where(e[:, 0] < e[:, 1], 1, -1)
    key, inverse = np.unique(lo * num_vertices + hi, return_inverse=True)
    net = np.bincount(inverse, weights=sign, minlength=len(key)).astype(np.int64)
    keep = (net != 0) & (key // num_vertices != key % num_vertices)
    a, b, m = key[keep] // num_vertices, key[keep] % num_vertices, net[keep]
    if len(a) == 0:
        return []
    graph = sp.coo_matrix((np.ones(len(a)), (a, b)), shape=(num_vertices, num_vertices))
    _, label = connected_components(graph, directed=False)
    comp = label[a]
    order = np.argsort(comp, kind="stable")
    splits = np.flatnonzero(np.diff(comp[order])) + 1
    return [(a[k], b[k], m[k]) for k in np.split(order, splits)]


def _solid_angles(q: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """(P,) sum over triangles ``x, y, z`` (T, 3) of their signed solid angles seen from ``q`` (P, 3)."""
    out = np.zeros(len(q))
    step = max(1, (1 << 22) // max(1, len(x)))
    for i in range(0, len(q), step):
        p = q[i:i + step, None]
        u, v, w = x[None] - p, y[None] - p, z[None] - p
        lu, lv, lw = (np.linalg.norm(t, axis=-1) for t in (u, v, w))
        num = np.einsum("...i,...i->...", u, np.cross(v, w))
        den = (lu * lv * lw + np.einsum("...i,...i->...", u, v) * lw + np.einsum("...i,...i->...", v, w) * lu
               + np.einsum("...i,...i->...", w, u) * lv)
        out[i:i + step] = (2.0 * np.arctan2(num, den)).sum(-1)
    return out


def _caps(points: np.ndarray, loops: list) -> tuple[np.ndarray, np.ndarray]:
    """Cap triangles ``(P_h, a, b)`` repeated ``|m|`` times with ``a, b`` swapped where ``m < 0``, (T, 3, 3);
    and per loop ``(P_h, R_h, A_h)`` as (H, 5) rows ``px, py, pz, R, A``."""
    tris, info = [], []
    for a, b, m in loops:
        verts = np.unique(np.concatenate([a, b]))
        apex = points[verts].mean(0)
        radius = float(np.linalg.norm(points[verts] - apex, axis=1).max())
        rep = np.abs(m)
        a2 = np.repeat(np.where(m > 0, a, b), rep)
        b2 = np.repeat(np.where(m > 0, b, a), rep)
        t = np.stack([np.broadcast_to(apex, (len(a2), 3)), points[a2], points[b2]], 1)
        area = 0.5 * np.linalg.norm(np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]), axis=1).sum()
        tris.append(t)
        info.append([*apex, radius, area])
    return np.concatenate(tris), np.array(info)


def _mark(free: np.ndarray, tri: np.ndarray, lo: np.ndarray, cell: float) -> None:
    """Clear ``free`` in every cell (grown by ``PAD``) that the box of a triangle of ``tri`` (T, 3, 3) meets."""
    dims = np.array(free.shape)
    i0 = np.floor((tri.min(1) - lo) / cell - PAD).astype(np.int64).clip(0, dims - 1)
    i1 = np.floor((tri.max(1) - lo) / cell + PAD).astype(np.int64).clip(0, dims - 1)
    span = (i1 - i0).max(1)
    for k in (1, 3):  # spans up to k: all (k + 1)^3 offsets, masked
        sel = span <= k if k == 1 else (span > 1) & (span <= 3)
        s0, s1 = i0[sel], i1[sel]
        for dx in range(k + 1):
            for dy in range(k + 1):
                for dz in range(k + 1):
                    off = np.array([dx, dy, dz])
                    ok = np.all(s0 + off <= s1, axis=1)
                    c = s0[ok] + off
                    free[c[:, 0], c[:, 1], c[:, 2]] = False
    for j in np.flatnonzero(span > 3):
        free[i0[j, 0]:i1[j, 0] + 1, i0[j, 1]:i1[j, 1] + 1, i0[j, 2]:i1[j, 2] + 1] = False


def _cap_bound(centres: np.ndarray, half: float, info: np.ndarray) -> np.ndarray:
    """(B,) upper bound of ``|w_C|`` over boxes of half-diagonal ``half`` at ``centres`` (B, 3)."""
    out = np.zeros(len(centres))
    step = max(1, (1 << 22) // max(1, len(info)))
    for i in range(0, len(centres), step):
        gap = np.linalg.norm(centres[i:i + step, None] - info[None, :, :3], axis=-1) - info[None, :, 3] - half
        with np.errstate(divide="ignore"):
            term = np.where(gap > 0, info[None, :, 4] / (4.0 * math.pi * np.maximum(gap, 1e-150) ** 2), np.inf)
        out[i:i + step] = term.sum(1)
    return out


def _cap_ok(dims: tuple, lo: np.ndarray, cell: float, info: np.ndarray) -> np.ndarray:
    """bool (X, Y, Z): cells over which the caps' ``|w_C| < CAP_LIMIT`` (boxes of 32 cells split in 8 until decided)."""
    ok = np.zeros(dims, dtype=bool)
    if len(info) == 0:
        ok[:] = True
        return ok
    size = _BLOCK
    grid = np.stack(np.meshgrid(*[np.arange(0, n, size) for n in dims], indexing="ij"), -1).reshape(-1, 3)
    offsets = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)])
    while len(grid) and size >= 1:
        centres = lo + (grid + 0.5 * size) * cell
        good = _cap_bound(centres, 0.5 * math.sqrt(3.0) * size * cell, info) < CAP_LIMIT
        if size == 1:
            g = grid[good]
            ok[g[:, 0], g[:, 1], g[:, 2]] = True
            break
        for x, y, z in grid[good]:
            ok[x:x + size, y:y + size, z:z + size] = True
        size //= 2
        grid = (grid[~good][:, None] + offsets * size).reshape(-1, 3)
        grid = grid[np.all(grid < np.array(dims), axis=1)]
    return ok


def build_grid(accel: SceneAccel, num_faces: int, stream=None, exact=None) -> OccupancyGrid | None:
    """The occupancy grid of ``accel``'s enabled flat faces (see the module docstring); ``None`` without SciPy or faces.

    ``exact``: the exact winding-number sum, ``exact(accel, num_faces, points, active, out, stream)``
    (:func:`rayd.engine.winding.winding_number_exact`, passed in by its module: no import cycle).
    """
    try:
        from scipy import ndimage
    except ImportError:
        return None
    if exact is None:
        raise ValueError("rayd.engine.occupancy.build_grid(): 'exact' (the exact winding-number sum) is required")
    winding_number_exact = exact

    points, faces = _enabled_faces(accel)
    if len(faces) == 0:
        return None
    used = points[np.unique(faces)]
    box_lo, box_hi = used.min(0), used.max(0)
    grow = GROW * float((box_hi - box_lo).max())
    lo, hi = box_lo - grow, box_hi + grow
    cell = float((hi - lo).max()) / GRID_CELLS
    if not cell > 0.0:
        return None
    dims = tuple(int(x) for x in np.maximum(1, np.ceil((hi - lo) / cell)))
    free = np.ones(dims, dtype=bool)
    _mark(free, points[faces], lo, cell)
    loops = boundary_loops(faces, len(points))
    cap_tris, info = _caps(points, loops) if loops else (np.zeros((0, 3, 3)), np.zeros((0, 5)))
    near_cap = np.ones(dims, dtype=bool)  # True: no cap triangle's box meets the cell
    if len(cap_tris):
        _mark(near_cap, cap_tris, lo, cell)
        free &= near_cap
    label, count = ndimage.label(free)
    values = np.full(dims, UNDECIDED, dtype=np.int8)
    ok = np.zeros(dims, dtype=bool)
    if count:
        flat = label.ravel()
        sizes = np.bincount(flat, minlength=count + 1)
        sizes[0] = 0
        chosen = np.argsort(sizes)[::-1][:MAX_COMPONENTS]
        chosen = chosen[sizes[chosen] > 0]
        first = np.full(count + 1, -1, dtype=np.int64)
        idx = np.flatnonzero(flat)
        first[flat[idx[::-1]]] = idx[::-1]  # the lowest flat index of each label
        reps = np.stack(np.unravel_index(first[chosen], dims), 1)
        centres = lo + (reps + 0.5) * cell
        device = accel.device
        q = wp.array(centres.astype(np.float32), dtype=wp.vec3, device=device)
        w = wp.empty(len(centres), dtype=wp.float64, device=device)
        winding_number_exact(accel, num_faces, q, wp.ones(1, dtype=wp.uint8, device=device), w, stream)
        w_s = w.numpy()
        # the exact sums were taken at the float32-rounded centres: the caps' share at the same points
        q64 = centres.astype(np.float32).astype(np.float64)
        w_c = (_solid_angles(q64, cap_tris[:, 0], cap_tris[:, 1], cap_tris[:, 2]) / (4.0 * math.pi)
               if len(cap_tris) else np.zeros(len(q64)))
        closed = w_s - w_c
        near = np.rint(closed)
        good = (np.abs(closed - near) < INTEGER_TOL) & (np.abs(near) <= 127)
        table = np.full(count + 1, UNDECIDED, dtype=np.int16)
        table[chosen[good]] = near[good].astype(np.int16)
        ok = _cap_ok(dims, lo, cell, info)
        values = np.where(ok, table[label], UNDECIDED).astype(np.int8)
    return OccupancyGrid(values, _partners(values, ok & near_cap), lo, cell, accel.device)


def _partners(values: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """int8 (X, Y, Z): for an undecided cell where ``allowed``, ``4 k + (s - 1)``: the nearest decided cell
    ``s <= PARTNER_REACH`` steps along face direction ``k`` (index into ``_OFFSETS``) with every cell on
    the way ``allowed``; -1 elsewhere. A point of such a cell gets ``w_S'`` of that cell's centre plus
    the crossings of the segment between them (inside the box of the cells on the way)."""
    partner = np.full(values.shape, -1, dtype=np.int8)
    dims = np.array(values.shape)
    todo = np.argwhere((values == UNDECIDED) & allowed)  # (M, 3) cells still without a partner
    code = np.full(len(todo), -1, dtype=np.int8)
    open_ = np.ones(len(todo), dtype=bool)
    for step in range(1, PARTNER_REACH + 1):
        for k, off in enumerate(_OFFSETS):
            path = open_.copy()
            for j in range(1, step):  # the cells strictly between must be allowed
                c = todo + off * j
                inside = np.all((c >= 0) & (c < dims), axis=1)
                path &= inside
                path[inside] &= allowed[c[inside, 0], c[inside, 1], c[inside, 2]]
            c = todo + off * step
            inside = np.all((c >= 0) & (c < dims), axis=1) & path
            take = np.zeros(len(todo), dtype=bool)
            take[inside] = values[c[inside, 0], c[inside, 1], c[inside, 2]] != UNDECIDED
            code[take] = 4 * k + step - 1
            open_ &= ~take
    partner[todo[:, 0], todo[:, 1], todo[:, 2]] = code
    return partner


def grid(accel: SceneAccel, num_faces: int, stream=None, n: int = GRID_MIN_POINTS,
         exact=None) -> OccupancyGrid | None:
    """The occupancy grid of ``accel`` for a query of ``n`` points (cached on ``accel``); ``exact``:
    the exact winding-number sum the grid's construction uses (see :func:`build_grid`).

    Built by the query after the first :data:`GRID_AFTER_QUERIES` (one) of at least
    :data:`GRID_MIN_POINTS` points on the same geometry (unchanged since a build, a refit or a change of the enable flags), then used
    by every query until the geometry changes. The first such query walks: the grid costs
    about as much CPU time as walking a few hundred thousand points (1.4 s for the 69 k
    bunny), which a one-off query, or a mesh that moves before every query, would never
    earn back. ``None`` where the grid is not used: CUDA devices, scenes with instances,
    no SciPy, or no grid yet.
    """
    if not accel.device.is_cpu or accel.instances is not None or not accel.flat_enabled:
        return None
    key = (accel.flat.version, accel.enabled_version, accel.view_for(None).all_enabled, num_faces)
    cached = getattr(accel, "_occupancy", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    if n < GRID_MIN_POINTS:
        return None
    asked = getattr(accel, "_occupancy_asked", None)
    walked = asked[1] if asked is not None and asked[0] == key else 0
    if walked < GRID_AFTER_QUERIES:
        accel._occupancy_asked = (key, walked + 1)  # an early large query of this geometry: walk
        return None
    built = build_grid(accel, num_faces, stream, exact)
    accel._occupancy = (key, built)
    return built
