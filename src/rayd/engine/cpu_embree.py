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
        self.degenerate_wp = wp.array(self.degenerate.astype(np.uint8), dtype=wp.uint8, device=tri.device)
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


import warp as wp  # noqa: E402

from rayd.engine.runtime import PerRow, launch_rows  # noqa: E402
from rayd.engine.traversal import ray_is_wellformed  # noqa: E402

wp.set_module_options({"enable_backward": False})


@wp.kernel(enable_backward=False)
def _prepare_kernel(
    o: wp.array(dtype=wp.vec3), o_stride: int, d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    active: wp.array(dtype=wp.uint8), active_stride: int, ignore: wp.array(dtype=wp.int32), ignore_stride: int,
    centre: wp.vec3d, radius: float, band: float,
    origin: wp.array(dtype=wp.vec3), direction: wp.array(dtype=wp.vec3), far: wp.array(dtype=float),
    start: wp.array(dtype=float), delta: wp.array(dtype=float),
):
    """Embree's ray per row: origin ``o + (tmin - delta) d - c`` (float64), ``tfar`` (-1: skip)."""
    i = wp.tid()
    oi = o[i * o_stride]
    di = d[i * d_stride]
    t0 = tmin[i * tmin_stride]
    t1 = tmax[i * tmax_stride]
    origin[i] = wp.vec3(0.0, 0.0, 0.0)
    direction[i] = wp.vec3(1.0, 1.0, 1.0)
    far[i] = -1.0
    start[i] = 0.0
    delta[i] = 0.0
    if active[i * active_stride] != wp.uint8(0) and ray_is_wellformed(oi, di, t0, t1):
        od = wp.vec3d(wp.float64(oi[0]), wp.float64(oi[1]), wp.float64(oi[2])) - centre
        dd = wp.vec3d(wp.float64(di[0]), wp.float64(di[1]), wp.float64(di[2]))
        dl = wp.float64(band) * (wp.length(od) + wp.float64(radius)) / wp.length(dd)
        s0 = wp.float64(t0) - dl
        p = od + s0 * dd
        origin[i] = wp.vec3(float(p[0]), float(p[1]), float(p[2]))
        direction[i] = di
        far[i] = float(wp.float64(t1) - s0 + dl)
        start[i] = float(s0)
        delta[i] = float(dl)


@wp.kernel(enable_backward=False)
def _finish_kernel(
    d: wp.array(dtype=wp.vec3), d_stride: int,
    tmin: wp.array(dtype=float), tmin_stride: int, tmax: wp.array(dtype=float), tmax_stride: int,
    ignore: wp.array(dtype=wp.int32), ignore_stride: int,
    flat_global: wp.array(dtype=wp.int32), flat_shape: wp.array(dtype=wp.int32),
    shape_enabled: wp.array(dtype=wp.uint8), degenerate: wp.array(dtype=wp.uint8),
    far: wp.array(dtype=float), start: wp.array(dtype=float), delta: wp.array(dtype=float),
    prim: wp.array(dtype=wp.int32), tfar: wp.array(dtype=float),
    out: wp.array(dtype=wp.int32), redo: wp.array(dtype=wp.uint8),
):
    """The winner's ``global_prim_id``, or -1 and ``redo = 1`` where Warp must decide."""
    i = wp.tid()
    out[i] = -1
    redo[i] = wp.uint8(0)
    if far[i] < 0.0:
        return
    f = prim[i]
    if f < 0:
        di = d[i * d_stride]
        if di[0] == 0.0 or di[1] == 0.0 or di[2] == 0.0:
            redo[i] = wp.uint8(1)
        return
    t = wp.float64(tfar[i]) + wp.float64(start[i])
    dl = wp.float64(delta[i])
    bad = t <= wp.float64(tmin[i * tmin_stride]) + dl or t >= wp.float64(tmax[i * tmax_stride]) - dl
    g = flat_global[f]
    if bad or degenerate[f] != wp.uint8(0) or g == ignore[i * ignore_stride] or shape_enabled[flat_shape[f]] == wp.uint8(0):
        redo[i] = wp.uint8(1)
        return
    if not wp.isfinite(t):
        redo[i] = wp.uint8(1)
        return
    out[i] = g


def _rows(array, n: int) -> np.ndarray:
    """A NumPy view of a ray array of length ``n`` or 1 (broadcast)."""
    a = array.numpy()
    if a.shape[0] == 1 and n != 1:
        return np.broadcast_to(a, (n, *a.shape[1:]))
    return a


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
    n = global_prim_id.shape[0]
    m = mirror(accel.flat)
    view = accel.view
    dev = accel.device
    origin = wp.empty(n, dtype=wp.vec3, device=dev)
    direction = wp.empty(n, dtype=wp.vec3, device=dev)
    far, start, delta, tfar = (wp.empty(n, dtype=float, device=dev) for _ in range(4))
    prim = wp.empty(n, dtype=wp.int32, device=dev)
    redo_flag = wp.empty(n, dtype=wp.uint8, device=dev)
    args = rays.launch_args(n)
    launch_rows(_prepare_kernel, n, [*args, wp.vec3d(*m.centre), m.radius, BAND],
                [origin, direction, far, start, delta], dev, None)
    org_np, dir_np, far_np = origin.numpy(), direction.numpy(), far.numpy()
    prim_np, tfar_np = prim.numpy(), tfar.numpy()
    workers = os.cpu_count() or 1
    parts = max(1, min(4 * workers, n // MIN_CHUNK))
    bounds = [n * k // parts for k in range(parts + 1)]

    def run(k: int) -> None:
        lo, hi = bounds[k], bounds[k + 1]
        res = m.scene.run(org_np[lo:hi], dir_np[lo:hi], dists=far_np[lo:hi].copy(), output=1)
        prim_np[lo:hi] = res["primID"]
        tfar_np[lo:hi] = res["tfar"]

    if parts == 1:
        run(0)
    else:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rayd-embree")
        list(_pool.map(run, range(parts)))
    launch_rows(_finish_kernel, n,
                [*args[2:8], *args[10:12], view.flat_global, view.flat_shape, view.shape_enabled, m.degenerate_wp,
                 *(PerRow(a) for a in (far, start, delta, prim, tfar))], [global_prim_id, redo_flag], dev, None)
    redo = np.flatnonzero(redo_flag.numpy())
    stats["rays"] += n
    stats["redone"] += int(redo.size)
    if redo.size == 0:
        return
    # The rays Embree could not answer exactly: rayd's Warp search on a compact batch.
    cols = [_rows(a, n) for a in (rays.o, rays.d, rays.tmin, rays.tmax, rays.active, rays.ignore)]
    sub = [np.ascontiguousarray(c[redo]) for c in cols]
    vec = [wp.array(sub[i], dtype=wp.vec3, device=dev) for i in (0, 1)]
    scal = [wp.array(sub[i], dtype=dt, device=dev) for i, dt in ((2, float), (3, float), (4, wp.uint8), (5, wp.int32))]
    sub_out = wp.empty(redo.size, dtype=wp.int32, device=dev)
    warp_search(accel, type(rays)(vec[0], vec[1], *scal), sub_out)
    global_prim_id.numpy()[redo] = sub_out.numpy()
