"""`SceneAccel`: everything a query kernel needs to trace one scene."""

from __future__ import annotations

import numpy as np
import warp as wp

from rayd.engine.bvh_nodes import dummy_nodes
from rayd.engine.instances import InstanceLevel
from rayd.engine.pair_nodes import dummy_pairs
from rayd.engine.runtime import carve
from rayd.engine.traversal import SceneView
from rayd.engine.triangles import TriangleScene
from rayd.engine.wide_nodes import dummy_wide


#: ``(dtype, length)`` of the zero placeholders a :class:`SceneAccel` may need (pair nodes' boxes and corners, wide
#: rows, compressed wide rows, instance pair base, instance table, an instance matrix, an int, Warp nodes' boxes,
#: refs and primitives, instance points, instance magnitude).
_PLACEHOLDERS = [(wp.vec4, 4), (wp.vec4, 3), (wp.vec4, 8), (wp.vec4i, 4), (wp.int32, 1), (wp.vec4i, 1),
                 (wp.mat44d, 1), (wp.int32, 1), (wp.vec4, 1), (wp.vec4i, 1), (wp.int32, 1), (wp.vec3, 1), (float, 1)]


class SceneAccel:
    """The acceleration structures of a scene and the arrays that number its faces.

    Args:
        device: the Warp device.
        flat: BVH over the world-space triangles of all meshes, or ``None``.
        flat_global: int32 (F_flat,) ``global_prim_id`` of each flat face.
        flat_shape: int32 (F_flat,) shape id of each flat face.
        shape_enabled: uint8 (S,) 1 where the shape takes part in queries.
        instances: the top level, or ``None``.
        inst_shape: int32 (I,) shape id of each instance.
        inst_global: int32 (I,) first ``global_prim_id`` of each instance.

    The frontend owns every array and may rewrite ``shape_enabled`` in place, then
    call :meth:`set_all_enabled` (and :meth:`set_flat_enabled`).
    """

    def __init__(
        self,
        device: wp.context.Device,
        flat: TriangleScene | None,
        flat_global: wp.array,
        flat_shape: wp.array,
        shape_enabled: wp.array,
        instances: InstanceLevel | None = None,
        inst_shape: wp.array | None = None,
        inst_global: wp.array | None = None,
    ) -> None:
        self.device = device
        self.flat = flat
        self.flat_enabled = True
        self.enabled_version = 0  # counts set_all_enabled() calls (the enable flags may have changed)
        self.instances = instances
        self.completions_by_fallback = 0  # stale trees completed by :attr:`view` (tests expect none)
        if flat is not None:  # with instances every search walks the pair nodes: no wide-only refit
            flat.lazy_refit = instances is None
        view = SceneView()
        view.has_flat = 0 if flat is None else 1
        view.flat_bvh = wp.uint64(0 if flat is None else flat.id)
        view.flat_points = flat.points
        view.flat_indices = flat.indices
        view.flat_magnitude = flat.magnitude
        nodes = flat.nodes
        view.flat_lowers = nodes.lowers
        view.flat_uppers = nodes.uppers
        view.flat_lower_index = nodes.lower_index
        view.flat_upper_index = nodes.upper_index
        view.flat_primitives = nodes.primitives
        view.flat_root = nodes.root
        # The placeholders of the parts this scene lacks, zero, from one allocation and one fill (runtime.carve;
        # issue 18, "build": about 10 allocations, fills and an upload fewer per build); owned by this scene.
        (pair_boxes, pair_tris, wide_data, wide_q0, inst_pair0, inst_table0, dummy_mat, dummy_int, node_z4,
         node_z4i, node_prims, blas_points0, blas_magnitude0) = carve(device, _PLACEHOLDERS, zero=True)
        pairs = flat.pairs if flat.pairs is not None else dummy_pairs(device, (pair_boxes, pair_tris))
        self._pairs = pairs
        view.flat_pair_boxes, view.flat_pair_links, view.flat_pair_root = pairs.boxes, pairs.links, pairs.root
        view.flat_tris = pairs.tris
        wide = flat.wide if getattr(flat, "wide", None) is not None else dummy_wide(device, wide_data)
        self._wide = wide
        view.flat_wide_data, view.flat_wide_links, view.flat_wide_root = wide.data, wide.links, wide.root
        wide_q = getattr(wide, "q", None)
        view.flat_wide_q = wide_q if wide_q is not None else wide_q0
        view.flat_wide_qfrom = getattr(wide, "q_from", 0) if wide_q is not None else 0
        view.flat_global = flat_global
        view.flat_shape = flat_shape
        view.shape_enabled = shape_enabled
        view.all_enabled = 1
        if instances is not None and getattr(instances, "has_pairs", False):
            view.blas_pair_boxes, view.blas_pair_links = instances.pair_boxes, instances.pair_links
            view.blas_tris = instances.pair_tris
            view.inst_pair_base, view.inst_pair_root = instances.inst_pair_base, instances.inst_pair_root
        else:
            view.blas_pair_boxes, view.blas_pair_links, view.blas_tris = pairs.boxes, pairs.links, pairs.tris
            view.inst_pair_base = view.inst_pair_root = inst_pair0
        view.tlas_pair_base, view.tlas_pair_root = 0, 0
        view.inst_table = inst_table0
        if instances is not None and getattr(instances, "tlas_pairs", None) is not None:
            view.tlas_pair_base, view.tlas_pair_root = instances.tlas_pair_base, instances.tlas_pairs.root
            view.inst_table = instances.table(inst_global)
        wide = getattr(instances, "wide", None) if instances is not None else None
        if wide is not None:  # the wide instance walks (instance_wide.py)
            view.inst_wide_data, view.inst_wide_links = wide.data, wide.links
            view.inst_wide_table = wide.table(instances.blas_slot, instances.inst_prim_base, inst_global)
            view.tlas_wide_base, view.tlas_wide_root = wide.top_base, wide.top_root
        else:
            view.inst_wide_data, view.inst_wide_links = self._wide.data, self._wide.links
            view.inst_wide_table = view.inst_table
            view.tlas_wide_base, view.tlas_wide_root = 0, 0
        if instances is None:
            view.num_instances = 0
            dummy = dummy_nodes(device, (node_z4, node_z4i, node_prims))
            view.tlas_lowers, view.tlas_uppers = dummy.lowers, dummy.uppers
            view.tlas_lower_index, view.tlas_upper_index = dummy.lower_index, dummy.upper_index
            view.tlas_primitives, view.tlas_root = dummy.primitives, 0
            view.blas_lowers, view.blas_uppers = dummy.lowers, dummy.uppers
            view.blas_lower_index, view.blas_upper_index = dummy.lower_index, dummy.upper_index
            view.blas_primitives = dummy.primitives
            view.blas_points = blas_points0
            view.blas_indices = dummy_int
            view.blas_magnitude = blas_magnitude0
            view.inst_node_base = dummy_int
            view.inst_prim_base = dummy_int
            view.inst_root = dummy_int
            view.inst_face_base = dummy_int
            view.inst_to_object = dummy_mat
            view.inst_shape = dummy_int
            view.inst_global = dummy_int
        else:
            view.num_instances = instances.count
            tlas = instances.nodes
            view.tlas_lowers, view.tlas_uppers = tlas.lowers, tlas.uppers
            view.tlas_lower_index, view.tlas_upper_index = tlas.lower_index, tlas.upper_index
            view.tlas_primitives, view.tlas_root = tlas.primitives, tlas.root
            view.blas_lowers, view.blas_uppers = instances.blas_lowers, instances.blas_uppers
            view.blas_lower_index, view.blas_upper_index = instances.blas_lower_index, instances.blas_upper_index
            view.blas_primitives = instances.blas_primitives
            view.blas_points = instances.points
            view.blas_indices = instances.indices
            view.blas_magnitude = instances.blas[0].magnitude
            view.inst_node_base = instances.inst_node_base
            view.inst_prim_base = instances.inst_prim_base
            view.inst_root = instances.inst_root
            view.inst_face_base = instances.face_base
            view.inst_to_object = instances.to_object
            view.inst_shape = inst_shape
            view.inst_global = inst_global
        self._view = view

    @property
    def view(self) -> SceneView:
        """The arrays every query kernel reads, with every node structure up to date: a flat BVH left
        :attr:`TriangleScene.stale` by a wide-only refit is completed first, on the stream of that
        refit (queries pass their own stream through :meth:`view_for`; this is the fallback)."""
        flat = self.flat
        if flat is not None and getattr(flat, "stale", False):
            self.completions_by_fallback += 1
            flat.complete(flat._stale_stream)
        return self._view

    def view_for(self, stream: wp.Stream | None) -> SceneView:
        """:attr:`view`, completing a stale flat BVH on ``stream`` (the query's)."""
        flat = self.flat
        if flat is not None and hasattr(flat, "complete"):
            flat.complete(stream)  # (a no-op unless stale; notes the reader: the next refit is a full one)
        return self._view

    def search_view(self, walk: str, stream: wp.Stream | None) -> SceneView:
        """The view for the closest/any-hit search kernel of ``walk`` (:attr:`search_walk`): the
        ``"flat_wide"`` (``"flat_wide_q"``) walk reads only the wide (compressed) nodes, the leaf triangles and
        the magnitude, which a wide-only refit keeps up to date, so nothing is completed for it; other walks get
        :meth:`view_for`."""
        if walk in ("flat_wide", "flat_wide_q"):
            return self._view
        return self.view_for(stream)

    @property
    def layout(self) -> str:
        """The flat BVH's node layout: ``"pair"`` (rayd's child-pair nodes) or ``"warp"``."""
        if self.flat.pairs is None or (self.instances is not None and not self.instances.has_pairs):
            return "warp"
        return "pair"

    @property
    def walks(self) -> str:
        """Which parts a query must walk: ``"flat"``, ``"instances"`` or ``"both"`` (picks the search kernel)."""
        if self.instances is None:
            return "flat"
        return "both" if self.flat_enabled else "instances"

    @property
    def search_walk(self) -> str:
        """:attr:`walks`, with ``"_pair"`` appended where the BVHs are walked in the pair layout
        (``"flat_wide"`` for a flat scene whose BVH has 4-wide nodes, ``wide_nodes.py``; ``"flat_wide_q"`` where
        they are also compressed, ``wide_q.py``),
        or, for instances walked with one shared stack, the instance walk's name
        (``"instances_unified"``, ``"both_pairtop"``; ``instances.INSTANCE_WALKS``)."""
        walk = self.walks
        if self.layout != "pair":
            return walk
        if walk == "flat" and getattr(self.flat, "wide", None) is not None:
            return "flat_wide_q" if getattr(self.flat.wide, "q", None) is not None else "flat_wide"
        if walk != "flat" and getattr(self.instances, "tlas_pairs", None) is not None:
            return walk + "_" + self.instances.walk
        return walk + "_pair"

    def set_flat_enabled(self, flag: bool) -> None:
        """Tell the search whether any mesh of the flat BVH is enabled (if none, it walks only the instances)."""
        self.flat_enabled = bool(flag)

    def set_all_enabled(self, flag: bool) -> None:
        """Tell kernels whether every shape is enabled (enables the ordered fast path)."""
        self._view.all_enabled = 1 if flag else 0
        self.enabled_version += 1


def flat_accel(tri: TriangleScene) -> SceneAccel:
    """A :class:`SceneAccel` seeing only the triangles of ``tri`` as shape 0, faces 0..F-1 (cached on ``tri``)."""
    cached = getattr(tri, "_flat_accel", None)
    if cached is None:
        f = tri.num_triangles
        cached = SceneAccel(
            tri.device,
            tri,
            wp.array(np.arange(f, dtype=np.int32), dtype=wp.int32, device=tri.device),
            wp.zeros(f, dtype=wp.int32, device=tri.device),
            wp.ones(1, dtype=wp.uint8, device=tri.device),
        )
        cached.no_ignore = wp.full(1, -1, dtype=wp.int32, device=tri.device)
        tri._flat_accel = cached
    return cached
