"""Ray rules shared by both frontends: the checks of ``Ray()`` arguments and of ``ignore`` ids.

Messages start with the call and name the argument (DESIGN.md, "Errors"); each
frontend passes its own call and the words for its array types (``"a float tensor"``,
``"a Dr.Jit Float array"``). This module imports no array library.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np


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
