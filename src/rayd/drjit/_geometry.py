"""World-space geometry with Dr.Jit ops: affine transforms as columns, concatenation.

A 4x4 transform acting on column vectors is kept as its four columns' top three rows,
``(a0, a1, a2, shift)``, each a 3-vector array: ``M @ [p, 1] = a0 p.x + a1 p.y + a2 p.z
+ shift``. Arrays of width S hold one transform per shape. Everything here is
differentiable through Dr.Jit's AD (points, normals and matrices alike).
"""

from __future__ import annotations

import drjit as dr
import numpy as np

from rayd.drjit import _concat

Columns = tuple  # (a0, a1, a2, shift), 3-vector arrays


def columns(to_world: dr.ArrayBase | None, Array3: type) -> Columns:
    """The columns of a 4x4 matrix (width 1) as ``Array3`` values; identity for ``None``."""
    if to_world is None:
        return Array3(1, 0, 0), Array3(0, 1, 0), Array3(0, 0, 1), Array3(0, 0, 0)
    Float = dr.value_t(Array3)
    return tuple(Array3(*(Float(to_world[i][j]) for i in range(3))) for j in range(4))


def linear(cols: Columns, v: dr.ArrayBase) -> dr.ArrayBase:
    """The linear part applied to a vector, ``L v``."""
    return cols[0] * v.x + cols[1] * v.y + cols[2] * v.z


def apply(cols: Columns, p: dr.ArrayBase) -> dr.ArrayBase:
    """``M @ [p, 1]``."""
    return linear(cols, p) + cols[3]


def place(transform: Columns | None, shape: dr.ArrayBase, *points: dr.ArrayBase) -> tuple:
    """World positions, ``Array3f64``, of object-space ``points`` of the shapes ``shape``.

    ``transform`` is :class:`rayd.drjit._intersect.LiveGeometry`'s width-S float64 columns
    (``None``: every shape is in world space); ``shape`` (``UInt``, one per lane) picks each
    lane's placement. The points (float32 or float64) are widened exactly to float64 and
    placed there, so a float32 mesh far from the origin keeps its float32 precision relative
    to its placement; callers round their outputs once to the output type (as rayd.torch's
    ``placed_vertices`` and ``_geometry.gather``). Differentiable in the points and the columns.
    """
    if transform is None:
        return tuple(dr.float64_array_t(type(p))(p) for p in points)
    Work = type(transform[0])
    cols = tuple(dr.gather(Work, c, shape) for c in transform)
    return tuple(apply(cols, Work(p)) for p in points)


def compose(outer: Columns, inner: Columns) -> Columns:
    """The columns of ``outer @ inner``."""
    return linear(outer, inner[0]), linear(outer, inner[1]), linear(outer, inner[2]), apply(outer, inner[3])


def normal_columns(cols: Columns) -> Columns:
    """Columns of ``inv(L)^T``, which maps normals: ``(a1 x a2, a2 x a0, a0 x a1) / det(L)``."""
    a0, a1, a2 = cols[0], cols[1], cols[2]
    c0, c1, c2 = dr.cross(a1, a2), dr.cross(a2, a0), dr.cross(a0, a1)
    inv_det = 1 / dr.dot(a0, c0)  # true division: dr.rcp is approximate on CUDA
    return c0 * inv_det, c1 * inv_det, c2 * inv_det


def world(points: dr.ArrayBase, to_world: dr.ArrayBase | None) -> dr.ArrayBase:
    """``to_world @ [p, 1]`` for every point (identity if ``None``)."""
    return points if to_world is None else apply(columns(to_world, type(points)), points)


def concat(parts: list[dr.ArrayBase]) -> dr.ArrayBase:
    """Concatenate arrays of one type lane-wise (componentwise for vectors); see :func:`rayd.drjit._concat.concat`."""
    return _concat.concat(parts)


class StackMatrices(dr.CustomOp):
    """Many width-1 matrices as one width-K array of their top three rows, differentiably.

    ``dr.custom(StackMatrices, matrices, values, Float)`` returns the 12 entries
    ``(i, j)``, ``i < 3``, row-major, each a ``Float`` of width K: entry ``k`` is
    ``matrices[k][i][j]``. ``values`` is their (K, 3, 4) NumPy copy (the primal, read
    on the host beforehand), so the forward pass compiles nothing per matrix.
    Concatenating K separately traced matrices instead builds one kernel whose size
    grows with K (and its adjoint a chain of K scatters), slow to compile for large K.

    The adjoint reads the output gradient once (one host synchronisation) and hands
    each matrix its row; forward mode reads each input's tangent.
    """

    def eval(self, matrices, values, kind):
        self._kinds = [type(x) for x in matrices]
        self._kind = kind
        return tuple(kind(np.ascontiguousarray(values[:, i, j])) for i in range(3) for j in range(4))

    def forward(self):
        tangents = self.grad_in("matrices")
        out = np.zeros((len(tangents), 3, 4))
        for k, tangent in enumerate(tangents):
            value = dr.detach(tangent)
            dr.make_opaque(value)
            out[k] = np.array(value, dtype=np.float64).reshape(4, 4)[:3]
        self.set_grad_out(tuple(self._kind(np.ascontiguousarray(out[:, i, j])) for i in range(3) for j in range(4)))

    def backward(self):
        count = len(self._kinds)
        grads = [dr.detach(g) for g in self.grad_out()]
        dr.make_opaque(*grads)
        host = np.zeros((count, 4, 4))
        for n, g in enumerate(grads):
            host[:, n // 4, n % 4] = np.broadcast_to(np.array(g, dtype=np.float64).reshape(-1), (count,))
        self.set_grad_in("matrices", [kind(host[k].tolist()) for k, kind in enumerate(self._kinds)])
