"""Optional CPU accelerator: Intel Embree 4 through ``embreex`` for the triangle search.

On the CPU, :func:`rayd.engine.intersect.search` hands flat scenes (no instances) to
:func:`search` here when ``embreex`` is importable. Embree picks the closest triangle
(robust mode) on chunks of rays in a thread pool over all cores (``EmbreeScene.run``
releases the GIL); rayd's Warp search answers every ray Embree cannot answer exactly,
so the result is the Warp path's answer up to Embree's own float32 rounding:

- the open interval ``tmin < t < tmax``: embreex has no per-ray ``tnear``, so the
  origin moves to ``o + (tmin - delta) d`` and Embree searches up to
  ``tmax + delta``; a winner with ``t`` within ``delta`` of ``tmin`` or ``tmax`` (the
  rounding band, where the two engines may disagree) is re-searched by Warp.
  ``delta = BAND * (|o - c| + R) / |d|`` with ``c`` the float64 bounding-box centre
  of the vertices and ``R`` the largest centre-relative coordinate, so it covers a
  float32 rounding of the hit point many times over.
- ``ignore`` and disabled meshes: when Embree's winner is the ignored face or lies
  on a disabled mesh, the closest *allowed* face may lie behind it: Warp re-searches
  that ray. Any other winner is also the closest allowed one.
- degenerate triangles (zero cross product in float64) are misses in rayd: a ray
  whose Embree winner is one is re-searched by Warp.
- a miss of a ray with a zero direction component: Embree culls such a ray lying
  exactly in a box's upper face (its slab test takes ``1/0`` as ``+huge``), which
  leaks through boundary edges on the scene's upper side: Warp re-searches it.
- inactive and malformed rays (NaN/inf, zero direction, ``tmax <= tmin``) are misses
  without a search; any hit takes the closest hit (a valid blocker).

Embree sees centre-relative float32 coordinates (vertices and origins minus ``c``,
subtracted in float64). A :class:`EmbreeMirror` is attached to its
:class:`~rayd.engine.triangles.TriangleScene` and rebuilt (committed) at every refit,
i.e. at the frontends' ``sync()``: Embree has no refit through embreex.

Not watertight, hence opt-in (``RAYD_CPU_ACCEL=embree`` in the environment, or
:func:`set_enabled`): rays passing within about 1e-7 (relative) of a mesh vertex leak
through Embree 4.4's robust-mode triangles in 1-12 % of cases (closed icosphere,
every one of the vertex's faces missed singly too, while the float64 reference hits
one with barycentric weights of 1e-7; tests/torch/test_watertight.py fails with it),
and a leak that lands on a farther face cannot be detected from the result. rayd's
Warp search (Woop et al. 2013, padded boxes) does not leak, so it stays the default.
"""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np

try:  # optional dependency: the ``cpu`` extra
    from embreex import mesh_construction as _mesh_construction
    from embreex import rtcore_scene as _rtcore_scene

    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # pragma: no cover - depends on the environment
    _mesh_construction = _rtcore_scene = None
    _IMPORT_ERROR = str(exc)

#: Half-width of the rounding band, in units of the centre-relative magnitude along the ray.
BAND = 1.0e-5

#: Rays per thread-pool chunk (at least); the batch is split in about 4 chunks per core.
MIN_CHUNK = 4096

#: Off by default: Embree's robust mode leaks through vertices (see the module docstring);
#: ``RAYD_CPU_ACCEL=embree`` or :func:`set_enabled` turns it on.
_enabled = os.environ.get("RAYD_CPU_ACCEL", "warp").strip().lower() == "embree"
_pool: concurrent.futures.ThreadPoolExecutor | None = None

#: Rays searched by Embree and rays re-searched by Warp since import (for tests and benchmarks).
stats = {"rays": 0, "redone": 0}


def available() -> bool:
    """True when ``embreex`` imported."""
    return _rtcore_scene is not None


def set_enabled(flag: bool) -> None:
    """Turn the Embree path on or off for this process (when available)."""
    global _enabled
    _enabled = bool(flag)


def active() -> bool:
    """True when CPU searches of flat scenes go through Embree."""
    return _enabled and available()


def describe() -> str:
    """One line naming the active CPU accelerator (for ``python -m rayd info``)."""
    if active():
        from importlib.metadata import version

        try:
            ver = version("embreex")
        except Exception:  # noqa: BLE001 - not installed as a distribution
            ver = "?"
        return f"embree (embreex {ver}, Embree 4 robust, {os.cpu_count() or 1} threads)"
    if not available():
        return f"warp (embreex not importable: {_IMPORT_ERROR}; pip install rayd-geom[cpu])"
    return "warp (embreex installed but off: not watertight; RAYD_CPU_ACCEL=embree turns it on)"


class EmbreeMirror:
    """An Embree scene over the triangles of a CPU :class:`TriangleScene`, centre-relative.

    Args:
        tri: the triangle scene (its ``points`` and ``indices`` are read at each refresh).
    """

    def __init__(self, tri) -> None:
        self.tri = tri
        self.refresh()

    def refresh(self) -> None:
        """Rebuild and commit the Embree scene from the current ``points`` (after a refit)."""
        tri = self.tri
        points = np.asarray(tri.points.numpy(), dtype=np.float64).reshape(-1, 3)
        faces = tri.indices.numpy().reshape(-1, 3)[tri.face_base : tri.face_base + tri.num_triangles]
        faces = np.ascontiguousarray(faces, dtype=np.int32)
        lo, hi = points.min(0), points.max(0)
        self.centre = 0.5 * (lo + hi)
        rel = points - self.centre
        self.radius = float(np.abs(rel).max()) if rel.size else 0.0
        a, b, c = rel[faces[:, 0]], rel[faces[:, 1]], rel[faces[:, 2]]
        self.degenerate = ~np.any(np.cross(b - a, c - a) != 0.0, axis=1)
        scene = _rtcore_scene.EmbreeScene(robust=True)
        _mesh_construction.TriangleMesh(scene, np.ascontiguousarray(rel, dtype=np.float32), faces)
        # embreex commits (builds the BVH) at the first query: commit now, at sync().
        scene.run(np.zeros((1, 3), np.float32), np.ones((1, 3), np.float32))
        self.scene = scene


def mirror(tri) -> EmbreeMirror:
    """The :class:`EmbreeMirror` of ``tri`` (built on first use, then kept in sync by refits)."""
    m = getattr(tri, "cpu_mirror", None)
    if m is None:
        m = EmbreeMirror(tri)
        tri.cpu_mirror = m
    return m


def usable(accel) -> bool:
    """Whether :func:`search` can serve ``accel`` (CPU, flat triangles only, Embree active)."""
    return active() and accel.device.is_cpu and accel.instances is None and accel.flat is not None


def _rows(array, n: int) -> np.ndarray:
    """A NumPy view of a ray array of length ``n`` or 1 (broadcast)."""
    a = array.numpy()
    if a.shape[0] == 1 and n != 1:
        return np.broadcast_to(a, (n, *a.shape[1:]))
    return a


def _chunk(m: EmbreeMirror, tables, o, d, tmin, tmax, active, ignore, out):
    """Embree search of one chunk; writes ``out`` and returns the rows Warp must redo."""
    flat_global, flat_shape, enabled, all_enabled = tables
    o64 = o.astype(np.float64) - m.centre
    d64 = d.astype(np.float64)
    t0 = tmin.astype(np.float64)
    t1 = tmax.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        dn = np.sqrt(np.einsum("ij,ij->i", d64, d64))
        ok = (active != 0) & np.isfinite(o64).all(1) & np.isfinite(d64).all(1) & np.isfinite(t0)
        ok &= ~np.isnan(t1) & (dn > 0.0) & (t1 > t0)
    out[:] = -1
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return rows
    o64, d64, t0, t1, dn = o64[rows], d64[rows], t0[rows], t1[rows], dn[rows]
    delta = BAND * (np.sqrt(np.einsum("ij,ij->i", o64, o64)) + m.radius) / dn
    start = t0 - delta
    with np.errstate(over="ignore", invalid="ignore"):
        origin = (o64 + start[:, None] * d64).astype(np.float32)
        far = (t1 - start + delta).astype(np.float32)
    good = np.isfinite(origin).all(1)
    res = m.scene.run(np.ascontiguousarray(origin), np.ascontiguousarray(d64, dtype=np.float32),
                      dists=np.ascontiguousarray(far), output=1)
    prim = res["primID"].astype(np.int64)
    hit = prim >= 0
    face = np.where(hit, prim, 0)
    t = res["tfar"].astype(np.float64) + start
    redo = ~good | (hit & ((t <= t0 + delta) | (t >= t1 - delta) | m.degenerate[face]))
    # Embree's slab test takes 1/0 as +huge: a ray with a zero direction component lying
    # exactly on a box's upper face is culled (e.g. straight down onto the rim of a grid).
    redo |= ~hit & (d64 == 0.0).any(1)
    gid = np.where(hit, flat_global[face], -1)
    ign = ignore[rows]
    redo |= hit & (gid == ign)
    if not all_enabled:
        redo |= hit & (enabled[flat_shape[face]] == 0)
    gid[redo] = -1
    out[rows] = gid
    return rows[redo]


def search(accel, rays, global_prim_id, warp_search) -> None:
    """Closest (or any) hit per ray on the CPU through Embree; see the module docstring.

    Args:
        accel: a :class:`SceneAccel` for which :func:`usable` holds.
        rays: the :class:`RayBatch` (length N or 1 per array).
        global_prim_id: int32 (N,) output.
        warp_search: ``warp_search(accel, rays, out)`` runs rayd's Warp search on a ray
            batch (used for the rays Embree cannot answer exactly).
    """
    global _pool
    import warp as wp

    n = global_prim_id.shape[0]
    m = mirror(accel.flat)
    view = accel.view
    tables = (view.flat_global.numpy(), view.flat_shape.numpy(), view.shape_enabled.numpy(), view.all_enabled != 0)
    cols = [_rows(a, n) for a in (rays.o, rays.d, rays.tmin, rays.tmax, rays.active, rays.ignore)]
    cols[0], cols[1] = cols[0].reshape(n, 3), cols[1].reshape(n, 3)
    out = global_prim_id.numpy()
    workers = os.cpu_count() or 1
    parts = max(1, min(4 * workers, n // MIN_CHUNK))
    bounds = [n * k // parts for k in range(parts + 1)]

    def run(k: int) -> np.ndarray:
        lo, hi = bounds[k], bounds[k + 1]
        return lo + _chunk(m, tables, *(c[lo:hi] for c in cols), out[lo:hi])

    if parts == 1:
        redo = [run(0)]
    else:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rayd-embree")
        redo = list(_pool.map(run, range(parts)))
    redo = np.concatenate(redo)
    stats["rays"] += n
    stats["redone"] += int(redo.size)
    if redo.size == 0:
        return
    # The rays Embree could not answer exactly: rayd's Warp search on a compact batch.
    device = accel.device
    sub = [np.ascontiguousarray(c[redo]) for c in cols]
    vec = [wp.array(sub[i], dtype=wp.vec3, device=device) for i in (0, 1)]
    scal = [wp.array(sub[i], dtype=dt, device=device) for i, dt in ((2, float), (3, float), (4, wp.uint8), (5, wp.int32))]
    sub_out = wp.empty(redo.size, dtype=wp.int32, device=device)
    warp_search(accel, type(rays)(vec[0], vec[1], *scal), sub_out)
    out[redo] = sub_out.numpy()
