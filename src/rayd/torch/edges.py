"""Edges of a scene: topology records, the nearest-edge result record, edge bookkeeping.

The topology rule (DESIGN.md, "Edges") has one implementation, the engine's
(:func:`rayd.engine.edge_topology.mesh_edges`, Warp kernels on the scene's device,
launched on torch's current stream), shared with rayd.drjit: per mesh, the unique
undirected edges keyed by their sorted vertex-index pair (no welding by position), in
ascending key order. An edge with one incident face is a boundary edge
(``faces[:, 1] = -1``); an edge with ``2 <= k <= 8`` faces yields one record per
unordered pair of its faces (one for a manifold edge), in lexicographic order of the
faces; an edge with ``k > 8`` faces yields the ``k`` consecutive pairs of their cyclic
order ``(f_0, f_1), ..., (f_{k-1}, f_0)`` (faces ascending), so a mesh of ``F`` faces
has at most ``10.5 F`` records and silhouettes are still found on every such edge whose
faces disagree (the engine module explains the rule). Degenerate input is taken as
given: a face with a repeated vertex contributes an edge ``(i, i)`` and counts twice on
its other edge.
"""

from __future__ import annotations

import torch
import warp as wp

from rayd.core.edge_state import EdgeBuffers
from rayd.core.edges import TopologyBase, document
from rayd.core.topology import same_direction
from rayd.engine.edge_topology import mesh_edges as engine_mesh_edges
from rayd.records import EdgeRecord
from rayd.torch.intersection import TorchRecord
from rayd.engine.runtime import launch_stream
from rayd.torch import _check, _convert


class EdgeTopology(TopologyBase):
    """Scene-wide edge records, in shape order (row index = ``global_edge_id``).

    Attributes (E edges):
        v: (E, 2) int32 mesh-local vertex ids, ``v[:, 0] < v[:, 1]`` (unless a face is
            degenerate); ``edge_t`` runs from ``v[:, 0]`` (0) to ``v[:, 1]`` (1).
        faces: (E, 2) int32 mesh-local face ids of the two faces; ``faces[:, 1] = -1``
            for a boundary edge.
        opposite: (E, 2) int32 the third vertex of each face, -1 where no face.
        is_boundary: (E,) bool, True for edges with exactly one incident face.
        shape_id: (E,) int32 the mesh (shape) the edge belongs to.
        edge_id: (E,) int32 index of the record within its mesh.
        global_edge_id: (E,) int32 the row index ``0 .. E-1``.

    Units:
        Indices only; positions come from the meshes' vertex tensors.

    Gradients:
        None (integer and bool tensors).

    Example:
        The triangle ``(0, 1, 2)`` gives ``v = [[0, 1], [0, 2], [1, 2]]``, all boundary.

    ``Scene.edge_topology()`` returns a copy of the scene's record: writing into these
    tensors changes nothing in the scene.
    """


class NearestEdge(TorchRecord, EdgeRecord):
    """The nearest edge per query (or the k nearest), with miss values in the data.

    Attributes (``...`` is the query batch shape, ``[..., k]`` for ``nearest_edges``):
        distance: (...) float, Euclidean distance between the query (point, or the
            ray's closest point) and ``edge_point``; ``+inf`` where no edge lies within
            ``max_distance``.
        edge_t: (...) float in ``[0, 1]``, ``edge_point = (1 - edge_t) a + edge_t b``
            with ``a, b`` the world positions of ``v[:, 0], v[:, 1]``; 0 on a miss.
        edge_point: (..., 3) the closest point on the edge; 0 on a miss.
        ray_t: (...) (ray queries only) the ray parameter ``s`` in ``[tmin, tmax]`` of
            the closest point ``ray_point = o + s d``; 0 on a miss.
        ray_point: (..., 3) (ray queries only); 0 on a miss.
        edge_id: (...) int32 edge index within its mesh; -1 on a miss.
        shape_id: (...) int32; -1 on a miss.
        global_edge_id: (...) int32 row of :class:`EdgeTopology`; -1 on a miss.

    Units:
        ``distance``, ``edge_point``, ``ray_point`` in world units; ``edge_t`` is a
        fraction of the edge; ``ray_t`` in multiples of ``|d|``.

    Gradients:
        Float fields have the promoted dtype of the query and the scene's vertices and
        are differentiable (reverse and forward mode) for the fixed winning edge, with
        respect to vertices, transforms and the query (DESIGN.md); misses get zero
        gradient. Never NaN.

    Like :class:`Intersection`, supports ``detach()``, ``to(device)`` and indexing of
    the batch dims (``near[mask]``; for ``nearest_edges`` a mask of the query shape
    keeps all k slots of each selected query).
    """

    @property
    def shape(self) -> torch.Size:
        """The query batch shape (``[..., k]`` for top-k)."""
        return self._fields["distance"].shape


document(NearestEdge, {"is_valid": """(...) bool: True where an edge was found."""},
         {"is_valid": {"return": torch.Tensor}})


def mesh_edges(faces: torch.Tensor, num_vertices: int) -> tuple[torch.Tensor, ...]:
    """Edge records of one mesh by the topology rule (module docstring), computed by the engine.

    Args:
        faces: (F, 3) int32/int64 vertex ids in ``[0, V)``, on the CPU or a CUDA device.
        num_vertices: V.

    Returns:
        ``(v, faces, opposite)``, each (E, 2) int64 on ``faces``' device: sorted vertex
        pair, incident face pair (-1 for none), third vertex of each face (-1 for none).

    Raises:
        ValueError: the mesh is too large for int32 edge ids (about 204 million faces;
            see :func:`rayd.engine.edge_topology.mesh_edges`).

    Synchronises with the device once (to size the output), on torch's current stream.
    """
    return tuple(part.long() for part in _mesh_records(faces, num_vertices))


def _mesh_records(faces: torch.Tensor, num_vertices: int) -> tuple[torch.Tensor, ...]:
    """:func:`mesh_edges` as (E, 2) int32 tensors of their own (copies of the engine's arrays)."""
    faces = _convert.primal(faces)
    device = faces.device
    stream = _convert.current_stream(device)
    flat = faces.to(torch.int32).reshape(-1).contiguous()
    records = engine_mesh_edges(_convert.scalar_view(flat), num_vertices, stream)
    if records.num_edges == 0:
        empty = torch.empty((0, 2), dtype=torch.int32, device=device)
        return empty, empty.clone(), empty.clone()
    with launch_stream(records.v.device, stream):
        # Copy on torch's stream, then free the engine's arrays on that same stream.
        out = tuple(wp.to_torch(a).reshape(-1, 2).clone() for a in (records.v, records.faces, records.opposite))
        del records
    return out


def placed_vertices(state, dtype: torch.dtype, *, detach: bool = False) -> torch.Tensor:
    """(V, 3) world positions of every shape's vertices, concatenated in shape order.

    A mesh's rows are ``M_mesh @ [p, 1]``; an instance repeats its mesh's vertices
    placed by ``M_instance @ M_mesh`` (DESIGN.md). Differentiable in the registered
    vertex and transform tensors unless ``detach``. The torch ops per call do not grow
    with the number of shapes (:meth:`rayd.torch._live.LiveState.placed_vertices`).

    Args:
        state: the scene's :class:`rayd.torch._live.LiveState` (``scene._state``), of a
            built and synced scene.
        dtype: float dtype of the result.
        detach: use the plain values (no autograd, no functorch wrappers).

    Returns:
        (V, 3) ``dtype`` on the scene's device (possibly a mesh's own vertex tensor: read only).
    """
    return state.placed_vertices(dtype, detach=detach)


class SceneEdges(EdgeBuffers):
    """rayd.torch's :class:`~rayd.core.edge_state.EdgeBuffers`: topology, masks and points as torch tensors.

    The faces are those ``build()`` snapshotted (the ones the triangle BVH was built
    from), never the meshes' live face tensors: a face tensor edited in place after
    ``build()`` changes nothing until the next ``build()``.

    Args:
        scene: the :class:`rayd.torch.Scene`, just built: its list of shape records, in
            shape order (read live; meshes carry ``vertex_offset``, their first row in
            the flat vertex buffer), its device, and from its live state the build-time
            face table ``(F_meshes, 3)`` int64 (every mesh's faces, not instances', in
            shape order, offset by the mesh's ``vertex_offset``) and the search centre
            (engine/frame.py: the engine's copy is relative to it).
    """

    def __init__(self, scene) -> None:
        super().__init__(scene)
        shapes, faces = scene._shapes, scene._state.table.faces
        self.centre = scene._state.centre
        # Mesh-local build-time faces of every shape (an instance shares its mesh's).
        local: dict[int, torch.Tensor] = {}
        row = 0
        for shape_id, shape in enumerate(shapes):
            if not getattr(shape, "is_instance", False):
                n = shape.mesh.num_faces
                local[shape_id] = faces[row : row + n] - shape.vertex_offset
                row += n
        self._faces = [local[getattr(s, "base", i)] for i, s in enumerate(shapes)]
        self._points: torch.Tensor | None = None
        self._applied: torch.Tensor | None = None  # uint8, what the BVH sees (since sync)
        self._silhouette_tables: tuple | None = None  # (faces, offset, flip or None) of silhouette()

    def _mesh_records(self, base: int, stream) -> tuple[int, tuple[torch.Tensor, ...]]:
        records = _mesh_records(self._faces[base], self._shapes[base].mesh.num_vertices)
        return records[0].shape[0], records

    def _make_topology(self, records: list, plan) -> EdgeTopology:
        device = self._device

        def rows(k: int) -> torch.Tensor:
            parts = [r[k] for r in records]
            if not parts:
                return torch.empty((0, 2), dtype=torch.int32, device=device)
            return torch.cat(parts)[torch.from_numpy(plan.source).to(device)]

        def column(values) -> torch.Tensor:
            return torch.from_numpy(values).to(device)

        v, edge_faces = rows(0), rows(1)
        e = plan.num_edges
        # rows of the world-space copy; never `edge_topology().v` itself
        self._edge_rows = (v + column(plan.world_shift)[:, None]).contiguous()
        self._edges_view = _convert.vec2i_view(self._edge_rows)
        self._mask = torch.ones(e, dtype=torch.bool, device=device)
        self._applied = torch.ones(e, dtype=torch.uint8, device=device)
        self._applied_view = _convert.scalar_view(self._applied)
        return EdgeTopology(v=v, faces=edge_faces, opposite=rows(2), is_boundary=edge_faces[:, 1] < 0,
                            shape_id=column(plan.shape_id), edge_id=column(plan.edge_id),
                            global_edge_id=torch.arange(e, dtype=torch.int32, device=device))

    def _per_edge(self, enabled: list[bool]) -> torch.Tensor:
        return torch.tensor(enabled, dtype=torch.bool, device=self._device)[self.topology.shape_id.long()]

    def _write_applied(self, stream, applied: torch.Tensor) -> None:
        self._applied.copy_(applied)

    def _refresh_points(self, stream) -> None:
        if self.centre is None:
            world = placed_vertices(self._state, torch.float32, detach=True)
        else:  # x - c in float64, then rounded (as the triangle search's copy)
            world = (placed_vertices(self._state, torch.float64, detach=True) - self.centre).float()
        if self._points is None:
            # Always our own buffer: `world` may be the user's vertex tensor itself (one
            # float32 mesh without a transform), which sync() must never write into.
            self._points = world.clone(memory_format=torch.contiguous_format)
            self._points_view = _convert.vec3_view(self._points)
        else:
            self._points.copy_(world)

    @staticmethod
    def _copy_array(array: torch.Tensor) -> torch.Tensor:
        return array.clone()

    def _copy_mask(self) -> torch.Tensor:
        return self._mask.clone()

    def _checked_mask(self, call: str, mask: object) -> tuple[torch.Tensor, int, tuple[int, ...]]:
        """The user's mask, checked: a bool tensor on the scene's device (copied), its length, its shape.

        Raises:
            TypeError: ``mask`` is not a bool tensor.
            ValueError: it is on another device.
        """
        mask = _check.tensor(call, "mask", mask)
        if mask.dtype != torch.bool:
            raise TypeError(f"{call}: 'mask' must have dtype bool, got {mask.dtype}")
        _check.same_device(call, "mask", mask, self._device, "the scene")
        return _convert.primal(mask).clone(), mask.shape[0] if mask.dim() == 1 else -1, tuple(mask.shape)

    def silhouette(self, world_vertices: torch.Tensor, viewpoint: torch.Tensor, *, oriented: bool = False) -> torch.Tensor:
        """(E,) bool: boundary edges, and edges whose faces face opposite ways from ``viewpoint``.

        Args:
            world_vertices: (V, 3) :func:`placed_vertices` of the scene.
            viewpoint: (3,) in the same dtype.
            oriented: read the second face of a record whose faces run through the edge in
                the same direction as if it were flipped (:func:`rayd.core.topology.same_direction`;
                ``sample_edges``), so that the rule marks where the surface folds away from
                ``viewpoint`` whatever the faces' windings. Consistently oriented records: the same.

        Returns:
            The edges of the silhouette rule (:class:`rayd.core.edges.EdgeState`, ``silhouette``).
        """
        top = self.topology
        if self._silhouette_tables is None:  # build-time constants, made at the first call
            mesh_faces = self._faces  # build-time faces, as the topology
            faces = torch.cat([f + off for f, off in zip(mesh_faces, self._world_offsets)])
            counts = torch.tensor([0] + [f.shape[0] for f in mesh_faces[:-1]], device=faces.device)
            self._silhouette_tables = (faces, counts.cumsum(0)[top.shape_id.long()], None)
        faces, offset, flip = self._silhouette_tables  # (no host-to-device copy per query)
        f0 = top.faces[:, 0].long() + offset
        f1 = top.faces[:, 1].long().clamp(min=0) + offset
        if oriented and flip is None:  # one host pass over the topology, at the first such call
            local = torch.cat([f.to(faces.device).long() for f in self._faces])
            flip = torch.as_tensor(same_direction(*(_convert.host_array(x) for x in (
                top.v, local[f0], local[f1], ~top.is_boundary))), device=faces.device)
            self._silhouette_tables = (faces, offset, flip)
        tri = world_vertices[faces]  # (F, 3, 3)
        normal = torch.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        towards = ((viewpoint - tri[:, 0]) * normal).sum(-1)
        front0 = towards[f0] > 0
        front1 = towards[f1] > 0
        if oriented:
            front1 = torch.where(flip, towards[f1] < 0, front1)
        # masked-out edges and edges of disabled shapes are invisible to edge queries
        return (top.is_boundary | (front0 != front1)) & self._applied.bool()
