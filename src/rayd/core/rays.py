"""Ray rules shared by both frontends: ``Ray()``'s argument sequence, its checks and those of ``ignore`` ids.

Messages start with the call and name the argument (DESIGN.md, "Errors"); each
frontend passes its own call and the words for its array types (``"a float tensor"``,
``"a Dr.Jit Float array"``). This module imports no array library.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import numpy as np

from rayd.core.edges import document
from rayd.core.frontend import PublicName


#: The fields of a ``Ray`` whose assignment :meth:`RayBase.__setattr__` checks.
_FIELDS = ("o", "d", "tmax", "tmin")


class RayBase(PublicName):
    """Shared construction of ``rayd.torch.Ray`` and ``rayd.drjit.Ray``: ``o + t d`` for ``tmin < t < tmax``.

    ``Ray(o, d, tmax=inf, *, tmin=0)`` checks in one order for every array library:
    ``o``, ``d``, their devices, ``tmax``, ``tmin`` (a float or a float array of the
    frontend, :func:`interval_bound`), then that the batches broadcast. A frontend's
    ``Ray`` subclasses this (its ``_name``, ``"rayd.torch.Ray"``, comes from
    :class:`~rayd.core.frontend.PublicName`) and provides, as static hooks:

    - ``_check_vectors(call, name, value)``: a float array of 3-vectors, else raise;
    - ``_device_of(value)``: the device of a checked array;
    - ``_same_device(call, name, value, device, owner)``: raise ``ValueError`` unless on ``device``;
    - ``_ARRAYS`` (``"a float tensor"``), ``_is_array(value)``, ``_type_name(value)`` and
      ``_check_flat(call, name, value)``: the words, test and type check for an array bound
      (a flat float array; :meth:`_check_bound` adds its device);
    - ``_batch(value, vector)``: the batch of a checked array (of 3-vectors if ``vector``);
    - ``_broadcast(call, named_batches)``: the common batch, else ``ValueError`` naming them;
    - ``_set_batch(batch)``: store it (torch: ``shape``; Dr.Jit: ``width``);
    - ``_per_row(t)``: ``t`` shaped to scale ``d`` row by row (for ``ray(t)``; default: ``t``).
    """

    _name = "rayd.Ray"

    def __init__(self, o: Any, d: Any, tmax: Any = math.inf, *, tmin: Any = 0.0) -> None:
        self._assign(o, d, tmax, tmin)

    def __setattr__(self, name: str, value: Any) -> None:
        """Assigning ``o``, ``d``, ``tmax`` or ``tmin`` checks the ray again as ``Ray()`` does.

        The batch shape follows the new value; on an error nothing changes (a ``Ray`` may be
        reused across steps, e.g. ``ray.o = new_origins``).
        """
        if name in _FIELDS and "_checked" in self.__dict__:
            fields = {field: self.__dict__[field] for field in _FIELDS}
            fields[name] = value
            self._assign(fields["o"], fields["d"], fields["tmax"], fields["tmin"])
            return
        object.__setattr__(self, name, value)

    def _assign(self, o: Any, d: Any, tmax: Any, tmin: Any) -> None:
        """Check the four fields together (``Ray()``'s order and messages), then store them and the batch."""
        call = f"{self._name}()"
        o = self._check_vectors(call, "o", o)
        d = self._check_vectors(call, "d", d)
        device = self._device_of(o)
        self._same_device(call, "d", d, device, "'o'")
        bounds = {}
        for name, value in (("tmax", tmax), ("tmin", tmin)):
            bounds[name] = interval_bound(call, name, value, self._ARRAYS, self._is_array,
                                          lambda n, v: self._check_bound(call, n, v, device), self._type_name)
        batches = [("o", self._batch(o, True)), ("d", self._batch(d, True))]
        batches += [(n, self._batch(bounds[n], False)) for n in ("tmin", "tmax") if self._is_array(bounds[n])]
        batch = self._broadcast(call, batches)
        self._set_batch(batch)
        for name, value in (("o", o), ("d", d), ("tmax", bounds["tmax"]), ("tmin", bounds["tmin"])):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_checked", True)

    def _check_bound(self, call: str, name: str, value: Any, device: Any) -> Any:
        """A ``tmin``/``tmax`` array: a float array of the frontend (``_check_flat``) on ``device``, that of ``'o'``."""
        value = self._check_flat(call, name, value)
        self._same_device(call, name, value, device, "'o'")
        return value

    def __call__(self, t: Any) -> Any:
        """The point ``o + t d``."""
        return self.o + self._per_row(t) * self.d

    @staticmethod
    def _per_row(t: Any) -> Any:
        return t


def scalar_ignore(call: str, ignore: object, arrays: str) -> int | None:
    """An ``ignore`` given as one number: the ``global_prim_id`` as an int, else ``None`` (an array).

    Args:
        call: the public call, for messages.
        ignore: the user's ``ignore`` argument (not ``None``).
        arrays: how the frontend names the arrays it also takes (``"an integer tensor"``).

    Raises:
        TypeError: ``ignore`` is a bool.
        ValueError: an int outside the int32 range (``-1`` is "none").
    """
    if isinstance(ignore, (bool, np.bool_)):
        raise TypeError(f"{call}: 'ignore' must be an int or {arrays}, got bool")
    if isinstance(ignore, np.integer):
        ignore = int(ignore)
    if not isinstance(ignore, int):
        return None
    if not -(2**31) <= ignore < 2**31:
        raise ValueError(f"{call}: 'ignore' must be a global_prim_id (or -1), got {ignore}")
    return ignore


def check_ignore(call: str, batch: Any, ignore: object, arrays: str, one: Callable[[int], Any],
                 many: Callable[[str, Any, object], tuple[Any, Any]]) -> tuple[Any, Any]:
    """A query's ``ignore``: none, one ``global_prim_id`` for every ray, or an array of them.

    Args:
        call: the public call, for messages.
        batch: the query's batch (shape or width) so far.
        ignore: the user's ``ignore`` argument.
        arrays: as for :func:`scalar_ignore`.
        one: ``one(id)``: the frontend's value for one id (:func:`scalar_ignore`'s int).
        many: ``many(call, batch, ignore)``: the frontend's checked array and the batch
            with it broadcast in.

    Returns:
        ``(batch, ignore)``: ``ignore`` is ``None``, ``one(id)`` or ``many``'s array.
    """
    if ignore is None:
        return batch, None
    value = scalar_ignore(call, ignore, arrays)
    if value is not None:
        return batch, one(value)
    return many(call, batch, ignore)


def interval_bound(call: str, name: str, value: object, arrays: str, is_array: Callable[[object], bool],
                   check_array: Callable[[str, object], Any], type_name: Callable[[object], str]) -> Any:
    """A ``Ray`` bound (``tmin``/``tmax``): a Python float, or the frontend's checked float array.

    Args:
        call, name: for messages (``"rayd.torch.Ray()"``, ``"tmax"``).
        value: the user's value.
        arrays: how the frontend names its float arrays (``"a float tensor"``).
        is_array: True for the frontend's arrays.
        check_array: ``(name, array) -> array``: the frontend's dtype/shape/device checks.
        type_name: the name of a wrong type, for the message.

    Raises:
        TypeError: a bool, or neither a number nor an array of the frontend.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{call}: '{name}' must be a float or {arrays}, got bool")
    if isinstance(value, numbers.Real):  # NumPy scalars too
        return float(value)
    if is_array(value):
        return check_array(name, value)
    raise TypeError(f"{call}: '{name}' must be a float or {arrays}, got {type_name(value)}")


def document_ray(cls: type, array: type, call_doc: str) -> None:
    """Give a frontend's ``Ray`` its signature's types and ``ray(t)``'s docstring.

    Args:
        cls: the frontend's ``Ray`` (a :class:`RayBase`; its class docstring documents
            the constructor's arguments).
        array: the frontend's array type (``torch.Tensor``, ``drjit.ArrayBase``).
        call_doc: the docstring of ``ray(t)`` in the frontend's words.
    """
    bound = float | array
    document(cls, {"__init__": None, "__call__": call_doc},
             {"__init__": {"o": array, "d": array, "tmax": bound, "tmin": bound, "return": None},
              "__call__": {"t": array | float, "return": array}})


#: Half-width of the float32 search's rounding band around ``tmin``/``tmax`` of float64 queries,
#: relative to ``|o - c| / |d| + |bound|`` (the float32 ``t`` of a hit differs from its float64 ``t``
#: by rounding of the search-frame origin, the direction and the corners: a few 2^-24 of that).
BAND = 2.0**-17


def widened(reach: Any, tmin: Any, tmax: Any, to_float32: Callable[[Any], Any]) -> tuple[Any, Any]:
    """The float32 search's bounds of a float64 query: ``tmin - band``, ``tmax + band``.

    ``band = BAND (reach + |bound|)``, evaluated in float64 and rounded once by
    ``to_float32``; rounding moves a bound by at most ``2^-25 |bound + band|``, less than
    ``band``, so each stays outside the float64 bound it widens (infinite bounds stay as
    they are), and the float32 search drops no hit inside ``(tmin, tmax)`` on its float64 ``t``.

    Args:
        reach: per-ray float64 ``|o - c| / |d|`` (``o - c`` the search-frame origin), in the
            frontend's arrays.
        tmin, tmax: float64 bounds: Python floats or the frontend's per-ray arrays.
        to_float32: the frontend's rounding of a float64 array to its float32 search input.

    Returns:
        ``(tmin - band, tmax + band)`` as ``to_float32`` makes them.
    """
    return tuple(to_float32(b + sign * BAND * (reach + abs(b))) for b, sign in ((tmin, -1.0), (tmax, 1.0)))


#: Pad of the box a ``tmin = -inf`` search starts before: this fraction of its diagonal, plus
#: :data:`START_ROUNDING` of the coordinates' magnitude (``max |o_k| + max |box corner_k|``).
START_PAD = 2.0**-12
#: See :data:`START_PAD`: covers the float32 rounding of the start ``o + t0 d`` (a few 2^-24 of
#: those magnitudes, since ``|t0 d_k| <= |o_k| + |box| + pad`` on the axis the ray enters by).
START_ROUNDING = 2.0**-16


def search_start(where: Callable[[Any, Any, Any], Any], o: tuple[Any, Any, Any], d: tuple[Any, Any, Any],
                 box: tuple[Any, Any] | None) -> Any:
    """Finite search starts for rays with ``tmin = -inf``: ``t0`` just before each ray enters the scene's box.

    The engine searches ``(tmin, tmax)`` from ``o + tmin d``, so an infinite ``tmin`` cannot
    be searched as given. Every hit lies in the scene's bounding box, so the search of
    ``(-inf, tmax)`` may start at any ``t0`` before the ray enters it: ``t0`` is the entry
    of the box padded by ``pad = START_PAD |upper - lower| + START_ROUNDING (max_k |o_k| +
    max |corner|)`` (slab test, Kay and Kajiya 1986), so that the float32 start ``fl(o + t0
    d)`` lies outside the unpadded box on the axis the ray enters by, before every face:
    rounding loses no hit at the entry face. Rays that miss the padded box (they miss every
    face) get ``t0 = 0``; so do rays whose origin or direction is not finite or zero (they
    are malformed, hence misses, whatever ``t0``). Hits keep their ``t`` along ``o`` (the
    engine moves the start, not the parametrisation), so only the rows of ``tmin`` change.

    Args:
        where: the frontend's elementwise select ``where(mask, a, b)`` (``a`` an array, ``b``
            an array or a number).
        o, d: per-row float64 components ``(x, y, z)`` of the search-frame origins (world
            minus the scene's search centre) and of the directions, frontend arrays.
        box: ``(lower, upper)`` in the same frame, each 3 float64 components: numbers
            (:meth:`rayd.core.scene.SceneCore.search_box`) or single-element frontend arrays
            (a box computed on the device); ``None``: no geometry (every ray misses).

    Returns:
        Per-row float64 ``t0`` (a frontend array), finite; the caller puts it where ``tmin = -inf``.

    References:
        Kay, Kajiya 1986, "Ray Tracing Complex Scenes", SIGGRAPH (slabs).
    """
    zero = o[0] * 0.0
    if box is None:
        return where(zero == zero, zero, 0.0)  # (NaN rows too: 0)
    lower, upper = (list(b) for b in box)

    def larger(a: Any, b: Any) -> Any:
        return max(a, b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) else where(a > b, a, b)

    scale = abs(lower[0])
    for c in (*lower[1:], *upper):
        scale = larger(abs(c), scale)
    diag = sum((h - lo) * (h - lo) for lo, h in zip(lower, upper)) ** 0.5
    reach = abs(o[0])
    for ok in o[1:]:
        reach = larger(abs(ok), reach)
    pad = START_PAD * diag + START_ROUNDING * (reach + scale)
    near = far = None
    for k in range(3):
        ok, dk = o[k], d[k]
        lo, hi = lower[k] - pad, upper[k] + pad
        moving = dk != 0
        safe = where(moving, dk, 1.0)
        t1, t2 = (lo - ok) / safe, (hi - ok) / safe
        forward = dk > 0
        a, b = where(forward, t1, t2), where(forward, t2, t1)
        inside = moving | ((ok >= lo) & (ok <= hi))  # a ray parallel to the slab: all of it or none
        a, b = where(inside, where(moving, a, -math.inf), math.inf), where(inside, where(moving, b, math.inf), -math.inf)
        near = a if near is None else where(a > near, a, near)
        far = b if far is None else where(b < far, b, far)
    meets = (near <= far) & (near > -math.inf) & (near < math.inf)
    return where(meets, near, 0.0)
