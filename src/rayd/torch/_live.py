"""What the torch evaluation gathers from: per-build index tables and the live tensors.

The numbering itself (offsets, rows) is decided by :mod:`rayd.core`; this module only
holds it as torch tensors on the scene's device (made once per ``build()``) and
assembles the registered, differentiable tensors — vertices, normals, uv and every
shape's world transform — in the layout the gathers of :mod:`rayd.torch._geometry` read.

Transforms: when no registered matrix carries a gradient (no ``requires_grad``, no
forward-mode tangent, no ``torch.func`` wrapper), the placements come from the core's
host table, copied to the device once per ``sync()``: a query then costs the same
whatever the number of shapes. Otherwise each shape's own matrix is taken from the
tensor it was given in — one indexing op per batch given to ``set_mesh_transform``, one
stack of the single matrices — and instances are composed with their mesh's matrix in
one batched product.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad

from rayd.core.live import LiveBase, vertex_attributes
from rayd.core.shapes import matrix_groups
from rayd.core.surface import enabled_face_ids
from rayd.torch import _convert
from rayd.torch._geometry import LiveTensors, ShapeTable


_REQUIRES_GRAD = __import__("operator").attrgetter("requires_grad")


def differentiable(tensor: torch.Tensor | None, *, grad_mode: bool = True) -> bool:
    """True if gradients (reverse, forward or functorch) may flow through ``tensor``.

    With ``grad_mode=False``, ``requires_grad`` counts only while torch's grad mode is on: under
    ``torch.no_grad()`` / ``inference_mode`` no reverse-mode gradient can flow, so a query may take
    its value-only path; forward mode (dual tensors, ``torch.func.jvp``), which grad mode does not
    stop, and ``torch.func`` gradient levels still count (:func:`needs_gradient`).
    """
    if tensor is None:
        return False
    reverse = grad_mode or torch.is_grad_enabled()
    if tensor.requires_grad and reverse:
        return True
    if _convert.transforms_active() and _convert.is_wrapped(tensor) and (  # never while compiling
            _convert.grad_wrapped(tensor) or (reverse and _convert.unwrapped(tensor).requires_grad)):
        return True  # a tensor only batched by vmap carries no gradient: the value-only paths run
    return forward_ad._current_level >= 0 and forward_ad.unpack_dual(tensor).tangent is not None


def needs_gradient(tensor: torch.Tensor | None) -> bool:
    """:func:`differentiable` with ``requires_grad`` counted only while grad mode is on."""
    return differentiable(tensor, grad_mode=False)


def affine(m: torch.Tensor) -> torch.Tensor:
    """``m`` (..., 4, 4) in float64 with its last row replaced by (0, 0, 0, 1) (differentiably)."""
    m = m.to(torch.float64)
    last = torch.zeros_like(m[..., 3:, :])
    last[..., 0, 3] = 1.0
    return torch.cat((m[..., :3, :], last), dim=-2)


class LiveState(LiveBase):
    """Torch tables of one build of a scene, and the cached placements of its current sync.

    Args:
        scene: the :class:`rayd.torch.Scene`, just built (its core and device are read).
    """

    def _tables(self, scene, host: dict, has_normals: np.ndarray | None, has_uv: np.ndarray | None) -> None:
        core = scene._core
        self.device = device = scene._device
        shapes = core.table.shapes
        mesh_index = {sid: k for k, sid in enumerate(host["mesh_rows"].tolist())}

        def dev(values: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(values).to(device)

        faces_flat = core.table.num_flat_faces
        faces = _convert.from_warp(core.indices)[: 3 * faces_flat].view(-1, 3)
        self.indices = _convert.from_warp(core.indices)[: 3 * faces_flat]  # int32 flat rows (fused kernels)
        any_normals, any_uv = has_normals is not None, has_uv is not None
        self.table = ShapeTable(
            global_offset=dev(host["global_offset"]),
            face_row=dev(host["face_row"]),
            faces=faces.long(),
            face_has_normals=dev(has_normals) if any_normals else None,
            face_has_uv=dev(has_uv) if any_uv else None,
            shape_mesh=dev(np.array([mesh_index[s.base] for s in shapes], dtype=np.int64)),
            instance_rows=dev(host["instance_rows"]),
        )
        inst = host["instance_rows"]
        self.instance_base = dev(host["base"][inst])
        self.any_matrix = False
        self.plain = not core.instance_ids and not any_normals and not any_uv
        self._generation = self._groups_generation = -1
        self._world = self._own = self._normal = None
        self._batch_groups: list = []
        self._row_cache: dict[tuple[int, ...], torch.Tensor] = {}
        self._single_groups: list = []
        self._placement_rows: tuple | None = None  # (rows, shape) of placed_vertices, made below
        self.no_ignore = torch.full((1,), -1, dtype=torch.int32, device=device)  # made once: no launch per query
        # Rows of every query without a mask and with the default interval, made once too.
        self.all_active = torch.ones(1, dtype=torch.uint8, device=device)
        self.bound_rows = {0.0: torch.zeros(1, dtype=torch.float32, device=device),
                           float("inf"): torch.full((1,), float("inf"), dtype=torch.float32, device=device)}
        # int32 copies of each shape's first global_prim_id and face row, for the fused kernels (a
        # search's global_prim_id, and so every row, fits int32).
        self.int32_tables = (self.table.global_offset.to(torch.int32), self.table.face_row.clamp(min=0).to(torch.int32))
        # The search centre (engine/frame.py), for ray origins handed to the engine.
        self.centre = None if core.centre is None else torch.as_tensor(core.centre, dtype=torch.float64).to(device)
        # Made now, not at first use: a query compiled before an eager call made them would hold a guard on
        # their absence and recompile once (CUDA's device search box reads them: tests/torch/test_tmin22.py).
        self.placement_rows()

    # ------------------------------------------------------------------ transforms
    def _refresh(self) -> None:
        """Device copies of the host table, once per refresh of the table.

        Under ``torch.compile`` nothing is compared: the scene refreshed at its last
        ``build()``/``sync()`` (:meth:`prepare`), and a guard on the generation counter
        would recompile the graph at every ``sync()``.
        """
        if torch.compiler.is_compiling():
            return
        transforms = self.core.transforms
        if self._generation != transforms.generation:
            self._generation = transforms.generation
            self._own = torch.as_tensor(transforms.own).to(self.device)
            self._world = torch.as_tensor(transforms.world).to(self.device)
            self._normal = None
            self.any_matrix = transforms.has_any(self.core.table)

    def prepare(self) -> None:
        """Refresh the device tables now (after ``build()``/``sync()``), so that traced queries only read them.

        Also what a query would otherwise redo per mesh: ``vertex_dtype``, the meshes' vertex
        dtypes promoted together, and the detached concatenation of :meth:`flat_vertices`
        (dropped here, remade at its first use), and the device box of ``tmin = -inf`` searches
        (likewise). They hold until the next ``sync()``: a query
        runs only on a ready scene, whose registered tensors have not changed since.
        """
        self._refresh()
        self._groups()
        meshes = self.core.table.meshes
        dtype = meshes[0].vertices.dtype
        for shape in meshes[1:]:
            dtype = torch.promote_types(dtype, shape.vertices.dtype)
        self.vertex_dtype = dtype
        self._flat_vertices = None
        self._enabled_ids = None
        self._device_box = None  # (rayd.torch._trace._search_box)

    def enabled_face_ids(self) -> torch.Tensor:
        """(F,) int64 ``global_prim_id`` of every face of the enabled shapes, on the device, once per ``sync()``."""
        if torch.compiler.is_compiling():
            return torch.as_tensor(enabled_face_ids(self.core.table.shapes), device=self.device)
        if getattr(self, "_enabled_ids", None) is None:
            self._enabled_ids = torch.as_tensor(enabled_face_ids(self.core.table.shapes), device=self.device)
        return self._enabled_ids

    synced = prepare  # after ``sync()`` (rayd.core.frontend.SceneBase): the same refresh

    def flat_vertices(self) -> torch.Tensor:
        """(V_m, 3) the meshes' registered vertices, detached and concatenated in mesh order (no gradient).

        One mesh: its tensor itself (detached); several: one copy per ``sync()``, not per query.
        """
        meshes = self.core.table.meshes
        if len(meshes) == 1:
            return meshes[0].vertices.detach()
        if self._flat_vertices is None:
            self._flat_vertices = torch.cat([s.vertices.detach() for s in meshes])
        return self._flat_vertices

    def has_matrix(self) -> bool:
        """True if any shape has a transform (as of the last build/sync)."""
        self._refresh()
        return self.any_matrix

    def _groups(self) -> tuple[list, list]:
        """The registered matrices, grouped once per refresh: batches ``(src, rows, index)`` and single ``(row, m)``."""
        if not torch.compiler.is_compiling() and self._groups_generation != self._generation:
            batches, by_matrix = matrix_groups(self.core.table.shapes)
            singles = sorted(((i, src) for src, ids in by_matrix.values() for i in ids), key=lambda e: e[0])
            dev = self.device
            self._batch_groups = [(src, torch.as_tensor(rows, device=dev), torch.as_tensor(index, device=dev))
                                  for src, rows, index in batches.values()]
            self._single_groups = singles
            self._single_tensors = [m for _, m in singles]
            self._groups_generation = self._generation
        return self._batch_groups, self._single_groups

    def world(self) -> torch.Tensor:
        """(S, 4, 4) float64 placement per shape: ``M_mesh`` or ``M_instance @ M_mesh`` (differentiable).

        Only the top three rows of each matrix count: the last row is taken as
        (0, 0, 0, 1), so it never receives a gradient. The torch ops per query do not
        grow with the number of shapes (one gather per batch, one stack of the single
        matrices that carry gradients).
        """
        self._refresh()
        batches, singles = self._groups()
        batches = [g for g in batches if differentiable(g[0])]
        if singles:
            if torch.compiler.is_compiling():  # (attrgetter is not traceable)
                singles = [(i, m) for i, m in singles if m.requires_grad]
            elif _convert.transforms_active() or forward_ad._current_level >= 0:
                singles = [(i, m) for i, m in singles if differentiable(m)]
            elif any(map(_REQUIRES_GRAD, self._single_tensors)):  # one pass in C
                singles = [(i, m) for i, m in singles if m.requires_grad]
            else:
                singles = []
        if not batches and not singles:
            return self._world
        own = self._own
        for src, rows, index in batches:
            own = own.index_put((rows,), affine(src[index]))
        if singles:
            own = own.index_put((self._rows([i for i, _ in singles]),), affine(torch.stack([m for _, m in singles])))
        rows = self.table.instance_rows
        if rows.numel() == 0:
            return own
        return own.index_put((rows,), own[rows] @ own[self.instance_base])

    def _rows(self, rows: list[int]) -> torch.Tensor:
        """A device tensor of shape ids, cached: no host-to-device copy in a query once seen."""
        if torch.compiler.is_compiling():  # a constant of the graph; no guard on the cache
            return torch.as_tensor(rows, device=self.device)
        key = tuple(rows)
        found = self._row_cache.get(key)
        if found is None:
            if len(self._row_cache) > 64:
                self._row_cache.clear()
            found = self._row_cache[key] = torch.as_tensor(rows, device=self.device)
        return found

    def normal_matrix(self, world: torch.Tensor) -> torch.Tensor:
        """(S, 3, 3) inverse of each placement's linear part (normals map by its transpose)."""
        if world is self._world:
            if self._normal is None:
                self._normal = torch.linalg.inv_ex(world[:, :3, :3]).inverse
            return self._normal
        return torch.linalg.inv_ex(world[:, :3, :3]).inverse  # no error check: no host synchronisation

    # ------------------------------------------------------------------ world-space vertices
    def placement_rows(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(rows, shape)``: per row of :meth:`placed_vertices`, int64 (V_w,) on the device, made once per build.

        ``rows``: the row of the meshes' concatenated vertices it repeats (``None`` without
        instances: then the rows coincide). ``shape``: its shape id (``None`` for a scene of one
        shape). The shapes and their vertex counts are fixed from ``build()`` to ``build()``.
        Made at build (the end of ``_tables``), so that a compiled query finds them made (a cache
        filled while tracing, or by an eager call after it, would recompile the graph once).
        """
        found = self._placement_rows
        if found is not None:
            return found
        shapes = self.core.table.shapes
        if torch.compiler.is_compiling():
            return self._placement_rows_traced(shapes)
        counts = np.array([s.num_vertices for s in shapes], dtype=np.int64)
        first = np.array([s.vertex_offset for s in shapes], dtype=np.int64)  # an instance's: its mesh's
        rows = shape = None
        with _convert.outside_transforms():  # plain tensors: kept beyond this call
            if any(s.is_instance for s in shapes):
                start = np.cumsum(counts) - counts  # first row of each shape in the placed copy
                host = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(first - start, counts)
                rows = torch.as_tensor(host).to(self.device)
            if len(shapes) > 1:
                shape = torch.as_tensor(np.repeat(np.arange(len(shapes), dtype=np.int64), counts)).to(self.device)
        self._placement_rows = (rows, shape)
        return rows, shape

    def _placement_rows_traced(self, shapes) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """:meth:`placement_rows` while ``torch.compile`` traces: from Python ints (constants of the graph,
        not cached), by torch ops of static sizes. (Dynamo traces NumPy as torch ops on unbacked values:
        ``np.arange(int(counts.sum()))`` failed to trace, so a compiled ``tmin = -inf`` query on a scene
        with instances, whose box places the vertices in the graph, raised ``UserError``.)"""
        counts = [s.num_vertices for s in shapes]
        total = sum(counts)
        rows = shape = None
        if any(s.is_instance for s in shapes):
            starts = [sum(counts[:k]) for k in range(len(counts))]
            shift = torch.tensor([s.vertex_offset - b for s, b in zip(shapes, starts)], dtype=torch.int64,
                                 device=self.device)
            rows = torch.arange(total, dtype=torch.int64, device=self.device) + torch.repeat_interleave(
                shift, torch.tensor(counts, dtype=torch.int64, device=self.device), output_size=total)
        if len(shapes) > 1:
            shape = torch.repeat_interleave(torch.arange(len(shapes), dtype=torch.int64, device=self.device),
                                            torch.tensor(counts, dtype=torch.int64, device=self.device),
                                            output_size=total)
        return rows, shape

    def placed_vertices(self, dtype: torch.dtype, *, detach: bool = False) -> torch.Tensor:
        """(V_w, 3) world positions of every shape's vertices, concatenated in shape order.

        A mesh's rows are ``M_mesh @ [p, 1]``; an instance repeats its mesh's vertices
        placed by ``M_instance @ M_mesh`` (DESIGN.md). With any transform in the scene the
        placement is computed in float64 (as :func:`rayd.torch._geometry.gather` places
        corners), then cast to ``dtype``. The torch ops do not grow with the number of
        shapes: one concatenation of the meshes' vertex tensors, the placements of
        :meth:`world` (one stack of the matrices that carry gradients, else the host
        table's copy), one gather by the rows of :meth:`placement_rows`, one batched
        matrix product.

        Args:
            dtype: float dtype of the result.
            detach: the plain values (no autograd, no functorch wrappers), from the
                placements of the last ``sync()``.

        Returns:
            (V_w, 3) ``dtype`` tensor on the scene's device; ``V_w`` counts every shape's
            vertices, instances included. Without transforms and instances, the mesh's own
            vertex tensor when it has ``dtype`` (one mesh): never write into the result.

        Gradients:
            Unless ``detach``, reverse and forward mode into every registered vertex and
            matrix tensor (the matrices' last rows excepted, as in :meth:`world`).
        """
        self._refresh()
        meshes = self.core.table.meshes
        if detach:
            with torch.no_grad():
                vertices = _convert.primal(meshes[0].vertices if len(meshes) == 1
                                           else torch.cat([s.vertices for s in meshes]))
        else:  # (torch.cat promotes mixed float dtypes)
            vertices = meshes[0].vertices if len(meshes) == 1 else torch.cat([s.vertices for s in meshes])
        rows, shape = self.placement_rows()
        if not self.any_matrix:
            vertices = vertices.to(dtype)
            return vertices if rows is None else vertices.index_select(0, rows)
        placement = self._world if detach else self.world()  # (S, 4, 4) float64
        vertices = vertices.to(torch.float64)
        if rows is not None:
            vertices = vertices.index_select(0, rows)
        if shape is None:  # one shape
            m = placement[0]
            return (vertices @ m[:3, :3].transpose(0, 1) + m[:3, 3]).to(dtype)
        m = placement[:, :3, :].reshape(-1, 12).index_select(0, shape).view(-1, 3, 4)  # (V_w, 3, 4)
        return torch.baddbmm(m[:, :, 3:], m[:, :, :3], vertices.unsqueeze(-1)).squeeze(-1).to(dtype)

    # ------------------------------------------------------------------ tensors
    def live(self, dtype: torch.dtype) -> LiveTensors:
        """The registered tensors (differentiable), cast to ``dtype``, in the tables' row order."""
        self._refresh()
        device = self.device
        meshes = self.core.table.meshes  # (not a pass over every shape: 10,000 instances)
        vertices = [s.vertices if s.vertices.dtype == dtype else s.vertices.to(dtype) for s in meshes]
        table = self.table
        normals, uv = vertex_attributes(
            meshes, (table.face_has_normals is not None, table.face_has_uv is not None),
            lambda array, _: array.to(dtype), lambda rows, k: torch.zeros((rows, k), dtype=dtype, device=device),
            torch.cat)
        to_world = normal_matrix = None
        if self.any_matrix:
            to_world = self.world()  # float64: corners are placed in float64 (_geometry.gather)
            if normals is not None:
                normal_matrix = self.normal_matrix(to_world)
        return LiveTensors(
            vertices=vertices[0] if len(vertices) == 1 else torch.cat(vertices),
            normals=normals,
            uv=uv,
            to_world=to_world,
            normal_matrix=normal_matrix,
        )
