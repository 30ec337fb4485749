"""Copies of a scene's registered arrays, to see the in-place writes no version stamp sees.

A version stamp (:meth:`rayd.core.protocol.ArrayProtocol.version`) moves with the writes
the array library tracks, not with all of them: torch's autograd counter misses writes
through ``.data``, NumPy or DLPack views, ``untyped_storage()`` and every write into a
tensor made under ``torch.inference_mode()`` (it has no counter); Dr.Jit's variable ids
miss writes through zero-copy views (``.numpy()``, ``.torch()``, DLPack, Warp). So at
every snapshot (``build()``, ``sync()``) the scene keeps a copy of each registered array
(vertices, faces, matrices and the batches they were taken from) and each check
(:meth:`rayd.core.shapes.ShapeTable.unchanged`: every query, ``has_pending_updates()``,
``is_ready()``, ``sync()``) compares the arrays whose stamp did not move with their copies.
That is exact (every element, no sampling, no hash), and costs one read of each registered
array and of its copy per check, and the copies' memory (measured in
``benchmarks/README.md``, "12-07, 19th session, helper breakit19"; ``docs/lifecycle.md``).

The frontend's protocol provides the two operations (optional; without them the stamps
alone decide):

- ``snapshot(a)``: a private copy of ``a``'s current contents;
- ``same(arrays, copies, memo)``: per array, whether it still holds its copy's values
  (``memo``: a dict kept until the next snapshot, for the frontend's own plan, e.g. small
  arrays compared together in one operation). At most one host synchronisation.
"""

from __future__ import annotations

import os
from typing import Any

#: ``RAYD_CONTENT_CHECK``: ``"cpu"`` (default) compares the arrays of scenes on the CPU only; ``"1"`` also
#: on CUDA (rayd.torch: one host read per check, which DESIGN.md's "no hidden device synchronisation"
#: forbids by default; rayd.drjit: read after the query's own fence), not yet run on a GPU; ``"0"``: the
#: stamps alone decide, as before session 19 (for measurements only).
MODE = os.environ.get("RAYD_CONTENT_CHECK", "cpu").strip().lower()
ENABLED = MODE != "0"


class Contents:
    """The copies of one scene's registered arrays, parallel to the table's watched list.

    Args:
        arrays: the frontend's array protocol (its ``snapshot`` and ``same``).
    """

    def __init__(self, arrays: Any) -> None:
        self.arrays = arrays
        self.enabled = ENABLED and hasattr(arrays, "snapshot") and hasattr(arrays, "same")
        self.watched: list = []
        self.copies: list = []
        self.memo: dict = {}

    def take(self, arrays: list, fresh: set[int] | None) -> None:
        """Copy ``arrays`` (the table's watched list), reusing the copy of an array kept before
        unless its ``id`` is in ``fresh`` (``None``: copy all, as at ``build()``).

        The caller reuses only copies of arrays that no check found changed since the copy
        (:meth:`rayd.core.shapes.ShapeTable._watch`), so they still hold the arrays' values.
        """
        if not self.enabled:
            return
        if MODE not in ("1", "all") and self._on_cuda(arrays):
            self.enabled = False  # (see MODE: the CUDA check is opt-in)
            return
        old = {} if fresh is None else {id(a): c for a, c in zip(self.watched, self.copies)}
        copies = []
        for a in arrays:
            key = id(a)
            c = old.get(key) if fresh is not None and key not in fresh else None
            copies.append(self.arrays.snapshot(a) if c is None else c)
        self.watched, self.copies, self.memo = arrays, copies, {}

    def _on_cuda(self, arrays: list) -> bool:
        """Whether the scene's arrays live on a CUDA device (the protocol's ``device``, else the first array's)."""
        device = getattr(self.arrays, "device", None)
        if not isinstance(device, str):
            device = str(getattr(arrays[0], "device", "")) if arrays else ""
        return device.startswith("cuda")

    def differing(self, arrays: list, stamped: list[bool]) -> set[int]:
        """The ``id`` of every watched array whose stamp did not move (``stamped``) but whose values did."""
        if not self.enabled or arrays is not self.watched:
            return set()
        idx = [k for k, ok in enumerate(stamped) if ok]
        if not idx:
            return set()
        if len(idx) == len(arrays):
            sub, copies, memo = arrays, self.copies, self.memo
        else:  # a stamp moved: that array is changed anyway; the rest compared without the plan
            sub, copies, memo = [arrays[k] for k in idx], [self.copies[k] for k in idx], {}
        same = self.arrays.same(sub, copies, memo)
        return {id(a) for a, ok in zip(sub, same) if not ok}

    def kept(self, arrays: list, moved: list[bool]) -> set[int]:
        """The ``id`` of every watched array whose stamp moved (``moved``) but whose values did not.

        A torch version counter belongs to the storage: a write into another part of it (a
        neighbouring mesh's rows of one packed tensor, the fourth column of an ``(V, 4)`` buffer
        whose first three the mesh holds) or of the same values moves the stamp of every view.
        Only for a protocol whose ``storage_stamps`` is True (:mod:`rayd.core.protocol`).
        """
        if not self.enabled or arrays is not self.watched or not getattr(self.arrays, "storage_stamps", False):
            return set()
        idx = [k for k, m in enumerate(moved) if m]
        if not idx:
            return set()
        sub = [arrays[k] for k in idx]
        same = self.arrays.same(sub, [self.copies[k] for k in idx], {})
        return {id(a) for a, ok in zip(sub, same) if ok}
