"""`TriangleScene`: a BVH over triangles with conservatively padded boxes."""

from __future__ import annotations

import os

import warp as wp

from rayd.engine import wide_q
from rayd.engine.bvh_nodes import MAX_DEPTH, read_nodes
from rayd.engine.pair_nodes import MAX_LEAF, PairNodes
from rayd.engine.ploc import PlocBvh
from rayd.engine.refit import FusedRefit, magnitude_final_command, magnitude_zeroed
from rayd.engine.runtime import LaunchCache, carve, launch_once, launch_stream
from rayd.engine.wide_nodes import WideNodes
from rayd.engine.wide_refit import WideRefit, per_thread, tri_refit
from rayd.engine.wide_refit_tris import folds_magnitude, recorder

#: BVH construction used by ``build()``: ``"auto"`` is ``"ploc"`` for the flat BVH of a
#: CUDA scene (built on the device in milliseconds; with the ``ww`` walk it traces within
#: 1.03-1.06x of the best tree measured, H200 session 12) and ``"sah"`` (Warp's, on the
#: host) on the CPU and for the meshes that instances share (their walks were measured
#: over SAH trees).
DEFAULT_BVH_CONSTRUCTOR = "auto"

#: Optional GPU builder (issue 18, route 5): ``RAYD_BVH_CONSTRUCTOR=cubql`` (or
#: :func:`set_bvh_constructor`) builds CUDA triangle BVHs with Warp 1.19's cuBQL
#: binned-SAH builder, ``CUBQL_LEAF_SIZE`` triangles per leaf; off by default
#: (experimental in Warp). Scenes of fewer than ``CUBQL_MIN_TRIANGLES`` triangles, and
#: every CPU scene, keep the host SAH builder: a single-leaf cuBQL tree once made an
#: edge search hang on the H200.
#: ``"ploc"``: rayd's own builder on the scene's device, CPU or CUDA (``ploc.py``: PLOC
#: over 63-bit Morton keys, leaves of up to ``ploc.MAX_LEAF`` triangles by SAH); no
#: ``wp.Bvh`` is made (:attr:`TriangleScene.bvh` is ``None``) and the refit is always
#: ``refit.FusedRefit``. Off by default until measured on the H200.
#: ``"lbvh"``: Warp's CUDA LBVH (30-bit Morton keys; for comparison, CPU scenes keep SAH).
CONSTRUCTORS = ("auto", "sah", "cubql", "ploc", "lbvh")
CUBQL_LEAF_SIZE = 2
CUBQL_MIN_TRIANGLES = 4096
_constructor = os.environ.get("RAYD_BVH_CONSTRUCTOR", DEFAULT_BVH_CONSTRUCTOR).strip().lower()
if _constructor not in CONSTRUCTORS:
    raise ValueError(f"rayd.engine: RAYD_BVH_CONSTRUCTOR must be one of {CONSTRUCTORS}, got {_constructor!r}")


def set_bvh_constructor(name: str) -> None:
    """Choose the builder of triangle BVHs built from now on: ``"auto"`` (the default: see
    :data:`DEFAULT_BVH_CONSTRUCTOR`), ``"sah"`` (Warp's, on the host), ``"cubql"`` (Warp's cuBQL, CUDA only), ``"lbvh"`` (Warp's LBVH, CUDA only) or ``"ploc"``
    (rayd's, on the scene's device).

    Args:
        name: the builder.

    Raises:
        ValueError: if ``name`` is none of :data:`CONSTRUCTORS`.
    """
    global _constructor
    if name not in CONSTRUCTORS:
        raise ValueError(f"rayd.engine.set_bvh_constructor(): 'name' must be one of {CONSTRUCTORS}, got {name!r}")
    _constructor = name


def bvh_constructor() -> str:
    """The builder scenes built now get (before the CPU and size guards)."""
    return _constructor

#: Triangles per BVH leaf (at most); see benchmarks/README.md for the measurement.
LEAF_SIZE = int(os.environ.get("RAYD_BVH_LEAF_SIZE", "1"))

#: Node layout the closest/any-hit search walks (read when a scene is built):
#: ``"pair"`` (rayd's child-pair nodes, ``pair_nodes.py``), ``"warp"`` (Warp's own
#: nodes, one box per node) or ``"wide4"`` (the pair nodes plus 4-wide nodes collapsed from
#: them, ``wide_nodes.py``: flat scenes walk the wide nodes, instances keep the pair walk).
#: ``"auto"`` (the default) is ``"wide4"`` for the flat BVH of a CUDA scene (H200 session 12,
#: PLOC trees: closest hit 0.98x terrain 2M, 0.89x sphere 1M of ``"pair"`` with its ``ww`` walk;
#: update 1.1-1.2x) and ``"pair"`` on the CPU and for the meshes that instances share.
#: ``"wide4q"``: ``"wide4"`` whose flat walk reads compressed copies of the wide nodes (8-bit child
#: boxes, 64 bytes a node, ``wide_q.py``; the same winners). ``RAYD_BVH_LAYOUT`` sets the default;
#: :func:`set_bvh_layout` changes it for scenes built afterwards (the kinds may live in one process, for A/B).
LAYOUTS = ("auto", "pair", "warp", "wide4", "wide4q")
_WIDE = ("wide4", "wide4q")
_layout = os.environ.get("RAYD_BVH_LAYOUT", "auto").strip().lower()
if _layout not in LAYOUTS:
    raise ValueError(f"rayd.engine: RAYD_BVH_LAYOUT must be one of {LAYOUTS}, got {_layout!r}")


def set_bvh_layout(name: str) -> None:
    """Choose the node layout of triangle BVHs built from now on (one of :data:`LAYOUTS`).

    Raises:
        ValueError: if ``name`` is none of :data:`LAYOUTS`.
    """
    global _layout
    if name not in LAYOUTS:
        raise ValueError(f"rayd.engine.set_bvh_layout(): 'name' must be one of {LAYOUTS}, got {name!r}")
    _layout = name


def bvh_layout() -> str:
    """The node layout scenes built now get."""
    return _layout


#: Walk of the flat search over pair nodes (``pair_walk.py``; read when a scene is built):
#: ``"auto"`` (the default: ``"ww"`` on CUDA, where it traced the SAH tree 1-7 % and the PLOC
#: tree 22-30 % faster than ``"ifif"`` on the H200, session 12; ``"ifif"`` on the CPU),
#: ``"ifif"`` (``pair_walk``'s one loop) or ``"ww"`` (while-while: the same hits bit
#: for bit, the warp's lanes test leaves together). The speculative ``"wws"`` and the
#: one-triangle-per-iteration ``"one"`` were measured slower on the H200 and removed (session 13;
#: benchmarks/README.md, "Goals on one H200", session 12's attempts). ``RAYD_PAIR_WALK`` sets the
#: default; :func:`set_pair_walk` changes it.
PAIR_WALKS = ("auto", "ifif", "ww")
_pair_walk = os.environ.get("RAYD_PAIR_WALK", "auto").strip().lower()
if _pair_walk not in PAIR_WALKS:
    raise ValueError(f"rayd.engine: RAYD_PAIR_WALK must be one of {PAIR_WALKS}, got {_pair_walk!r}")


def set_pair_walk(name: str) -> None:
    """Choose the flat search walk of pair-layout scenes built from now on (``"auto"``, ``"ifif"`` or ``"ww"``).

    Raises:
        ValueError: for another name.
    """
    global _pair_walk
    if name not in PAIR_WALKS:
        raise ValueError(f"rayd.engine.set_pair_walk(): 'name' must be one of {PAIR_WALKS}, got {name!r}")
    _pair_walk = name


def pair_walk() -> str:
    """The flat search walk scenes built now get."""
    return _pair_walk


#: Refit of pair-layout BVHs: ``"fused"`` (``refit.py``: magnitude by a reduction, one
#: bottom-up kernel that also refreshes the pair nodes and leaf triangles) or
#: ``"warp"`` (per-vertex ``atomic_max``, Warp's refit, then a copy into the pair
#: nodes: the path before issue 18). ``RAYD_REFIT`` sets the default.
REFITS = ("fused", "warp")
_refit = os.environ.get("RAYD_REFIT", "fused").strip().lower()
if _refit not in REFITS:
    raise ValueError(f"rayd.engine: RAYD_REFIT must be one of {REFITS}, got {_refit!r}")


def set_refit(name: str) -> None:
    """Choose the refit of triangle BVHs built from now on (``"fused"`` or ``"warp"``)."""
    global _refit
    if name not in REFITS:
        raise ValueError(f"rayd.engine.set_refit(): 'name' must be one of {REFITS}, got {name!r}")
    _refit = name


def refit_kind() -> str:
    """The refit scenes built now get."""
    return _refit


#: 1: a scene's wide-only refit (``wide_refit.WideRefit``: its leaf lists, a scan and two host
#: reads) is set up at build; 0 (default): at its first refit, so ``build()`` waits for the device fewer times
#: (issue 18, "build"; the first ``sync()`` after a build pays it instead). ``RAYD_EAGER_WIDE_REFIT``
#: (session 20, one H200, ``benchmarks/results/h200-session20/``: with the other build switches, ``build()``
#: terrain 2 M 12.39 -> 10.37 ms, sphere 1 M 13.37 -> 11.33 ms, medians of 10, the same tree).
EAGER_WIDE_REFIT = int(os.environ.get("RAYD_EAGER_WIDE_REFIT", "0"))

#: Boxes are padded by this fraction of the scene's magnitude (largest absolute
#: coordinate plus extent), so that slab tests rounded in float32 never reject a ray
#: through a shared edge or vertex lying on a box face: a watertight triangle test
#: needs a conservative traversal (Woop et al. 2013, sec. 4; Ize 2013).
BOX_PADDING = wp.constant(1.0e-5)

# Bounds kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})


@wp.kernel
def _padded_bounds_kernel(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    face_base: int,
    magnitude: wp.array(dtype=float),
    lowers: wp.array(dtype=wp.vec3),
    uppers: wp.array(dtype=wp.vec3),
):
    f = wp.tid()
    pad = magnitude[0] * (2.0 * BOX_PADDING) + 1.0e-30
    a = points[indices[3 * (face_base + f)]]
    b = points[indices[3 * (face_base + f) + 1]]
    c = points[indices[3 * (face_base + f) + 2]]
    lo = wp.min(wp.min(a, b), c)
    hi = wp.max(wp.max(a, b), c)
    grow = wp.vec3(pad, pad, pad)
    lowers[f] = lo - grow
    uppers[f] = hi + grow


@wp.kernel
def _magnitude_kernel(points: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    p = points[wp.tid()]
    wp.atomic_max(out, 0, wp.max(wp.max(wp.abs(p[0]), wp.abs(p[1])), wp.abs(p[2])))


class TriangleScene:
    """A BVH over ``F`` triangles ``indices[3 (face_base + f) + k]`` of ``points``.

    The tree is a ``wp.Bvh`` (:attr:`bvh`) or, with the ``"ploc"`` builder, a
    ``ploc.PlocBvh`` (:attr:`tree`); either way :attr:`nodes` views it in Warp's node
    layout, which every rayd kernel reads.

    The frontend owns the storage: ``points`` is a Warp ``vec3`` view of a float32
    buffer the frontend fills at build time and refreshes before ``refit()``;
    ``indices`` is a flat int32 view of a triangle list (vertex ids into ``points``).
    Several scenes may share ``points``/``indices`` with different ``face_base``.

    Args:
        points: ``wp.array(dtype=wp.vec3)`` of shape (V,), contiguous.
        indices: ``wp.array(dtype=wp.int32)``, contiguous.
        stream: the stream to build on (``None`` on the CPU).
        num_triangles: F (default: all of ``indices``); faces ``face_base ..
            face_base + F - 1`` are covered.
        face_base: first face of ``indices`` that this BVH covers.
        bvh_constructor: ``"sah"``, ``"median"``, ``"lbvh"``, ``"cubql"`` (these two CUDA
            only) or ``"ploc"`` (``ploc.py``; default: :func:`bvh_constructor`, with its guards).
        layout: one of :data:`LAYOUTS` (default: :func:`bvh_layout`); with ``"pair"``, ``"wide4"`` and
            ``"wide4q"``, :attr:`pairs` holds the child-pair nodes; with ``"wide4"`` and ``"wide4q"``,
            :attr:`wide` the 4-wide nodes the flat search walks (``None`` where the tree's walk
            could overflow the wide stack: the pair walk then serves); with ``"wide4q"`` they also
            hold compressed copies (``wide.q``, ``wide_q.py``), which the flat search walks instead.
        instanced: the BVH of a mesh that instances share (``"auto"`` builds it by SAH).

    Raises:
        ValueError: if there are no triangles.
    """

    def __init__(
        self,
        points: wp.array,
        indices: wp.array,
        stream: wp.Stream | None = None,
        *,
        num_triangles: int | None = None,
        face_base: int = 0,
        bvh_constructor: str | None = None,
        layout: str | None = None,
        instanced: bool = False,
    ) -> None:
        if num_triangles is None:
            num_triangles = indices.size // 3
        if num_triangles <= 0:
            raise ValueError(f"rayd.engine.TriangleScene(): needs at least one triangle, got {num_triangles}")
        self.device = points.device
        self.points = points
        self.indices = indices
        self.num_triangles = num_triangles
        self.face_base = face_base
        leaf_size = LEAF_SIZE
        self.version = 0  # counts refits (caches of per-node data compare it)
        self.instanced = instanced
        self.lazy_refit = True  # wide-only refits allowed (SceneAccel: not with instances, whose walks read the rest)
        self.stale = False  # a wide-only refit left the binary, per-face and pair boxes for complete()
        # a query read the binary / per-face / pair boxes (complete()) since the last refit: the next
        # refit is a full one, so a scene queried that way after every update pays no completion
        self._full_reader = False
        self._stale_stream = None
        self._wide_refits: dict[str, WideRefit] = {}  # wide-only refits, by what a thread starts from
        self.walk = _pair_walk  # the flat search's walk over the pair nodes
        if self.walk == "auto":
            self.walk = "ifif" if self.device.is_cpu else "ww"
        if bvh_constructor is None:
            bvh_constructor = _constructor
            if bvh_constructor == "cubql" and num_triangles < CUBQL_MIN_TRIANGLES:
                bvh_constructor = "sah"
        if bvh_constructor == "auto":
            bvh_constructor = "sah" if self.device.is_cpu or instanced else "ploc"
        if self.device.is_cpu and bvh_constructor in ("lbvh", "cubql"):
            bvh_constructor = "sah"
        if bvh_constructor == "cubql":
            leaf_size = max(LEAF_SIZE, CUBQL_LEAF_SIZE)
        self.constructor = bvh_constructor
        # (one allocation: runtime.carve; the boxes are written whole by _bounds, the magnitude's arrays zeroed)
        self.lowers, self.uppers, self.magnitude, self._partial = carve(
            self.device, [(wp.vec3, num_triangles), (wp.vec3, num_triangles), (float, 1), (float, 256)])
        self.magnitude.zero_()
        self._partial.zero_()  # (zero between refits: magnitude_zeroed)
        self._launches = LaunchCache()  # the refit's recorded launches
        self._final = None  # the magnitude's second pass, recorded at its first replay (refit.magnitude_final_command)
        layout = _layout if layout is None else layout
        if layout == "auto":
            layout = "pair" if self.device.is_cpu or instanced else "wide4"
        self._reduce = layout in ("pair", *_WIDE) and _refit == "fused"
        if bvh_constructor == "ploc":
            self._reduce = True  # the fused refit is the only refit of a tree without a wp.Bvh
        with launch_stream(self.device, stream):
            self._bounds(stream)
            self.bvh = self.tree = None
            if bvh_constructor == "ploc":
                self.tree = PlocBvh(self.lowers, self.uppers, stream,
                                    triangles=(points, indices, face_base) if layout in ("pair", *_WIDE) else None)
                self.nodes = self.tree.nodes
                if self.nodes.depth > MAX_DEPTH:
                    self.tree = None
                    bvh_constructor = self.constructor = "median"
            if self.tree is None:
                self.bvh = wp.Bvh(self.lowers, self.uppers, constructor=bvh_constructor, leaf_size=leaf_size)
                self.nodes = read_nodes(self.bvh, num_triangles)
            if self.nodes.depth > MAX_DEPTH:
                # Degenerate inputs can make SAH trees deeper than the traversal stack:
                # a median split is balanced (depth about log2 F).
                self.bvh = wp.Bvh(self.lowers, self.uppers, constructor="median", leaf_size=leaf_size)
                self.nodes = read_nodes(self.bvh, num_triangles)
            self.pairs = self.wide = None
            emitted = self.tree.pairs if self.tree is not None else None
            if emitted is not None:  # written by the PLOC build itself
                self.pairs = PairNodes.from_arrays(self.nodes, points, indices, face_base, emitted.number,
                                                   emitted.boxes, emitted.root, emitted.tris)
            elif layout in ("pair", *_WIDE) and leaf_size <= MAX_LEAF:
                self.pairs = PairNodes(self.nodes, points, indices, face_base, stream)
            if layout in _WIDE and self.pairs is not None:
                self.wide = WideNodes(self.pairs, self.nodes.depth, stream)
                if not self.wide.ok:
                    self.wide = None
                elif layout == "wide4q":
                    wide_q.attach(self.wide, stream)
            self.fused = None
            if self.tree is not None:
                self.fused = FusedRefit(self.nodes, self.tree.parents, num_triangles,
                                        self.tree.leaf_nodes if emitted is not None else None)
            elif self.pairs is not None and self._reduce and FusedRefit.applies(self.bvh, self.nodes, num_triangles):
                self.fused = FusedRefit.from_bvh(self.bvh, self.nodes, num_triangles)
            per = per_thread(tri_refit())
            if EAGER_WIDE_REFIT and per is not None and not instanced and WideRefit.applies(self):
                self._wide_refits[per] = WideRefit(self, per, stream, recorder(per))  # (else at the first such refit)

    @property
    def id(self) -> int:
        """The ``wp.Bvh`` id (0 for a tree rayd built itself: rayd's kernels read :attr:`nodes`)."""
        return 0 if self.bvh is None else self.bvh.id

    @property
    def magnitude_partials(self) -> tuple[wp.array, wp.array] | None:
        """``(partial, magnitude)``: float32 (256,) and (1,) device arrays that a caller placing *every*
        point of :attr:`points` may fold the scene magnitude into (``assemble.place_points(...,
        magnitude=...)``: it clears ``magnitude`` and folds each point into ``partial``) before
        ``refit(partials_ready=True)``, which then skips its own pass over the points; ``None`` where
        this scene measures its magnitude otherwise."""
        return (self._partial, self.magnitude) if self._reduce else None

    def _bounds(self, stream: wp.Stream | None, partials_ready: bool = False) -> None:
        # The padding follows the current magnitude, measured on the device (no host
        # read), so a refit to a much larger or farther scene stays watertight.
        self._magnitude(stream, partials_ready)
        launch_once(_padded_bounds_kernel, self.num_triangles,
                    [self.points, self.indices, self.face_base, self.magnitude, self.lowers, self.uppers],
                    self.device, stream)

    def _magnitude(self, stream: wp.Stream | None, partials_ready: bool = False, final: bool = True) -> None:
        if self._reduce and partials_ready and final:  # the usual sync(): the second pass alone, replayed
            if self._final is None:
                self._final = magnitude_final_command(self._partial, self.magnitude)
            self._final.launch(None if self.device.is_cpu else stream)
        elif self._reduce:
            magnitude_zeroed(self.points, self.magnitude, self._partial, stream, self._launches, partials_ready,
                             final)
        else:
            self.magnitude.zero_()
            wp.launch(_magnitude_kernel, self.points.shape[0], [self.points], [self.magnitude],
                      device=self.device, stream=stream)

    def refit(self, stream: wp.Stream | None = None, partials_ready: bool = False) -> None:
        """Refit the BVH (and its box padding) to the current contents of ``points`` (topology unchanged).

        Args:
            stream: the stream to launch on (``None`` on the CPU).
            partials_ready: the caller folded every point into :attr:`magnitude_partials` already.

        With the fused refit (``RAYD_TRI_REFIT=full``) this is three launches replayed from records, no memset,
        no host read: the magnitude's two passes (one if ``partials_ready``) and the climb, which also
        writes the pair nodes, leaf triangles and wide nodes. With a wide-only refit (``RAYD_TRI_REFIT=wide_tris``, the
        default, or ``wide`` and the others of ``wide_refit.py``) the flat tree of a scene without instances that has wide nodes (the CUDA
        default layout) gets a wide-only refit instead and is left :attr:`stale` until
        :meth:`complete` -- unless a query needed :meth:`complete` since the previous refit (closest
        point, all hits, winding numbers, ...): then this refit is a full one, so a scene queried that
        way after every update pays the full refit only, not a wide refit and a completion. The wide-only
        refits ``"wide_tris"`` and ``"wide_tris_r"`` (``wide_refit_tris.py``) fold the magnitude's partial
        maxima in their first launch (the magnitude's second pass is not launched separately).
        """
        self.stale = False
        if self.fused is not None:  # (every launch names its stream: no scoped stream needed)
            name = tri_refit()
            per = per_thread(name)
            full_reader, self._full_reader = self._full_reader, False
            wide = (per is not None and self.lazy_refit and not self.instanced and not full_reader
                    and WideRefit.applies(self))
            # (the "wide_tris" refits fold the magnitude's partial maxima in their first launch)
            self._magnitude(stream, partials_ready, final=not (wide and folds_magnitude(name)))
            if wide:
                if per not in self._wide_refits:
                    self._wide_refits[per] = WideRefit(self, per, stream, recorder(per))
                self._wide_refits[per].run(self, stream)
                if not self._wide_refits[per].quantises:  # (the default "wide_tris" quantises in its climb)
                    wide_q.quantise(self.wide, stream)
                self.stale, self._stale_stream = True, stream
            else:
                self.fused.run(self, stream)
                if self.wide is not None and not FusedRefit.writes_wide(self):
                    self.wide.refresh(stream)
                if self.wide is not None:
                    wide_q.quantise(self.wide, stream)  # (no-op without compressed nodes)
        else:
            with launch_stream(self.device, stream):
                self._bounds(stream, partials_ready)
                self.bvh.refit()
                if self.pairs is not None:
                    self.pairs.refresh(stream)
                if self.wide is not None:
                    self.wide.refresh(stream)
                    wide_q.quantise(self.wide, stream)
        self.version += 1
        mirror = getattr(self, "cpu_mirror", None)
        if mirror is not None:  # a CPU accelerator's copy (rayd.engine.cpu_embree): rebuilt here, at sync()
            mirror.refresh()

    def complete(self, stream: wp.Stream | None = None) -> None:
        """Bring up to date what the last refit left stale (:attr:`stale`: a wide-only refit,
        ``wide_refit.py``, wrote only the wide nodes and leaf triangles): Warp's node boxes, the
        per-face boxes (:attr:`lowers`, :attr:`uppers`) and the pair nodes, by the fused refit from
        the same points and magnitude (bit-equal to a full refit). No-op when nothing is stale.

        Args:
            stream: the stream of the query that needs them (``None`` on the CPU).

        Every call (stale or not) also notes that the boxes were needed since the last refit, which
        makes the next :meth:`refit` a full one.
        """
        self._full_reader = True
        if self.stale:
            self.fused.run(self, stream)
            self.stale = False
