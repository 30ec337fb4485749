"""The top level of a two-level scene: instances of shared bottom-level BVHs."""

from __future__ import annotations

import os

import warp as wp

from rayd.engine.bvh_nodes import MAX_DEPTH, read_nodes
from rayd.engine.instance_wide import InstanceWide
from rayd.engine.pair_nodes import MAX_LEAF, PairNodes
from rayd.engine.runtime import launch_stream
from rayd.engine.triangles import TriangleScene

# Bounds kernels have no derivatives: skip generating adjoint code (faster first compile).
wp.set_module_options({"enable_backward": False})

#: How a query walks instances (issue 18; ``instance_walk.py``): ``"nested"`` (Warp's nodes
#: for the top level, a walk with its own stack per instance entered: the walk before
#: issue 18's instance work), ``"pairtop"`` (the top level in the child-pair layout too,
#: each BLAS walked in a loop nested in the top level's, one stack of refs per ray),
#: ``"unified"`` (one loop and one stack for both levels: a marker on the stack leaves
#: an instance), ``"unified_cull"`` (the same, popped BLAS nodes behind the closest hit
#: skipped too), ``"wide_both"`` / ``"wide_blas"`` (``instance_walk.py``): ``unified`` with
#: both levels / the BLAS only in 4-wide nodes (``instance_wide.py``), or ``"auto"`` (the
#: default: ``"wide_blas"`` on CUDA, where the H200 of session 20 traced 1,000 instances in
#: 0.985x / 0.993x the time of ``unified`` (closest / any hit; ``wide_both`` 1.36x;
#: ``benchmarks/results/h200-session20/``), itself 2.9x faster than nested on the H200 of
#: session 11; ``"nested"`` on the CPU, where it was not faster).
#: ``RAYD_INSTANCE_WALK`` sets the default; :func:`set_instance_walk` changes it for scenes built
#: afterwards. All give the same winners (the wide walks: up to exact ties in ``t``, see there).
INSTANCE_WALKS = ("auto", "nested", "pairtop", "unified", "unified_cull", "wide_both", "wide_blas")
_walk = os.environ.get("RAYD_INSTANCE_WALK", "auto").strip().lower()
if _walk not in INSTANCE_WALKS:
    raise ValueError(f"rayd.engine: RAYD_INSTANCE_WALK must be one of {INSTANCE_WALKS}, got {_walk!r}")

#: Entries of the one stack of the ``pairtop`` / ``unified`` walks: it holds the top level's
#: (entry distance, ref) pairs, one marker and one leaf continuation pair, then the BLAS's refs
#: (at most one push per level of each tree).
SHARED_STACK = 96


#: ``RAYD_INSTANCE_MAXREG=N``: the search kernels that walk instances get CUDA's
#: ``__maxnreg__(N)`` (Warp's ``cuda_max_registers``); unset or 0: the compiler's choice.
#: :func:`set_instance_max_registers` changes it for launches from then on.
_max_registers = int(os.environ.get("RAYD_INSTANCE_MAXREG", "0") or 0)


def set_instance_max_registers(count: int) -> None:
    """Cap the registers per thread of the search kernels that walk instances (CUDA; 0: no cap).

    Raises:
        ValueError: ``count`` is negative or not an int.
    """
    global _max_registers
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"rayd.engine.set_instance_max_registers(): 'count' must be an int >= 0, got {count!r}")
    _max_registers = count


def instance_max_registers() -> int:
    """The register cap of the instance search kernels (0: none)."""
    return _max_registers


def set_instance_walk(name: str) -> None:
    """Choose how scenes built from now on walk their instances (one of :data:`INSTANCE_WALKS`).

    Raises:
        ValueError: ``name`` is not one of :data:`INSTANCE_WALKS`.
    """
    global _walk
    if name not in INSTANCE_WALKS:
        raise ValueError(f"rayd.engine.set_instance_walk(): 'name' must be one of {INSTANCE_WALKS}, got {name!r}")
    _walk = name


def instance_walk() -> str:
    """The instance walk scenes built now get (:data:`INSTANCE_WALKS`)."""
    return _walk


@wp.kernel
def _instance_table_kernel(pair_base: wp.array(dtype=wp.int32), prim_base: wp.array(dtype=wp.int32),
                           pair_root: wp.array(dtype=wp.int32), global_base: wp.array(dtype=wp.int32),
                           table: wp.array(dtype=wp.vec4i)):
    i = wp.tid()
    table[i] = wp.vec4i(pair_base[i], prim_base[i], pair_root[i], global_base[i])


@wp.kernel
def _object_bounds_kernel(item_lowers: wp.array(dtype=wp.vec3), item_uppers: wp.array(dtype=wp.vec3), slot: int,
                          lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3)):
    f = wp.tid()
    wp.atomic_min(lowers, slot, item_lowers[f])
    wp.atomic_max(uppers, slot, item_uppers[f])


@wp.kernel
def _instances_bounds_kernel(
    blas_slot: wp.array(dtype=wp.int32),
    object_lowers: wp.array(dtype=wp.vec3),
    object_uppers: wp.array(dtype=wp.vec3),
    to_world: wp.array(dtype=wp.mat44),
    to_object: wp.array(dtype=wp.mat44d),
    lowers: wp.array(dtype=wp.vec3),
    uppers: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    m = to_world[i]
    # The inverse in float64: rays are taken into object space in float64 (traversal.py).
    to_object[i] = wp.inverse(wp.mat44d(m))
    a = object_lowers[blas_slot[i]]
    b = object_uppers[blas_slot[i]]
    lo = wp.vec3(1.0e30, 1.0e30, 1.0e30)
    hi = wp.vec3(-1.0e30, -1.0e30, -1.0e30)
    # World box of the 8 transformed corners of the object box (conservative).
    for k in range(8):
        corner = wp.vec3(wp.where((k & 1) != 0, b[0], a[0]), wp.where((k & 2) != 0, b[1], a[1]),
                         wp.where((k & 4) != 0, b[2], a[2]))
        p = wp.transform_point(m, corner)
        lo = wp.min(lo, p)
        hi = wp.max(hi, p)
    lowers[i] = lo
    uppers[i] = hi


class InstanceLevel:
    """A ``wp.Bvh`` over instance world boxes; each leaf is a shared bottom-level BVH.

    Args:
        blas: the object-space :class:`TriangleScene` of each instanced mesh; all
            share one ``points`` and one ``indices`` array (``face_base`` apart).
        blas_slot: per instance, its index into ``blas``.
        to_world: ``wp.array(dtype=wp.mat44)`` (I,), object-to-world per instance
            (column-vector convention, already composed with the mesh's own transform).
        stream: the stream to build on (``None`` on the CPU).

    Updating transforms (:meth:`update`) recomputes boxes and refits only this level.

    Attributes:
        walk: the instance walk its searches use (:data:`INSTANCE_WALKS`, ``"auto"`` resolved).
        tlas_pairs: the top level's pair nodes (``None`` with the ``nested`` walk).
        wide: the 4-wide nodes of the BLAS (and the top level) for the ``wide_both`` /
            ``wide_blas`` walks (``instance_wide.InstanceWide``), else ``None``.
    """

    def __init__(
        self, blas: list[TriangleScene], blas_slot: list[int], to_world: wp.array, stream: wp.Stream | None = None
    ) -> None:
        self.device = to_world.device
        self.blas = blas
        self.count = len(blas_slot)
        self.blas_slot = wp.array(blas_slot, dtype=wp.int32, device=self.device)
        self.face_base = wp.array([blas[k].face_base for k in blas_slot], dtype=wp.int32, device=self.device)
        self.points = blas[0].points
        self.indices = blas[0].indices
        self.object_lowers = wp.empty(len(blas), dtype=wp.vec3, device=self.device)
        self.object_uppers = wp.empty(len(blas), dtype=wp.vec3, device=self.device)
        self.to_world = to_world
        self.to_object = wp.empty(self.count, dtype=wp.mat44d, device=self.device)
        self.lowers = wp.empty(self.count, dtype=wp.vec3, device=self.device)
        self.uppers = wp.empty(self.count, dtype=wp.vec3, device=self.device)
        # All bottom levels' nodes in one set of arrays, so that kernels can walk any
        # of them near-child-first (node and primitive indices offset per BLAS).
        node_counts = [b.nodes.lowers.shape[0] for b in blas]
        self.node_base = [sum(node_counts[:k]) for k in range(len(blas))]
        self.prim_base = [sum(b.num_triangles for b in blas[:k]) for k in range(len(blas))]
        self.blas_lowers = wp.empty(sum(node_counts), dtype=wp.vec4, device=self.device)
        self.blas_uppers = wp.empty(sum(node_counts), dtype=wp.vec4, device=self.device)
        self.blas_lower_index = wp.array(ptr=self.blas_lowers.ptr, dtype=wp.vec4i, shape=self.blas_lowers.shape,
                                         device=self.device)
        self.blas_upper_index = wp.array(ptr=self.blas_uppers.ptr, dtype=wp.vec4i, shape=self.blas_uppers.shape,
                                         device=self.device)
        self.blas_primitives = wp.empty(max(1, sum(b.num_triangles for b in blas)), dtype=wp.int32, device=self.device)
        self.inst_node_base = wp.array([self.node_base[k] for k in blas_slot], dtype=wp.int32, device=self.device)
        self.inst_prim_base = wp.array([self.prim_base[k] for k in blas_slot], dtype=wp.int32, device=self.device)
        self.inst_root = wp.array([blas[k].nodes.root for k in blas_slot], dtype=wp.int32, device=self.device)
        # The pair layout of every BLAS (pair_nodes.py), one after another, when all have one:
        # refs stay local (offset per instance by inst_pair_base, slots by inst_prim_base).
        self.has_pairs = all(getattr(b, "pairs", None) is not None for b in blas)
        if self.has_pairs:
            pair_counts = [b.pairs.boxes.shape[0] for b in blas]
            self.pair_base = [sum(pair_counts[:k]) for k in range(len(blas))]
            # Room after the BLAS nodes for the top level's pair nodes (at most count - 1 inner nodes).
            self.tlas_pair_base = sum(pair_counts) // 4
            self.pair_boxes = wp.zeros(sum(pair_counts) + 4 * max(1, self.count), dtype=wp.vec4, device=self.device)
            self.pair_links = wp.array(ptr=self.pair_boxes.ptr, dtype=wp.vec4i, shape=self.pair_boxes.shape,
                                       device=self.device)
            self.pair_tris = wp.empty(3 * max(1, sum(b.num_triangles for b in blas)), dtype=wp.vec4, device=self.device)
            self.inst_pair_base = wp.array([self.pair_base[k] // 4 for k in blas_slot], dtype=wp.int32,
                                           device=self.device)
            self.inst_pair_root = wp.array([blas[k].pairs.root for k in blas_slot], dtype=wp.int32, device=self.device)
        with launch_stream(self.device, stream):
            self._copy_nodes(stream, primitives=True)
            self._bounds(stream)
            self.bvh = wp.Bvh(self.lowers, self.uppers, constructor="sah", leaf_size=1)
            self.nodes = read_nodes(self.bvh, self.count)
            if self.nodes.depth > MAX_DEPTH:
                self.bvh = wp.Bvh(self.lowers, self.uppers, constructor="median", leaf_size=1)
                self.nodes = read_nodes(self.bvh, self.count)
            self.walk = self._choose_walk(stream)

    def _choose_walk(self, stream: wp.Stream | None) -> str:
        """:func:`instance_walk`, or ``"nested"`` where this scene cannot take the shared-stack walks.

        Those need every BLAS in the pair layout, top-level leaves of at most
        :data:`~rayd.engine.pair_nodes.MAX_LEAF` instances (the ref encoding) and both
        levels' depths within :data:`SHARED_STACK`; then the top level's pair nodes are
        made (``tlas_pairs``) and kept after the BLAS nodes in ``pair_boxes``. The wide walks
        also collapse the trees into 4-wide nodes (:attr:`wide`) and fall back to ``"unified"``
        where a tree does not collapse or their stack need (``WideNodes.stack_need``; two
        entries per top-level ref) exceeds :data:`SHARED_STACK`.
        """
        self.tlas_pairs = self.wide = None
        walk = instance_walk()
        if walk == "auto":
            walk = "wide_blas" if self.nodes.lowers.device.is_cuda else "nested"
        if walk == "nested" or not self.has_pairs:
            return "nested"
        per_blas_level = 2 if walk == "unified_cull" else 1
        if 2 * self.nodes.depth + per_blas_level * max(b.nodes.depth for b in self.blas) + 3 > SHARED_STACK:
            return "nested"
        low = self.nodes.lower_index.numpy()[:, 3]
        high = self.nodes.upper_index.numpy()[:, 3]
        leaf = low < 0
        if leaf.any() and int(((high[leaf] & 0x7FFFFFFF) - (low[leaf] & 0x7FFFFFFF)).max()) > MAX_LEAF:
            return "nested"
        self.tlas_pairs = PairNodes(self.nodes, None, None, 0, stream)
        self._copy_tlas_pairs(stream)
        if walk in ("wide_both", "wide_blas"):
            top = (self.tlas_pairs, self.nodes.depth) if walk == "wide_both" else None
            wide = InstanceWide([b.pairs for b in self.blas], [b.nodes.depth for b in self.blas], top, stream)
            # top-level entries are two (distance, ref), plus a leaf continuation pair and a marker
            top_need = 2 * (wide.top_stack if top is not None else self.nodes.depth)
            if wide.ok and top_need + wide.blas_stack + 3 <= SHARED_STACK:
                self.wide = wide
            else:
                walk = "unified"
        return walk

    def _copy_tlas_pairs(self, stream: wp.Stream | None) -> None:
        wp.copy(self.pair_boxes, self.tlas_pairs.boxes, 4 * self.tlas_pair_base, 0, self.tlas_pairs.boxes.shape[0],
                stream=stream)

    def table(self, inst_global: wp.array) -> wp.array:
        """Per instance ``(first pair node, first primitive slot, root ref, first global_prim_id)``
        of its BLAS, ``wp.array(dtype=wp.vec4i)`` (I,): one 128-bit load per instance entered.

        Args:
            inst_global: int32 (I,), the first ``global_prim_id`` of each instance.
        """
        table = wp.empty(self.count, dtype=wp.vec4i, device=self.device)
        wp.launch(_instance_table_kernel, self.count,
                  [self.inst_pair_base, self.inst_prim_base, self.inst_pair_root, inst_global], [table],
                  device=self.device)
        return table

    def _copy_nodes(self, stream: wp.Stream | None, primitives: bool) -> None:
        """Copy every BLAS's node boxes (and, at build, primitive lists) into the shared arrays."""
        for k, tri in enumerate(self.blas):
            tri.complete(stream)  # (BLAS are refitted in full today; a no-op then)
            count = tri.nodes.lowers.shape[0]
            wp.copy(self.blas_lowers, tri.nodes.lowers, self.node_base[k], 0, count, stream=stream)
            wp.copy(self.blas_uppers, tri.nodes.uppers, self.node_base[k], 0, count, stream=stream)
            if primitives:
                wp.copy(self.blas_primitives, tri.nodes.primitives, self.prim_base[k], 0, tri.num_triangles,
                        stream=stream)
            if self.has_pairs:
                wp.copy(self.pair_boxes, tri.pairs.boxes, self.pair_base[k], 0, tri.pairs.boxes.shape[0], stream=stream)
                wp.copy(self.pair_tris, tri.pairs.tris, 3 * self.prim_base[k], 0, 3 * tri.num_triangles, stream=stream)

    def _bounds(self, stream: wp.Stream | None) -> None:
        self.object_lowers.fill_(wp.vec3(1.0e30, 1.0e30, 1.0e30))
        self.object_uppers.fill_(wp.vec3(-1.0e30, -1.0e30, -1.0e30))
        for slot, mesh in enumerate(self.blas):
            wp.launch(
                _object_bounds_kernel,
                dim=mesh.num_triangles,
                inputs=[mesh.lowers, mesh.uppers, slot],
                outputs=[self.object_lowers, self.object_uppers],
                device=self.device,
                stream=stream,
            )
        self.refresh_transforms(stream)

    def refresh_transforms(self, stream: wp.Stream | None) -> None:
        """Recompute inverse transforms and instance boxes (object boxes unchanged)."""
        wp.launch(
            _instances_bounds_kernel,
            dim=self.count,
            inputs=[self.blas_slot, self.object_lowers, self.object_uppers, self.to_world],
            outputs=[self.to_object, self.lowers, self.uppers],
            device=self.device,
            stream=stream,
        )

    def update(self, geometry_changed: bool, stream: wp.Stream | None = None) -> None:
        """Refit the top level after ``to_world`` changed (and, if ``geometry_changed``, a BLAS moved)."""
        with launch_stream(self.device, stream):
            if geometry_changed:
                self._copy_nodes(stream, primitives=False)
                self._bounds(stream)
            else:
                self.refresh_transforms(stream)
            self.bvh.refit()
            if self.tlas_pairs is not None:
                self.tlas_pairs.refresh(stream)
                self._copy_tlas_pairs(stream)
            if self.wide is not None:
                if geometry_changed:
                    self.wide.copy(stream)
                else:
                    self.wide.refresh_top(stream)
