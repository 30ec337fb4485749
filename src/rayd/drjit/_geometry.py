"""World-space geometry with Dr.Jit ops: transforms of points and normals, concatenation.

Everything here is differentiable through Dr.Jit's AD (points, normals and the 4x4
matrices alike).
"""

from __future__ import annotations

import drjit as dr


def _matrix_columns(to_world: dr.ArrayBase, Array3: type) -> list[dr.ArrayBase]:
    """The four columns of a 4x4 matrix's top three rows, as 3-vectors of type ``Array3``."""
    Float = dr.value_t(Array3)
    return [Array3(*(Float(to_world[i][j]) for i in range(3))) for j in range(4)]


def world(points: dr.ArrayBase, to_world: dr.ArrayBase | None) -> dr.ArrayBase:
    """``to_world @ [p, 1]`` for every point (identity if ``None``)."""
    if to_world is None:
        return points
    a0, a1, a2, shift = _matrix_columns(to_world, type(points))
    return a0 * points.x + a1 * points.y + a2 * points.z + shift


def world_normals(normals: dr.ArrayBase, to_world: dr.ArrayBase | None) -> dr.ArrayBase:
    """Normals transform by the inverse transpose of the linear part, ``inv(L)^T n``."""
    if to_world is None:
        return normals
    a0, a1, a2, _ = _matrix_columns(to_world, type(normals))
    # inv(L)^T has columns (a1 x a2, a2 x a0, a0 x a1) / det(L) for L = [a0 a1 a2].
    c0, c1, c2 = dr.cross(a1, a2), dr.cross(a2, a0), dr.cross(a0, a1)
    return (c0 * normals.x + c1 * normals.y + c2 * normals.z) / dr.dot(a0, c0)


def concat(parts: list[dr.ArrayBase]) -> dr.ArrayBase:
    """Concatenate arrays of one type lane-wise (componentwise for vectors)."""
    if len(parts) == 1:
        return parts[0]
    kind = type(parts[0])
    if dr.depth_v(kind) == 1:
        return dr.concat(parts)
    return kind(*(dr.concat([p[i] for p in parts]) for i in range(dr.size_v(kind))))
