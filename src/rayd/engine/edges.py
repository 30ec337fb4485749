"""`EdgeBvh`: the engine's copy of a scene's edges as segments, with a BVH over them.

Warp's ``wp.Bvh`` answers box, sphere and ray-overlap queries, but its traversal
cannot shrink a search radius as candidates are found, order children by distance,
or keep a per-query top-k bound. Nearest-edge search needs all three, so the search
kernels (:mod:`rayd.engine.nearest_edge`) walk a packed copy of a binary tree:

* the tree comes from one of three builders (``DEFAULT_BUILDER`` per device):

  - ``"sah"`` (CPU default): Warp's SAH tree (``wp.Bvh``) over the segment boxes with
    leaves of up to ``leaf_size`` segments, built by Warp's host builder on every device
    and converted on the host (:mod:`rayd.engine.edge_sah`), then copied to the device:
    the same tree on CPU and CUDA. Its build takes 0.7-1.9 s for 1.6-3.1 M edges; on the
    H200 its trees search 20-25 % faster than the LBVH's on the sphere, as fast on the
    terrain (benchmarks/README.md, "Edges");
  - ``"lbvh"`` (CUDA default): our own Karras 2012 linear BVH over 63-bit Morton codes of
    the segment midpoints in cubic cells (:mod:`rayd.engine.edge_lbvh`), built on the
    device in 3-5 ms, subtrees of up to ``leaf_size`` segments collapsed into one leaf.
  - ``"ploc"`` (opt-in, ``RAYD_EDGE_BVH_BUILDER=ploc`` on CUDA): rayd's PLOC builder
    (:mod:`rayd.engine.ploc`, Meister & Bittner 2018) over the segment boxes padded by
    ``PLOC_PAD`` mean segment lengths, built on the device and converted there
    (:mod:`rayd.engine.edge_ploc`); leaves of up to ``leaf_size`` (at most 8) segments,
    collapsed by SAH.

* packed layout (what the searches read): internal node ``j`` (root 0) is one
  64-byte run holding both children's boxes and their links (as the triangle walk's
  ``pair_nodes.py``): ``node_box[4 j + 0..2] = (lo_a.xyz, hi_a.x), (hi_a.yz, lo_b.xy),
  (lo_b.z, hi_b.xyz)`` and, in the same memory as int32, ``node_link[4 j + 3] =
  (code_a, code_b, count_a, count_b)``: a child with ``count = 0`` is internal node
  ``code``, else a leaf holding the segment slots ``code .. code + count - 1``. A
  visit reads one 64-byte run (four 128-bit loads, one cache line); the children's
  boxes are tested together. Segment slots are in leaf order: ``seg[2 s], seg[2 s + 1]``
  are the endpoints of slot ``s`` (one contiguous run per leaf), ``slot_id[s]`` its
  ``global_edge_id``, or ``-1`` while masked out.
  Masked segments also leave the boxes (an all-masked subtree gets an empty box
  ``lo = +inf, hi = -inf``, which no query enters).

Optionally (``wide=``, ``DEFAULT_WIDE``, ``RAYD_EDGE_WIDE``) the tree also gets a 4-wide copy that point
and top-k searches walk instead (:mod:`rayd.engine.edge_wide`, :mod:`rayd.engine.edge_wide_walk`: the triangle engine's
:class:`~rayd.engine.wide_nodes.WideNodes` over these packed nodes, four children's boxes per
fetch; ``q``: their boxes quantised to 8 bits per plane, 64 bytes a node,
:mod:`rayd.engine.edge_wide_q`); ray searches walk it too (since the 18th session,
``edge_wide_walk.WIDE_RAYS``), so no query reads the binary boxes; the refit refreshes it in one
more launch, or refits the wide tree alone (``refit=``, :mod:`rayd.engine.edge_refit_wide`).

Refit (:meth:`EdgeBvh.refit`), the same for all builders: segments and leaf boxes from
the live endpoints and mask, internal and packed boxes bottom up, in two launches (a slots
launch, then a thread per leaf climbing with atomic counters,
:class:`rayd.engine.tree_refit.TreeRefit`); no host synchronisation.

References:
    Karras 2012, "Maximizing Parallelism in the Construction of BVHs, Octrees,
    and k-d Trees", HPG 2012.
    Wald 2007, "On fast Construction of SAH-based Bounding Volume Hierarchies", RT 2007.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import warp as wp

from rayd.engine.edge_lbvh import Lbvh
from rayd.engine.edge_ploc import PlocEdgeTree
from rayd.engine.edge_wide import EdgeWide
from rayd.engine.edge_sah import warp_tree
from rayd.engine.runtime import launch_stream
from rayd.engine import edge_refit_fused
from rayd.engine.edge_refit_wide import WIDE_MODES, WideRefit
from rayd.engine import edge_leaf_slab
from rayd.engine.tree_refit import TreeRefit, single_leaf_tree

#: Builder used when ``EdgeBvh(builder=None)``, per device kind. On CUDA our LBVH
#: (``edge_lbvh.py``, built on the device in ~5 ms for 3 M edges; Warp's SAH builder runs on
#: the host, 1.5-1.7 s). Since its keys use cubic cells and small subtrees are collapsed into
#: leaves, it reads about as many bytes per query as the SAH tree (terrain 2 M tris, 3.1 M
#: edges: 201 nodes / 437 segments per query with leaves of 8, 273 / 310 with 4, SAH leaves of
#: 4: 257 / 276; the 30-bit per-axis keys of commit 811b89b with one segment per leaf: 562 / 241;
#: benchmarks/README.md, "Edges"). On the CPU the SAH tree is kept (its host build is no slower
#: there, its trees read 7 % fewer bytes on the sphere).
#: ``RAYD_EDGE_BVH_BUILDER`` (``"sah"``, ``"lbvh"`` or ``"ploc"``) overrides the CUDA entry: the SAH tree
#: where the query time matters more than a 1-2 s build (H200, 1 M points: sphere 43.9 -> 33.4 ms,
#: top-8 54.7 -> 42.7 ms; benchmarks/results/h200-edges-12-02/edges_h200_b.txt).
#: ``"ploc"``: the PLOC tree, built on the device: **the CUDA default** since the H200 run of
#: session 13 (with the compressed 4-wide walk, :data:`DEFAULT_WIDE`; sorted search, 1 M points:
#: terrain 2 M 21.4 -> 14.9 ms, sphere 1 M 43.2 -> 33.1 ms, top-8 55.1 -> 43.9 ms against
#: ``lbvh:8``; build 4.4 -> 10.2 ms; benchmarks/results/h200-session13/edges_wide_final.txt).
DEFAULT_BUILDER = {"cpu": "sah", "cuda": os.environ.get("RAYD_EDGE_BVH_BUILDER", "ploc")}
#: Deepest tree the searches walk (their stack size); deeper SAH trees are rebuilt with median splits.
MAX_DEPTH = 64
#: ``wp.Bvh`` constructor of the ``"sah"`` builder on CUDA (``RAYD_EDGE_BVH_CONSTRUCTOR``:
#: ``"sah"``, Warp's host SAH, or ``"cubql"``, its GPU builder, whose tree is then also read
#: back and converted on the host; not validated on CUDA).
CUDA_CONSTRUCTOR = os.environ.get("RAYD_EDGE_BVH_CONSTRUCTOR", "sah")

#: Segments per leaf when ``leaf_size=None``, per builder. LBVH leaves of 8 read 24-26 % fewer
#: nodes than leaves of 4 for 33-41 % more (contiguous) segment tests, and searched 1-36 % faster
#: on the CPU (benchmarks/README.md, "Edges"); to be confirmed on the H200 (``--trees``).
DEFAULT_LEAF_SIZE = {"sah": 4, "lbvh": 8, "ploc": 8}
#: Padding of the segment boxes the ``"ploc"`` builder clusters, as a fraction of the mean
#: segment length (``RAYD_EDGE_PLOC_PAD``; see ``edge_ploc.py``).
PLOC_PAD = float(os.environ.get("RAYD_EDGE_PLOC_PAD", "0.5"))
#: PLOC's neighbour radius for edge trees (``None``: ``ploc.py``'s default, 2) and its SAH costs
#: ``(C_T, C_I)`` = (3, 1) (``RAYD_EDGE_PLOC_NODE_COST``), so leaves of up to 8 collapse more often
#: than with unit costs. Counts of issue-size trees (CPU, benchmarks/README.md "Issue 11, fourth
#: pass"): C_T = 3, leaves of 8 visit 26-30 % fewer nodes than C_T = 1, leaves of 4, for 30-55 %
#: more (contiguous) segment tests, and read the fewest bytes per query (C_T = 2: 0-1 % more).
PLOC_RADIUS: int | None = None
PLOC_COSTS: tuple[float, float] | None = (float(os.environ.get("RAYD_EDGE_PLOC_NODE_COST", "3")), 1.0)
#: Store only the LBVH's packed internal nodes (``Lbvh.compact``: rows ranked, no holes for the
#: Karras nodes inside collapsed leaves; the same tree and walk, a 4-5 x smaller node array with
#: leaves of 8). Opt-in (``RAYD_EDGE_LBVH_COMPACT=1``) until the H200 has timed it.
LBVH_COMPACT = os.environ.get("RAYD_EDGE_LBVH_COMPACT", "0") == "1"
#: Per device kind, whether trees also keep a 4-wide copy for the point, ray and top-k searches
#: (``edge_wide.py``; rays too since the 18th session): ``False``, ``True`` (112-byte nodes), ``"q"``
#: (compressed 64-byte nodes, ``edge_wide_q.py``) or ``"qs"`` (and quantised leaf-segment boxes,
#: 8 bytes a slot, tested before each segment). ``RAYD_EDGE_WIDE`` (``0``, ``1``, ``q``, ``qs``)
#: overrides the CUDA entry. CUDA default ``"q"`` (H200, session 13, over the PLOC tree: the
#: fastest walk on all three 1 M-point workloads, 1.2-1.3 x the binary walk; ``"qs"`` read fewer
#: bytes but searched 1.4-1.6 x slower than ``"q"``); the CPU keeps the binary walk (the
#: compressed walks ran slower there: benchmarks/README.md, "Issue 11, fifth pass"). Tree spec
#: suffixes ``+w``/``+q``/``+qs`` in the benchmarks.
DEFAULT_WIDE: dict = {"cpu": False, "cuda": {"0": False, "1": True, "q": "q", "qs": "qs"}.get(
    os.environ.get("RAYD_EDGE_WIDE", "q").strip().lower(), "q")}
#: Morton key length of the ``"lbvh"`` builder (63: 21 bits per axis; 30: 10 bits per axis).
LBVH_KEY_BITS = 63
#: Quantise all axes of the ``"lbvh"`` keys with one scale (cubic cells), not per axis.
LBVH_CUBIC = True

# Build and search kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})


@wp.kernel
def _edges_box_kernel(
    points: wp.array(dtype=wp.vec3),
    edge_v: wp.array(dtype=wp.vec2i),
    lower: wp.array(dtype=wp.vec3),
    upper: wp.array(dtype=wp.vec3),
):
    e = wp.tid()
    ev = edge_v[e]
    a = points[ev[0]]
    b = points[ev[1]]
    lower[e] = wp.min(a, b)
    upper[e] = wp.max(a, b)


@wp.kernel
def _edges_put_links_kernel(links: wp.array(dtype=wp.vec4i), node_link: wp.array(dtype=wp.vec4i)):
    j = wp.tid()
    node_link[4 * j + 3] = links[j]


class EdgeBvh:
    """The scene's edges as world-space segments, with a BVH over their bounds.

    The frontend owns ``points`` (the scene's float32 world-space vertex buffer) and
    the topology; this object reads them at construction and at every ``refit()``.

    Args:
        points: ``wp.array(dtype=wp.vec3)`` of shape (V,), the scene's world-space vertices.
        edge_v: ``wp.array(dtype=wp.vec2i)`` of shape (E,), scene-wide vertex ids of each
            edge's endpoints (row = ``global_edge_id``).
        mask: ``wp.array(dtype=wp.uint8)`` of shape (E,); 0 hides an edge from queries.
        stream: the stream to build on (``None`` on the CPU).
        builder: ``"sah"``, ``"lbvh"`` or ``"ploc"`` (see the module docstring); ``None``:
            ``DEFAULT_BUILDER``.
        leaf_size: most segments per leaf (1 to 16, 1 to 8 for ``"ploc"``; ``None``: ``DEFAULT_LEAF_SIZE``).
        wide: also build the 4-wide copy :attr:`wide` (``True``; ``"q"``: with compressed nodes; ``"qs"``:
            and quantised segment boxes; ``None``: :data:`DEFAULT_WIDE` of the device); kept only for a
            tree of more than one leaf with leaves of at most 8 segments whose walk fits the stack.
        refit: the refit of a tree with compressed wide nodes (``edge_refit_fused.REFIT_MODES``; ``None``:
            ``edge_refit_fused.REFIT_MODE``, on CUDA ``REFIT_MODE_CUDA``).
        leaf_slab: give a tree with a wide copy per-leaf oriented slabs that its walks test before a leaf's
            segments (:mod:`rayd.engine.edge_leaf_slab`; ``None``: ``edge_leaf_slab.LEAF_SLAB``).

    Building synchronises with the device a few times (small reads of tree sizes; the
    ``"sah"`` builder copies the segment boxes to the host and its tree back).

    Raises:
        ValueError: if there are no edges, or for an unknown ``builder`` / ``leaf_size``.
    """

    def __init__(
        self,
        points: wp.array,
        edge_v: wp.array,
        mask: wp.array,
        stream: wp.Stream | None = None,
        *,
        builder: str | None = None,
        leaf_size: int | None = None,
        wide: bool | str | None = None,
        refit: str | None = None,
        leaf_slab: bool | None = None,
    ) -> None:
        n = edge_v.shape[0]
        if n == 0:
            raise ValueError("rayd.engine.EdgeBvh(): 'edge_v' must hold at least one edge")
        if builder is None:
            builder = DEFAULT_BUILDER["cpu" if points.device.is_cpu else "cuda"]
        if builder not in ("sah", "lbvh", "ploc"):
            raise ValueError(f"rayd.engine.EdgeBvh(): 'builder' (or RAYD_EDGE_BVH_BUILDER) must be 'sah', "
                             f"'lbvh' or 'ploc', got {builder!r}")
        leaf_size = DEFAULT_LEAF_SIZE[builder] if leaf_size is None else int(leaf_size)
        if not 1 <= leaf_size <= 16:
            raise ValueError(f"rayd.engine.EdgeBvh(): 'leaf_size' must be in [1, 16], got {leaf_size}")
        self.device = dev = points.device
        self.points = points
        self.edge_v = edge_v
        self.mask = mask
        self.num_edges = n
        self.builder = builder if n > 1 else "single"
        self.leaf_size = leaf_size if self.builder != "single" else 1
        self.fallback_error: str | None = None  # why the "sah" builder fell back to "lbvh" (CUDA)
        with launch_stream(dev, stream):
            self.seg = wp.empty(2 * n, dtype=wp.vec3, device=dev)
            self.slot_id = wp.empty(n, dtype=wp.int32, device=dev)
            self.root_box = wp.empty(2, dtype=wp.vec3, device=dev)
            if self.builder == "single":
                self.slot_edge = wp.zeros(1, dtype=wp.int32, device=dev)
                self._tree = single_leaf_tree(1, dev)
                self.num_inner = 1
                self.depth = 2
                links = np.array([[0, 0, 1, 0]], np.int32)
            elif self.builder == "lbvh":
                self._build_lbvh(stream)
            elif self.builder == "ploc":
                links = self._build_ploc(stream)
            else:
                try:
                    links = self._build_sah(stream)
                except RuntimeError as error:  # e.g. no cuBQL in this Warp build
                    if dev.is_cpu:
                        raise
                    warnings.warn(f"rayd.engine.EdgeBvh(): the 'sah' builder failed on {dev} ({error}); "
                                  "building the 'lbvh' tree instead", RuntimeWarning, stacklevel=2)
                    self.fallback_error = str(error)
                    self.builder = "lbvh"
                    self._build_lbvh(stream)
            self.node_box = wp.empty(4 * self.num_inner, dtype=wp.vec4, device=dev)
            # the same memory as int32: node_link[4 j + 3] = (code_a, code_b, count_a, count_b)
            self.node_link = wp.array(ptr=self.node_box.ptr, dtype=wp.vec4i, shape=self.node_box.shape, device=dev)
            TreeRefit.clear_nodes(self.node_box)  # nodes inside collapsed LBVH subtrees stay empty
            if self.builder == "lbvh" and self._lbvh_links is None:
                self._lbvh.write_links(self.node_link, self.leaf_size)
            else:
                self._write_links(self._lbvh_links if self.builder == "lbvh" else links)
        #: the 4-wide copy walked by the point, ray and top-k searches (``rayd.engine.edge_wide.EdgeWide``), or None
        self.wide = None
        #: per-leaf oriented slabs read by the wide walks (``rayd.engine.edge_leaf_slab.LeafSlabs``), or None
        self.leaf_slabs = None
        self._fused = None
        self._binary_stale = False  # the last refit left node_box behind (wide-tree refit): binary_boxes()
        self.refit(stream)
        mode = DEFAULT_WIDE["cpu" if dev.is_cpu else "cuda"] if wide is None else wide
        if mode and self.builder != "single" and self.num_edges > self.leaf_size \
                and self.leaf_size <= 8:
            with launch_stream(dev, stream):
                tree = EdgeWide(self.node_box, self.node_link, self.depth, stream, compressed=mode in ("q", "qs"),
                                seg=self.seg, slot_id=self.slot_id, seg_boxes=mode == "qs")
            self.wide = tree if tree.ok else None
        if (edge_leaf_slab.LEAF_SLAB if leaf_slab is None else leaf_slab) and self.wide is not None:
            with launch_stream(dev, stream):
                self.leaf_slabs = edge_leaf_slab.LeafSlabs(self._tree.leaves, self.seg, self.slot_id, stream)
        if refit is None:
            refit = edge_refit_fused.REFIT_MODE if dev.is_cpu else edge_refit_fused.REFIT_MODE_CUDA
        mode = str(refit)
        if mode not in edge_refit_fused.REFIT_MODES:
            raise ValueError(f"rayd.engine.EdgeBvh(): 'refit' must be one of {edge_refit_fused.REFIT_MODES}, "
                             f"got {mode!r}")
        self.refit_mode = "split"
        if mode in WIDE_MODES and self.wide is not None and self.wide.compressed is not None:
            with launch_stream(dev, stream):
                self._fused = WideRefit(self._tree, self.wide.compressed, self.num_edges, mode, stream)
                self._fused.slabs = self.leaf_slabs  # written by its leaf threads
            self.refit_mode = mode if self._fused.gathered or mode != "wide1" else "wide"
        elif mode != "split" and self.wide is not None and self.wide.compressed is not None:
            with launch_stream(dev, stream):
                self._fused = edge_refit_fused.FusedRefit(self._tree, self.node_link, self.wide.compressed, mode,
                                                          stream)
            self.refit_mode = mode if self._fused.gathered or mode == "fused" else "fused"

    def _build_lbvh(self, stream) -> None:
        self._lbvh = Lbvh(self.points, self.edge_v, stream, key_bits=LBVH_KEY_BITS, cubic=LBVH_CUBIC)
        if self._lbvh.depth >= MAX_DEPTH:  # deeper than the search stack (63-bit keys only): 30-bit keys
            self._lbvh = Lbvh(self.points, self.edge_v, stream, key_bits=30, cubic=LBVH_CUBIC)
        self.slot_edge = self._lbvh.order
        self.depth = self._lbvh.depth
        self._lbvh_links = None
        if LBVH_COMPACT and self.num_edges > self.leaf_size:
            self._tree, self._lbvh_links, self.num_inner = self._lbvh.compact(self.leaf_size, stream)
        else:
            self.num_inner = self.num_edges - 1
            self._tree = self._lbvh.refit_tree(self.leaf_size, stream)

    def _build_ploc(self, stream):
        """rayd's PLOC tree over the padded segment boxes, built on the device (``rayd.engine.edge_ploc``);
        its links (a device array; host links for a tree that is one leaf)."""
        tree = PlocEdgeTree(self.points, self.edge_v, self.leaf_size, PLOC_PAD, stream, radius=PLOC_RADIUS,
                            costs=PLOC_COSTS)
        if tree.depth >= MAX_DEPTH:  # deeper than the search stack (not seen): the LBVH
            warnings.warn(f"rayd.engine.EdgeBvh(): the 'ploc' tree has {tree.depth} levels; building the 'lbvh' "
                          "tree instead", RuntimeWarning, stacklevel=3)
            self.builder = "lbvh"
            self._build_lbvh(stream)
            return None
        self.slot_edge = tree.order
        self.num_inner = tree.num_inner
        self.depth = tree.depth
        if tree.links is None:  # one leaf holds every segment
            self._tree = single_leaf_tree(self.num_edges, self.device)
            self.depth = 2
            return np.array([[0, 0, self.num_edges, 0]], np.int32)
        self._tree = tree.refit
        return tree.links

    def _build_sah(self, stream) -> np.ndarray:
        """Warp's SAH tree, built on the host on every device (``rayd.engine.edge_sah``); its links."""
        n, dev = self.num_edges, self.device
        # Build over the full boxes of all edges (masked ones too, so that unmasking needs only a refit).
        lower = wp.empty(n, dtype=wp.vec3, device=dev)
        upper = wp.empty(n, dtype=wp.vec3, device=dev)
        wp.launch(_edges_box_kernel, dim=n, inputs=[self.points, self.edge_v], outputs=[lower, upper], device=dev)
        if dev.is_cpu or CUDA_CONSTRUCTOR != "cubql":
            lo, hi = lower.numpy(), upper.numpy()
            tree = warp_tree(lo, hi, self.leaf_size)
            if tree.depth >= MAX_DEPTH:  # deeper than the search stack: median splits (depth ~ log2 n)
                tree = warp_tree(lo, hi, self.leaf_size, constructor="median")
        else:  # cuBQL's GPU builder (opt-in), converted on the host as well
            tree = warp_tree(lower, upper, self.leaf_size, constructor="cubql", device=dev)
            if tree.depth >= MAX_DEPTH:
                raise RuntimeError(f"cuBQL tree deeper than {MAX_DEPTH} levels")
        self.slot_edge = wp.array(tree.order, dtype=wp.int32, device=dev)
        self.num_inner = tree.links.shape[0]
        self.depth = tree.depth
        self._tree = TreeRefit(wp.array(tree.children, dtype=wp.vec2i, device=dev),
                               wp.array(tree.parent, dtype=wp.int32, device=dev),
                               wp.array(tree.leaves, dtype=wp.vec4i, device=dev), tree.parent.shape[0])
        return tree.links

    def _write_links(self, links) -> None:
        """Packed links (``(num_inner, 4)`` int32 on the host, or a vec4i device array) into ``node_link[4 j + 3]``."""
        words = links if isinstance(links, wp.array) else wp.array(links, dtype=wp.vec4i, device=self.device)
        wp.launch(_edges_put_links_kernel, dim=links.shape[0], inputs=[words], outputs=[self.node_link],
                  device=self.device)

    def packed_nodes(self):
        """Host copy of the packed tree, for tests and measurements.

        Returns:
            ``(box, link)``: float32 ``(num_inner, 2, 2, 3)`` (child, lo/hi, xyz) and int32
            ``(num_inner, 4)`` = (code_a, code_b, count_a, count_b).
        """
        raw = self.binary_boxes().numpy().reshape(-1, 16)
        box = raw[:, :12].reshape(-1, 2, 2, 3)
        link = self.node_link.numpy().reshape(-1, 4, 4)[:, 3]
        return box, link

    @property
    def num_nodes(self) -> int:
        """Internal (packed) nodes."""
        return self.num_inner

    def binary_boxes(self, stream: wp.Stream | None = None) -> wp.array:
        """``node_box``, the packed binary nodes, refitted first if the last :meth:`refit` only wrote the
        wide nodes (``refit_mode`` ``"wide*"``: one climb from the final slots, on ``stream``).
        Read the binary boxes through this (the binary walk of trees without a wide copy, or of rays with
        ``edge_wide_walk.WIDE_RAYS`` off; :meth:`packed_nodes`)."""
        if self._binary_stale:
            with launch_stream(self.device, stream):
                self._tree.climb(self.seg, self.slot_id, self.node_box, self.root_box)
            self._binary_stale = False
        return self.node_box

    def refit(self, stream: wp.Stream | None = None) -> None:
        """Refit the node boxes to the current ``points`` and ``mask`` (topology unchanged). With the
        wide-tree refit (``refit_mode`` ``"wide*"``) the binary boxes wait for
        :meth:`binary_boxes`."""
        with launch_stream(self.device, stream):
            if self._fused is not None:
                self._fused.refit(self.points, self.edge_v, self.mask, self.slot_edge, self.seg, self.slot_id,
                                  self.node_box, self.root_box)
                self._binary_stale = not self._fused.writes_binary
            else:
                self._tree.refit(self.points, self.edge_v, self.mask, self.slot_edge, self.seg, self.slot_id,
                                 self.node_box, self.root_box)
                self._binary_stale = False
                if self.wide is not None:
                    self.wide.refresh(stream)
            if self.leaf_slabs is not None and getattr(self._fused, "slabs", None) is None:
                self.leaf_slabs.refit(self.seg, self.slot_id, stream)
