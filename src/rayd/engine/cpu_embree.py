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
  Rays whose shifted origin lies beyond ``FAR * R`` go to Warp (their rounding outgrows the margin), so do rays
  from beyond ``FAR_RAYS * R`` of the centre, and the edge and near-tangent bands of rays from beyond ``FAR_SCALE * R``
  widen with their distance (the Warp path's corners relative to the float32 origin are rounded at ``|o|``;
  :mod:`rayd.engine.cpu_embree_kernels`),
  and so do rays with ``|d|^2`` outside ``[DIR2_MIN, DIR2_MAX]``; scenes of a radius outside
  ``[RADIUS_MIN, RADIUS_MAX]`` never use Embree (its float32 products overflow or underflow), nor do
  geometries moved (by updates) farther than ``CENTRE_MAX * R`` from the search centre (Warp's own rounding there).
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
and brought up to date at a later query: the second on the same geometry (``WARM_QUERIES``),
or the first when its rays (with those Warp answered since the change) reach
``RAYS_PER_FACE`` per face. The grown faces are recomputed by one Warp kernel on all cores
and Embree *refits* its BVHs in place (``RTC_SCENE_FLAG_DYNAMIC``, ``RTC_BUILD_QUALITY_REFIT``)
while the vertices stay within the frame (centre, ``R``; ``FRAME_SLACK``): a loop of update,
``sync()`` and one large query per step runs on Embree; small batches stay on Warp.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from rayd.engine import embree_api
from rayd.engine.cpu_embree_caps import edge_caps, sliver_caps, vertex_caps  # noqa: F401 - tests use them here
from rayd.engine.cpu_embree_grown import DEGENERATE, SLIVER, face_rows, grown_faces

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

#: Geometries whose frame centre lies farther than ``CENTRE_MAX * R`` (largest coordinate) from the origin of the
#: search frame stay on the Warp path: there Warp's float32 search coordinates (and its start ``o + tmin d``) are
#: rounded at ``|centre|``, beyond the bands of this module, which assume Warp's rounding at about ``R``. ``build()``
#: picks a search centre within ``4 R`` of the frame's (rayd.engine.frame.search_centre); a mesh updated far from
#: where it was built leaves it (2e4 R away: 1,960 of 22,080 float64 rays answered unlike the Warp path; 48 R: 0,
#: 160 R: 7 with a widened ``tmin``; tests/torch/test_review25_embree_moved_far.py). ``build()`` again brings it back.
CENTRE_MAX = 16.0

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

#: The frame radius of a scene rebuilt after a change of its geometry, in units of the box's: vertices that
#: later updates move up to this far stay in the frame, and the scene is refitted instead of rebuilt.
FRAME_SLACK = 1.25

#: Rays per face at which a query on a changed geometry updates the Embree scene at once instead of
#: going to Warp (:meth:`EmbreeMirror.ready`; rays Warp answered since the change count too): (refit, new
#: scene). Terrain, 131 k faces, 2 cores: Warp ~0.33 us a ray; a refit ~0.14 us a face, a new scene ~0.45.
RAYS_PER_FACE = (0.5, 1.5)

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
        self.waited_rays = 0  # and their rays
        self.scene = None
        self.edge_scene = None
        self._incoherent = None
        self._faces = None  # (F, 3) int32, the topology (fixed for a TriangleScene)
        self._used = None  # the vertex ids the faces use (None: all)
        self._rows = None  # Embree's faces of the grown points (face_rows)
        self.fresh = True  # no query has run on the current geometry yet (see incoherent_scene)
        self._lock = threading.Lock()  # held by an update (ready) and to count the queries tracing
        self.tracing = 0  # queries in search() now

    def refresh(self) -> None:
        """Mark the scene out of date (called at every refit, i.e. at ``sync()``).

        The Embree scene is brought up to date at a later query (:meth:`ready`): by a refit of its
        BVHs where the topology and the frame allow (:meth:`rebuild`), else by a new scene.
        """
        self.stale = True
        self.waited = 0
        self.waited_rays = 0

    def ready(self, n: int = 0) -> bool:
        """Whether a query of ``n`` rays may use Embree, updating the scene first where due.

        A stale scene is brought up to date once Warp has answered ``WARM_QUERIES`` queries on the
        geometry, or at once when this query's rays and those Warp answered since the last change
        reach ``RAYS_PER_FACE`` per face (the cost of a refit, or of a new scene, against Warp's per
        ray: a loop of update, ``sync()`` and one large query per step runs on Embree).
        """
        if not self.stale:
            return True
        with self._lock:  # one update at a time (compiled torch queries call the engine without ENGINE_LOCK)
            if not self.stale:
                return True
            per_face = RAYS_PER_FACE[0 if self._refittable() else 1]
            if self.waited < WARM_QUERIES and self.waited_rays + n < per_face * self.tri.num_triangles:
                self.waited += 1
                self.waited_rays += n
                return False
            self.rebuild()
            return True

    def _refittable(self) -> bool:
        """A dynamic scene that no query is tracing now (a refit changes it in place; a query in flight
        keeps the scene it took, so a new one is made instead)."""
        return self.scene is not None and self.scene.dynamic and self.tracing == 0

    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The float64 corners of the box of the vertices the faces use."""
        tri = self.tri
        if self._faces is None:
            faces = tri.indices.numpy().reshape(-1, 3)[tri.face_base : tri.face_base + tri.num_triangles]
            self._faces = np.ascontiguousarray(faces, dtype=np.int32)
            used = np.unique(self._faces)
            self._used = None if used.size == tri.points.shape[0] else used
        points = tri.points.numpy()
        used = points if self._used is None else points[self._used]
        if not used.size:
            return np.zeros(3), np.zeros(3)
        return used.min(0).astype(np.float64), used.max(0).astype(np.float64)

    def rebuild(self) -> None:
        """Bring the Embree scenes up to the current ``points``: the grown faces (and sliver rectangles)
        refitted in place when the scene is dynamic, the sliver set is unchanged and the vertices still
        lie within the frame's radius ``R`` (and beyond ``R / 2``) of its centre; else new scenes in a
        frame of the current box: its centre, and ``R`` its largest centre-relative coordinate (times
        ``FRAME_SLACK`` once the geometry has changed: every bound of this module takes ``R`` as a bound
        on the coordinates, so a looser one only widens the margins in proportion)."""
        tri = self.tri
        lo, hi = self._bounds()
        keep = False
        if GROWN and self._refittable():
            reach = float(np.maximum(np.abs(hi - self.centre), np.abs(lo - self.centre)).max())
            keep = 0.5 * self.radius <= reach <= self.radius
        if not keep:
            self.centre = 0.5 * (lo + hi)
            self.radius = float((0.5 * (hi - lo)).max())  # the largest centre-relative coordinate (exact)
            if GROWN and self.scene is not None:  # a changed geometry: room for the next changes' refits
                self.radius *= FRAME_SLACK
        # (and a frame far from the search frame's origin -- a mesh updated far from where it was built, whose
        # float32 search coordinates Warp rounds beyond this module's bands -- stays on Warp: CENTRE_MAX)
        self.in_range = (RADIUS_MIN <= self.radius <= RADIUS_MAX
                         and float(np.abs(self.centre).max()) <= CENTRE_MAX * self.radius)
        self._incoherent = None
        self.edge_scene = None
        self.fresh = True
        if not self.in_range:  # Warp answers every query on this geometry (no Embree scene)
            self.scene = None
            self.stale = False
            return
        self.grown = GROWN
        if GROWN:
            # One non-robust Embree scene of the grown faces (geomID 0) and the sliver rectangles
            # (geomID 1): see rayd.engine.cpu_embree_grown.
            gp, table, flag, gs, longest = grown_faces(tri.points, tri.indices, tri.face_base, tri.num_triangles,
                                                       self.centre, GROW * self.radius)
            if self._rows is None:
                self._rows = face_rows(tri.num_triangles)
            meshes = [(gp, self._rows)] + ([gs] if gs is not None else [])
            self.grown_table = wp.array(table, dtype=wp.float32, device=tri.device)
            degenerate = flag == DEGENERATE
            if keep:  # the grown faces refitted; the sliver rectangles too, or replaced where their set changed
                self.scene.update(meshes)
            else:
                self.scene = _commit(*meshes, robust=False, dynamic=True)
        else:
            points = tri.points.numpy().astype(np.float64) - self.centre
            faces = self._faces
            a, b, c = points[faces[:, 0]], points[faces[:, 1]], points[faces[:, 2]]
            degenerate = ~np.any(np.cross(b - a, c - a) != 0.0, axis=1)
            r = CAP * self.radius
            slivers = sliver_caps(a, b, c, r, ~degenerate)
            # 1: degenerate (a miss in rayd), 2: a sliver (the engines may disagree anywhere on it):
            # a ray whose Embree winner is either is re-searched by Warp.
            flag = np.where(degenerate, 1, np.where(slivers[0], 2, 0)).astype(np.uint8)
            longest = np.sqrt(max(float(np.max(np.sum((x - y) ** 2, 1), initial=0.0)) for x, y in ((a, b), (b, c), (c, a))))
            # One Embree scene: the triangles (geomID 0), the vertex caps (geomID 1) and the sliver
            # caps (geomID 2): a ray whose closest hit is a cap passes near a vertex or through a
            # sliver before any other triangle (or misses them all).
            used = points if self._used is None else points[self._used]
            meshes = [(np.ascontiguousarray(points, dtype=np.float32), faces), vertex_caps(used, r)]
            if slivers[0].any():
                meshes.append(slivers[1:])
            # (The edge caps in the scene above doubled every ray's walk: terrain 26 -> 52-58 ms, 1 thread.)
            self.grown_table = wp.zeros((1, 4), dtype=wp.float32, device=tri.device)
            self.scene = _commit(*meshes, robust=True)
        # The edge caps (both modes): a scene of their own that only Embree's misses are traced through,
        # built after the first query with a miss (:meth:`build_edge_scene`): a ray running along a
        # (boundary) edge within rounding of it, at a grazing angle, may miss every grown face too
        # (tests/torch/test_offface23_float64.py, slope 1e-6 along an edge 1e-6 inside the face).
        self._nondegenerate = ~degenerate
        self.graze = TANGENT * self.radius * longest if TANGENT_CHECK else 0.0
        self.degenerate = wp.array(flag, dtype=wp.uint8, device=tri.device)
        self.any_flagged = bool(flag.any())
        self._meshes = meshes
        self.fn = embree_api.intersect16_pointer()
        self.stale = False

    def build_edge_scene(self) -> None:
        """Build the scene of the edge caps (:func:`edge_caps`; with ``GROWN``, also the true faces,
        robust mode), traced for the rays that miss."""
        if self.edge_scene is None:
            rel = self.tri.points.numpy().astype(np.float64) - self.centre
            meshes = [edge_caps(rel, self._faces, EDGE_CAP * self.radius, self._nondegenerate)]
            if self.grown:
                # and the true faces in robust mode: a ray so near-tangent to a face (cos below the
                # non-robust test's rounding over the margin) that it missed the grown copies is caught
                # here when it truly crosses one (a hit here sends the ray to Warp)
                meshes.append((np.ascontiguousarray(rel, dtype=np.float32), self._faces))
            self.edge_scene = embree_api.Scene(meshes)

    def incoherent_scene(self) -> embree_api.Scene:
        """The scene for incoherent batches: the same meshes in one BVH of high build quality, triangles
        and caps together (sorted sphere, shadow_test: 115-121 -> 101-106 ms CPU; the two-level
        :attr:`scene` stays the one for coherent batches, where it was 30 % faster). Built at an incoherent
        batch on a geometry that an earlier query already ran on: the first query after each change
        (a loop of update, ``sync()`` and one query) traces the refitted :attr:`scene` instead."""
        if self._incoherent is None:
            if self.fresh:
                return self.scene
            self._incoherent = embree_api.Scene(self._meshes, quality=embree_api.BUILD_QUALITY_HIGH, robust=not self.grown,
                                                argument_filter=bool(self.grown))
        return self._incoherent


def _commit(*meshes: tuple[np.ndarray, np.ndarray], robust: bool = True, dynamic: bool = False) -> embree_api.Scene:
    """A committed Embree scene of meshes ``(vertices (V, 3) float32, faces (F, 3) int32)`` (geomID = position
    in ``meshes``), robust mode or non-robust with argument filters; ``dynamic``: refittable in place
    (:meth:`rayd.engine.embree_api.Scene.update`)."""
    # Build quality LOW: one BVH per geometry under a top level (Embree's two-level mode), so the
    # caps (small, clustered at the vertices) do not slow the walk over the triangles: 35 -> 24.5 ms
    # (terrain, 1 thread; one merged BVH over triangles and caps: 35; triangles alone: 22).
    return embree_api.Scene(meshes, quality=embree_api.BUILD_QUALITY_LOW, geometry_quality=embree_api.BUILD_QUALITY_MEDIUM,
                            robust=robust, argument_filter=not robust, dynamic=dynamic)


def mirror(tri) -> EmbreeMirror:
    """The :class:`EmbreeMirror` of ``tri`` (made on first use, marked stale by refits)."""
    m = getattr(tri, "cpu_mirror", None)
    if m is None:
        m = EmbreeMirror(tri)
        tri.cpu_mirror = m
    return m


def usable(accel, n: int = 0) -> bool:
    """Whether :func:`search` can serve ``accel`` (CPU, flat triangles only, Embree active) for a
    query of ``n`` rays (:meth:`EmbreeMirror.ready`)."""
    if not (active() and accel.device.is_cpu and accel.instances is None and accel.flat is not None):
        return False
    if accel.flat.num_triangles > MAX_TRIANGLES:
        return False
    m = mirror(accel.flat)
    return m.ready(n) and m.in_range


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
    """Closest (or any) hit per ray on the CPU through Embree (:func:`_search`), counted as a query in
    flight on the mirror while it runs, so that no update refits the Embree scene it traces."""
    m = mirror(accel.flat)
    with m._lock:
        m.tracing += 1
    try:
        _search(accel, m, rays, global_prim_id, warp_search)
    finally:
        with m._lock:
            m.tracing -= 1


def _search(accel, m: EmbreeMirror, rays, global_prim_id, warp_search) -> None:
    """Closest (or any) hit per ray on the CPU through Embree; see the module docstring.

    One Warp kernel per chunk of rays prepares Embree's rays, traces them 16 at a time
    (``rtcIntersect16``, or ``rtcIntersect8`` twice: :func:`rayd.engine.embree_api.packet_width`) and checks each winner, a packet at a time in C++
    (:func:`rayd.engine.cpu_embree_kernels._search16`); the chunks run on all cores.

    Args:
        accel: a :class:`SceneAccel` for which :func:`usable` holds.
        m: its mirror (:func:`mirror`).
        rays: the :class:`RayBatch` (length N or 1 per array).
        global_prim_id: int32 (N,) output.
        warp_search: ``warp_search(accel, rays, out)`` runs rayd's Warp search (closest or
            any hit) on a ray batch.
    """
    n = global_prim_id.shape[0]
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
    m.fresh = False  # (a later incoherent batch on this geometry gets the scene of high quality)
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
