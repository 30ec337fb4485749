"""Records of the reflection queries: ``ReflectionChain`` and ``SpecularPaths``."""

from __future__ import annotations

import torch

from rayd.core.edges import document
from rayd.records import ChainRecord, PathRecord
from rayd.torch.intersection import TorchRecord


class ReflectionChain(TorchRecord, ChainRecord):
    """The specular chain of each ray: up to ``B`` closest hits, one slot per bounce.

    Attributes (``...`` is the ray batch shape, ``B`` = ``max_bounces``):
        t: (..., B) float, length of segment ``b`` in multiples of ``|d|``; ``+inf``
            in empty slots.
        p: (..., B, 3) hit point ``p_b``; 0 in empty slots.
        geo_n: (..., B, 3) unit geometric normal of the hit face (as in ``intersect``,
            never flipped); 0 in empty slots.
        d_out: (..., B, 3) direction leaving ``p_b``, ``d_b - 2 (d_b . g_b) g_b`` (same
            length as ``d``); 0 in empty slots.
        image_source: (..., B, 3) ``I_b``, the ray origin mirrored across the planes
            of hits ``0..b`` in order; 0 in empty slots.
        prim_id, shape_id, global_prim_id: (..., B) int32, -1 in empty slots.
        num_bounces: (...) int32, the number of valid slots.
        path_length: (...) float, ``sum_b t_b |d|`` over valid slots (world units);
            0 with no hit.

    Float fields have the promoted dtype of the ray and the scene's vertices and are
    differentiable (reverse and forward mode) for the fixed chain of faces, with
    respect to vertices, transforms, ``ray.o`` and ``ray.d``. Never NaN.
    Supports ``detach()``, ``to(device)`` and indexing of the batch dims.
    """

    @property
    def shape(self) -> torch.Size:
        """The ray batch shape ``...``."""
        return self._fields["num_bounces"].shape

    @property
    def max_bounces(self) -> int:
        """``B``, the number of slots."""
        return int(self._fields["t"].shape[-1])


class SpecularPaths(TorchRecord, PathRecord):
    """Exact specular paths for given face sequences (image method).

    Attributes (``...`` is the batch shape, ``B`` the sequence length):
        points: (..., B, 3) reflection points in order from the source; 0 in padding
            slots and for invalid paths.
        num_bounces: (...) int32, the number of faces in the sequence (non-padding).
        length: (...) float, total path length in world units; ``+inf`` if invalid.
        valid: (...) bool, see :meth:`rayd.torch.Scene.specular_paths`.

    ``points`` and ``length`` are differentiable (reverse and forward mode) with
    respect to the source, the target, vertices and transforms, for the fixed face
    sequence; invalid paths carry zero gradient. Never NaN.
    """

    @property
    def shape(self) -> torch.Size:
        """The batch shape ``...``."""
        return self._fields["valid"].shape


document(ReflectionChain, {"is_valid": """(..., B) bool: True in the slots that hold a hit."""},
         {"is_valid": {"return": torch.Tensor}})
document(SpecularPaths, {"is_valid": """(...) bool, the ``valid`` field."""},
         {"is_valid": {"return": torch.Tensor}})
