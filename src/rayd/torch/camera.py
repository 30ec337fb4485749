"""`Camera`: a pinhole camera that makes rays, projects points and samples visibility edges."""

from __future__ import annotations

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
    are not copied).

    Raises:
        TypeError: ``width``/``height`` not ints; an intrinsic neither a number nor a
            float tensor; ``to_world`` not a float tensor.
        ValueError: non-positive size, ``fov_y`` together with ``fx``/``fy``, neither
            given, ``fov_y`` outside ``(0, 180)``, a non-positive focal length, a
            non-finite intrinsic, a tensor intrinsic that is not 0-dim, ``to_world`` not
            (4, 4), non-finite or singular (3x3 part of determinant 0), or tensors on
            different devices. Tensor values are checked here (one host read) and again
            by :meth:`sample_edges`.
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

    def _checked_fov(self, fov_y: object) -> float | torch.Tensor | None:
        return self._scalar("fov_y", fov_y)

    def _checked_to_world(self, to_world: object) -> torch.Tensor:
        to_world = _check.float_tensor(self._CALL, "to_world", to_world)
        if tuple(to_world.shape) != (4, 4):
            raise ValueError(f"{self._CALL}: 'to_world' must have shape (4, 4), got {tuple(to_world.shape)}")
        return to_world

    def _check_values(self, call: str) -> None:
        """``ValueError`` for tensors on different devices, non-positive/non-finite intrinsics or a
        non-finite/singular ``to_world`` (reads tensor values on the host: a synchronisation, at
        ``Camera()`` and ``sample_edges``)."""
        tensors = [(n, v) for n, v in self._parameters() if isinstance(v, torch.Tensor)]
        for name, value in tensors[1:]:
            _check.same_device(call, name, value, tensors[0][1].device, f"'{tensors[0][0]}'")
        host = [_convert.host_array(v, torch.float64) if isinstance(v, torch.Tensor) else v
                for v in (self.fx, self.fy, self.cx, self.cy, self.fov_y)]  # all of a vmap batch
        _core.check_intrinsics(call, *host[:4], fov_y=host[4])
        if self.to_world is not None:
            check_matrices(call, "to_world", _convert.host_matrices(self.to_world))

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

    def _matrix(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(A, t)``: the linear part (3, 3) and translation (3,) of ``to_world``, or ``None``."""
        if self.to_world is None:
            return None
        m = self.to_world.to(dtype)
        return m[:3, :3], m[:3, 3]

    def _check_device(self, call: str, name: str, value: torch.Tensor) -> None:
        device = self.device
        if device is not None:
            _check.same_device(call, name, value, device, "the camera")

    # ------------------------------------------------------------------ queries
    def camera_to_pixels(self, p: torch.Tensor) -> torch.Tensor:
        """(..., 2) pixel coordinates of (..., 3) camera-space points (differentiable)."""
        z = p[..., 2]
        return torch.stack((self.fx * p[..., 0] / z + self.cx, self.fy * p[..., 1] / z + self.cy), dim=-1)

    def world_to_camera(self, points: torch.Tensor) -> torch.Tensor:
        """(..., 3) camera-space positions of world ``points`` (differentiable; no checks)."""
        placed = self._matrix(torch.promote_types(points.dtype, self.dtype), points.device)
        if placed is None:
            return points.to(torch.promote_types(points.dtype, self.dtype))
        a, t = placed
        return (points.to(a.dtype) - t) @ _inverse(a).transpose(0, 1)

    def _generate_rays(self, call: str, samples: torch.Tensor | None) -> Ray:
        if samples is None:
            device = self.device or torch.device("cpu")
            ys = torch.arange(self.height, dtype=self.dtype, device=device) + 0.5
            xs = torch.arange(self.width, dtype=self.dtype, device=device) + 0.5
            gy, gx = torch.meshgrid(ys, xs, indexing="ij")
            samples = torch.stack((gx, gy), dim=-1)
        else:
            samples = _check.float_tensor(call, "samples", samples, last=2)
            self._check_device(call, "samples", samples)
        dtype = torch.promote_types(samples.dtype, self.dtype)
        samples = samples.to(dtype)
        x, y = samples.unbind(-1)
        local = torch.stack(((x - self.cx) / self.fx, (y - self.cy) / self.fy, torch.ones_like(x)), dim=-1)
        placed = self._matrix(dtype, samples.device)
        if placed is None:
            d, o = local, torch.zeros(3, dtype=dtype, device=samples.device)
        else:
            a, o = placed
            d = local @ a.transpose(0, 1)
        d = d / torch.linalg.vector_norm(d, dim=-1, keepdim=True)
        return Ray(o.expand(d.shape), d)

    def _project(self, call: str, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        points = _check.float_tensor(call, "points", points, last=3)
        self._check_device(call, "points", points)
        dtype = torch.promote_types(points.dtype, self.dtype)
        p = points.to(dtype)
        placed = self._matrix(dtype, p.device)
        if placed is not None:
            a, t = placed
            p = (p - t) @ _inverse(a).transpose(0, 1)
        depth = p[..., 2]
        plane = (depth == 0)[..., None]  # no projection: xy = 0, and a finite stand-in keeps the gradient 0
        xy = self.camera_to_pixels(torch.where(plane, torch.ones_like(p), p))
        return torch.where(plane, torch.zeros_like(xy), xy), depth

    # ------------------------------------------------------------------ CameraBase hooks
    def _array_scalar(self, name: str, value: object) -> torch.Tensor | None:
        if not isinstance(value, torch.Tensor):
            return None
        value = _check.float_tensor(self._CALL, name, value)
        if value.dim() != 0:
            raise ValueError(f"{self._CALL}: '{name}' must be a 0-dim tensor, got shape {tuple(value.shape)}")
        return value

    def _array_focal(self, fov_y: torch.Tensor) -> torch.Tensor:
        return (0.5 * self.height) / torch.tan(torch.deg2rad(fov_y) / 2)

    def _host_scalar(self, value: torch.Tensor) -> float:
        return float(_convert.primal(value))

    def _repr_tail(self) -> str:
        return f", to_world={'set' if self.to_world is not None else 'identity'}"


serialise_public(Camera, torch.compiler.is_compiling)  # calls from several threads: one at a time (rayd.engine.runtime.ENGINE_LOCK)



def _inverse(a: torch.Tensor) -> torch.Tensor:
    """``a^-1`` without the error check of ``torch.linalg.inv`` (which synchronises CUDA with
    the host); ``Camera()`` and ``sample_edges`` refuse singular matrices themselves."""
    return torch.linalg.inv_ex(a).inverse
