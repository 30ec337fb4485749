"""rayd.drjit's vector ops: what the backend-neutral formulas of :mod:`rayd.core` need, in Dr.Jit.

A 3-vector array is an ``Array3f``/``Array3f64`` (rows are lanes), a scalar array a
``Float``/``Float64``. Differentiable through Dr.Jit's AD, forward mode included.
Clamps are selects (LLVM's float64 min/max intrinsics fail to compile on some CPUs,
and ``dr.minimum``/``dr.clip`` are avoided in differentiable code); nothing here
divides a vector by a scalar (CUDA Dr.Jit turns that into an approximate ``rcp``).
Counterpart: :mod:`rayd.torch._vector`; the protocol is described in
:mod:`rayd.core.segments`.
"""

from __future__ import annotations

import sys

import drjit as dr


def const3(like: dr.ArrayBase, x: float, y: float, z: float) -> dr.ArrayBase:
    """The 3-vector ``(x, y, z)`` of ``like``'s type (a width-1 literal)."""
    return type(like)(x, y, z)


def dot(a: dr.ArrayBase, b: dr.ArrayBase) -> dr.ArrayBase:
    """Lane-wise ``a . b``."""
    return dr.dot(a, b)


def cross(a: dr.ArrayBase, b: dr.ArrayBase) -> dr.ArrayBase:
    """Lane-wise ``a x b``."""
    return dr.cross(a, b)


def scale(x: dr.ArrayBase, v: dr.ArrayBase) -> dr.ArrayBase:
    """Lane-wise ``x v`` (a scalar times a 3-vector)."""
    return x * v


def where(mask: dr.ArrayBase, a: object, b: object) -> dr.ArrayBase:
    """``dr.select``: ``a`` where ``mask``, else ``b`` (either may be a number)."""
    return dr.select(mask, a, b)


where3 = where  # dr.select broadcasts a lane mask over the components of a vector


def sqrt(x: dr.ArrayBase) -> dr.ArrayBase:
    """Lane-wise square root."""
    return dr.sqrt(x)


def clamp(x: dr.ArrayBase, lo: object, hi: object) -> dr.ArrayBase:
    """``min(max(x, lo), hi)`` by selects (see the module docstring)."""
    return dr.select(x < lo, lo, dr.select(x > hi, hi, x))


def all_zero(v: dr.ArrayBase) -> dr.ArrayBase:
    """Lane-wise: every component of ``v`` is 0."""
    return dr.all(v == 0)


def max_abs(v: dr.ArrayBase) -> dr.ArrayBase:
    """Lane-wise largest ``|component|`` of ``v`` (by selects, as :func:`clamp`)."""
    a = dr.abs(v)
    m = dr.select(a.x > a.y, a.x, a.y)
    return dr.select(m > a.z, m, a.z)


def masked(mask: dr.ArrayBase, fn, *rows: dr.ArrayBase) -> dr.ArrayBase:
    """``fn(*rows) & mask`` for a lane-wise bool ``fn`` (Dr.Jit fuses it into the kernels that read it)."""
    return fn(*rows) & mask


def rsqrt(x: dr.ArrayBase) -> dr.ArrayBase:
    """``1 / sqrt(x)`` as a true division (``dr.rsqrt`` is approximate on CUDA, in float64 too)."""
    return 1 / dr.sqrt(x)


def stack(*xs: dr.ArrayBase) -> dr.ArrayBase:
    """The vector ``(x0, x1, ...)`` of scalar arrays (``Float`` -> ``Array2f``/``Array3f``, likewise ``Float64``)."""
    kind = type(xs[0])
    suffix = "f64" if kind.__name__.endswith("64") else "f"
    return getattr(sys.modules[kind.__module__], f"Array{len(xs)}{suffix}")(*xs)
