"""What rayd.drjit's evaluation gathers from: per-build tables, transform columns, live arrays.

The numbering (offsets, rows) is :mod:`rayd.core`'s; this module holds it as Dr.Jit
arrays (made once per ``build()``) and assembles the registered, differentiable arrays
— vertices, normals, uv and every shape's placement as width-S columns — for the
gathers of :mod:`rayd.drjit._intersect`. Placements come from the core's host
transform table (cached until it changes) unless a registered matrix has gradients
enabled; then they are rebuilt from the matrices with a traced expression that does
not grow with the number of shapes.
"""

from __future__ import annotations

from types import ModuleType

import drjit as dr
import numpy as np

from rayd.core.live import LiveBase, vertex_attributes
from rayd.core.shapes import matrix_groups
from rayd.drjit import _check, _convert
from rayd.drjit._geometry import StackMatrices, compose, concat, normal_columns
from rayd.drjit._intersect import LiveGeometry


class LiveState(LiveBase):
    """Dr.Jit tables of one build of a scene and its cached transform columns.

    Args:
        scene: the :class:`rayd.drjit.Scene`, just built (its core and backend,
            ``'llvm'`` or ``'cuda'``, are read).
    """

    def _tables(self, scene, host: dict, has_normals: np.ndarray | None, has_uv: np.ndarray | None) -> None:
        self.backend = backend = scene._backend
        plain = _convert.module(backend, False)
        table = self.core.table
        flat = _convert.from_warp_int32(self.core.indices, 3 * table.num_flat_faces, backend)
        self._faces = plain.Array3u(dr.gather(plain.Array3i, flat, dr.arange(plain.UInt32, table.num_flat_faces)))
        if not table.num_flat_faces:
            self._faces = plain.Array3u()
        self._face_has_normals = None if has_normals is None else plain.Bool(has_normals)
        self._face_has_uv = None if has_uv is None else plain.Bool(has_uv)
        self._global_offset = plain.Int(host["global_offset"].astype(np.int32))
        self._face_row = plain.Int(host["face_row"].astype(np.int32))
        self.is_instance = host["is_instance"]
        self.base_of = host["base"]
        dr.make_opaque(self._faces, self._global_offset, self._face_row)
        dr.eval(self._face_has_normals, self._face_has_uv)
        self._columns_cache: dict = {}
        self._generation = self.core.transforms.generation
        # Per transform refresh: the registered matrices grouped by source array, and whether any
        # shape has one (a query reads them without a pass over the shapes: 10,000 instances).
        self._groups_cache: tuple | None = None
        self._precision: tuple[bool, bool] | None = None
        self._mesh_rows = [s for s in table.shapes if not s.is_instance and s.mesh.num_vertices]

    def _fresh(self) -> None:
        if self._generation != self.core.transforms.generation:
            self._generation = self.core.transforms.generation
            self._columns_cache.clear()
            self._groups_cache = None

    def _groups(self) -> tuple[tuple[dict, dict], bool]:
        """``(matrix_groups(shapes), any shape has a matrix)``, made once per transform refresh."""
        self._fresh()
        if self._groups_cache is None:
            shapes = self.core.table.shapes
            self._groups_cache = (matrix_groups(shapes), any(s.to_world is not None for s in shapes))
        return self._groups_cache

    def precision(self) -> tuple[bool, bool]:
        """``(any mesh's vertices are float64, any registered array is an AD array)``, once per ``sync()``.

        Both are properties of the arrays' types, which change only through calls that a
        ``sync()`` must follow (a query on a scene with pending updates raises).
        """
        if self._precision is None:
            shapes = self.core.table.shapes
            self._precision = (any(_convert.is_double(s.vertices) for s in self.core.table.meshes),
                               any(shape_is_ad(s) for s in shapes))
        return self._precision

    def synced(self) -> None:
        """Forget what :meth:`precision` found (the registered arrays may have been replaced)."""
        self._precision = None

    def world_columns(self, Array3: type) -> tuple:
        """Every shape's placement as width-S ``Array3`` columns (no gradients), from the host table; cached."""
        self._fresh()
        key = (Array3, "world")
        if key not in self._columns_cache:
            dtype = np.float64 if dr.type_v(Array3) == dr.VarType.Float64 else np.float32
            world = self.core.transforms.world
            self._columns_cache[key] = tuple(
                Array3(*(np.ascontiguousarray(world[:, i, j], dtype=dtype) for i in range(3))) for j in range(4)
            )
        return self._columns_cache[key]

    def transform_columns(self, m: ModuleType, with_normals: bool) -> tuple[tuple, tuple | None]:
        """Width-S ``Array3f64`` placement columns (and normal-transform columns) for the differentiable evaluation.

        float64 whatever the vertices' and matrices' types (float32 matrices widen
        exactly; an instance's composition is computed in float64): the evaluation places
        the winners' vertices in float64 and rounds its outputs once
        (:func:`rayd.drjit._geometry.place`), as rayd.torch does.

        When no registered matrix has gradients enabled, they come from the host table
        (plain arrays, cached until a transform changes). Otherwise every shape's own
        matrix starts from the host table and the matrices that require gradients are
        written over it: a batch given to ``set_mesh_transform`` with one ``dr.gather``
        for all its shapes, the width-1 matrices together through one
        :class:`StackMatrices` op; instances are then composed with their mesh's matrix
        in one vectorised step. The traced expression does not grow with the number
        of shapes.
        """
        Array3 = m.Array3f64
        (every_batch, every_single), _ = self._groups()  # filtered per distinct array, as matrix_groups(.., keep)
        batches = {key: group for key, group in every_batch.items() if _requires_grad(group[0])}
        singles = {key: group for key, group in every_single.items() if _requires_grad(group[0])}
        if not batches and not singles:
            transform = self.world_columns(Array3)
            if not with_normals:
                return transform, None
            key = (Array3, "normal")
            normal = self._columns_cache.get(key)
            if normal is None:
                normal = normal_columns(transform)
                dr.eval(normal)
                self._columns_cache[key] = normal
            return transform, normal

        Float = m.Float64
        own = self.core.transforms.own
        entries = [[Float(np.ascontiguousarray(own[:, i, j], dtype=np.float64)) for j in range(4)] for i in range(3)]

        def overwrite(values, index, positions):  # entries[positions] = values[index]
            where = m.UInt(positions)
            index = m.UInt(index)
            for i in range(3):
                for j in range(4):
                    dr.scatter(entries[i][j], Float(dr.gather(type(values[i][j]), values[i][j], index)), where)

        for src, positions, indices in batches.values():
            overwrite(src, indices, positions)
        if singles:
            groups = list(singles.values())
            values = own[[ids[0] for _, ids in groups], :3]
            stacked = dr.custom(StackMatrices, [src for src, _ in groups], values, Float)
            rows = [stacked[4 * i : 4 * i + 4] for i in range(3)]
            slot = [k for k, (_, ids) in enumerate(groups) for _ in ids]
            overwrite(rows, slot, [i for _, ids in groups for i in ids])
        cols = tuple(Array3(entries[0][j], entries[1][j], entries[2][j]) for j in range(4))
        inst = self.is_instance
        if inst.any():
            base = m.UInt(np.where(inst, self.base_of, 0).astype(np.uint32))
            is_instance = m.Bool(inst)
            identity = (Array3(1, 0, 0), Array3(0, 1, 0), Array3(0, 0, 1), Array3(0, 0, 0))
            inner = tuple(dr.select(is_instance, dr.gather(Array3, c, base), e) for c, e in zip(cols, identity))
            cols = compose(cols, inner)
        return cols, (normal_columns(cols) if with_normals else None)

    def live_geometry(self, m: ModuleType, double: bool) -> LiveGeometry:
        """The registered arrays (differentiable): object-space meshes and per-shape transforms."""
        Array3 = m.Array3f64 if double else m.Array3f
        Array2 = m.Array2f64 if double else m.Array2f
        rows = self._mesh_rows  # meshes with vertices (width 0 adds no rows)
        vertices = concat([Array3(s.vertices) for s in rows])
        if self._face_has_normals is not None or self._face_has_uv is not None:
            _attribute_widths(rows)
        kinds = {3: Array3, 2: Array2}
        normals, uv = vertex_attributes(rows, (self._face_has_normals is not None, self._face_has_uv is not None),
                                        lambda array, k: kinds[k](array), lambda n, k: dr.zeros(kinds[k], n), concat)
        transform = normal_transform = None
        if self._groups()[1]:  # any shape has a matrix
            transform, normal_transform = self.transform_columns(m, normals is not None)
        return LiveGeometry(
            vertices=vertices,
            faces=self._faces,
            normals=normals,
            face_has_normals=self._face_has_normals,
            uv=uv,
            face_has_uv=self._face_has_uv,
            global_offset=self._global_offset,
            face_row=self._face_row,
            transform=transform,
            normal_transform=normal_transform,
        )


def _attribute_widths(rows: list) -> None:
    """``ValueError`` if a mesh's normals or uv no longer have one row per vertex.

    They are read at each query, not snapshotted, and a Dr.Jit vector's component can be
    replaced by one of another width (``normals.y = Float(...)``): the evaluation's gathers
    would then read zeros past the end, and every later mesh's rows one place off (a
    width-1 component, which ``Mesh()`` refuses, would be copied as if it had V rows).
    """
    for s in rows:
        for name in ("normals", "uv"):
            array = getattr(s.mesh, name)
            if array is None:
                continue
            widths = [dr.width(c) for c in array]
            if any(w != s.built_vertices for w in widths):
                raise ValueError(f"{_check.query_call()}: the {name} of mesh {s.base} must keep one row per vertex "
                                 f"({s.built_vertices}); their components now have widths {widths} (changed in "
                                 f"place?): pass a new Mesh and build() again")


def shape_is_ad(shape) -> bool:
    """True if any array a shape registered (vertices, normals, uv, transform) is a Dr.Jit AD array."""
    arrays = (shape.vertices, shape.mesh.normals, shape.mesh.uv, shape.to_world)
    return any(a is not None and _convert.is_ad(a) for a in arrays)


def gather_matrix(source: dr.ArrayBase, k: int, backend: str) -> dr.ArrayBase:
    """Entry ``k`` of a batch of matrices, width 1 (differentiable: gradients flow back into ``source``).

    The index is opaque, so kernels that read one such matrix do not differ by ``k``.
    """
    index = dr.opaque(_convert.module(backend, False).UInt32, k)
    return dr.gather(type(source), source, index)


def _requires_grad(array: dr.ArrayBase) -> bool:
    return _convert.is_ad(array) and dr.grad_enabled(array)
