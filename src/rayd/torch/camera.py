"""`Camera`: a pinhole camera that makes rays, projects points and samples visibility edges."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rayd.core import camera as _core
from rayd.core.camera_frontend import CameraBase
from rayd.core.frontend import serialise_public
from rayd.core.transforms import check_matrices
from rayd.torch import _check, _convert
from rayd.torch.ray import Ray


class Camera(CameraBase):
    """A pinhole camera in the OpenCV convention.

    Camera space: x right, y down, z forward (the camera looks along +z). Pixel
    coordinates ``(x, y)`` cover ``[0, width) x [0, height)``; pixel ``(i, j)`` (column
    ``i``, row ``j``) is the square ``[i, i+1) x [j, j+1)`` with its centre at
    ``(i + 0.5, j + 0.5)``. A camera-space point ``(X, Y, Z)``, ``Z > 0``, lands on
    ``(fx X / Z + cx, fy Y / Z + cy)``.

    Args:
        width, height: image size in pixels, positive ints.
        fov_y: vertical field of view in degrees, in ``(0, 180)`` (float or 0-dim float
            tensor); sets ``fx = fy = (height / 2) / tan(fov_y / 2)``. Give either
            ``fov_y`` or ``fx`` / ``fy``, not both.
        fx, fy: focal lengths in pixels (positive floats or 0-dim float tensors); one of
            them alone sets both.
        cx, cy: principal point in pixels (default ``width / 2``, ``height / 2``).
        to_world: optional (4, 4) float32/float64 camera-to-world matrix acting on column
            vectors, ``p_world = M @ [p_cam, 1]`` (as for meshes; only its top three rows
            are read). Default: the identity (camera at the origin looking along +z).

    Any of ``fov_y, fx, fy, cx, cy, to_world`` may be a tensor that requires grad;
    :meth:`generate_rays`, :meth:`project` and the ``motion`` of :meth:`sample_edges`
    are differentiable with respect to them. Tensors are read live at each call (they
    are not copied; a tensor ``fov_y`` gives ``fx = fy`` from its value at each call).

    Raises:
        TypeError: ``width``/``height`` not ints; an intrinsic neither a number nor a
            float tensor; ``to_world`` not a float tensor.
        ValueError: non-positive size, ``fov_y`` together with ``fx``/``fy``, neither
            given, ``fov_y`` outside ``(0, 180)``, a non-positive focal length, a
            non-finite intrinsic, a tensor intrinsic that is not 0-dim, ``to_world`` not
            (4, 4), non-finite or singular (3x3 part of determinant 0), or tensors on
            different devices. Tensor values are checked here (one host read; not while
            ``torch.compile`` traces) and again by :meth:`sample_edges`.
    """

    _SCALAR = "a float or a 0-dim float tensor"
    _ARRAY = torch.Tensor

    def __init__(
        self,
        width: int,
        height: int,
        *,
        fov_y: float | torch.Tensor | None = None,
        fx: float | torch.Tensor | None = None,
        fy: float | torch.Tensor | None = None,
        cx: float | torch.Tensor | None = None,
        cy: float | torch.Tensor | None = None,
        to_world: torch.Tensor | None = None,
    ) -> None:
        super().__init__(width, height, fov_y=fov_y, fx=fx, fy=fy, cx=cx, cy=cy, to_world=to_world)

    def _checked_to_world(self, to_world: object) -> torch.Tensor:
        to_world = _check.float_tensor(self._CALL, "to_world", to_world)
        _check.supported_device(self._CALL, "to_world", to_world)  # a meta tensor stopped in torch's host read
        if tuple(to_world.shape) != (4, 4):
            raise ValueError(f"{self._CALL}: 'to_world' must have shape (4, 4), got {tuple(to_world.shape)}")
        return to_world

    def _check_values(self, call: str) -> None:
        """``ValueError`` for tensors on different devices, non-positive/non-finite intrinsics or a
        non-finite/singular ``to_world`` (reads tensor values on the host: a synchronisation, at
        ``Camera()`` and ``sample_edges``). While ``torch.compile`` traces, only the devices are
        checked: a host read would break the graph (``sample_edges``, which reads them anyway,
        checks the values again outside)."""
        tensors = [(n, v) for n, v in self._parameters() if isinstance(v, torch.Tensor)]
        for name, value in tensors[1:]:
            _check.same_device(call, name, value, tensors[0][1].device, f"'{tensors[0][0]}'")
        if torch.compiler.is_compiling():
            return
        host = [_convert.host_array(v, torch.float64) if isinstance(v, torch.Tensor) else v
                for v in (self.fx, self.fy, self.cx, self.cy, self.fov_y)]  # all of a vmap batch
        _core.check_intrinsics(call, *host[:4], fov_y=host[4])
        if self.to_world is not None:
            host = _convert.host_array(self.to_world, torch.float64).reshape(-1, 4, 4)  # all of a vmap batch
            check_matrices(call, "to_world", host, batch=False)

    # ------------------------------------------------------------------ properties
    def _parameters(self) -> list[tuple[str, object]]:
        return [("fov_y", self.fov_y), ("fx", self.fx), ("fy", self.fy), ("cx", self.cx), ("cy", self.cy),
                ("to_world", self.to_world)]

    @property
    def device(self) -> torch.device | None:
        """The device of the camera's tensors, ``None`` if all its parameters are numbers."""
        for _, value in self._parameters():
            if isinstance(value, torch.Tensor):
                return value.device
        return None

    @property
    def dtype(self) -> torch.dtype:
        """The promoted dtype of the camera's tensors (float32 if it has none)."""
        dtype = torch.float32
        for _, value in self._parameters():
            if isinstance(value, torch.Tensor):
                dtype = torch.promote_types(dtype, value.dtype)
        return dtype

    def _check_device(self, call: str, name: str, value: torch.Tensor) -> None:
        device = self.device
        if device is not None:
            _check.same_device(call, name, value, device, "the camera")

    # ------------------------------------------------------------------ camera space (rayd.core.camera_frontend)
    def camera_to_pixels(self, p: torch.Tensor) -> torch.Tensor:
        """Pixel coordinates of camera-space points: the pinhole projection, no checks.

        Args:
            p: (..., 3) float32/float64 camera-space points (x right, y down, z forward),
                on the camera's device.

        Returns:
            (..., 2) tensor in ``p``'s dtype, pixel coordinates; concretely,
            ``(fx x / z + cx, fy y / z + cy)``. Points with ``z = 0`` divide by zero
            here (``inf``/NaN); :meth:`project` handles them.

        Units: pixels.

        Gradients: differentiable with respect to ``p`` and the intrinsics.

        Raises:
            Nothing of its own (torch errors for wrong shapes or devices).
        """
        return self._camera_to_pixels((p.dtype, p.device), p)

    def world_to_camera(self, points: torch.Tensor) -> torch.Tensor:
        """Camera-space positions of world points, no checks.

        Args:
            points: (..., 3) float32/float64 world-space points on the camera's device.

        Returns:
            (..., 3) tensor in the promoted dtype of ``points`` and the camera's
            parameters: ``to_world⁻¹ @ [points, 1]`` (the points themselves when
            ``to_world`` is ``None``), in the camera's axes (x right, y down, z forward).

        Units: world units.

        Gradients: differentiable with respect to ``points`` and ``to_world``.

        Raises:
            Nothing of its own (torch errors for wrong shapes or devices).
        """
        return self._world_to_camera(_working(self, points), points)

    # ------------------------------------------------------------------ CameraBase hooks
    def _array_scalar(self, name: str, value: object) -> torch.Tensor | None:
        if not isinstance(value, torch.Tensor):
            return None
        value = _check.float_tensor(self._CALL, name, value)
        _check.supported_device(self._CALL, name, value)
        if value.dim() != 0:
            raise ValueError(f"{self._CALL}: '{name}' must be a 0-dim tensor, got shape {tuple(value.shape)}")
        return value

    def _array_focal(self, fov_y: torch.Tensor) -> torch.Tensor:
        return (0.5 * self.height) / torch.tan(torch.deg2rad(fov_y) / 2)

    def _host_scalar(self, value: torch.Tensor) -> float:
        return float(_convert.primal(value))

    def _repr_tail(self) -> str:
        return f", to_world={'set' if self.to_world is not None else 'identity'}"


def _working(camera: Camera, array: torch.Tensor) -> tuple[torch.dtype, torch.device]:
    """A call's working precision: the promoted dtype of ``array`` and the camera, ``array``'s device."""
    return torch.promote_types(array.dtype, camera.dtype), array.device


def _pixel_centres(camera: Camera) -> torch.Tensor:
    """(height, width, 2) pixel centres in the camera's dtype, on its device (the CPU if it has no tensors)."""
    device = camera.device or torch.device("cpu")
    ys = torch.arange(camera.height, dtype=camera.dtype, device=device) + 0.5
    xs = torch.arange(camera.width, dtype=camera.dtype, device=device) + 0.5
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack((gx, gy), dim=-1)


def _checked(camera: Camera, call: str, name: str, value: object, last: int) -> torch.Tensor:
    """``value``, a float tensor of shape (..., last) on the camera's device, else raise."""
    value = _check.float_tensor(call, name, value, last=last)
    camera._check_device(call, name, value)
    return value


def _stack(parts: tuple) -> torch.Tensor:
    """The (..., k) vectors of k tensor or number components (a number: ``full_like`` the first tensor)."""
    like = next(p for p in parts if isinstance(p, torch.Tensor))
    return torch.stack([p if isinstance(p, torch.Tensor) else torch.full_like(like, p) for p in parts], dim=-1)


def _split(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A, t)``: the linear part (3, 3) and the translation (3,) of a (4, 4) matrix."""
    return m[:3, :3], m[:3, 3]


def _inverse(a: torch.Tensor) -> torch.Tensor:
    """``a^-1`` without the error check of ``torch.linalg.inv`` (which synchronises CUDA with
    the host); ``Camera()`` and ``sample_edges`` refuse singular matrices themselves."""
    return torch.linalg.inv_ex(a).inverse


#: rayd.torch's steps of ``generate_rays``, ``project`` and the camera-space maps
#: (:class:`rayd.core.camera_frontend.CameraBase`, ``_OPS``): work = ``(dtype, device)``, vectors (..., k).
Camera._OPS = SimpleNamespace(working=_working, pixel_centres=_pixel_centres,
                              checked_samples=lambda camera, call, v: _checked(camera, call, "samples", v, 2),
                              checked_points=lambda camera, call, v: _checked(camera, call, "points", v, 3),
                              cast=lambda work, v: v.to(work[0]), components=lambda work, v: v.to(work[0]).unbind(-1),
                              vector=lambda work, *parts: _stack(parts),
                              intrinsics=lambda camera, work: (camera.fx, camera.fy, camera.cx, camera.cy),
                              placement=lambda camera, work: _split(camera.to_world.to(work[0])),
                              rotate=lambda a, v: v @ a.transpose(0, 1),
                              unrotate=lambda a, v: v @ _inverse(a).transpose(0, 1),
                              zero3=lambda work: torch.zeros(3, dtype=work[0], device=work[1]),
                              unit=lambda v: v / torch.linalg.vector_norm(v, dim=-1, keepdim=True),
                              select=lambda mask, value, v: torch.where(mask.unsqueeze(-1), value, v),
                              ray=lambda o, d: Ray(o.expand(d.shape), d), empty=lambda array: False)

serialise_public(Camera, torch.compiler.is_compiling)  # calls from several threads: one at a time (rayd.engine.runtime.ENGINE_LOCK)
