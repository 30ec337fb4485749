"""`Intersection`: the closest-hit record returned by ``Scene.intersect``."""

from __future__ import annotations

import torch

from rayd.core.edges import document
from rayd.core.frontend import PublicName
from rayd.records import FieldRecord, HitRecord


class TorchRecord(PublicName, FieldRecord):
    """The torch parts of a record: ``detach()``, ``to()``, ``cpu()`` and indexing.

    Mixed into :class:`Intersection` and :class:`~rayd.torch.NearestEdge` ahead of their
    backend-neutral base (``rayd.records``), which supplies the generic machinery.
    """

    def _detach_field(self, value: torch.Tensor) -> torch.Tensor:
        return value.detach()

    def _index_field(self, value: torch.Tensor, index: object) -> torch.Tensor:
        batch = len(self.shape)
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            lead = tuple(self.shape[: index.dim()])
            if index.dim() > batch or tuple(index.shape) != lead:
                raise IndexError(
                    f"{self._name}[mask]: a bool mask must have the record's batch shape "
                    f"{tuple(self.shape)} or a leading part of it, got {tuple(index.shape)}"
                )
        extra = value.dim() - batch  # trailing component dims (3 of p, 2 of uv)
        if extra and (index is Ellipsis or (isinstance(index, tuple) and Ellipsis in index)):
            # `...` stands for batch dims only: keep the component dims out of its reach
            index = (index if isinstance(index, tuple) else (index,)) + (slice(None),) * extra
        return value[index]

    def to(self, device: torch.device | str | torch.dtype | None = None, dtype: torch.dtype | None = None, *,
           non_blocking: bool = False) -> "TorchRecord":
        """The record with every field on ``device`` and float fields in ``dtype``.

        Args:
            device: target device (``None``: stay), or a dtype (``record.to(torch.float64)``).
            dtype: target floating dtype for the float fields (``None``: keep); id
                fields stay int32.
            non_blocking: passed to ``torch.Tensor.to``.

        Returns:
            A record of the same type and flags; fields already there are not copied.

        Raises:
            TypeError: ``dtype`` is not a floating dtype.
        """
        if isinstance(device, torch.dtype):
            device, dtype = None, device
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"{self._name}.to(): 'dtype' must be a floating dtype, got {dtype}")

        def move(name: str, value: torch.Tensor) -> torch.Tensor:
            want = dtype if value.is_floating_point() else None
            return value.to(device=device, dtype=want, non_blocking=non_blocking)

        return self._map(move)

    def cpu(self) -> "TorchRecord":
        """The record with every field on the CPU (``to("cpu")``).

        Returns:
            A record of the same type and flags; fields already on the CPU are not copied.
        """
        return self.to("cpu")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(f"len() of a 0-d {self._name}")
        return int(self.shape[0])


class Intersection(TorchRecord, HitRecord):
    """Closest hit per ray, with miss values encoded in the data.

    Attributes (``...`` is the ray batch shape):
        t: (...) float, hit distance in multiples of ``|d|``; ``+inf`` on a miss.
        p: (..., 3) hit point ``o + t d``; 0 on a miss. Needs ``RayFlags.Geometric``.
        geo_n: (..., 3) unit geometric normal ``normalize((v1 - v0) x (v2 - v0))`` in
            world space; 0 on a miss. Needs ``RayFlags.Geometric``.
        barycentric: (..., 3) weights ``(w0, w1, w2)`` of the face's vertices,
            ``p = w0 v0 + w1 v1 + w2 v2``; 0 on a miss. Needs ``RayFlags.Geometric``.
        n: (..., 3) unit shading normal ``normalize(w0 n0 + w1 n1 + w2 n2)`` of the
            vertex normals (``geo_n`` when the mesh has none; never flipped); 0 on a
            miss. Needs ``RayFlags.ShadingN``.
        uv: (..., 2) interpolated texture coordinates, or ``(w1, w2)`` when the mesh
            has none; 0 on a miss. Needs ``RayFlags.UV``.
        prim_id: (...) int32 face index within the hit mesh; -1 on a miss.
        shape_id: (...) int32 id of the hit mesh (or instance); -1 on a miss.
        global_prim_id: (...) int32 scene-wide face id (``prim_id`` + the shape's
            face offset); -1 on a miss.

    Float fields have the promoted dtype of the rays and the scene's vertices and are
    differentiable (fixed winner, DESIGN.md). Reading a field that was not requested
    raises ``AttributeError`` naming the flag to pass. Never NaN.

    Records behave like a batch of tensors: ``hit.detach()``, ``hit.to(device)``,
    ``hit[mask]`` / ``hit[idx]`` / ``hit[2:5]`` (a record of the selected rays with the
    same fields and flags; the index applies to the batch dims, so ``hit[mask].p`` is
    ``(M, 3)``).
    """

    @property
    def shape(self) -> torch.Size:
        """The ray batch shape ``...``."""
        return self._fields["t"].shape


document(Intersection, {"is_valid": """(...) bool: True where the ray hit something."""},
         {"is_valid": {"return": torch.Tensor}})
