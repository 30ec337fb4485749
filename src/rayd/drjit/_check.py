"""Input checks for rayd.drjit with messages that name the call and the argument.

Exception types follow DESIGN.md: ``TypeError`` for wrong Python types and dtypes
(including a PyTorch tensor or a rayd.torch object given to rayd.drjit),
``ValueError`` for wrong shapes (component counts, widths), backends/devices and
values, ``RuntimeError`` for lifecycle faults. Never ``assert``.

Shapes in Dr.Jit terms: a ``(N, 3)`` input is a 3-vector array (``Array3f``) of width
``N``; a ``(N,)`` input is a flat array (``Float``) of width ``N``. Width 1 broadcasts.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import types

import drjit as dr

from rayd.core.checks import face_range as _face_range, lifecycle, max_distance, non_finite, top_k
from rayd.drjit import _convert

__all__ = ["lifecycle", "max_distance", "top_k"]  # re-exported for rayd.drjit's modules

_FLOAT = (dr.VarType.Float32, dr.VarType.Float64)
_INDEX = (dr.VarType.Int32, dr.VarType.UInt32, dr.VarType.Int64, dr.VarType.UInt64)
_EXAMPLE = {3: "Array3f", 2: "Array2f", 1: "Float"}


def _foreign_hint(value: object) -> str:
    module = type(value).__module__
    if module.startswith("torch"):
        return " (PyTorch tensors belong to rayd.torch; convert with the Dr.Jit type's constructor, e.g. Array3f(t.T))"
    if module.startswith("rayd.torch"):
        return " (rayd.torch and rayd.drjit objects do not mix)"
    if module.startswith("mitsuba") and hasattr(value, "matrix"):
        return " (a Mitsuba transform: pass its .matrix)"
    return ""


def jit_array(call: str, name: str, value: object, kind: str = "Array3f") -> dr.ArrayBase:
    """``value`` if it is an LLVM or CUDA Dr.Jit array, else ``TypeError`` (naming ``kind`` as the example type)."""
    if not _convert.is_jit_array(value):
        raise TypeError(
            f"{call}: '{name}' must be a Dr.Jit array of the LLVM or CUDA backend "
            f"(e.g. drjit.llvm.ad.{kind}, drjit.cuda.ad.{kind}), "
            f"got {_convert.type_name(value)}{_foreign_hint(value)}"
        )
    if not dr.flag(dr.JitFlag.SymbolicScope):  # (inside one, pure Dr.Jit calls such as Camera.generate_rays take them)
        not_symbolic(call, name, value)
    return value


def _symbolic(value: dr.ArrayBase) -> bool:
    """True if any flat array in ``value`` (components, matrix entries, a tensor's array) is a symbolic variable."""
    if dr.is_tensor_v(value):
        return _symbolic(value.array)
    if dr.depth_v(value) <= 1:
        return value.state == dr.VarState.Symbolic
    return any(_symbolic(part) for part in value)


def not_symbolic(call: str, name: str, value: dr.ArrayBase) -> None:
    """``ValueError`` if ``value`` holds symbolic variables (made inside ``drjit.while_loop``, ``drjit.if_stmt``, ...).

    They exist only while their loop or conditional is recorded: an array that keeps one (a
    mesh's vertices, ``update_mesh_vertices``, an instance's matrix, an edge mask) could not be
    evaluated by the later ``build()``/``sync()`` (Dr.Jit: "input arrays are symbolic, but the
    operation was issued outside of a symbolic recording session"), and one passed after its loop
    ended cannot be evaluated at all.
    """
    if _symbolic(value):
        raise ValueError(
            f"{call}: '{name}' holds symbolic variables of a symbolic loop or conditional (drjit.while_loop, "
            f"drjit.if_stmt, drjit.switch, @drjit.syntax), which cannot be evaluated outside it; make the array "
            f"outside the loop, or run the loop with mode='evaluated'"
        )


def _components(value: dr.ArrayBase) -> int:
    """3 for Array3x, 2 for Array2x, 1 for a flat array; other counts as they are."""
    if dr.depth_v(value) == 1:
        return 1
    if dr.depth_v(value) == 2 and not dr.is_tensor_v(value) and not dr.is_matrix_v(value):
        return dr.size_v(value)
    return -1


def _shape_error(call: str, name: str, value: dr.ArrayBase, components: int, examples: str) -> ValueError:
    want = f"(N, {components}): a {components}-vector array" if components > 1 else "(N,): a flat array"
    return ValueError(f"{call}: '{name}' must have shape {want} such as {examples}, got {_convert.type_name(value)}")


def float_array(call: str, name: str, value: object, components: int) -> dr.ArrayBase:
    """A float32/float64 array with ``components`` components (1: flat ``Float``)."""
    value = jit_array(call, name, value, _EXAMPLE.get(components, "Array3f"))
    if dr.type_v(value) not in _FLOAT:
        raise TypeError(f"{call}: '{name}' must have dtype float32 or float64, got {_convert.type_name(value)}")
    if _components(value) != components:
        raise _shape_error(call, name, value, components, f"{_EXAMPLE[components]} or {_EXAMPLE[components]}64")
    if components > 1:
        broadcast_components(call, name, value)
    return value


def broadcast_components(call: str, name: str, value: dr.ArrayBase) -> int:
    """The width of a vector array whose components broadcast (width 1 against N), or ``ValueError``.

    Dr.Jit lets a component be replaced by one of any width (``o.x = Float(...)``); its own
    ``dr.width`` then raises "the input is ragged" for two different widths other than 1, and
    calls an empty component beside width-1 ones width 1, which later operations refuse.
    """
    widths = [dr.width(c) for c in value]
    not_ragged(call, name, widths, "components")
    return max(widths)


def not_ragged(call: str, name: str, widths: list[int], parts: str) -> None:
    """``ValueError`` unless the ``widths`` of an array's ``parts`` (components, matrix entries) broadcast:
    one width besides 1, and no empty part beside width-1 ones."""
    sizes = set(widths)
    if len(sizes - {1}) > 1 or (0 in sizes and 1 in sizes):
        raise ValueError(f"{call}: '{name}' is ragged: its {parts} have widths {widths}")


def index_array(call: str, name: str, value: object) -> dr.ArrayBase:
    """A 3-vector array of 32- or 64-bit integers (``Array3i``, ``Array3u``, ``Array3i64``, ``Array3u64``)."""
    value = jit_array(call, name, value, "Array3u")
    if dr.type_v(value) not in _INDEX:
        raise TypeError(
            f"{call}: '{name}' must have dtype int32, uint32, int64 or uint64, got {_convert.type_name(value)}"
        )
    if _components(value) != 3:
        raise _shape_error(call, name, value, 3, "Array3i or Array3u")
    return value


def index_flat(call: str, name: str, value: object) -> dr.ArrayBase:
    """A flat array of 32- or 64-bit integers (``Int``, ``UInt``, ``Int64``, ``UInt64``)."""
    value = jit_array(call, name, value, "Int")
    if dr.type_v(value) not in _INDEX:
        raise TypeError(f"{call}: '{name}' must have an integer dtype, got {_convert.type_name(value)}")
    if _components(value) != 1:
        raise _shape_error(call, name, value, 1, "Int or UInt")
    return value


def bool_array(call: str, name: str, value: object) -> dr.ArrayBase:
    """A flat ``Bool`` array."""
    value = jit_array(call, name, value, "Bool")
    if dr.type_v(value) != dr.VarType.Bool:
        raise TypeError(f"{call}: '{name}' must have dtype bool (a Dr.Jit Bool), got {_convert.type_name(value)}")
    if _components(value) != 1:
        raise _shape_error(call, name, value, 1, "Bool")
    return value


def same_backend(call: str, name: str, value: dr.ArrayBase, device: str, owner: str) -> None:
    """``ValueError`` unless ``value`` lives on ``device`` (named after ``owner``)."""
    if _convert.device_name(value) != device:
        raise ValueError(f"{call}: '{name}' is on {_convert.device_name(value)}, but {owner} is on {device}")


def width(call: str, name: str, value: dr.ArrayBase, expected: int, like: str) -> None:
    """``ValueError`` unless ``value`` has width ``expected``."""
    if dr.width(value) != expected:
        raise ValueError(f"{call}: '{name}' must have width {expected} like {like}, got {dr.width(value)}")


def rows(call: str, name: str, value: dr.ArrayBase, expected: int, like: str) -> None:
    """``ValueError`` unless every component of ``value`` has width ``expected`` (no width-1 broadcast)."""
    count = common_width(call, name, value)
    if count != expected:
        raise ValueError(f"{call}: '{name}' must have width {expected} like {like}, got {count}")


def broadcast(call: str, names_and_widths: list[tuple[str, int]]) -> int:
    """The common width of several inputs (each 1 or N), or ``ValueError`` naming them."""
    widths = {w for _, w in names_and_widths if w != 1}
    if len(widths) > 1:
        described = ", ".join(f"'{n}' ({w},)" for n, w in names_and_widths)
        raise ValueError(f"{call}: batch shapes do not broadcast: {described}")
    return widths.pop() if widths else 1


def finite(call: str, name: str, value: dr.ArrayBase) -> None:
    """``ValueError`` if ``value`` holds NaN or inf (reads one value back: synchronises)."""
    if dr.width(value) == 0:
        return
    ok = dr.isfinite(dr.detach(value))
    if _components(value) > 1:
        row_ok = ok[0]
        for i in range(1, len(ok)):
            row_ok = row_ok & ok[i]
    else:
        row_ok = ok
    if not dr.all(row_ok, axis=None).item():
        bad = dr.compress(~row_ok)
        raise non_finite(call, name, int(bad[0]) if dr.width(bad) else -1)


def common_width(call: str, name: str, value: dr.ArrayBase) -> int:
    """The width of a vector array, or ``ValueError`` if its components differ (e.g. one was reassigned)."""
    if _components(value) <= 1:
        return dr.width(value)
    widths = [dr.width(c) for c in value]
    if len(set(widths)) > 1:
        raise ValueError(f"{call}: '{name}' is ragged: its components have widths {widths}")
    return widths[0]


def face_range(call: str, name: str, faces: dr.ArrayBase, num_vertices: int) -> None:
    """``ValueError`` unless every entry of ``faces`` lies in ``[0, num_vertices)`` (reads two values: synchronises)."""
    if common_width(call, name, faces) == 0:
        return
    flat = dr.detach(faces)
    low = int(dr.min(flat, axis=None).item())
    high = int(dr.max(flat, axis=None).item())
    _face_range(call, name, low, high, num_vertices)


def outside_recording(call: str) -> None:
    """``RuntimeError`` inside a symbolic region or while ``drjit.freeze`` records, where a scene call cannot run.

    A scene call hands Dr.Jit arrays to Warp kernels (DLPack) and reads small arrays on the host,
    outside Dr.Jit's recording: inside a symbolic loop, conditional or call (``drjit.while_loop``,
    ``drjit.if_stmt``, ``drjit.switch``, ``@drjit.syntax``) Dr.Jit cannot evaluate the symbolic
    variables involved, and a function frozen with ``drjit.freeze`` would replay without the
    engine's launches. Evaluated loops and conditionals (``mode='evaluated'``, or
    ``drjit.JitFlag.SymbolicLoops`` / ``SymbolicConditionals`` off) work.
    """
    if dr.flag(dr.JitFlag.SymbolicScope):
        raise RuntimeError(
            f"{call}: cannot run inside a symbolic loop, conditional or call (drjit.while_loop, drjit.if_stmt, "
            f"drjit.switch, @drjit.syntax); run that loop or conditional with mode='evaluated' (or with "
            f"drjit.JitFlag.SymbolicLoops / SymbolicConditionals off)"
        )
    if dr.flag(dr.JitFlag.FreezingScope):
        raise RuntimeError(
            f"{call}: cannot run inside a function frozen with drjit.freeze (the scene's engine launches are not "
            f"Dr.Jit kernels and would not be replayed); call it outside the frozen function"
        )


def outside_freezing(call: str) -> None:
    """``RuntimeError`` while ``drjit.freeze`` records: a replay of the frozen function runs only its recorded
    Dr.Jit kernels, so a scene call made there (``update_mesh_vertices``, ``set_shape_enabled``, ...) would
    happen at the recording and silently never again (the scene keeps the recorded call's geometry)."""
    if dr.flag(dr.JitFlag.FreezingScope):
        raise RuntimeError(
            f"{call}: cannot run inside a function frozen with drjit.freeze (its replays run only the recorded "
            f"Dr.Jit kernels, not this call, so the scene would silently keep the first call's state); call it "
            f"outside the frozen function"
        )


def exact_math(function):
    """``function`` run with ``drjit.JitFlag.FastMath`` off, so that its float64 arithmetic and derivatives are exact.

    With FastMath on (Dr.Jit's default), Dr.Jit 1.5's CUDA backend emits ``drjit.rcp`` as the
    PTX ``rcp.approx.ftz`` for **every** float type (drjit-core's ``jitc_var_rcp``), and in
    float64 that instruction keeps only 20 bits of the mantissa (PTX ISA, "rcp.approx.ftz.f64").
    Dr.Jit's reverse- and forward-mode derivative of ``a / b`` is weighted by ``rcp(b)``
    (``ad_var_div``), and ``drjit.rsqrt`` / ``drjit.normalize`` go through ``rcp`` too, so
    rayd.drjit's float64 derivatives on CUDA were about 1e-6 relative off (values were not:
    float64 division is ``div.rn``). The weights of Dr.Jit's AD graph are made when the
    operation runs, so running rayd.drjit's own arithmetic with the flag off makes them exact;
    the user's later ``drjit.backward`` / ``drjit.forward_to`` only multiplies and adds them.
    float32 arithmetic then rounds correctly as well (``div.rn``, ``sqrt.rn``), and ``x * 0``
    is no longer folded to ``0`` in rayd's expressions. The LLVM backend divides exactly either way.
    """

    @functools.wraps(function)
    def exact(*args, **kwargs):
        with dr.scoped_set_flag(dr.JitFlag.FastMath, False):
            return function(*args, **kwargs)

    return exact


def exact_math_public(cls: type) -> type:
    """Every public method of ``cls`` (its own and inherited) wrapped by :func:`exact_math`; returns ``cls``."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, types.FunctionType):
            setattr(cls, name, exact_math(attr))
    return cls


#: The public query running now (its outermost call), for messages raised deep inside it.
_QUERY: contextvars.ContextVar[str | None] = contextvars.ContextVar("rayd_drjit_query", default=None)


def enter_query(call: str) -> contextvars.Token | None:
    """Record ``call`` as the query running now unless one already runs (a query inside a query keeps the outer)."""
    return _QUERY.set(call) if _QUERY.get() is None else None


def leave_query(token: contextvars.Token | None) -> None:
    """Undo :func:`enter_query`."""
    if token is not None:
        _QUERY.reset(token)


def query_call() -> str:
    """The public query running now (``"rayd.drjit.Scene.intersect()"``), else ``"rayd.drjit.Scene"``."""
    return _QUERY.get() or "rayd.drjit.Scene"
