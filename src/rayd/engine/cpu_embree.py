"""Optional CPU accelerator: Intel Embree 4 (the library bundled with ``embreex``) for the search.

On the CPU, :func:`rayd.engine.intersect.search` hands flat scenes (no instances) to
:func:`search` here when ``embreex`` is importable (the default; ``RAYD_CPU_ACCEL=warp``
or :func:`set_enabled` turns it off). Embree picks the closest triangle (packets of 16 rays
called from a Warp kernel, ``rtcIntersect16`` or, where 16-ray packets are not native (AVX2), ``rtcIntersect8`` on
each half: :func:`rayd.engine.embree_api.native_width`); one kernel per chunk of rays
prepares Embree's rays, traces them and checks the winners (:mod:`rayd.engine.cpu_embree_kernels`),
the chunks taken in turn by all cores (:func:`rayd.engine.runtime.run_parallel`); large incoherent
batches are traced in the Morton order of their Embree origins (``SORT_MIN_RAYS``; the order reused
by a later query on the same rays, :func:`rayd.engine.cpu_embree_order.reuse_order`), the answers
put back in place, through a merged BVH of high build quality (:meth:`EmbreeMirror.incoherent_scene`);
coherent batches laid out as the rows of an image (:func:`image_width`) are traced in 4 x 4 tiles of
pixels (``TILE_MIN_RAYS``). rayd's Warp search answers every ray Embree cannot answer exactly, so
the winners are the Warp path's:

- watertightness (``GROWN = 1``, the default since session 24): Embree's scene holds each face grown
  in its plane by ``GROW * R`` (:mod:`rayd.engine.cpu_embree_grown`; per-face vertices, non-robust
  mode, Mitsuba's setting): a ray crossing a face crosses its grown copy well inside, and the copies
  around an edge or a vertex overlap, so Embree's non-robust test does not leak there. The kernel maps
  Embree's barycentric weights back to the true face. A winner crossed clearly outside its true face
  (in the margin, over a neighbour) is traced again without that face (``rtcIntersect1``, an argument
  filter), and the next hit is kept when it passes the checks below within ``GAP * GROW * R`` of the
  first crossing (farther, or a miss: Warp). Faces thinner than ``8 GROW R`` (slivers) are covered by
  a rectangle of their own; a hit on one goes to Warp. ``GROW = 2^-13``: the smallest margin with no
  answer unlike the Warp path's in 1.8 M adversarial grazing rays (``tests/torch/test_cpu_embree_stress.py``;
  ``2^-14``: 3-6 in 800 k). Robust mode with vertex caps, sliver caps and edge caps (``GROWN = 0``,
  ``RAYD_EMBREE_GROWN=0``) is kept for measurements: Embree 4.4's robust test leaks near vertices
  (caps) and, found in session 24, through edges of non-convex meshes (no cap covers that).
  Rays whose shifted origin lies beyond ``FAR * R`` go to Warp (their rounding outgrows the margin),
  and so do rays with ``|d|^2`` outside ``[DIR2_MIN, DIR2_MAX]``; scenes of a radius outside
  ``[RADIUS_MIN, RADIUS_MAX]`` never use Embree (its float32 products overflow or underflow).
- the open interval ``tmin < t < tmax``: the ray keeps ``tnear = 0``: the
  origin moves to ``o + (tmin - delta) d`` and Embree searches up to
  ``tmax + delta``; a winner with ``t`` within ``delta / cos`` of ``tmin`` or ``tmax`` (the
  rounding band, where the two engines may disagree; ``cos`` of the ray's angle with the
  winner's face: the origin's rounding moves a near-tangent face's ``t`` by that much, so a
  ray leaving a face at a grazing angle, whose own face lies behind ``tmin`` in float64,
  is not answered by that face) is re-searched by Warp.
  ``delta = BAND * (|o - c| + R) / |d|`` with ``c`` the float64 bounding-box centre
  of the vertices and ``R`` the largest centre-relative coordinate.
- ``ignore`` and disabled meshes: when Embree's winner is the ignored face or lies
  on a disabled mesh, the closest *allowed* face may lie behind it: Warp re-searches
  that ray. Any other winner is also the closest allowed one.
- ties: a hit within ``EDGE`` (barycentric, of the true face) of its face's edges is re-searched by
  Warp, so a ray through a shared edge gets the Warp path's face.
- grazing rays: a miss is traced again through thin *edge caps* (:func:`edge_caps`, a scene of
  their own built after the first query with a miss; until then Warp answers misses): a ray running
  along an edge within rounding of it at a grazing angle (``cos`` below the test's rounding over the
  margin) can miss the grown faces too, and a ray that only grazes a silhouette edge gets the Warp
  path's answer; a hit whose crossing lies within ``TANGENT * R / cos`` of its face's edges (a
  near-tangent ray) is re-searched by Warp.
- degenerate triangles (zero cross product in float64) are misses in rayd: a ray
  whose Embree winner is one is re-searched by Warp.
- a miss of a ray with a zero direction component: Embree culls such a ray lying
  exactly in a box's upper face (its slab test takes ``1/0`` as ``+huge``): Warp
  re-searches it.
- inactive and malformed rays (NaN/inf, zero direction, ``tmax <= tmin``) are misses
  without a search; any hit takes the closest hit (a valid blocker).

Embree sees centre-relative float32 coordinates (vertices and origins minus ``c``,
subtracted in float64). The :class:`EmbreeMirror` attached to a
:class:`~rayd.engine.triangles.TriangleScene` is marked stale by every refit (``sync()``)
and rebuilt at the second query on the same geometry (``WARM_QUERIES``; Embree's refit is
not used, and a rebuild costs several Warp refits): one-shot scenes and update-sync-query
loops stay on the Warp path.
"""

from __future__ import annotations

import os

import numpy as np

from rayd.engine import embree_api
from rayd.engine.cpu_embree_caps import edge_caps, sliver_caps, vertex_caps  # noqa: F401 - tests use them here
from rayd.engine.cpu_embree_grown import grown_faces

try:  # optional dependency: the ``cpu`` extra (its bundled Embree 4 library is what rayd calls)
    import embreex as _embreex

    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # pragma: no cover - depends on the environment
    _embreex = None
    _IMPORT_ERROR = str(exc)

#: Half-width of the rounding band, in units of the centre-relative magnitude along the ray.
BAND = 1.0e-5

#: Vertex-cap radius, in units of the scene's centre-relative radius ``R``: rays passing within
#: ``CAP * R`` (1.5e-5 R) of a vertex before their Embree hit are re-searched by Warp (Embree's
#: leaks, measured, lie within about 1e-7 R of a vertex; float32 rounding at ``|origin| <= 4 R``
#: is about 5e-7 R). Small beside the edges of dense scans (1e-3 R for 871 k triangles).
CAP = 2.0**-16

#: Edge-cap reach, in units of ``R``: rays passing within ``EDGE_CAP * R`` (3.8e-6 R, about 64 float32
#: ulps at ``R``) of an edge without crossing a face before it are re-searched by Warp (a ray that
#: only grazes a silhouette edge is a hit for one test and a miss for the other within rounding).
EDGE_CAP = 2.0**-18

#: Near-tangent hits: a hit whose crossing lies within ``TANGENT * R / cos`` of its face's edges along
#: the face (``cos``: of the angle between the ray and the face) is re-searched by Warp; there the ray
#: runs within rounding of the face's plane up to the edge and the two tests may disagree (1e-6 R,
#: about 16 float32 ulps at ``R``).
TANGENT = 2.0**-20

#: Whether the near-tangent check runs (off: for measurements).
TANGENT_CHECK = True

#: Whether Embree's misses are checked against the edge caps (:func:`edge_caps`); off: grazing rays may
#: answer differently on the Warp and Embree paths (for measurements).
EDGE_CAPS = True

#: Rays whose Embree origin lies farther than ``FAR * R`` from the centre are re-searched by
#: Warp (their float32 rounding would outgrow the caps); origins are moved to the sphere of
#: radius ``1.8 R`` around the centre first, so this is a guard.
FAR = 4.0

#: A hit with a barycentric weight below ``EDGE`` lies on (or within rounding of) an edge,
#: where two faces tie or a boundary edge decides: re-searched by Warp, so that ties resolve
#: as on the Warp path (the same face from both paths, query after query).
EDGE = 2.0**-16

#: Scenes whose centre-relative radius ``R`` lies outside ``[RADIUS_MIN, RADIUS_MAX]`` stay on the
#: Warp path: Embree's float32 robust test overflows (``R^3``: every ray misses from ``R`` about
#: ``2^43``) or underflows (``R^2 |d|``: from ``R`` about ``2^-62`` with ``|d| = 1``), measured on an
#: icosphere; the bounds keep a margin of ``2^7`` on ``R``.
RADIUS_MIN, RADIUS_MAX = 2.0**-20, 2.0**36

#: Rays with ``|d|^2`` outside ``[DIR2_MIN, DIR2_MAX]`` are re-searched by Warp (Embree's products of
#: ``R^2`` and ``|d|`` underflow or overflow float32 at such lengths, with ``R`` in the range above).
DIR2_MIN, DIR2_MAX = 2.0**-80, 2.0**80

#: Flat scenes of more triangles stay on the Warp path (chosen when embreex copied the triangles
#: and caps element by element: 46 s for 871 k triangles; the ctypes build copies each buffer
#: at once, 2-3x faster on the terrain, not re-measured on large scans).
MAX_TRIANGLES = 300_000

#: Queries on a geometry (after ``build()`` or a refit) that Warp answers before the Embree
#: scene is built: building it (triangles and caps) costs several Warp refits, so one-shot
#: and update-every-query scenes never pay it.
WARM_QUERIES = 1

#: Rays per thread-pool chunk (at least, a multiple of 16); the batch is split in ``CHUNKS_PER_CORE`` chunks
#: per core, taken in turn by the pool's threads and the calling thread (a core that another
#: process holds leaves its chunks to the others).
MIN_CHUNK = 4096

#: Chunks per core of a batch (at most; each of at least ``MIN_CHUNK`` rays or one band of 4 image rows;
#: 2 / 4 / 8 per core: terrain 26.7 / 26.9 / 27.4 ms CPU, sphere 81.5 / 81.9 / 86.4, wall alike at load 10).
CHUNKS_PER_CORE = 4

#: 1: a batch of several chunks traced by one launch per core, each taking ``STEAL_STEP`` packets at a
#: time from a shared counter (the same packets: the threads end within ~0.1 ms, where equal chunks left
#: one idle for up to a chunk); 0: the chunks, a launch each.
STEAL, STEAL_STEP = 1, 32

#: Batches of at least this many rays whose packets are mostly incoherent are traced in the Morton
#: order of their Embree origins (a key pass, Warp's radix sort, the rays permuted); others in turn.
SORT_MIN_RAYS = 16384

#: 1: the sort keys of incoherent batches in float32 (where each ray enters the sphere of radius 1.8 R);
#: 0: from the float64 preparation of each ray's Embree origin (the key orders the rays, never an answer).
FAST_KEY = 1

#: Coherent batches of at least this many rays laid out as rows of an image (:func:`image_width`)
#: are traced in 4 x 4 tiles of pixels instead of runs of 16 along a row.
TILE_MIN_RAYS = 4096

#: Sorted batches keep their order and sorted rays for a later query on the same ray arrays holding
#: the same bytes (:func:`rayd.engine.cpu_embree_order.reuse_order`); off: for measurements.
REUSE_ORDER = True

#: 1 (default): a non-robust Embree scene of faces grown by ``GROW * R`` (:mod:`rayd.engine.cpu_embree_grown`);
#: 0 (``RAYD_EMBREE_GROWN=0``, for measurements): robust mode with vertex, sliver and edge caps.
GROWN = int(os.environ.get("RAYD_EMBREE_GROWN", "1"))

#: The margin of the grown faces, in units of ``R`` (2^-13 = 1.2e-4: no answer unlike the Warp path's in 1.8 M
#: adversarial grazing rays; 2^-14: 3-6 in 800 k; re-traced rays 2.4 % of the sphere's, Warp 0.12 %).
GROW = 2.0**-13

#: A ray traced again past a grown face's margin keeps the next hit only within ``GAP * GROW * R`` of it.
GAP = 16.0

#: The grown scene's checks skip the per-face flags (degenerate faces, slivers): those faces are not grown
#: (``s = 0``) and fail the weight check already (off: for measurements).
GROWN_SKIPS_FLAGS = True

#: On by default where embreex imports; ``RAYD_CPU_ACCEL=warp`` (or :func:`set_enabled`) turns it off.
_enabled = os.environ.get("RAYD_CPU_ACCEL", "embree").strip().lower() != "warp"

#: Rays searched by Embree and rays re-searched by Warp since import (for tests and benchmarks).
stats = {"rays": 0, "redone": 0}


def available() -> bool:
    """True when ``embreex`` imported and its Embree 4 library loaded (:mod:`rayd.engine.embree_api`)."""
    return _embreex is not None and embree_api.library() is not None


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
        mode = f"non-robust, faces grown by 2^{np.log2(GROW):.0f} R" if GROWN else "robust + vertex caps"
        return (f"embree (Embree 4 of embreex {ver}, rtcIntersect{embree_api.packet_width()} packets, {mode}, Warp re-search; "
                f"{os.cpu_count() or 1} threads)")
    if _embreex is None:
        return f"warp (embreex not importable: {_IMPORT_ERROR}; pip install rayd-geom[cpu])"
    if not available():
        return f"warp (embreex's Embree library not loadable: {embree_api.error()})"
    return "warp (embreex installed but off: RAYD_CPU_ACCEL=warp or set_enabled(False))"


class EmbreeMirror:
    """Embree scenes over the triangles of a CPU :class:`TriangleScene`, centre-relative.

    ``GROWN``: one non-robust scene of the grown faces (geomID 0) and the sliver rectangles (geomID 1),
    with :attr:`grown_table` (F, 4) float32 mapping Embree's weights back to the true faces. Otherwise
    one robust scene of the triangles (geomID 0), the *vertex caps* (:func:`vertex_caps`, geomID 1)
    that flag the rays passing near a vertex and the sliver caps (geomID 2).

    Args:
        tri: the triangle scene (its ``points`` and ``indices`` are read at each rebuild).
    """

    def __init__(self, tri) -> None:
        self.tri = tri
        self.stale = True
        self.waited = 0  # queries answered by Warp on the current geometry

    def refresh(self) -> None:
        """Mark the scene out of date (called at every refit, i.e. at ``sync()``).

        The rebuild happens at a later query (:meth:`ready`): Embree's refit is not used, and a
        rebuild costs several Warp refits, so a loop of update, ``sync()`` and one query
        per step stays on the Warp path.
        """
        self.stale = True
        self.waited = 0

    def ready(self) -> bool:
        """Whether this query may use Embree, rebuilding first where due: the first
        ``WARM_QUERIES`` queries on a geometry (after ``build()`` or a refit) use Warp."""
        if not self.stale:
            return True
        if self.waited < WARM_QUERIES:
            self.waited += 1
            return False
        self.rebuild()
        return True

    def rebuild(self) -> None:
        """Build and commit both Embree scenes from the current ``points``."""
        tri = self.tri
        points = np.asarray(tri.points.numpy(), dtype=np.float64).reshape(-1, 3)
        faces = tri.indices.numpy().reshape(-1, 3)[tri.face_base : tri.face_base + tri.num_triangles]
        faces = np.ascontiguousarray(faces, dtype=np.int32)
        used = points[np.unique(faces)] if faces.size else points[:0]
        lo, hi = (used.min(0), used.max(0)) if used.size else (np.zeros(3), np.zeros(3))
        self.centre = 0.5 * (lo + hi)
        rel = points - self.centre
        self.radius = float(np.abs(used - self.centre).max()) if used.size else 0.0
        self.in_range = RADIUS_MIN <= self.radius <= RADIUS_MAX
        if not self.in_range:  # Warp answers every query on this geometry (no Embree scene)
            self.stale = False
            return
        a, b, c = rel[faces[:, 0]], rel[faces[:, 1]], rel[faces[:, 2]]
        cross = np.cross(b - a, c - a)
        degenerate = ~np.any(cross != 0.0, axis=1)
        self.grown = GROWN
        self.edge_scene = None
        if GROWN:
            # One non-robust Embree scene of the grown faces (geomID 0) and the sliver rectangles
            # (geomID 1): see rayd.engine.cpu_embree_grown.
            gp, gf, table, gs, longest = grown_faces(a, b, c, GROW * self.radius, degenerate, cross)
            meshes = [(gp, gf)] + ([gs] if gs is not None else [])
            self.grown_table = wp.array(table, dtype=wp.float32, device=tri.device)
            flag = np.where(degenerate, 1, np.where(table[:, 0] == 0.0, 2, 0)).astype(np.uint8)
        else:
            r = CAP * self.radius
            slivers = sliver_caps(a, b, c, r, ~degenerate)
            # 1: degenerate (a miss in rayd), 2: a sliver (the engines may disagree anywhere on it):
            # a ray whose Embree winner is either is re-searched by Warp.
            flag = np.where(degenerate, 1, np.where(slivers[0], 2, 0)).astype(np.uint8)
            longest = np.sqrt(max(float(np.max(np.sum((x - y) ** 2, 1), initial=0.0)) for x, y in ((a, b), (b, c), (c, a))))
            # One Embree scene: the triangles (geomID 0), the vertex caps (geomID 1) and the sliver
            # caps (geomID 2): a ray whose closest hit is a cap passes near a vertex or through a
            # sliver before any other triangle (or misses them all).
            meshes = [(np.ascontiguousarray(rel, dtype=np.float32), faces), vertex_caps(used - self.centre, r)]
            if slivers[0].any():
                meshes.append(slivers[1:])
            # (The edge caps in the scene above doubled every ray's walk: terrain 26 -> 52-58 ms, 1 thread.)
            self.grown_table = wp.zeros((1, 4), dtype=wp.float32, device=tri.device)
        # The edge caps (both modes): a scene of their own that only Embree's misses are traced through,
        # built after the first query with a miss (:meth:`build_edge_scene`): a ray running along a
        # (boundary) edge within rounding of it, at a grazing angle, may miss every grown face too
        # (tests/torch/test_offface23_float64.py, slope 1e-6 along an edge 1e-6 inside the face).
        self._edge_input = (rel, faces, EDGE_CAP * self.radius, ~degenerate)
        self.graze = TANGENT * self.radius * longest if TANGENT_CHECK else 0.0
        self.degenerate = wp.array(flag, dtype=wp.uint8, device=tri.device)
        self.any_flagged = bool(flag.any())
        self.scene = _commit(*meshes, robust=not GROWN)
        self._meshes, self._incoherent = meshes, None
        self.fn = embree_api.intersect16_pointer()
        self.stale = False

    def build_edge_scene(self) -> None:
        """Build the scene of the edge caps (:func:`edge_caps`; with ``GROWN``, also the true faces,
        robust mode), traced for the rays that miss."""
        if self.edge_scene is None:
            meshes = [edge_caps(*self._edge_input)]
            if self.grown:
                # and the true faces in robust mode: a ray so near-tangent to a face (cos below the
                # non-robust test's rounding over the margin) that it missed the grown copies is caught
                # here when it truly crosses one (a hit here sends the ray to Warp)
                rel, faces = self._edge_input[:2]
                meshes.append((np.ascontiguousarray(rel, dtype=np.float32), faces))
            self.edge_scene = embree_api.Scene(meshes)

    def incoherent_scene(self) -> embree_api.Scene:
        """The scene for incoherent batches (built at the first one on this geometry): the same
        meshes in one BVH of high build quality, triangles and caps together (sorted sphere,
        shadow_test: 115-121 -> 101-106 ms CPU; the two-level :attr:`scene` stays the one for
        coherent batches, where it was 30 % faster)."""
        if self._incoherent is None:
            self._incoherent = embree_api.Scene(self._meshes, quality=embree_api.BUILD_QUALITY_HIGH, robust=not self.grown,
                                                argument_filter=bool(self.grown))
        return self._incoherent


def _commit(*meshes: tuple[np.ndarray, np.ndarray], robust: bool = True) -> embree_api.Scene:
    """A committed robust-mode Embree scene of meshes ``(vertices (V, 3) float32, faces (F, 3) int32)``
    (geomID = position in ``meshes``)."""
    # Build quality LOW: one BVH per geometry under a top level (Embree's two-level mode), so the
    # caps (small, clustered at the vertices) do not slow the walk over the triangles: 35 -> 24.5 ms
    # (terrain, 1 thread; one merged BVH over triangles and caps: 35; triangles alone: 22).
    return embree_api.Scene(meshes, quality=embree_api.BUILD_QUALITY_LOW, geometry_quality=embree_api.BUILD_QUALITY_MEDIUM,
                            robust=robust, argument_filter=not robust)


def mirror(tri) -> EmbreeMirror:
    """The :class:`EmbreeMirror` of ``tri`` (made on first use, marked stale by refits)."""
    m = getattr(tri, "cpu_mirror", None)
    if m is None:
        m = EmbreeMirror(tri)
        tri.cpu_mirror = m
    return m


def usable(accel) -> bool:
    """Whether :func:`search` can serve ``accel`` (CPU, flat triangles only, Embree active)."""
    if not (active() and accel.device.is_cpu and accel.instances is None and accel.flat is not None):
        return False
    if accel.flat.num_triangles > MAX_TRIANGLES:
        return False
    m = mirror(accel.flat)
    return m.ready() and m.in_range


import warp as wp  # noqa: E402

from rayd.engine.cpu_embree_kernels import _search16_kernel, _search16_steal_kernel, _trace_kernel  # noqa: E402
from rayd.engine.cpu_embree_order import _incoherent, _permuted, _rows, image_width  # noqa: E402, F401
from rayd.engine.cpu_embree_order import keep_order, reuse_order  # noqa: E402
from rayd.engine import runtime  # noqa: E402
from rayd.engine.runtime import LaunchCache, PerRow, load_once, run_parallel  # noqa: E402


def _buffers(m: EmbreeMirror, n: int, dev) -> dict:
    """Per-batch scratch arrays and recorded launches (``launches``: a :class:`LaunchCache` per chunk
    and pass, about 24 instead of 56 us of host time per launch), reused while ``n`` repeats: taken
    off the mirror for the query (a concurrent query on another thread allocates its own) and put back
    by :func:`search`."""
    cache = m.__dict__.pop("_scratch", None)  # atomic under the GIL
    if cache is None or cache["n"] != n or (n >= SORT_MIN_RAYS and "keys" not in cache):
        cache = {"n": n, "redo": wp.empty(n, dtype=wp.uint8, device=dev),
                 "redo_count": wp.zeros(1, dtype=wp.int32, device=dev), "launches": {},
                 "counter": wp.zeros(1, dtype=wp.int32, device=dev)}
        # NumPy views of the two counters, kept with them (``wp.array.numpy()`` costs ~5 us a call, and
        # ``zero_()`` a Warp memset: 4-5 of them per query)
        cache["redo_count_np"], cache["counter_np"] = cache["redo_count"].numpy(), cache["counter"].numpy()
        if n >= SORT_MIN_RAYS:  # radix_sort_pairs works in arrays of twice the length
            cache.update(keys=wp.empty(2 * n, dtype=wp.int32, device=dev), order=wp.empty(2 * n, dtype=wp.int32, device=dev))
    return cache


def _face_mode(accel, m: EmbreeMirror) -> int:
    """Bits of the per-face checks a query may skip (see :func:`rayd.engine.cpu_embree_kernels._search16`)."""
    view = accel.view_for(None)  # (CPU only)
    identity = getattr(accel, "_cpu_identity", None)
    if identity is None or identity[0] is not view.flat_global:
        g = view.flat_global.numpy()
        identity = (view.flat_global, bool(np.array_equal(g, np.arange(g.shape[0], dtype=g.dtype))))
        accel._cpu_identity = identity
    pending = 8 if EDGE_CAPS and m.edge_scene is None else 0  # misses go to Warp (no edge caps yet)
    # (grown faces: every flagged face has s = 0 in the grown table, so its hits fail the weight check
    # anyway; the per-face flags need not be read)
    flagged = m.any_flagged and not (m.grown and GROWN_SKIPS_FLAGS)
    return (1 if identity[1] else 0) | (2 if view.all_enabled else 0) | (0 if flagged else 4) | pending


def search(accel, rays, global_prim_id, warp_search) -> None:
    """Closest (or any) hit per ray on the CPU through Embree; see the module docstring.

    One Warp kernel per chunk of rays prepares Embree's rays, traces them 16 at a time
    (``rtcIntersect16``, or ``rtcIntersect8`` twice: :func:`rayd.engine.embree_api.packet_width`) and checks each winner, a packet at a time in C++
    (:func:`rayd.engine.cpu_embree_kernels._search16`); the chunks run on all cores.

    Args:
        accel: a :class:`SceneAccel` for which :func:`usable` holds.
        rays: the :class:`RayBatch` (length N or 1 per array).
        global_prim_id: int32 (N,) output.
        warp_search: ``warp_search(accel, rays, out)`` runs rayd's Warp search (closest or
            any hit) on a ray batch.
    """
    n = global_prim_id.shape[0]
    m = mirror(accel.flat)
    view = accel.view_for(None)  # (CPU only)
    dev = accel.device
    buf = _buffers(m, n, dev)
    launch_args = rays.launch_args(n)
    args = [x.array if isinstance(x, PerRow) else x for x in launch_args]
    redo_count, count = buf["redo_count"], buf["redo_count_np"]
    count[0] = 0
    workers = runtime._WORKERS  # (os.cpu_count() reads sysfs: ~10-40 us a call)
    parts = max(1, min(CHUNKS_PER_CORE * workers, n // MIN_CHUNK))
    bounds = [min(n, (n * k // parts + 15) // 16 * 16) for k in range(parts)] + [n]
    cached, cached_order, entry = reuse_order(m, launch_args, n) if n >= SORT_MIN_RAYS and REUSE_ORDER else (None, None, None)
    layout = entry["layout"] if entry is not None and cached is None else None  # (incoherent, width) of these rays
    if cached is not None or layout is not None:
        incoherent = cached is not None or layout[0]
    else:
        incoherent = n >= SORT_MIN_RAYS and _incoherent(rays.d, n)
    sampled = incoherent
    packet = embree_api.packet_width()
    embree_scene = m.incoherent_scene() if incoherent else m.scene
    fixed = [wp.vec3d(*m.centre), m.radius, BAND, view.flat_global, view.flat_shape, view.shape_enabled,
             m.degenerate, _face_mode(accel, m), FAR * m.radius, EDGE, m.graze, DIR2_MIN, DIR2_MAX,
             embree_api.intersect_pointer(packet), embree_scene.ptr, m.edge_scene.ptr if m.edge_scene else 0,
             embree_api.COHERENT_COS, packet, m.grown_table, m.grown, GAP * GROW * m.radius,
             embree_api.intersect_pointer(1)]
    out, redo = global_prim_id, buf["redo"]
    keys = order = global_prim_id  # placeholders outside the key pass
    width = 0

    launches = buf["launches"]  # recorded launches per chunk and pass (this query owns buf)
    load_once(_search16_kernel, dev)  # (before the chunks' first launches on several threads)

    steal = STEAL and parts > 1  # one launch per thread taking STEAL_STEP packets at a time
    if steal:
        load_once(_search16_steal_kernel, dev)

    def launcher(ray_args, key_pass: int):
        def run(k: int) -> None:
            lo, hi = (0, n) if steal else (bounds[k], bounds[k + 1])
            if hi > lo:
                dim = (hi - lo + 15) // 16 if width == 0 else -(-(hi - lo) // (4 * width)) * ((width + 3) // 4)
                cache = launches.get((k, key_pass, steal))
                if cache is None:
                    cache = launches[(k, key_pass, steal)] = LaunchCache()
                a = [*ray_args, *fixed, lo, hi, width, out, redo, redo_count, keys, order, key_pass, FAST_KEY]
                cache.launch(_search16_steal_kernel, 1, [*a, buf["counter"], dim, STEAL_STEP], dev) if steal else \
                    cache.launch(_search16_kernel, dim, a, dev)
        if steal:
            buf["counter_np"][0] = 0
        run_parallel(run, workers if steal else parts)

    sorted_pass = 0
    if n >= TILE_MIN_RAYS and not incoherent:
        width = layout[1] if layout is not None else image_width(rays, n)
        if width:  # chunks of whole bands of 4 rows, traced as 4 x 4 tiles
            bands = -(-n // (4 * width))
            parts = max(1, min(CHUNKS_PER_CORE * workers, bands))
            bounds = [min(n, bands * k // parts * 4 * width) for k in range(parts)] + [n]
    if cached is not None:  # the same rays as an earlier query: its order and sorted rays
        args, order, sorted_pass = cached, cached_order, 2
    elif incoherent:
        # Incoherent batches are traced in the Morton order of their Embree origins, the rays
        # permuted into contiguous arrays (read through the order instead, most of the gain was
        # lost): sphere search 235 -> 99 ms CPU. Coherent ones (camera rows) stay in turn.
        keys, order = buf["keys"], buf["order"]
        launcher(args, 1)
        incoherent = int(count[0])
        count[0] = 0
        if incoherent * 32 > n:  # more than half of the packets (the sample above may err)
            wp.utils.radix_sort_pairs(keys, order, n, end_bit=30)
            args = _permuted(launch_args, order, buf, n, dev)
            sorted_pass = 2  # answers scattered to their rays by the trace kernel itself
        keys = global_prim_id
        if not sorted_pass:
            order = global_prim_id
    launcher(args, sorted_pass)
    if entry is not None:
        if cached is None:
            entry["layout"] = (sampled, width)
        keep_order(m, entry, launch_args, n, order if sorted_pass and cached is None else None, args)
    m._scratch = buf
    stats["rays"] += n
    if int(count[0]) == 0:
        return
    flags = buf["redo"].numpy()
    redo = np.flatnonzero(flags != 0)  # (flatnonzero of the uint8 flags: 0.45 ms for 256 k rays, this 0.04)
    if not redo.size:
        return
    if EDGE_CAPS and m.edge_scene is None and bool(np.any(flags[redo] == 2)):
        m.build_edge_scene()  # a query with misses: the edge caps for the next ones
    stats["redone"] += int(redo.size)
    # The rays Embree cannot answer exactly: rayd's Warp search on a compact batch.
    out_np = global_prim_id.numpy()
    cols = [_rows(a, n) for a in (rays.o, rays.d, rays.tmin, rays.tmax, rays.active, rays.ignore)]
    kinds = (wp.vec3, wp.vec3, wp.float32, wp.float32, wp.uint8, wp.int32)
    sub = [np.ascontiguousarray(c[redo], dtype=_NP[k]) for c, k in zip(cols, kinds)]
    # zero-copy views of the gathered rows (wp.array(ndarray) copied each through its __init__: ~25 us apiece)
    views = [runtime.host_array(x.ctypes.data, k, redo.size, x) for x, k in zip(sub, kinds)]
    if any(v is None for v in views):  # (another Warp's array layout)
        views = [wp.array(x, dtype=k, device=dev) for x, k in zip(sub, kinds)]
    vec, scal = views[:2], views[2:]
    sub_out = wp.empty(redo.size, dtype=wp.int32, device=dev)
    warp_search(accel, type(rays)(vec[0], vec[1], *scal), sub_out)
    out_np[redo] = sub_out.numpy()


#: The NumPy dtype of each Warp type of a ray batch's arrays (the re-search's gathered rows).
_NP = {wp.vec3: np.float32, wp.float32: np.float32, wp.uint8: np.uint8, wp.int32: np.int32}


def trace(scene: embree_api.Scene, o: np.ndarray, d: np.ndarray, tfar: np.ndarray, coherent_cos: float = 2.0) -> dict:
    """Embree's closest hit of NumPy rays (float32 (N, 3) ``o``, ``d``, (N,) ``tfar``), one thread.

    ``coherent_cos``: as :data:`rayd.engine.embree_api.COHERENT_COS` (above 1: never coherent).

    Returns:
        dict of NumPy arrays ``tfar``, ``primID``, ``geomID`` (-1: a miss), ``u``, ``v``.
    """
    n = len(o)
    arrays = [wp.array(np.ascontiguousarray(x, np.float32), dtype=wp.vec3, device="cpu") for x in (o, d)]
    far = wp.array(np.ascontiguousarray(tfar, np.float32), dtype=float, device="cpu")
    out = [wp.full(n, -1, dtype=wp.int32, device="cpu") for _ in range(2)] + [wp.zeros(n, dtype=float, device="cpu")
                                                                             for _ in range(2)]
    wp.launch(_trace_kernel, dim=(n + 15) // 16, inputs=[_fn(), scene.ptr, n, *arrays, far, *out, coherent_cos],
              device="cpu")
    return {"tfar": far.numpy(), **{k: a.numpy() for k, a in zip(("primID", "geomID", "u", "v"), out)}}


def _fn() -> int:
    return embree_api.intersect16_pointer()
