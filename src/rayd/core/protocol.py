"""The array protocol: what `rayd.core` needs from a frontend's array library.

`rayd.core` never imports torch or drjit. Each frontend's ``_convert.py`` implements
this small protocol once, for its own arrays, and hands an instance to
:class:`rayd.core.SceneCore`:

- ``version(a)``: a hashable stamp that changes whenever ``a``'s contents change in
  place (torch: the storage's version counter; Dr.Jit: the JIT variable ids behind its
  components). ``None`` if the array has none (then only the content copies below see its
  in-place changes).
- ``vec3_view(a)``: a Warp ``vec3``/``vec3d`` view of an (n, 3) array's rows (zero-copy
  where the layout allows, else one packing copy), and the object that must stay
  alive while Warp reads it.
- ``index_view(a)``: a flat Warp ``int32``/``int64`` view of an (F, 3) face array.
- ``host_matrices(a)``: the (K, 4, 4) float64 NumPy copy of one matrix or a batch (one
  host read; only at ``build()``, ``sync()`` and ``set_mesh_transform``).
- ``stream(device)``: the Warp stream that orders engine work after the frontend's
  (``None`` on the CPU).
- ``fence(device)``: wait for queued work where the frontend must (a no-op for torch).

Optional:

- ``track(a) -> (version, hold)``: the version to record at a snapshot, and an object
  the scene keeps until the next one (Dr.Jit: a second reference, so that a later
  in-place scatter copies and changes the version); default ``(version(a), None)``.
- ``snapshot(a)`` / ``same(arrays, copies, memo)``: a private copy of an array's values,
  and whether arrays still hold their copies' values (:mod:`rayd.core.contents`: the
  writes no version stamp sees); without them only the stamps decide.
- ``storage_stamps``: True where ``version(a)`` is shared by every view of one storage
  (torch), so that a write elsewhere in the storage moves it: then ``same`` must also
  compare arrays whose stamp moved, and faces or a static mesh's vertices whose values
  equal their copy are no change (:meth:`rayd.core.shapes.ShapeTable.unchanged`).
  Default False (Dr.Jit: its copies are read through views valid only while the stamp
  holds).
- ``rows(call, name, a) -> int``: the row count of an array, raising the contract's
  ``ValueError`` (naming ``call`` and ``name``) if it is malformed (Dr.Jit: ragged
  components); default: the mesh's own count.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np
import warp as wp


class ArrayProtocol(Protocol):
    """The operations a frontend provides on its own arrays (see the module docstring)."""

    def version(self, array: Any) -> Hashable | None:
        """A stamp that changes with every in-place change of ``array`` (``None``: not trackable)."""

    def vec3_view(self, array: Any) -> tuple[wp.array, Any]:
        """``(view, keepalive)``: Warp ``vec3``/``vec3d`` rows of an (n, 3) float array."""

    def index_view(self, array: Any) -> tuple[wp.array, Any]:
        """``(view, keepalive)``: flat Warp int32/int64 entries of an (F, 3) integer array."""

    def host_matrices(self, array: Any) -> np.ndarray:
        """(K, 4, 4) float64 host copy of a (4, 4) matrix or a batch of K."""

    def stream(self, device: str) -> wp.Stream | None:
        """The Warp stream to launch on for ``device`` (``None`` on the CPU)."""

    def fence(self, device: str) -> None:
        """Wait for queued frontend work where the frontend requires it."""


class ArraysBase:
    """Defaults for a frontend's protocol class (subclass it and write the rest of :class:`ArrayProtocol`).

    - :meth:`fence`: nothing to wait for (a frontend whose arrays order their work on
      the stream that :meth:`ArrayProtocol.stream` names, as torch's do).
    """

    def fence(self, device: str) -> None:
        """Wait for queued frontend work where the frontend requires it: here, never (a no-op)."""
        return None


_streams: dict[tuple[str, int], Any] = {}


def cached_stream(device: str, handle: int, make: Any) -> wp.Stream:
    """The Warp stream wrapping the frontend's CUDA stream ``handle`` on ``device``, made once by ``make()``."""
    key = (device, handle)
    cached = _streams.get(key)
    if cached is None:
        cached = _streams[key] = make()
    return cached

