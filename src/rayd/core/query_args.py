"""The argument steps every ray query of both frontends starts with, written once.

A ray query (``intersect``, ``shadow_test``, ``visible``, ``intersect_all``,
``trace_reflections``, ...) checks in one order: the scene is ready (lifecycle), the
``ray`` is the frontend's ``Ray`` on the scene's device, then the ``active`` mask and the
``ignore`` ids broadcast into the batch. The frontends give the array-specific checks as
plain functions, named in their ``_parts`` module; this module imports no array library.
"""

from __future__ import annotations

from typing import Any, Callable

#: Crossings the float64 walk-on re-check (``_walk_on`` of both frontends) looks at per doubtful
#: ray: all within float32 rounding of a bound, so rarely more than 2.
CANDIDATES = 8


def batch_name(call: str) -> str:
    """How a message names the query's batch of rays: ``ray``, or ``start/end`` for ``visible()``,
    whose rays are made from its segments (``"... batch shapes do not broadcast: 'start/end' (2,),
    'active' (3,)"``)."""
    return "start/end" if call.endswith(".visible()") else "ray"


def ray_checker(ray_type: type, name_of: Callable[[object], str]) -> Callable[[str, object, Any], Any]:
    """The frontend's ``check_ray(call, ray, device)``: ``ray`` if it is a ``ray_type`` on ``device``.

    Args:
        ray_type: the frontend's ``Ray`` (a :class:`rayd.core.rays.RayBase`: its ``_name``
            names it in messages, its ``_same_device(call, name, value, device, owner)``
            checks the device).
        name_of: the name of a wrong value's type, for the message.

    Returns:
        ``check_ray(call, ray, device) -> ray``, which raises ``TypeError`` (not a
        ``ray_type``: ``"{call}: 'ray' must be a rayd.torch.Ray, got list"``) or what
        ``_same_device`` raises for ``ray.o`` (``ValueError``, "the scene"), after the ray's
        arrays are checked again if they changed since ``Ray()`` (``RayBase._current``: an assigned
        ``ray.o``, a Dr.Jit component replaced by one of another width).
    """
    want = ray_type._name
    same_device = ray_type._same_device

    def check_ray(call: str, ray: object, device: Any) -> Any:
        if not isinstance(ray, ray_type):
            raise TypeError(f"{call}: 'ray' must be a {want}, got {name_of(ray)}")
        ray = ray._current(call)  # its arrays as they are now (assigned, or a Dr.Jit component of another width)
        same_device(call, "ray.o", ray.o, device, "the scene")
        return ray

    check_ray.__doc__ = f"``ray`` if it is a ``{want}`` on ``device``, else the contract's error."
    return check_ray


def query_arguments(scene: Any, call: str, ray: object, active: object, ignore: object) -> tuple[Any, Any, Any, Any]:
    """A ray query's checked arguments: ``(ray, batch, active, ignore)``.

    Args:
        scene: the frontend's ``Scene``: its ``_require_ready(call)``, ``_device`` and the checks its
            ``_parts`` module names (:mod:`rayd.core.frontend`): ``check_ray(call, ray, device)``
            (:func:`ray_checker`'s), ``check_active(call, ray, active, device) -> (batch, active)``,
            ``check_ignore(call, batch, ignore, device) -> (batch, ignore)``.
        call: the public call, for messages (``"rayd.torch.Scene.intersect()"``).
        ray, active, ignore: the user's arguments.

    Returns:
        The checked ``Ray``, the batch (torch: the broadcast shape; Dr.Jit: the width), the
        checked ``active`` mask and ``ignore`` ids (``None`` where not given).

    Raises:
        RuntimeError: the scene is not ready (not built, or updates pending).
        TypeError, ValueError: as the frontend's checks raise.
    """
    scene._require_ready(call)
    device, parts = scene._device, scene._PARTS
    ray = parts.check_ray(call, ray, device)
    batch, active = parts.check_active(call, ray, active, device)
    batch, ignore = parts.check_ignore(call, batch, ignore, device)
    return ray, batch, active, ignore
