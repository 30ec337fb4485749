"""Edges of a rayd.drjit scene: topology records, the nearest-edge result record, edge bookkeeping.

The topology rule (DESIGN.md, "Edges") is computed per mesh by the engine
(:func:`rayd.engine.edge_topology.mesh_edges`, Warp kernels on the scene's device;
rayd.torch calls the same function) and copied into Dr.Jit arrays; the records equal
rayd.torch's. Edges with more than 8 faces yield the cyclic pairs of their faces
(bounded topology; the engine module documents the rule).
"""

from __future__ import annotations

import drjit as dr
import numpy as np
import warp as wp

from rayd.core.edge_state import EdgeBuffers
from rayd.core.edges import TopologyBase, document
from rayd.core.topology import same_direction
from rayd.drjit import _check, _convert
from rayd.drjit._geometry import apply, concat, place
from rayd.engine.edge_topology import mesh_edges
from rayd.records import EdgeRecord
from rayd.drjit.intersection import DrjitRecord


class EdgeTopology(TopologyBase):
    """Scene-wide edge records, in shape order (lane = ``global_edge_id``), plain Dr.Jit arrays.

    Attributes (E edges; an ``(E, 2)`` field is an ``Array2i`` of width E):
        v: (E, 2) ``Array2i`` mesh-local vertex ids, ``v.x < v.y`` (unless a face is
            degenerate); ``edge_t`` runs from ``v.x`` (0) to ``v.y`` (1).
        faces: (E, 2) ``Array2i`` mesh-local ids of the two faces; ``faces.y = -1``
            for a boundary edge.
        opposite: (E, 2) ``Array2i`` the third vertex of each face, -1 where no face.
        is_boundary: (E,) ``Bool``, True for edges with exactly one incident face.
        shape_id: (E,) ``Int`` the mesh or instance the edge belongs to.
        edge_id: (E,) ``Int`` index of the record within its mesh.
        global_edge_id: (E,) ``Int`` the lane index ``0 .. E-1``.

    Units:
        Indices only; positions come from the meshes' vertex arrays.

    Gradients:
        None (integer and bool arrays of the non-differentiable namespace).

    Example:
        The triangle ``(0, 1, 2)`` gives ``v = [(0, 1), (0, 2), (1, 2)]``, all boundary.

    ``Scene.edge_topology()`` returns a copy of the scene's record: assigning items of
    these arrays (``top.shape_id[0] = 5``) changes nothing in the scene.
    """


class NearestEdge(DrjitRecord, EdgeRecord):
    """The nearest edge per query (or the k nearest), with miss values in the data.

    Attributes (width N, or N k for ``nearest_edges``: slot ``j`` of query ``i`` is
    lane ``i k + j``):
        distance: ``Float``/``Float64``, Euclidean distance between the query (point,
            or the ray's closest point) and ``edge_point``; ``+inf`` where no edge lies
            within ``max_distance``.
        edge_t: ``Float``/``Float64`` in ``[0, 1]``, ``edge_point = (1 - edge_t) a +
            edge_t b`` with ``a, b`` the world positions of ``v.x, v.y``; 0 on a miss.
        edge_point: ``Array3f``/``Array3f64`` the closest point on the edge; 0 on a miss.
        ray_t: (ray queries only) the ray parameter ``s`` in ``[tmin, tmax]`` of the
            closest point ``ray_point = o + s d``; 0 on a miss.
        ray_point: ``Array3f``/``Array3f64`` (ray queries only); 0 on a miss.
        edge_id: ``Int`` edge index within its mesh; -1 on a miss.
        shape_id: ``Int``; -1 on a miss.
        global_edge_id: ``Int`` lane of :class:`EdgeTopology`; -1 on a miss.

    Units:
        ``distance``, ``edge_point``, ``ray_point`` in world units; ``edge_t`` is a
        fraction of the edge; ``ray_t`` in multiples of ``|d|``.

    Gradients:
        Float fields are float64 when the query or any mesh's vertices are, and ``.ad``
        types when any input is; they are differentiable through Dr.Jit's AD (reverse
        and forward mode) for the fixed winning edge, with respect to vertices,
        transforms and the query (DESIGN.md); misses get zero gradient. Never NaN.

    ``detach()`` and selecting queries (``near[mask]`` with a ``Bool`` of width N; a
    top-k record keeps the k slots of each selected query) as for :class:`Intersection`.
    """

    __slots__ = ("_shape",)
    _width_field = "distance"

    def __init__(self, shape: tuple[int, ...], **fields: dr.ArrayBase) -> None:
        super().__init__(**fields)
        self._shape = shape

    @property
    def shape(self) -> tuple[int, ...]:
        """The query batch shape: ``(N,)``, or ``(N, k)`` for top-k."""
        return self._shape

    def _resize(self, count: int) -> None:
        self._shape = (count,) + tuple(self._shape[1:])


document(NearestEdge, {"is_valid": """``Bool`` of the fields' width: True where an edge was found."""},
         {"is_valid": {"return": dr.ArrayBase}})


class SceneEdges(EdgeBuffers):
    """rayd.drjit's :class:`~rayd.core.edge_state.EdgeBuffers`: topology and masks as Dr.Jit arrays.

    Its ``edge_rows`` (``Array2u``) are rows of the scene's concatenated mesh vertices.

    Args:
        scene: the :class:`rayd.drjit.Scene` (its shapes, backend and device are read live).
    """

    def _mesh_records(self, base: int, stream) -> tuple[int, tuple[dr.ArrayBase, ...]]:
        """``(E_mesh, (v, faces, opposite))``, ``Array2i`` of one mesh, by the engine.

        From the faces ``build()`` snapshotted (the scene's face table, the ones the
        triangle BVH was built from), never the mesh's live face array.
        """
        plain = _convert.module(self._scene._backend, False)
        shape = self._shapes[base]
        mesh, scene = shape.mesh, self._scene
        row = dr.arange(plain.UInt, mesh.num_faces) + shape.face_row
        snapshot = dr.gather(plain.Array3u, scene._faces, row) - shape.vertex_offset
        flat = dr.ravel(plain.Array3i(snapshot), order="F")
        dr.make_opaque(flat)
        _convert.fence(self._device)
        records = mesh_edges(_convert.scalar_view(flat, self._device), mesh.num_vertices, stream)
        out = []
        for part in (records.v, records.faces, records.opposite):
            buffer, view = _convert.vec2i_buffer(records.num_edges, self._scene._backend, self._device)
            wp.copy(view, part, stream=stream)
            out.append(buffer)
        _convert.fence(self._device)
        return records.num_edges, tuple(dr.unravel(plain.Array2i, b.array, order="F") for b in out)

    def _make_topology(self, records: list, plan) -> EdgeTopology:
        plain = _convert.module(self._scene._backend, False)
        source = plain.UInt(plan.source.astype(np.uint32))
        v, faces, opposite = (dr.gather(plain.Array2i, concat([r[k] for r in records]), source) for k in range(3))
        num_edges = plan.num_edges
        topology = EdgeTopology(v=v, faces=faces, opposite=opposite, is_boundary=faces.y < 0,
                                shape_id=plain.Int(plan.shape_id), edge_id=plain.Int(plan.edge_id),
                                global_edge_id=dr.arange(plain.Int, num_edges))
        self._edge_rows = plain.Array2u(v + plain.Int(plan.vertex_shift))
        dr.make_opaque(topology.v, topology.faces, topology.opposite, topology.is_boundary,
                       topology.shape_id, topology.edge_id, topology.global_edge_id, self._edge_rows)
        world_v = v + plain.Int(plan.world_shift)
        self._edges_view, self._world_v = _convert.vec2i_view(world_v, self._device)
        self._mask = dr.full(plain.Bool, True, num_edges)
        self._applied = dr.full(plain.UInt8, 1, num_edges)
        dr.make_opaque(self._mask, self._applied)
        self._applied_view = _convert.scalar_view(self._applied, self._device)
        return topology

    def _per_edge(self, enabled: list[bool]) -> dr.ArrayBase:
        plain = _convert.module(self._scene._backend, False)
        return dr.gather(plain.Bool, plain.Bool(enabled), plain.UInt(self._topology.shape_id))

    def _write_applied(self, stream, applied: dr.ArrayBase) -> None:
        """``applied`` (what the BVH sees), written in place into the BVH's flag buffer."""
        plain = _convert.module(self._scene._backend, False)
        flags = plain.UInt8(dr.select(applied, 1, 0))
        dr.eval(flags)
        _convert.fence(self._device)
        wp.copy(self._applied_view, _convert.scalar_view(flags, self._device), stream=stream)
        _convert.fence(self._device)

    def _refresh_points(self, stream) -> None:
        """Write every shape's float32 world-space vertices into the engine's point buffer."""
        if getattr(self, "_points_view", None) is None:
            self._points, self._points_view = _convert.vec3_buffer(self._num_world_vertices, self._scene._backend, self._device)
        # All shapes at once: object-space rows of the meshes (float64) placed by the
        # scene's host table of placements, gathered by index arrays built on the host.
        plain = _convert.module(self._scene._backend, False)
        scene = self._scene
        shapes = scene._shapes
        if not self._num_world_vertices:
            return
        meshes = [s for s in shapes if not s.is_instance and s.mesh.num_vertices]
        vertices = concat([plain.Array3f64(dr.detach(s.vertices)) for s in meshes])
        counts = np.array([s.mesh.num_vertices for s in shapes], dtype=np.int64)
        starts = np.cumsum(counts) - counts
        local = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)
        base_rows = np.array([shapes[s.base].vertex_offset for s in shapes], dtype=np.int64)
        row = plain.UInt((np.repeat(base_rows, counts) + local).astype(np.uint32))
        shape = plain.UInt(np.repeat(np.arange(len(shapes)), counts).astype(np.uint32))
        cols = tuple(dr.gather(plain.Array3f64, c, shape) for c in scene._world_columns(plain.Array3f64))
        placed = apply(cols, dr.gather(plain.Array3f64, vertices, row))
        centre = scene._core.centre
        if centre is not None:  # x - c in float64, then rounded (as the triangle search's copy)
            placed = placed - plain.Array3f64(*(float(x) for x in centre))
        points, buffer = _convert.vec3_view(placed, self._device)
        _convert.fence(self._device)
        wp.copy(self._points_view, points, count=self._num_world_vertices, stream=stream)
        _convert.fence(self._device)
        del buffer

    def _copy_array(self, array: dr.ArrayBase) -> dr.ArrayBase:
        """A copy in its own memory: ``drjit.copy`` of an evaluated array shares it, and so does a gather at
        ``dr.arange`` (Dr.Jit 1.5 folds it), so a write through a NumPy/DLPack view of the "copy" reached the
        scene's array; a gather at an index with an opaque offset runs a kernel into a new buffer."""
        UInt32 = _convert.module(self._scene._backend, False).UInt32
        index = dr.arange(UInt32, dr.width(array)) + dr.opaque(UInt32, 0)
        copy = dr.gather(type(array), array, index)
        dr.eval(copy)
        return copy

    def _copy_mask(self) -> dr.ArrayBase:
        return self._copy_array(self._mask)

    def _checked_mask(self, call: str, mask: object) -> tuple[dr.ArrayBase, int, str]:
        """The user's mask, checked: a ``Bool`` on the scene's backend and device (copied), its width.

        Raises:
            TypeError: ``mask`` is not a Dr.Jit ``Bool`` array.
            ValueError: it is on another backend or device.
        """
        mask = _check.bool_array(call, "mask", mask)
        _check.same_backend(call, "mask", mask, self._device, "the scene")
        plain = _convert.module(self._scene._backend, False)
        checked = self._copy_array(plain.Bool(dr.detach(mask)))  # (its own memory: the user's later writes stay theirs)
        return checked, dr.width(mask), f"width {dr.width(mask)}"

    def _flipped(self, top: EdgeTopology) -> np.ndarray:
        """(E,) bool host array, :func:`rayd.core.topology.same_direction` of the records (once per topology)."""
        cached = getattr(self, "_flip_cache", None)
        if cached is not None and cached[0] is top:
            return cached[1]
        shape_id = np.array(top.shape_id, dtype=np.int64)
        v = np.array(top.v, dtype=np.int64).T.reshape(-1, 2)
        faces = np.array(top.faces, dtype=np.int64).T.reshape(-1, 2)
        row = np.array(self._scene._face_row, dtype=np.int64)[shape_id]
        offset = np.array([s.vertex_offset for s in self._shapes], dtype=np.int64)[shape_id]
        table = np.array(self._scene._faces, dtype=np.int64).T.reshape(-1, 3)
        tri0, tri1 = (table[row + np.maximum(faces[:, k], 0)] - offset[:, None] for k in (0, 1))
        flip = same_direction(v, tri0, tri1, faces[:, 1] >= 0)
        self._flip_cache = (top, flip)
        return flip

    def silhouette(self, m, geometry, viewpoint: dr.ArrayBase, *, oriented: bool = False) -> dr.ArrayBase:
        """(E,) ``Bool``: boundary edges, and edges whose faces face opposite ways from ``viewpoint``.

        Args:
            m: the Dr.Jit namespace of ``geometry``'s arrays.
            geometry: the scene's detached :class:`~rayd.drjit._intersect.LiveGeometry`
                (mesh vertices and per-shape transforms), in the working float type.
            viewpoint: ``Array3f``/``Array3f64`` of width 1 in that float type.
            oriented: read the second face of a record whose faces run through the edge in
                the same direction as if it were flipped (:func:`rayd.core.topology.same_direction`;
                ``sample_edges``), as rayd.torch does. Consistently oriented records: the same.

        Returns:
            The edges of the silhouette rule (:class:`rayd.core.edges.EdgeState`, ``silhouette``).
        """
        top = self.topology
        scene = self._scene
        plain = _convert.module(self._scene._backend, False)
        Array3 = type(viewpoint)
        shape = m.UInt(top.shape_id)
        first_row = dr.gather(m.Int, m.Int(scene._face_row), shape)

        def towards(face: dr.ArrayBase) -> dr.ArrayBase:
            tri = dr.gather(m.Array3u, m.Array3u(scene._faces), m.UInt(first_row + face))
            v0, v1, v2 = (dr.gather(Array3, geometry.vertices, i) for i in (tri.x, tri.y, tri.z))
            if geometry.transform is not None:  # placed in float64, rounded once (rayd.torch's placed_vertices)
                v0, v1, v2 = (Array3(v) for v in place(geometry.transform, shape, v0, v1, v2))
            return dr.dot(dr.cross(v1 - v0, v2 - v0), viewpoint - v0)

        faces = m.Array2i(top.faces)
        boundary = m.Bool(top.is_boundary)
        second = dr.select(boundary, faces.x, faces.y)
        front0 = towards(faces.x) > 0
        along = towards(second)
        front1 = along > 0
        if oriented:
            front1 = dr.select(m.Bool(self._flipped(top)), along < 0, front1)
        # masked-out edges and edges of disabled shapes are invisible to edge queries
        result = plain.Bool(dr.detach(boundary | (front0 != front1))) & (self._applied != 0)
        dr.eval(result)
        return result
