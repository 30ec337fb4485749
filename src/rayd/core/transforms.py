"""The host transform table: every shape's own matrix and its placement, in float64.

Transforms are 4x4 matrices acting on column vectors, ``p_world = M @ [p, 1]``; only
their top three rows count (affine), the last row is taken as ``(0, 0, 0, 1)``. A
mesh's placement is its own ``M_mesh``; an instance's is ``M_instance @ M_mesh``
(DESIGN.md, "API contract"). The table holds host copies as of the last
``build()``/``sync()``: they feed the engine (the flat BVH's world-space vertices, the
instance level's matrices) and the frontends' evaluation where no matrix requires
gradients. The differentiable composition itself is done by each frontend in its own
array ops (the one place it must be: gradients).

The rules every matrix must meet (:func:`transform_problem`) are checked here too.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from rayd.core.protocol import ArrayProtocol
from rayd.core.shapes import ShapeTable

#: Largest finite float32.
FLOAT32_MAX = 3.4028234663852886e38


def transform_problem(m: np.ndarray) -> tuple[int, str] | None:
    """The first rule that a batch of matrices breaks, else ``None``.

    A matrix is rejected if an entry is non-finite, beyond float32 range (the engine
    stores transforms in float32), or if its 3x3 linear part is singular. The
    determinant is expanded by cofactors, so integer matrices of rank < 3 give exactly
    0 (an LU factorisation, as in ``numpy.linalg.det``, leaves a rounding residue).

    Args:
        m: (K, 4, 4) float64 matrices acting on column vectors.

    Returns:
        ``(k, message)``: the index of the first offending matrix and what it breaks,
        phrased to follow the argument's name (e.g. ``"holds non-finite values"``).
    """
    if m.shape[0] == 0:
        return None
    flat = m.reshape(m.shape[0], 16)
    bad = ~np.isfinite(flat).all(1)
    if bad.any():
        return int(np.argmax(bad)), "holds non-finite values"
    bad = (np.abs(flat) > FLOAT32_MAX).any(1)
    if bad.any():
        return int(np.argmax(bad)), "holds values outside the float32 range (the engine stores float32)"
    a = m[:, :3, :3]
    with np.errstate(over="ignore"):  # products of entries near float32's limit may overflow float64: not 0
        det = (
            a[:, 0, 0] * (a[:, 1, 1] * a[:, 2, 2] - a[:, 1, 2] * a[:, 2, 1])
            - a[:, 0, 1] * (a[:, 1, 0] * a[:, 2, 2] - a[:, 1, 2] * a[:, 2, 0])
            + a[:, 0, 2] * (a[:, 1, 0] * a[:, 2, 1] - a[:, 1, 1] * a[:, 2, 0])
        )
    bad = det == 0.0
    if bad.any():
        return int(np.argmax(bad)), "is singular (its 3x3 linear part has determinant 0)"
    return None


def check_matrices(call: str, name: str, m: np.ndarray, batch: bool | None = None) -> None:
    """Raise ``ValueError`` naming ``call`` and ``name`` if a matrix of the (K, 4, 4) batch ``m`` is bad.

    The message names the matrix as ``'name[k]'`` for a batch, ``'name'`` for a single
    matrix; ``batch=None`` takes a batch of one as a single matrix.
    """
    found = transform_problem(m)
    if found is not None:
        k, problem = found
        indexed = m.shape[0] != 1 if batch is None else batch
        where = f"'{name}[{k}]'" if indexed else f"'{name}'"
        raise ValueError(f"{call}: {where} {problem}")


def checked_batch(call: str, name: str, value: object, count: int, host: object) -> object:
    """``value``, a batch of ``count`` matrices whose type, shape and device are checked, once its values are.

    ``host(value)`` is its (count, 4, 4) float64 host copy (one host read), not made for
    ``count == 0`` (nothing to read: an empty batch is the partner of an empty id list).
    """
    if count:
        check_matrices(call, name, host(value), batch=True)
    return value


def affine(m: np.ndarray) -> np.ndarray:
    """``m`` (..., 4, 4) with its last row replaced by (0, 0, 0, 1)."""
    m = np.array(m, dtype=np.float64, copy=True)
    m[..., 3, :] = (0.0, 0.0, 0.0, 1.0)
    return m


class TransformTable:
    """Host float64 copies of each shape's own matrix (``own``) and placement (``world``), (S, 4, 4).

    Shapes without a matrix hold the identity. ``generation`` counts refreshes, so
    frontends can cache what they derive from the table.
    """

    def __init__(self, arrays: ArrayProtocol) -> None:
        self.arrays = arrays
        self.own = np.zeros((0, 4, 4))
        self.world = np.zeros((0, 4, 4))
        self._identity = np.zeros(0, dtype=bool)
        self.generation = 0

    def reset(self, table: ShapeTable, call: str | None = None) -> None:
        """Read (and, with ``call``, check again) every shape's matrix (at ``build()``)."""
        self.own = np.repeat(np.eye(4)[None], len(table), axis=0)
        self.world = np.zeros((0, 4, 4))  # (read() then recomposes and counts a new generation)
        self.read(table, range(len(table)), call)

    def read(self, table: ShapeTable, shape_ids: Iterable[int], call: str | None = None) -> None:
        """Re-read the listed shapes' matrices (a batch shared by several shapes is read once) and recompose.

        With ``call`` (at ``sync()``), matrices changed in place are checked again:
        ``ValueError`` naming ``call`` and the shape if one lost its shape (``resize_``),
        or is non-finite, beyond float32 or singular (the rules of :func:`transform_problem`).
        """
        sources: dict[int, np.ndarray] = {}
        changed = self.world.shape[0] != len(table)
        for i in shape_ids:
            shape = table[i]
            src = shape.matrix
            if src is None:
                if not changed and self._identity[i]:
                    continue  # still the identity: nothing to recompose (no new generation)
                self.own[i] = np.eye(4)
                changed = True
                continue
            changed = True
            key = id(src)
            if key not in sources:
                try:
                    sources[key] = self.arrays.host_matrices(src)
                except (ValueError, RuntimeError, IndexError) as error:
                    raise ValueError(f"{call or 'rayd'}: the matrix of {shape.kind} {i} no longer holds 4x4 "
                                     f"matrices (changed in place?): {error}") from None
            batch = sources[key]
            index = shape.source_index if shape.source is not None else 0
            expected = shape.source_count if shape.source is not None else 1
            if batch.shape[0] != expected or index >= batch.shape[0]:
                raise ValueError(f"{call or 'rayd'}: the matrix of {shape.kind} {i} must keep the shape it was "
                                 f"given in ({expected} matrices), now holds {batch.shape[0]}; pass it again with "
                                 f"set_mesh_transform()")
            if call is not None:
                found = transform_problem(batch[index : index + 1])
                if found is not None:
                    raise ValueError(f"{call}: the matrix of {shape.kind} {i} (changed in place) {found[1]}")
            self.own[i] = affine(batch[index])
        if not changed:
            return  # every listed shape without a matrix kept the identity: own, world and generation hold
        world = self.own.copy()
        inst = np.array([s.is_instance for s in table], dtype=bool)
        if inst.any():
            base = np.array([s.base for s in table], dtype=np.int64)
            world[inst] = self.own[inst] @ self.own[base[inst]]
        self.world = world
        # the shapes whose own matrix is exactly the identity (a vertex-only sync of them recomposes nothing)
        self._identity = np.all(self.own == np.eye(4), axis=(1, 2))
        self.generation += 1

    def has_any(self, table: ShapeTable) -> bool:
        """True if any shape has a matrix."""
        return any(s.matrix is not None for s in table)
