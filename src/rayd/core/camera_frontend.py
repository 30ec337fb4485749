"""The part of a frontend's ``Camera`` / ``EdgeSamples`` that is the same for every array library.

:class:`CameraBase` holds the argument checks and the intrinsics bookkeeping of
``Camera()`` (sizes, ``fov_y`` versus ``fx``/``fy``, defaults of the principal point);
:func:`check_sample_args` and :func:`rayd.core.camera.plan_samples` the argument checks and the
host-side orchestration of ``Camera.sample_edges`` (seams, clipping, stratified
positions, edge parameters and normals, from :mod:`rayd.core.camera`);
:class:`EdgeSamplesBase` the record's bookkeeping. The frontends supply the array
hooks (which values are arrays, how to read them) and the differentiable evaluation.

Hooks a :class:`CameraBase` subclass defines:

- ``_SCALAR`` (how messages name an accepted intrinsic, e.g. ``"a float or a 0-dim
  float tensor"``); ``_CALL`` (``"rayd.torch.Camera()"``) follows from its public name
  (:class:`~rayd.core.frontend.PublicName`);
- ``_array_scalar(name, value)``: the checked array intrinsic, or ``None`` if ``value``
  is not an array of the frontend;
- ``_ARRAY``: the frontend's array type (``_is_array(value)``: whether a checked
  intrinsic is one, not a Python float);
- ``_array_focal(fov_y)``: the focal length of an array ``fov_y`` (differentiable);
- ``_checked_fov(fov_y)`` (optional): ``fov_y`` checked (``None``, a float, or an array
  where the frontend takes one; default :meth:`CameraBase._scalar`);
  ``_checked_to_world(to_world)``: a given ``to_world`` checked
  (the frontend's matrix, on the intrinsics' device);
- ``_check_values(call)`` (optional): the value checks of ``Camera()`` and
  ``sample_edges`` (default: :func:`rayd.core.camera.check_intrinsics` of
  :meth:`CameraBase.intrinsics`);
- ``_host_scalar(value)``: the Python float of an array intrinsic (detached);
- ``_repr_tail()``: extra text for ``repr`` (default none);
- ``_OPS``: the array steps of ``generate_rays``, ``project`` and the camera-space maps
  (:meth:`CameraBase._world_to_camera`, :meth:`CameraBase._camera_to_pixels`), which are
  written here once: a namespace of

  - ``working(camera, array)``: the working precision of a call on ``array`` (torch: the
    promoted dtype and the device; Dr.Jit: the namespace ``m`` and ``double``);
  - ``pixel_centres(camera)``: the default ``samples``, every pixel centre;
  - ``checked_samples(camera, call, samples)``, ``checked_points(camera, call, points)``:
    the user's (..., 2) / (..., 3) float array checked (type, shape, device);
  - ``cast(work, v)``: a vector array in the working precision; ``components(work, v)``: its
    components; ``vector(work, *components)``: the vector of components (a number broadcasts);
  - ``intrinsics(camera, work)``: ``(fx, fy, cx, cy)`` in the working precision;
  - ``placement(camera, work)``: ``(A, t)`` of a given ``to_world``, as ``rotate`` and
    ``unrotate`` take ``A``;
  - ``rotate(A, v)``, ``unrotate(A, v)``: ``A v`` and ``A^-1 v`` row by row;
  - ``zero3(work)``: the origin; ``unit(v)``: ``v / |v|``; ``select(mask, value, v)``:
    ``value`` where ``mask`` (per row), else ``v``; ``ray(o, d)``: the frontend's ``Ray``;
  - ``empty(array)``: no rows where the library cannot broadcast them against a literal
    (Dr.Jit: width 0; torch: never), and then ``nothing(work, components)``, the empty array
    of 1, 2 or 3 components.

  The values and derivatives are those of each frontend's own ops (torch: one matrix
  product, ``torch.linalg.inv_ex``; Dr.Jit: dot products, the adjugate inverse and true
  divisions, as CUDA needs).

``CameraBase.sample_edges`` is written here once, over the steps the frontend writes in its
array library: ``rayd.<frontend>._edge_sampling.OPS``, a namespace of

- ``generator_type``, ``generator_name``: the accepted ``generator`` type and its name in messages;
- ``ready(scene, call)``: the scene's edge state, synced, its lazily built parts made;
- ``candidates(call, camera, scene, edges, intrinsics)``: the camera checked against the scene
  and its values (``intrinsics`` as read on the host), then ``(work, ids, a, b, o,
  is_boundary)``: the frontend's working state of the call (precision, camera centre, ...),
  the ids of the silhouette and boundary edges the BVH sees from the camera centre (its own
  array or NumPy), their (K, 3) float64 host world end points ``a``, ``b``, the opposite
  vertex ``o`` of each edge's first face and (K,) bool ``is_boundary``;
- ``jitter(generator)``: ``jitter(n)`` -> (n,) float64 uniform numbers in ``[0, 1)``;
- ``evaluate(camera, scene, edges, work, ids, plan)``: the fields of the frontend's ``EdgeSamples``
  (``rayd.<frontend>._edge_sampling.EdgeSamples``, made here with the camera's ``width`` and
  ``height``) for the :class:`SamplePlan`: the differentiable evaluation at the fixed edge parameters.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rayd.core import camera as _core
from rayd.core.camera import SamplePlan, plan_samples, to_camera  # noqa: F401 - the host steps of sample_edges
from rayd.core.checks import integer, real, type_name
from rayd.core.docs import FrontendDocs
from rayd.core.frontend import PublicName, frontend_module
from rayd.records import FieldRecord


#: The attributes of a ``Camera`` whose assignment ``CameraBase.__setattr__`` checks (or refuses).
_ASSIGNABLE = ("width", "height", "fov_y", "fx", "fy", "cx", "cy", "to_world")


def check_size(call: str, name: str, value: object) -> int:
    """A positive image size (``width``/``height``) as an int, else ``TypeError``/``ValueError``."""
    if integer(value) is None:
        raise TypeError(f"{call}: '{name}' must be an int, got {type(value).__name__}")
    value = integer(value)
    if value <= 0:
        raise ValueError(f"{call}: '{name}' must be positive, got {value}")
    return value


class CameraBase(PublicName, FrontendDocs):
    """Argument checks and intrinsics of ``Camera`` (see the module docstring for the hooks); the
    docstrings of its public methods are the frontend's ``_camera_docs.DOCS``."""

    _name = "rayd.Camera"
    _DOCUMENTED = "Camera"
    _DOCS_MODULE = "_camera_docs"
    _SCALAR = "a float"
    _ARRAY: type = type(None)
    _OPS: Any = None  # the frontend's array steps of the camera maps (module docstring), set below its class

    @property
    def fx(self) -> Any:
        """The horizontal focal length in pixels: the number or array given, or, while ``fov_y`` is an
        array, ``(height / 2) / tan(fov_y / 2)`` of its current value (evaluated at each read, so an
        in-place change of ``fov_y`` takes effect and its gradient flows into ``fov_y``; it was
        evaluated once at ``Camera()``, which kept stale rays after an optimiser step on ``fov_y``)."""
        return self._focal("_fx")

    @fx.setter
    def fx(self, value: Any) -> None:
        self.__dict__["_fx"] = value

    @property
    def fy(self) -> Any:
        """The vertical focal length in pixels (as :attr:`fx`)."""
        return self._focal("_fy")

    @fy.setter
    def fy(self, value: Any) -> None:
        self.__dict__["_fy"] = value

    def _focal(self, stored: str) -> Any:
        fov_y = self.__dict__.get("fov_y")
        if fov_y is not None and self._is_array(fov_y):
            return self._array_focal(fov_y)
        return self.__dict__.get(stored)

    @property
    def _CALL(self) -> str:
        """The call that messages of ``Camera()`` start with (``"rayd.torch.Camera()"``)."""
        return f"{self._name}()"

    def __init__(self, width: int, height: int, *, fov_y: Any = None, fx: Any = None, fy: Any = None,
                 cx: Any = None, cy: Any = None, to_world: Any = None) -> None:
        """Check and set the size, the intrinsics and ``to_world`` (the frontend's class documents them).

        In order: ``width``, ``height``; ``fov_y``, ``fx``, ``fy``, ``cx``, ``cy`` one by
        one (:meth:`_scalar`), then how they combine (:meth:`_set_intrinsics`); ``to_world``
        (the frontend's ``_checked_to_world``); last the values (``_check_values``: one host
        read of array intrinsics).

        Raises:
            TypeError, ValueError: as the frontend's ``Camera`` documents.
        """
        self._set_size(width, height)
        fov_y = self._checked_fov(fov_y)
        self._set_intrinsics(fov_y, *(self._scalar(n, v) for n, v in (("fx", fx), ("fy", fy), ("cx", cx), ("cy", cy))))
        self.to_world = None if to_world is None else self._checked_to_world(to_world)
        self._check_values(self._CALL)
        self._made = True

    def __setattr__(self, name: str, value: Any) -> None:
        """Assigning a parameter after ``Camera()`` checks it as ``Camera()`` does (without reading
        array values: ``sample_edges`` does) and keeps the intrinsics consistent: ``fov_y`` sets
        ``fx = fy``, ``fx``/``fy`` clear ``fov_y``, ``cx``/``cy`` ``None`` mean the image centre.
        ``width`` and ``height`` cannot be assigned (the default centre and ``fov_y`` depend on them).
        Before, ``camera.fov_y = 30`` was ignored, ``camera.fx = -2.0`` gave NaN rays and
        ``camera.to_world = x`` any object."""
        if not self.__dict__.get("_made") or name not in _ASSIGNABLE:
            object.__setattr__(self, name, value)
            return
        if name in ("width", "height"):
            raise AttributeError(f"{self._name}: '{name}' cannot be assigned; make a new {self._name}()")
        object.__setattr__(self, "_made", False)  # the checks below set the attributes themselves
        try:
            if name == "to_world":
                self.to_world = None if value is None else self._checked_to_world(value)
            elif name in ("cx", "cy"):
                value = self._scalar(name, value)
                object.__setattr__(self, name, (0.5 * (self.width if name == "cx" else self.height)
                                                if value is None else value))
            else:
                given = {"fov_y": None, "fx": None, "fy": None}
                if name in ("fx", "fy"):
                    given = {"fov_y": None, "fx": self.fx, "fy": self.fy}
                given[name] = self._checked_fov(value) if name == "fov_y" else self._scalar(name, value)
                self._set_intrinsics(given["fov_y"], given["fx"], given["fy"], self.cx, self.cy)
        finally:
            object.__setattr__(self, "_made", True)

    # ------------------------------------------------------------------ hooks (frontends)
    def _checked_fov(self, fov_y: object):
        """``fov_y`` checked like every intrinsic (:meth:`_scalar`); a frontend may narrow it."""
        return self._scalar("fov_y", fov_y)

    def _checked_to_world(self, to_world: object):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_values(self, call: str) -> None:
        """``ValueError`` naming ``call`` for non-finite or non-positive intrinsics (a host read of arrays)."""
        _core.check_intrinsics(call, *self.intrinsics())

    def _array_scalar(self, name: str, value: object):  # pragma: no cover - abstract
        raise NotImplementedError

    def _is_array(self, value: object) -> bool:
        return isinstance(value, self._ARRAY)

    def _array_focal(self, fov_y: object):  # pragma: no cover - abstract
        raise NotImplementedError

    def _host_scalar(self, value: object) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _repr_tail(self) -> str:
        return ""

    # ------------------------------------------------------------------ public (documented per frontend)
    def generate_rays(self, samples=None):
        call = f"{self._name}.generate_rays()"
        ops = self._OPS
        samples = ops.pixel_centres(self) if samples is None else ops.checked_samples(self, call, samples)
        work = ops.working(self, samples)
        placed = None if self.to_world is None else ops.placement(self, work)
        o = ops.zero3(work) if placed is None else placed[1]
        if ops.empty(samples):
            return ops.ray(o, ops.nothing(work, 3))
        x, y = ops.components(work, samples)
        fx, fy, cx, cy = ops.intrinsics(self, work)
        d = ops.vector(work, (x - cx) / fx, (y - cy) / fy, 1.0)
        return ops.ray(o, ops.unit(d if placed is None else ops.rotate(placed[0], d)))

    def project(self, points):
        call = f"{self._name}.project()"
        ops = self._OPS
        points = ops.checked_points(self, call, points)
        work = ops.working(self, points)
        if ops.empty(points):
            return ops.nothing(work, 2), ops.nothing(work, 1)
        p = self._world_to_camera(work, points)
        depth = ops.components(work, p)[2]
        plane = depth == 0  # no projection: xy = 0, and a finite stand-in keeps the gradient 0
        xy = self._camera_to_pixels(work, ops.select(plane, 1.0, p))
        return ops.select(plane, 0.0, xy), depth

    def _world_to_camera(self, work, points):
        """Camera-space positions ``A^-1 (p - t)`` of world ``points`` in the precision ``work`` (differentiable)."""
        ops = self._OPS
        p = ops.cast(work, points)
        if self.to_world is None:
            return p
        a, t = ops.placement(self, work)
        return ops.unrotate(a, p - t)

    def _camera_to_pixels(self, work, p):
        """Pixel coordinates ``(fx X / Z + cx, fy Y / Z + cy)`` of camera-space points (differentiable)."""
        ops = self._OPS
        x, y, z = ops.components(work, p)
        fx, fy, cx, cy = ops.intrinsics(self, work)
        return ops.vector(work, fx * x / z + cx, fy * y / z + cy)

    def sample_edges(self, scene: Any, num_samples: int, *, generator: Any = None) -> Any:
        """Samples on the images of the scene's silhouette and boundary edges (each frontend documents it).

        The steps (module docstring): the argument checks, the scene's lifecycle, its edges
        made ready, the candidates (``OPS.candidates``) placed in camera space, the plan
        (:func:`plan_samples`), the frontend's evaluation, the record.
        """
        call = f"{self._name}.sample_edges()"
        sampling = frontend_module(self, "_edge_sampling")
        ops = sampling.OPS
        num_samples = check_sample_args(call, scene, frontend_module(self, "scene").Scene, num_samples,
                                        generator, ops.generator_type, ops.generator_name)
        scene._require_ready(call)
        edges = ops.ready(scene, call)
        intrinsics = self.intrinsics()
        work, ids, a, b, o, is_boundary = ops.candidates(call, self, scene, edges, intrinsics)
        to_world = self._host_to_world()
        world = (a, b)
        a, b, o = (to_camera(x, to_world) for x in (a, b, o))
        plan = plan_samples(a, b, o, is_boundary, intrinsics, self.width, self.height, num_samples,
                            ops.jitter(generator), world=world)
        fields = ops.evaluate(self, scene, edges, work, ids, plan)
        return sampling.EdgeSamples(width=self.width, height=self.height, **fields)

    # ------------------------------------------------------------------ shared
    def _scalar(self, name: str, value: object):
        """``None``, a finite Python float, or a checked array intrinsic, else raise."""
        if value is None:
            return None
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{self._CALL}: '{name}' must be {self._SCALAR}, got bool")
        if real(value) is not None:
            value = real(value)
            if not math.isfinite(value):
                raise ValueError(f"{self._CALL}: '{name}' must be finite, got {value}")
            return value
        checked = self._array_scalar(name, value)
        if checked is None:
            raise TypeError(f"{self._CALL}: '{name}' must be {self._SCALAR}, got {type(value).__name__}")
        return checked

    def _set_size(self, width: object, height: object) -> None:
        self.width = check_size(self._CALL, "width", width)
        self.height = check_size(self._CALL, "height", height)

    def _set_intrinsics(self, fov_y, fx, fy, cx, cy) -> None:
        """Sets ``fov_y, fx, fy, cx, cy`` from checked intrinsics (``_scalar``'s results)."""
        call = self._CALL
        if fov_y is not None and (fx is not None or fy is not None):
            raise ValueError(f"{call}: give either 'fov_y' or 'fx'/'fy', not both")
        if fov_y is None and fx is None and fy is None:
            raise ValueError(f"{call}: one of 'fov_y', 'fx' or 'fy' is required")
        if fov_y is not None:
            if self._is_array(fov_y):
                fx = fy = self._array_focal(fov_y)
            elif not 0.0 < fov_y < 180.0:
                raise ValueError(f"{call}: 'fov_y' must be in (0, 180) degrees, got {fov_y}")
            else:
                fx = fy = _core.fov_to_focal(float(fov_y), self.height)
        fx = fy if fx is None else fx
        fy = fx if fy is None else fy
        for name, value in (("fx", fx), ("fy", fy)):
            if not self._is_array(value) and not value > 0:
                raise ValueError(f"{call}: '{name}' must be positive, got {value}")
        self.fov_y = fov_y
        array_fov = fov_y is not None and self._is_array(fov_y)
        self.fx, self.fy = (None, None) if array_fov else (fx, fy)  # an array fov_y: read at each use (fx)
        self.cx = 0.5 * self.width if cx is None else cx
        self.cy = 0.5 * self.height if cy is None else cy

    def _host_to_world(self) -> np.ndarray | None:
        """``to_world`` as a (4, 4) float64 host matrix (detached; one host read by the frontend's
        ``_convert.host_matrices``), ``None`` for the identity."""
        if self.to_world is None:
            return None
        return frontend_module(self, "_convert").host_matrices(self.to_world)[0]

    def _host_centre(self) -> tuple[float, float, float]:
        """The camera centre in world space (the translation of ``to_world``) as Python floats."""
        to_world = self._host_to_world()
        return (0.0, 0.0, 0.0) if to_world is None else tuple(float(x) for x in to_world[:3, 3])

    def intrinsics(self) -> tuple[float, float, float, float]:
        """``(fx, fy, cx, cy)`` in pixels, as Python floats (detached; a host read for arrays)."""
        return tuple(self._host_scalar(v) if self._is_array(v) else float(v)
                     for v in (self.fx, self.fy, self.cx, self.cy))

    def __repr__(self) -> str:
        fx, fy, cx, cy = self.intrinsics()
        return (f"{self._CALL[:-2]}(width={self.width}, height={self.height}, fx={fx:g}, fy={fy:g}, "
                f"cx={cx:g}, cy={cy:g}{self._repr_tail()})")


def check_sample_args(call: str, scene: object, scene_type: type, num_samples: object,
                      generator: object, generator_type: type, generator_name: str) -> int:
    """The checks of ``Camera.sample_edges``' arguments; returns ``num_samples`` as an int.

    ``scene_type`` is the frontend's ``Scene``; ``generator_name`` names
    ``generator_type`` in messages (``"torch.Generator"``).
    """
    if not isinstance(scene, scene_type):
        raise TypeError(f"{call}: 'scene' must be a {scene_type.__module__.rsplit('.', 1)[0]}.Scene, "
                        f"got {type_name(scene)}")
    if integer(num_samples) is None:
        raise TypeError(f"{call}: 'num_samples' must be an int, got {type(num_samples).__name__}")
    num_samples = integer(num_samples)
    if num_samples < 0:
        raise ValueError(f"{call}: 'num_samples' must be >= 0, got {num_samples}")
    if generator is not None and not isinstance(generator, generator_type):
        raise TypeError(f"{call}: 'generator' must be a {generator_name}, got {type_name(generator)}")
    return num_samples



class EdgeSamplesBase(PublicName, FieldRecord):
    """Bookkeeping of ``EdgeSamples``: a record (:class:`rayd.records.FieldRecord`: fields
    as attributes and in ``dir()``, ``detach()``, indexing), plus ``width``/``height``.

    A subclass sets ``shape`` (``len()`` is its first entry, N) and ``_RAY`` (its ``Ray``); a
    field map applies to the parts (``o``, ``d``, ``tmin``, ``tmax``) of a ray field that are
    arrays of the frontend (``_RAY._is_array``; the generated rays' scalar bounds pass through),
    each first brought to the N rows by ``_all_rows`` (default: as it is). Its ``_name``
    (``"rayd.torch.EdgeSamples"``) comes from :class:`~rayd.core.frontend.PublicName`.
    """

    __slots__ = ("width", "height")
    _name = "rayd.EdgeSamples"
    _RAY: type = type(None)

    def __len__(self) -> int:
        return int(self.shape[0])

    def _all_rows(self, x):
        """A ray part with a row per sample (a frontend whose arrays broadcast one row widens it here)."""
        return x

    def _map(self, fn):
        """Map every field (each part of the ray fields, by ``_map_ray_part``) into a new record."""
        def each(name: str, value):
            if not isinstance(value, self._RAY):
                return fn(name, value)
            parts = (value.o, value.d, value.tmax, value.tmin)
            o, d, tmax, tmin = (fn(name, self._all_rows(x)) if self._RAY._is_array(x) else x for x in parts)
            return self._RAY(o, d, tmax, tmin=tmin)

        return self._replace({name: each(name, value) for name, value in self._fields.items()})

    def __init__(self, *, width: int, height: int, **fields) -> None:
        FieldRecord.__init__(self, **fields)
        self.width = width
        self.height = height

    def __repr__(self) -> str:
        return f"{self._name}(num_samples={len(self)}, width={self.width}, height={self.height})"

    @staticmethod
    def _check_filter(call: str, filter: object, allowed: tuple[str, ...], message: str) -> None:
        """``TypeError`` unless ``filter`` is a str, ``ValueError`` (``message``) unless in ``allowed``."""
        if not isinstance(filter, str):
            raise TypeError(f"{call}: 'filter' must be a str, got {type(filter).__name__}")
        if filter not in allowed:
            raise ValueError(f"{call}: 'filter' must be {message}, got {filter!r}")
